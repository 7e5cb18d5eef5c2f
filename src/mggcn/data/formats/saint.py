"""GraphSAINT directories: ``adj_full.npz`` (scipy CSR), ``feats.npy``, ``class_map.json``, ``role.json``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from mggcn.data.formats.checks import (
    PathLike,
    check_features,
    check_splits,
    decimal_int,
    file_error,
    load_json,
    load_npy,
    mask_from_ids,
)
from mggcn.data.formats.sparse import load_sparse
from mggcn.data.graph import SPLITS, Graph, one_hot_classes

__all__ = ["read_saint", "write_saint"]


def read_saint(root: PathLike) -> Graph:
    """Read a GraphSAINT dataset directory (``adj_full.npz``, ``feats.npy``, ``class_map.json``, ``role.json``).

    ``class_map.json`` maps a vertex id to its class (Flickr, Reddit): vertices absent from it are unlabelled (and
    must be in no split). Or, multi-label (PPI, Yelp, Amazon), to a list of ``C`` ≥ 2 zeros and ones, 1 where the
    vertex has that label: every vertex is listed, with a list of the same length.
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
    lists = isinstance(next(iter(class_map.values()), None), list)
    y = (one_hot_classes(_label_lists(class_map, n, cm_path), str(cm_path)) if lists
         else _class_ids(class_map, n, cm_path))

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


_JSON_ID = re.compile(r"0|[1-9][0-9]*")


def _vertex_id(key: str, n: int, path: Path) -> int:
    v = decimal_int(key) if _JSON_ID.fullmatch(key) else None
    if v is None:  # one spelling per vertex: "01" or "+1" beside "1" would silently replace its label
        raise file_error(path, f"key {key[:40]!r} is not a vertex id as JSON writes one (decimal digits, without "
                               "a sign, spaces or leading zeros)")
    if not 0 <= v < n:
        raise file_error(path, f"vertex id {v} is out of range [0, {n})")
    return v


def _class_ids(class_map: dict, n: int, path: Path) -> np.ndarray:
    """One class per listed vertex, int64 [n] with -1 for the vertices not listed."""
    y = np.full(n, -1, dtype=np.int64)
    for key, label in class_map.items():
        v = _vertex_id(key, n, path)
        if isinstance(label, list):
            raise file_error(path, f"vertex {v} has a list of labels but the first vertex listed has one class: "
                                   "give every vertex a class, or every vertex a list of 0/1 (multi-label)")
        if isinstance(label, bool) or not isinstance(label, int):
            raise file_error(path, f"label {label!r} of vertex {v} is not an integer")
        if label < 0:
            raise file_error(path, f"label {label} of vertex {v} is negative")
        if label >= n:  # checked here, while it is a Python int of any size
            raise file_error(path, f"label {label} of vertex {v} would make {label + 1} classes, more than the "
                                   f"{n} vertices")
        y[v] = label
    return y


_LIST_ROWS = 1 << 14  # vertices whose lists are converted at a time: a temporary of int64 [rows, C]


def _label_lists(class_map: dict, n: int, path: Path) -> np.ndarray:
    """Multi-label: a list of ``C`` ≥ 2 zeros and ones for every vertex, as uint8 [n, C]. The lists are converted a
    block of vertices at a time (Amazon's are 1.6M lists of 107), each block checked."""
    first = next(iter(class_map.values()))
    width = len(first)
    if width < 2:
        raise file_error(path, f"the first vertex listed has a list of {width} label(s); multi-label lists hold "
                               "C >= 2 zeros and ones (one class per vertex: give its id, not a list)")
    y = np.zeros((n, width), dtype=np.uint8)
    listed = np.zeros(n, dtype=bool)
    items = list(class_map.items())
    for begin in range(0, len(items), _LIST_ROWS):
        block = items[begin:begin + _LIST_ROWS]
        ids = np.array([_vertex_id(key, n, path) for key, _ in block], dtype=np.int64)
        y[ids] = _list_block([lists for _, lists in block], ids, width, path)
        listed[ids] = True
    if not listed.all():
        raise file_error(path, f"vertex {int(np.argmin(listed))} is not listed: a multi-label class map lists the "
                               "labels of every vertex")
    return y


def _list_block(lists: list, ids: np.ndarray, width: int, path: Path) -> np.ndarray:
    """The lists of vertices ``ids`` as a 0/1 array, or a one-line error naming the first bad one."""
    for v, labels in zip(ids.tolist(), lists):
        if not isinstance(labels, list):
            raise file_error(path, f"vertex {v} has the label {labels!r}, not a list of 0/1 as the first vertex "
                                   "listed: give every vertex a list (multi-label), or every vertex a class")
        if len(labels) != width:
            raise file_error(path, f"vertex {v} has a list of {len(labels)} labels, the first vertex listed one of "
                                   f"{width}: every vertex lists the same labels")
    try:
        block = np.array(lists)
    except (ValueError, OverflowError, TypeError):
        block = np.array(lists, dtype=object)  # nested lists, or a number beyond int64: named below
    if block.dtype.kind not in "biu" or block.ndim != 2:
        i, j = next((i, j) for i, row in enumerate(lists) for j, e in enumerate(row)
                    if type(e) not in (int, bool) or e not in (0, 1))
        raise file_error(path, f"vertex {int(ids[i])} has {lists[i][j]!r} for label {j}: multi-label lists hold "
                               "0 or 1")
    other = (block != 0) & (block != 1)
    if other.any():
        i, j = np.unravel_index(int(np.argmax(other)), block.shape)
        raise file_error(path, f"vertex {int(ids[i])} has {block[i, j].item()!r} for label {j}: multi-label lists "
                               "hold 0 or 1")
    return block


def write_saint(graph: Graph, root: PathLike) -> None:
    """Write ``graph`` as a GraphSAINT directory that :func:`read_saint` reads back (``root`` is created).

    ``adj_full.npz`` holds ``A[source, target] = 1`` per edge (duplicates add up), ``feats.npy`` float32
    features, ``class_map.json`` the label of every labelled vertex (multi-label: every vertex's list of 0/1),
    ``role.json`` the vertices of each split.
    """
    root = Path(root)
    os.makedirs(root, exist_ok=True)
    n, (src, dst) = graph.num_nodes, graph.edge_index
    adj = sp.csr_matrix((np.ones(src.shape[0], dtype=np.float32), (src, dst)), shape=(n, n))
    sp.save_npz(root / "adj_full.npz", adj)
    np.save(root / "feats.npy", np.asarray(graph.x, dtype=np.float32))
    with open(root / "class_map.json", "w", encoding="utf-8") as f:
        if graph.multilabel:
            json.dump({str(v): row.tolist() for v, row in enumerate(graph.y)}, f)
        else:
            json.dump({str(v): int(c) for v, c in enumerate(graph.y) if c >= 0}, f)
    with open(root / "role.json", "w", encoding="utf-8") as f:
        json.dump({key: np.flatnonzero(graph.masks[s]).tolist() for key, s in zip(("tr", "va", "te"), SPLITS,
                                                                                    strict=True)}, f)
