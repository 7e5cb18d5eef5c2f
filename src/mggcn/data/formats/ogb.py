"""OGB node-property directories (``raw/`` + ``split/<name>/``), CSV or binary (``raw/data.npz``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mggcn.data.formats.checks import (
    PathLike,
    check_edges,
    check_features,
    check_labels,
    check_splits,
    file_error,
    load_npz,
    mask_from_ids,
    read_table,
)
from mggcn.data.graph import Graph

__all__ = ["read_ogb"]


_OGB_SPLIT_FILES = {"train": "train.csv.gz", "val": "valid.csv.gz", "test": "test.csv.gz"}


def read_ogb(root: PathLike, split: str | None = None) -> Graph:
    """Read an OGB node-property dataset directory as OGB writes it.

    Args:
        root: the dataset directory (e.g. ``.../ogbn_products``) holding ``raw/`` and ``split/``.
        split: the split scheme directory under ``split/``; default: the only one there.

    ``raw/data.npz`` (+ ``raw/node-label.npz``) is used when present (OGB's binary variant, e.g. papers100M);
    otherwise the CSV files ``raw/{edge,num-node-list,node-feat,node-label}.csv.gz``. Edges are kept as stored.
    """
    root = Path(root)
    raw = root / "raw"
    if not raw.is_dir():
        raise file_error(root, "no raw/ directory; pass the OGB dataset directory that holds raw/ and split/")
    if (raw / "data.npz").exists():
        ei, x, n, y = _read_ogb_binary(raw)
        labels_src = str(raw / "node-label.npz")
    else:
        ei, x, n, y = _read_ogb_csv(raw)
        labels_src = str(raw / "node-label.csv.gz")

    split_dir = _ogb_split_dir(root, split)
    masks, sources = {}, {}
    for key, fname in _OGB_SPLIT_FILES.items():
        path = split_dir / fname
        ids = read_table(path, np.int64, ncols=1)[:, 0]
        masks[key] = mask_from_ids(ids, n, path, lambda i: f"line {i + 1}")
        sources[key] = str(path)
    check_splits(masks, y, sources, labels_src)
    return Graph(n, ei, x, y, masks, name=str(root),
                 meta={"format": "ogb", "source": str(root), "split": split_dir.name}).validate()


def _ogb_split_dir(root: Path, split: str | None) -> Path:
    base = root / "split"
    if split is not None:
        if not (base / split).is_dir():
            raise file_error(base / split, "missing split directory")
        return base / split
    if not base.is_dir():
        raise file_error(base, "missing directory (OGB keeps the train/valid/test vertex ids there)")
    found = sorted(p.name for p in base.iterdir() if p.is_dir())
    if len(found) != 1:
        raise file_error(base, f"expected exactly one split scheme directory, found {found}; pass split=<name>")
    return base / found[0]


def _read_ogb_csv(raw: Path) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    nn_path = raw / "num-node-list.csv.gz"
    counts = read_table(nn_path, np.int64, ncols=1)[:, 0]
    if counts.shape[0] != 1:
        raise file_error(nn_path, f"expected one line (a node-property dataset has one graph), found {counts.shape[0]}")
    n = int(counts[0])
    if n <= 0:
        raise file_error(nn_path, f"line 1: the vertex count {n} is not positive")
    n_from = f"{nn_path.name} says {n}"

    edge_path = raw / "edge.csv.gz"
    ei = read_table(edge_path, np.int64, ncols=2).T
    ei = check_edges(ei, n, edge_path, lambda e: f"line {e + 1}")

    feat_path = raw / "node-feat.csv.gz"
    x = check_features(read_table(feat_path, np.float32, ncols=None), feat_path, n, n_from)

    label_path = raw / "node-label.csv.gz"
    y = check_labels(read_table(label_path, np.float64, ncols=1)[:, 0], label_path, n, n_from,
                     nan_is_unlabelled=True)
    return ei, x, n, y


def _read_ogb_binary(raw: Path) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    data_path = raw / "data.npz"
    data = load_npz(data_path, ["edge_index", "num_nodes_list"], optional=["node_feat"])
    counts = data["num_nodes_list"].reshape(-1)
    if counts.shape[0] != 1:
        raise file_error(data_path,
                         f"num_nodes_list has {counts.shape[0]} entries; a node-property dataset has one graph")
    count = counts[0].item()
    if counts.dtype.kind not in "iuf" or not float(count).is_integer():  # NaN, 1.5, text, complex: no count
        raise file_error(data_path, f"num_nodes_list holds {counts.dtype} {count!r}, not an integer count")
    n = int(count)
    if n <= 0:
        raise file_error(data_path, f"num_nodes_list says {n} vertices")
    ei = data["edge_index"]
    if ei.ndim != 2 or ei.shape[0] != 2 or not np.issubdtype(ei.dtype, np.integer):
        raise file_error(data_path, f"edge_index must be an integer [2, E] array, got {ei.dtype} {list(ei.shape)}")
    ei = check_edges(ei, n, data_path, lambda e: f"edge_index[:, {e}]")
    if "node_feat" not in data:
        raise file_error(data_path, "no node_feat array (this reader needs vertex features)")
    x = check_features(data["node_feat"], data_path, n, f"num_nodes_list says {n}")
    label_path = raw / "node-label.npz"
    y = load_npz(label_path, ["node_label"])["node_label"]
    y = check_labels(y, label_path, n, f"{data_path.name} says {n}", nan_is_unlabelled=True)
    return ei, x, n, y
