"""GraphSAINT directories: ``adj_full.npz`` (scipy CSR), ``feats.npy``, ``class_map.json``, ``role.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from mggcn.data.formats.checks import (
    PathLike,
    check_features,
    check_splits,
    file_error,
    load_json,
    load_npy,
    load_sparse,
    mask_from_ids,
)
from mggcn.data.graph import SPLITS, Graph

__all__ = ["read_saint", "write_saint"]


def read_saint(root: PathLike) -> Graph:
    """Read a GraphSAINT dataset directory (``adj_full.npz``, ``feats.npy``, ``class_map.json``, ``role.json``).

    Vertices absent from ``class_map.json`` are unlabelled (and must be in no split). Multi-label class maps
    (one-hot lists, e.g. Yelp, Amazon) are refused: the trainer does single-label softmax classification.
    """
    root = Path(root)
    adj_path = root / "adj_full.npz"
    n, ei = load_sparse(adj_path)
    feat_path = root / "feats.npy"
    x = check_features(load_npy(feat_path), feat_path, n, f"{adj_path.name} is {n} x {n}")

    cm_path = root / "class_map.json"
    class_map = load_json(cm_path)
    if not isinstance(class_map, dict):
        raise file_error(cm_path, f"expected an object {{vertex id: label}}, found a JSON {type(class_map).__name__}")
    y = np.full(n, -1, dtype=np.int64)
    for key, label in class_map.items():
        try:
            v = int(key)
        except ValueError:
            raise file_error(cm_path, f"key {key!r} is not a vertex id") from None
        if not 0 <= v < n:
            raise file_error(cm_path, f"vertex id {v} is out of range [0, {n})")
        if isinstance(label, list):
            raise file_error(cm_path, f"vertex {v} has a list label: multi-label (one-hot) datasets are not supported")
        if isinstance(label, bool) or not isinstance(label, int):
            raise file_error(cm_path, f"label {label!r} of vertex {v} is not an integer")
        if label < 0:
            raise file_error(cm_path, f"label {label} of vertex {v} is negative")
        if label >= n:  # checked here, while it is a Python int of any size
            raise file_error(cm_path, f"label {label} of vertex {v} would make {label + 1} classes, more than the "
                                      f"{n} vertices")
        y[v] = label

    role_path = root / "role.json"
    role = load_json(role_path)
    if not isinstance(role, dict) or any(k not in role for k in ("tr", "va", "te")):
        found = sorted(role) if isinstance(role, dict) else type(role).__name__
        raise file_error(role_path, f"expected keys 'tr', 'va', 'te', found {found}")
    masks, sources = {}, {}
    for split, key in zip(SPLITS, ("tr", "va", "te")):
        ids = role[key]
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise file_error(role_path, f"'{key}' must be a list of integer vertex ids")
        far = next((i for i, v in enumerate(ids) if not 0 <= v < n), None)  # before any fixed-width integer
        if far is not None:
            raise file_error(role_path, f"'{key}'[{far}]: vertex id {ids[far]} is out of range [0, {n})")
        masks[split] = mask_from_ids(np.asarray(ids, dtype=np.int64), n, role_path,
                                     lambda i, key=key: f"'{key}'[{i}]")
        sources[split] = str(role_path)
    check_splits(masks, y, sources, str(cm_path))
    return Graph(n, ei, x, y, masks, name=str(root), meta={"format": "saint", "source": str(root)}).validate()


def write_saint(graph: Graph, root: PathLike) -> None:
    """Write ``graph`` as a GraphSAINT directory that :func:`read_saint` reads back (``root`` is created).

    ``adj_full.npz`` holds ``A[source, target] = 1`` per edge (duplicates add up), ``feats.npy`` float32
    features, ``class_map.json`` the label of every labelled vertex, ``role.json`` the vertices of each split.
    """
    root = Path(root)
    os.makedirs(root, exist_ok=True)
    n, (src, dst) = graph.num_nodes, graph.edge_index
    adj = sp.csr_matrix((np.ones(src.shape[0], dtype=np.float32), (src, dst)), shape=(n, n))
    sp.save_npz(root / "adj_full.npz", adj)
    np.save(root / "feats.npy", np.asarray(graph.x, dtype=np.float32))
    with open(root / "class_map.json", "w", encoding="utf-8") as f:
        json.dump({str(v): int(c) for v, c in enumerate(graph.y) if c >= 0}, f)
    with open(root / "role.json", "w", encoding="utf-8") as f:
        json.dump({key: np.flatnonzero(graph.masks[s]).tolist() for key, s in zip(("tr", "va", "te"), SPLITS,
                                                                                    strict=True)}, f)
