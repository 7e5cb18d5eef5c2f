"""OGB node-property directories (``raw/`` + ``split/<name>/``), CSV or binary (``raw/data.npz``)."""

from __future__ import annotations

import codecs
import contextlib
import os
import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mggcn.data.formats.checks import (
    PathLike,
    check_edges,
    check_features,
    check_splits,
    check_vertex_memory,
    file_error,
    load_npz,
    mask_from_ids,
    read_table,
    why,
)
from mggcn.data.formats.labels import read_labels
from mggcn.data.graph import SPLITS, Graph
from mggcn.utils.errors import unpickling_reason

__all__ = ["read_ogb"]


_OGB_SPLIT_FILES = {"train": "train.csv.gz", "val": "valid.csv.gz", "test": "test.csv.gz"}
_OGB_SPLIT_DICT = "split_dict.pt"
_OGB_SPLIT_KEYS = {"train": "train", "val": "valid", "test": "test"}  # the split: its key in split_dict.pt


def read_ogb(root: PathLike, split: str | None = None) -> Graph:
    """Read an OGB node-property dataset directory as OGB writes it.

    Args:
        root: the dataset directory (e.g. ``.../ogbn_products``) holding ``raw/`` and ``split/``.
        split: the split scheme directory under ``split/``; default: the only one there.

    ``raw/data.npz`` (+ ``raw/node-label.npz``) is used when present (OGB's binary variant, e.g. papers100M);
    otherwise the CSV files ``raw/{edge,num-node-list,node-feat,node-label}.csv.gz``. Edges are kept as stored.
    Without ``node-feat.csv.gz`` but with ``edge-feat.csv.gz`` (ogbn-proteins), a vertex's features are the mean of
    its edges' (:func:`_edge_mean`).
    Labels of one column are a class per vertex (NaN: unlabelled); of several, 0/1 per label (multi-label, as
    ogbn-proteins' 112 columns), every vertex labelled.
    The split is ``split/<name>/split_dict.pt`` when present (OGB's ``get_idx_split`` looks there first), else
    ``split/<name>/{train,valid,test}.csv.gz``.
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
    masks, sources = _ogb_split(split_dir, n)
    check_splits(masks, y, sources, labels_src)
    return Graph(n, ei, x, y, masks, name=str(root),
                 meta={"format": "ogb", "source": str(root), "split": split_dir.name}).validate()


def _ogb_split_dir(root: Path, split: str | None) -> Path:
    base = root / "split"
    if split is not None:
        if os.sep in split or split in ("", ".", ".."):
            raise file_error(base, f"split {split!r} is not the name of a split scheme directory in it")
        if not (base / split).is_dir():
            raise file_error(base / split, "missing split directory")
        return base / split
    if not base.is_dir():
        raise file_error(base, "missing directory (OGB keeps the train/valid/test vertex ids there)")
    found = sorted(p.name for p in base.iterdir() if p.is_dir())
    if len(found) != 1:
        raise file_error(base, f"expected exactly one split scheme directory, found {found}; give its name "
                               "(split=NAME)", "split")
    return base / found[0]


def _ogb_split(split_dir: Path, n: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The train/val/test masks and the file each comes from: ``split_dict.pt`` when it is a file there, as in
    OGB's ``get_idx_split``, else the three CSV files. Both go through the same checks."""
    dict_path = split_dir / _OGB_SPLIT_DICT
    if dict_path.is_file():
        ids = _load_split_dict(dict_path)
        masks = {name: mask_from_ids(ids[name], n, dict_path, lambda i, key=key: f"'{key}'[{i}]")
                 for name, key in _OGB_SPLIT_KEYS.items()}
        return masks, dict.fromkeys(SPLITS, str(dict_path))
    masks, sources = {}, {}
    for name, fname in _OGB_SPLIT_FILES.items():
        path = split_dir / fname
        ids = read_table(path, np.int64, ncols=1)[:, 0]
        masks[name] = mask_from_ids(ids, n, path, lambda i: f"line {i + 1}")
        sources[name] = str(path)
    return masks, sources


def _load_split_dict(path: Path) -> dict[str, np.ndarray]:
    """The vertex ids of ``split_dict.pt`` (``torch.save`` of a dict of 1-D tensors or numpy arrays under 'train',
    'valid', 'test'), by split, each a 1-D numpy array; :func:`mask_from_ids` checks their type and range."""
    import torch  # here, not at the top: reading every other file (mggcn prepare, mggcn info) loads no torch

    try:
        with warnings.catch_warnings(), _numpy_arrays_allowed(torch):
            warnings.simplefilter("ignore")  # torch's notes on the file (pickle protocol, sparse checks)
            # weights_only: tensors, containers and the numpy names allowed above; a pickle that names any other
            # function or class (a crafted __reduce__) is refused before anything in it runs
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise file_error(path, f"refused by torch.load(weights_only=True): not plain tensors and arrays "
                               f"({unpickling_reason(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds on a truncated or damaged file
        raise file_error(path, f"truncated or corrupt torch.save file ({type(exc).__name__}: {why(exc)})") from None
    if not isinstance(obj, dict):
        raise file_error(path, f"holds a {type(obj).__name__}, not a dict of 'train', 'valid' and 'test' vertex ids")
    missing = [key for key in _OGB_SPLIT_KEYS.values() if key not in obj]
    if missing:
        found = sorted(repr(k)[:40] for k in obj)
        raise file_error(path, f"missing key(s) {missing}; the dict has [{', '.join(found[:8])}"
                               f"{', ...' if len(found) > 8 else ''}]")
    return {name: _split_ids(obj[key], key, path, torch) for name, key in _OGB_SPLIT_KEYS.items()}


def _split_ids(value: Any, key: str, path: Path, torch: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's notes on what it holds (a nested tensor's "prototype")
                value = value.detach().cpu().numpy()
        except (TypeError, RuntimeError) as exc:  # bfloat16, sparse, meta, nested: no vertex ids numpy can hold
            raise file_error(path, f"'{key}' is a {value.dtype} tensor that numpy cannot hold ({why(exc)}); "
                                   "expected integer vertex ids") from None
    if not isinstance(value, np.ndarray):
        raise file_error(path, f"'{key}' holds a {type(value).__name__}, not a tensor or array of vertex ids")
    if value.ndim != 1:
        raise file_error(path, f"'{key}' must be a one-dimensional array of vertex ids, got shape "
                               f"{list(value.shape)}")
    # an empty split holds no id, whatever its dtype (torch.tensor([]) is float32): as the empty CSV file does
    return value if value.size else value.astype(np.int64)


def _numpy_reconstructor(module: str) -> Any:
    """numpy's array rebuild function under the name ``module._reconstruct`` that a pickle may give it: numpy 1
    writes ``numpy.core.multiarray``, numpy 2 ``numpy._core.multiarray``, and torch matches the name exactly."""
    rebuild = np.ndarray.__reduce__(np.empty(0))[0]

    def _reconstruct(*args: Any) -> np.ndarray:
        return rebuild(*args)

    _reconstruct.__module__, _reconstruct.__qualname__ = module, "_reconstruct"
    return _reconstruct


def _empty_bytes(*args: Any) -> bytes:
    """``bytes()``, which pickle protocol 2 writes for the raw data of an empty array, and nothing else:
    ``bytes(n)`` from a file would allocate n bytes."""
    if args:
        raise pickle.UnpicklingError("bytes() with arguments (only bytes() of an empty array is allowed)")
    return b""


_empty_bytes.__module__, _empty_bytes.__qualname__ = "builtins", "bytes"  # the name torch matches the pickle's by
_empty_bytes.__name__ = "bytes"


@contextlib.contextmanager
def _numpy_arrays_allowed(torch: Any) -> Iterator[None]:
    """Let torch's weights-only unpickler rebuild numpy arrays of numbers while the file loads (a split_dict.pt
    may hold its ids as numpy arrays, as OGB's get_idx_split returns them from the CSV files): the array and dtype
    classes, the dtypes of booleans, integers and floats, numpy's rebuild function, which sets an array from its
    shape, dtype and raw bytes and calls nothing else, the empty bytes of an empty array, and ``_codecs.encode``,
    by which pickle protocol 2 (torch.save's) writes an array's raw bytes as a string (torch >= 2.5 allows it by
    itself)."""
    codes = "?" + np.typecodes["AllInteger"] + np.typecodes["AllFloat"]
    allowed = [_numpy_reconstructor("numpy.core.multiarray"), _numpy_reconstructor("numpy._core.multiarray"),
               _empty_bytes, codecs.encode, np.ndarray, np.dtype, *{type(np.dtype(c)) for c in codes}]
    serialization = torch.serialization
    if hasattr(serialization, "safe_globals"):  # torch >= 2.5: allowed within the block only
        with serialization.safe_globals(allowed):
            yield
        return
    before = list(serialization.get_safe_globals())  # torch 2.4: allow, then put back what the process had allowed
    serialization.add_safe_globals(allowed)
    try:
        yield
    finally:
        serialization.clear_safe_globals()
        serialization.add_safe_globals(before)


def _read_ogb_csv(raw: Path) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    nn_path = raw / "num-node-list.csv.gz"
    counts = read_table(nn_path, np.int64, ncols=1)[:, 0]
    if counts.shape[0] != 1:
        raise file_error(nn_path, f"expected one line (a node-property dataset has one graph), found {counts.shape[0]}")
    n = int(counts[0])
    if n <= 0:
        raise file_error(nn_path, f"line 1: the vertex count {n} is not positive")
    n_from = f"{nn_path.name} says {n}"
    check_vertex_memory(nn_path, n, n_from)  # before any array of n rows (the mean of edge features makes some)

    edge_path = raw / "edge.csv.gz"
    ei = read_table(edge_path, np.int64, ncols=2).T
    ei = check_edges(ei, n, edge_path, lambda e: f"line {e + 1}")

    feat_path, edge_feat_path = raw / "node-feat.csv.gz", raw / "edge-feat.csv.gz"
    if not feat_path.exists() and edge_feat_path.exists():  # ogbn-proteins
        x = _edge_mean(read_table(edge_feat_path, np.float32, ncols=None), ei, n, edge_feat_path)
    else:
        x = check_features(read_table(feat_path, np.float32, ncols=None), feat_path, n, n_from)

    label_path = raw / "node-label.csv.gz"
    table = read_table(label_path, np.float64, ncols=None)  # one column, or one per label (ogbn-proteins: 112)
    y = read_labels(table if table.shape[1] > 1 else table.reshape(-1), label_path, n, n_from,
                    nan_is_unlabelled=True)
    return ei, x, n, y


def _edge_mean(edge_feat: np.ndarray, ei: np.ndarray, n: int, path: Path) -> np.ndarray:
    """Vertex features for a dataset that has only edge features (ogbn-proteins): each vertex's mean of the
    features of the edges it is an end of, 0 for a vertex without edges — OGB's example for ogbn-proteins, which
    takes the mean of each vertex's in-edges once its loader has added the reverse of every stored edge."""
    e = ei.shape[1]
    if edge_feat.ndim != 2 or edge_feat.shape[0] != e or edge_feat.shape[1] == 0:
        raise file_error(path, f"edge features of shape {list(edge_feat.shape)} for {e} edges: expected [{e}, F] "
                               "(the vertex features are their mean over each vertex's edges)")
    feat = check_features(edge_feat, path, e, f"{e} edges")
    src, dst = ei  # each edge counts once at its source and once at its target
    count = np.maximum(np.bincount(src, minlength=n) + np.bincount(dst, minlength=n), 1).astype(np.float64)
    x = np.empty((n, feat.shape[1]), dtype=np.float32)
    for j in range(feat.shape[1]):  # a weighted count per column: one E-sized float64 column at a time
        column = feat[:, j]
        total = np.bincount(src, weights=column, minlength=n) + np.bincount(dst, weights=column, minlength=n)
        x[:, j] = total / count
    return x


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
    y = read_labels(y, label_path, n, f"{data_path.name} says {n}", nan_is_unlabelled=True)
    return ei, x, n, y
