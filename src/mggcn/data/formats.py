"""Readers from the on-disk layouts real datasets ship in to an in-memory :class:`~mggcn.data.graph.Graph`.

Every reader checks its input where it reads it, so a bad dataset fails with ONE line that names the offending file
and what is wrong with it (missing file, truncated or corrupt array, unparsable line and its number, vertex id out of
range, bad label, NaN/inf features, wrong row count, overlapping or empty splits), then calls ``Graph.validate()``.

Formats (``read(source, fmt)`` dispatches on ``fmt``) and their edge direction. A :class:`Graph` edge is
``source -> target``: the target aggregates over it.

==============  =====================================================================================================
``ogb``         OGB node-property directory (``raw/`` + ``split/<name>/``), CSV (``raw/edge.csv.gz`` ...) or binary
                (``raw/data.npz`` + ``raw/node-label.npz``). A line ``src,dst`` / column ``edge_index[:, e]`` is the
                edge ``src -> dst``, kept as stored (ogbn-arxiv is directed; :func:`transform` symmetrizes). A NaN label
                marks an unlabelled vertex, which must be in no split.
``saint``       GraphSAINT: ``adj_full.npz`` (scipy CSR), ``feats.npy``, ``class_map.json``, ``role.json``. A nonzero
                ``adj[i, j]`` is the edge ``i -> j`` (the matrix is symmetric anyway). Multi-label is refused.
``dgl-reddit``  DGL's ``reddit_data.npz`` + ``reddit_graph.npz`` (scipy COO). A nonzero ``A[i, j]`` is ``i -> j``
                (DGL's ``from_scipy``: row = source). ``node_types`` 1/2/3 = train/val/test.
``mtx``         Matrix Market ``coordinate`` file (1-based, ``symmetric`` expands to both directions). A nonzero
                ``A[i, j]`` is ``i -> j`` (row = source, the usual adjacency convention).
``edgelist``    text/CSV edge list, 0-based ids; a line ``u v`` is ``u -> v``.
``mggcn-bin``   the original MG-GCN files; ``graph.bin`` row = TARGET, column = source (MG-GCN aggregates over rows).
==============  =====================================================================================================

The ``mggcn-bin`` layout, as MG-GCN's ``test/data/prep.py`` writes it and PIGO's ``CSR::read_bin_`` reads it (all
little-endian, no padding):

* ``graph.bin``: the 11 ASCII bytes ``PIGO-CSR-v2``; ``uint8 L``, ``uint8 O`` (byte widths, 4 or 8, of vertex ids
  and of offsets); ``L n``, ``O nnz``, ``L nrows``, ``L ncols``; ``O indptr[n + 1]``; ``L indices[nnz]``; then
  ``float32 values[nnz]`` (a weighted CSR, which is what MG-GCN reads; a file that stops after ``indices`` is read as
  unweighted). Entry ``(row, indices[k])`` with a nonzero value is the edge ``indices[k] -> row``.
* ``features.bin``: ``uint32 rows, cols`` then ``float32 [rows, cols]`` row-major.
* ``labels.bin``: ``uint32 rows, 1`` then ``int32 [rows]``; ``-1`` = unlabelled (MG-GCN writes uint32; same bytes).
* ``sets.bin``: ``uint32 rows, 1`` then ``int32 [rows]``: 0 = train, 1 = val, 2 = test, anything else = no split.

``mtx`` and ``edgelist`` take their vertex data from optional files; what is absent is synthesized from ``seed``:

* ``features``: ``.npy`` ``float [n, F]``; absent: standard normal ``[n, num_features]``.
* ``labels``: ``.npy`` integer ``[n]`` (``-1`` = unlabelled); absent: uniform in ``[0, num_classes or 2)``.
* ``split``: ``.npy`` integer ``[n]`` with 0 = train, 1 = val, 2 = test, -1 = none (the ``sets.bin`` code), or
  ``.npz`` with bool ``train``/``val``/``test`` arrays of length n; absent: a random 50/25/25 split of the labelled
  vertices.

Legend: n = vertices, E = edges, F = feature dimension.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import os
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import scipy.io
import scipy.sparse as sp

from mggcn.data.graph import SPLITS, Graph, GraphError

__all__ = [
    "FORMATS",
    "edgelist_vertex_data",
    "from_pyg",
    "from_tensors",
    "iter_edgelist_chunks",
    "read",
    "read_dgl_reddit",
    "read_edgelist",
    "read_mggcn_bin",
    "read_mtx",
    "read_ogb",
    "read_saint",
    "transform",
    "write_mggcn_bin",
]

FORMATS = ("ogb", "saint", "dgl-reddit", "mtx", "edgelist", "mggcn-bin")

PathLike = str | os.PathLike

PIGO_MAGIC = b"PIGO-CSR-v2"
# Errors that loading a damaged file can raise; each becomes "<file>: truncated or corrupt ...".
_CORRUPT = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error)
_OGB_SPLIT_FILES = {"train": "train.csv.gz", "val": "valid.csv.gz", "test": "test.csv.gz"}


# --------------------------------------------------------------------------------------------------- error helpers


def _err(path: PathLike, msg: str) -> GraphError:
    # One line, always: the caller may log it next to thousands of others.
    return GraphError(" ".join(f"{os.fspath(path)}: {msg}".split()))


def _why(exc: BaseException, limit: int = 100) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _require(path: PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise _err(path, "missing file" if not path.exists() else "not a regular file")
    return path


def _short(line: str, limit: int = 60) -> str:
    line = line.rstrip("\r\n")
    return repr(line if len(line) <= limit else line[:limit] + "...")


# ------------------------------------------------------------------------------------------------ text tables


def _open_text(path: Path) -> TextIO:
    # Sniff gzip by magic, not by suffix: users rename files; errors="replace" turns binary garbage into an
    # unparsable token that the line scanner can point at, instead of a UnicodeDecodeError with no line number.
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if gz:
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _data_lines(path: Path, comments: Sequence[str], skiprows: int) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, text without comment)`` for each non-blank data line."""
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if lineno <= skiprows:
                continue
            text = line
            for c in comments:
                text = text.split(c, 1)[0]
            if text.strip():
                yield lineno, text


def _locate_bad_line(path: Path, dtype: type, ncols: int | None, exact: bool, delimiter: str | None,
                     comments: Sequence[str], skiprows: int) -> str | None:
    """Re-scan a table numpy refused and describe its first bad line; only ever run on the error path."""
    parse: Callable[[str], Any] = int if np.issubdtype(dtype, np.integer) else float
    kind = "an integer" if parse is int else "a number"
    for lineno, text in _data_lines(path, comments, skiprows):
        tokens = [t.strip() for t in text.strip().split(delimiter)]
        if ncols is None:
            ncols = len(tokens)  # a feature table: the first line decides the width
        if len(tokens) != ncols if exact else len(tokens) < ncols:
            want = f"{ncols}" if exact else f"at least {ncols}"
            return f"line {lineno}: expected {want} value(s), found {len(tokens)}: {_short(text)}"
        for tok in tokens[:ncols]:
            try:
                parse(tok)
            except ValueError:
                return f"line {lineno}: cannot parse {_short(tok, 30)} as {kind}"
    return None


def _read_table(path: Path, dtype: type, *, ncols: int | None, exact: bool = True, delimiter: str | None = ",",
                comments: Sequence[str] = (), skiprows: int = 0) -> np.ndarray:
    """Parse a (possibly gzipped) text table into ``[rows, cols]``; ``ncols=None`` means any consistent width."""
    path = _require(path)
    usecols = None if exact or ncols is None else tuple(range(ncols))
    try:
        with _open_text(path) as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data": callers judge emptiness
            table = np.loadtxt(f, dtype=dtype, delimiter=delimiter, comments=list(comments) or None,
                               skiprows=skiprows, usecols=usecols, ndmin=2)
    except ValueError as exc:
        where = _locate_bad_line(path, dtype, ncols, exact, delimiter, comments, skiprows)
        raise _err(path, where or f"unparsable ({_why(exc)})") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise _err(path, f"truncated or corrupt file ({_why(exc)})") from None
    if table.size == 0:
        return np.empty((0, ncols or 0), dtype=dtype)
    if ncols is not None and exact and table.shape[1] != ncols:
        # loadtxt accepts any width that is consistent; the scanner names the first line (all are wrong).
        raise _err(path, _locate_bad_line(path, dtype, ncols, exact, delimiter, comments, skiprows) or
                   f"expected {ncols} value(s) per line, found {table.shape[1]}")
    return table


def _line_of_row(path: Path, row: int, comments: Sequence[str] = (), skiprows: int = 0) -> int:
    for i, (lineno, _) in enumerate(_data_lines(path, comments, skiprows)):
        if i == row:
            return lineno
    return -1


# --------------------------------------------------------------------------------------------------- binary arrays


def _load_npy(path: PathLike, mmap: bool = False) -> np.ndarray:
    path = _require(path)
    try:
        return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
    except _CORRUPT as exc:
        raise _err(path, f"truncated or corrupt .npy file ({_why(exc)})") from None


def _load_npz(path: PathLike, keys: Sequence[str], optional: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Load ``keys`` (and whichever of ``optional`` exist) eagerly, so a damaged member fails here, named."""
    path = _require(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in keys if k not in npz.files]
            if missing:
                raise _err(path, f"missing array(s) {missing}; the file has {sorted(npz.files)}")
            return {k: npz[k] for k in (*keys, *optional) if k in npz.files}
    except GraphError:
        raise
    except _CORRUPT as exc:
        raise _err(path, f"truncated or corrupt .npz file ({_why(exc)})") from None


def _load_sparse(path: PathLike) -> sp.coo_matrix:
    path = _require(path)
    try:
        mat = sp.load_npz(path)
    except _CORRUPT as exc:
        raise _err(path, f"truncated or corrupt scipy sparse .npz file ({_why(exc)})") from None
    if mat.shape[0] != mat.shape[1]:
        raise _err(path, f"the adjacency matrix is {mat.shape[0]} x {mat.shape[1]}, not square")
    return sp.coo_matrix(mat)


def _edges_from_sparse(mat: sp.coo_matrix) -> np.ndarray:
    """``[2, E]`` with row -> column for every entry whose value is nonzero (explicit zeros are no edge)."""
    keep = mat.data != 0
    return np.stack([mat.row[keep], mat.col[keep]]).astype(np.int64)


# ------------------------------------------------------------------------------------------------ shared checks


def _check_features(x: np.ndarray, path: PathLike, n: int, n_from: str) -> np.ndarray:
    if x.ndim != 2:
        raise _err(path, f"features must be a 2-D [n, F] array, got shape {list(x.shape)}")
    if x.shape[0] != n:
        raise _err(path, f"{x.shape[0]} feature rows for {n} vertices ({n_from})")
    if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
        raise _err(path, f"features must be real numbers, got dtype {x.dtype}")
    x = np.asarray(x, dtype=np.float32)
    finite = np.isfinite(x)
    if not finite.all():
        row = int(np.argmax(~finite.all(axis=1)))
        raise _err(path, f"features contain NaN or inf (first in row {row})")
    return x


def _check_labels(y: np.ndarray, path: PathLike, n: int, n_from: str, *, nan_is_unlabelled: bool) -> np.ndarray:
    """Return int64 ``[n]`` labels with -1 = unlabelled.

    Formats that mark "unlabelled" with NaN (OGB) have no -1 sentinel, so there every negative label is an error;
    elsewhere -1 means unlabelled and anything below it is an error.
    """
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise _err(path, f"labels must be a vector [n] (multi-label is not supported), got shape {list(y.shape)}")
    if y.shape[0] != n:
        raise _err(path, f"{y.shape[0]} labels for {n} vertices ({n_from})")
    if np.issubdtype(y.dtype, np.floating):
        nan = np.isnan(y)
        if nan.any() and not nan_is_unlabelled:
            raise _err(path, f"label of vertex {int(np.argmax(nan))} is NaN")
        filled = np.where(nan, 0.0, y)
        bad = ~np.isfinite(filled) | (filled != np.round(filled))
        if bad.any():
            v = int(np.argmax(bad))
            raise _err(path, f"label {float(y[v])!r} of vertex {v} is not an integer")
        labels = filled.astype(np.int64)
    elif np.issubdtype(y.dtype, np.integer):
        nan, labels = np.zeros(n, dtype=bool), y.astype(np.int64)
    else:
        raise _err(path, f"labels must be integers, got dtype {y.dtype}")
    negative = labels < (0 if nan_is_unlabelled else -1)
    if negative.any():
        v = int(np.argmax(negative))
        raise _err(path, f"label {int(labels[v])} of vertex {v} is negative")
    labels[nan] = -1
    return labels


def _check_label_range(y: np.ndarray, num_classes: int | None, path: PathLike) -> int:
    if num_classes is None:
        return int(y.max()) + 1 if y.size else 0
    too_big = y >= num_classes
    if too_big.any():
        v = int(np.argmax(too_big))
        raise _err(path, f"label {int(y[v])} of vertex {v} is out of range [0, {num_classes})")
    return num_classes


def _mask_from_ids(ids: np.ndarray, n: int, path: PathLike, where: Callable[[int], str]) -> np.ndarray:
    ids = np.asarray(ids).reshape(-1)
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise _err(path, f"vertex ids must be integers, got dtype {ids.dtype}")
    bad = (ids < 0) | (ids >= n)
    if bad.any():
        i = int(np.argmax(bad))
        raise _err(path, f"{where(i)}: vertex id {int(ids[i])} is out of range [0, {n})")
    mask = np.zeros(n, dtype=bool)
    mask[ids] = True
    return mask


def _check_splits(masks: dict[str, np.ndarray], y: np.ndarray, sources: dict[str, str], labels_src: str) -> None:
    """Overlap, empty train, unlabelled split vertices, each named by the file(s) that define them."""
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        both = masks[a] & masks[b]
        if both.any():
            files = sources[a] if sources[a] == sources[b] else f"{sources[a]} and {sources[b]}"
            raise GraphError(f"{files}: the '{a}' and '{b}' splits overlap (vertex {int(np.argmax(both))})")
    if not masks["train"].any():
        raise GraphError(f"{sources['train']}: the training split is empty")
    for split in SPLITS:
        unlabelled = masks[split] & (y < 0)
        if unlabelled.any():
            raise GraphError(f"{sources[split]}: vertex {int(np.argmax(unlabelled))} is in the '{split}' split but "
                             f"has no label in {labels_src}")


def _check_edges(ei: np.ndarray, n: int, path: PathLike, where: Callable[[int], str]) -> np.ndarray:
    """``ei`` is ``[2, E]``; ``where(e)`` says where edge ``e`` sits in the file."""
    if ei.size:
        bad = ((ei < 0) | (ei >= n)).any(axis=0)
        if bad.any():
            e = int(np.argmax(bad))
            v = int(ei[0, e]) if not 0 <= ei[0, e] < n else int(ei[1, e])
            raise _err(path, f"{where(e)}: vertex id {v} is out of range [0, {n})")
    return ei.astype(np.int64, copy=False)


# --------------------------------------------------------------------------------------------------------- OGB


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
        raise _err(root, "no raw/ directory; pass the OGB dataset directory that holds raw/ and split/")
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
        ids = _read_table(path, np.int64, ncols=1)[:, 0]
        masks[key] = _mask_from_ids(ids, n, path, lambda i: f"line {i + 1}")
        sources[key] = str(path)
    _check_splits(masks, y, sources, labels_src)
    return Graph(n, ei, x, y, masks, name=str(root),
                 meta={"format": "ogb", "source": str(root), "split": split_dir.name}).validate()


def _ogb_split_dir(root: Path, split: str | None) -> Path:
    base = root / "split"
    if split is not None:
        if not (base / split).is_dir():
            raise _err(base / split, "missing split directory")
        return base / split
    if not base.is_dir():
        raise _err(base, "missing directory (OGB keeps the train/valid/test vertex ids there)")
    found = sorted(p.name for p in base.iterdir() if p.is_dir())
    if len(found) != 1:
        raise _err(base, f"expected exactly one split scheme directory, found {found}; pass split=<name>")
    return base / found[0]


def _read_ogb_csv(raw: Path) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    nn_path = raw / "num-node-list.csv.gz"
    counts = _read_table(nn_path, np.int64, ncols=1)[:, 0]
    if counts.shape[0] != 1:
        raise _err(nn_path, f"expected one line (a node-property dataset has one graph), found {counts.shape[0]}")
    n = int(counts[0])
    if n <= 0:
        raise _err(nn_path, f"line 1: the vertex count {n} is not positive")
    n_from = f"{nn_path.name} says {n}"

    edge_path = raw / "edge.csv.gz"
    ei = _read_table(edge_path, np.int64, ncols=2).T
    ei = _check_edges(ei, n, edge_path, lambda e: f"line {e + 1}")

    feat_path = raw / "node-feat.csv.gz"
    x = _check_features(_read_table(feat_path, np.float32, ncols=None), feat_path, n, n_from)

    label_path = raw / "node-label.csv.gz"
    y = _check_labels(_read_table(label_path, np.float64, ncols=1)[:, 0], label_path, n, n_from,
                      nan_is_unlabelled=True)
    return ei, x, n, y


def _read_ogb_binary(raw: Path) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    data_path = raw / "data.npz"
    data = _load_npz(data_path, ["edge_index", "num_nodes_list"], optional=["node_feat"])
    counts = data["num_nodes_list"].reshape(-1)
    if counts.shape[0] != 1:
        raise _err(data_path, f"num_nodes_list has {counts.shape[0]} entries; a node-property dataset has one graph")
    n = int(counts[0])
    if n <= 0:
        raise _err(data_path, f"num_nodes_list says {n} vertices")
    ei = data["edge_index"]
    if ei.ndim != 2 or ei.shape[0] != 2 or not np.issubdtype(ei.dtype, np.integer):
        raise _err(data_path, f"edge_index must be an integer [2, E] array, got {ei.dtype} {list(ei.shape)}")
    ei = _check_edges(ei, n, data_path, lambda e: f"edge_index[:, {e}]")
    if "node_feat" not in data:
        raise _err(data_path, "no node_feat array (this reader needs vertex features)")
    x = _check_features(data["node_feat"], data_path, n, f"num_nodes_list says {n}")
    label_path = raw / "node-label.npz"
    y = _load_npz(label_path, ["node_label"])["node_label"]
    y = _check_labels(y, label_path, n, f"{data_path.name} says {n}", nan_is_unlabelled=True)
    return ei, x, n, y


# ---------------------------------------------------------------------------------------------------- GraphSAINT


def read_saint(root: PathLike) -> Graph:
    """Read a GraphSAINT dataset directory (``adj_full.npz``, ``feats.npy``, ``class_map.json``, ``role.json``).

    Vertices absent from ``class_map.json`` are unlabelled (and must be in no split). Multi-label class maps
    (one-hot lists, e.g. Yelp, Amazon) are refused: the trainer does single-label softmax classification.
    """
    root = Path(root)
    adj_path = root / "adj_full.npz"
    adj = _load_sparse(adj_path)
    n = adj.shape[0]
    ei = _edges_from_sparse(adj)
    feat_path = root / "feats.npy"
    x = _check_features(_load_npy(feat_path), feat_path, n, f"{adj_path.name} is {n} x {n}")

    cm_path = root / "class_map.json"
    class_map = _load_json(cm_path)
    if not isinstance(class_map, dict):
        raise _err(cm_path, f"expected an object {{vertex id: label}}, found a JSON {type(class_map).__name__}")
    y = np.full(n, -1, dtype=np.int64)
    for key, label in class_map.items():
        try:
            v = int(key)
        except ValueError:
            raise _err(cm_path, f"key {key!r} is not a vertex id") from None
        if not 0 <= v < n:
            raise _err(cm_path, f"vertex id {v} is out of range [0, {n})")
        if isinstance(label, list):
            raise _err(cm_path, f"vertex {v} has a list label: multi-label (one-hot) datasets are not supported")
        if isinstance(label, bool) or not isinstance(label, int):
            raise _err(cm_path, f"label {label!r} of vertex {v} is not an integer")
        if label < 0:
            raise _err(cm_path, f"label {label} of vertex {v} is negative")
        y[v] = label

    role_path = root / "role.json"
    role = _load_json(role_path)
    if not isinstance(role, dict) or any(k not in role for k in ("tr", "va", "te")):
        found = sorted(role) if isinstance(role, dict) else type(role).__name__
        raise _err(role_path, f"expected keys 'tr', 'va', 'te', found {found}")
    masks, sources = {}, {}
    for split, key in zip(SPLITS, ("tr", "va", "te")):
        ids = role[key]
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise _err(role_path, f"'{key}' must be a list of integer vertex ids")
        masks[split] = _mask_from_ids(np.asarray(ids, dtype=np.int64), n, role_path,
                                      lambda i, key=key: f"'{key}'[{i}]")
        sources[split] = str(role_path)
    _check_splits(masks, y, sources, str(cm_path))
    return Graph(n, ei, x, y, masks, name=str(root), meta={"format": "saint", "source": str(root)}).validate()


def _load_json(path: Path) -> Any:
    path = _require(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise _err(path, f"line {exc.lineno}: invalid JSON ({exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _err(path, f"unreadable ({_why(exc)})") from None


# ------------------------------------------------------------------------------------------------------ DGL Reddit


def read_dgl_reddit(root: PathLike) -> Graph:
    """Read DGL's Reddit files: ``reddit_data.npz`` (feature, label, node_types) and ``reddit_graph.npz`` (COO)."""
    root = Path(root)
    data_path = root / "reddit_data.npz"
    data = _load_npz(data_path, ["feature", "label", "node_types"])
    n = int(data["feature"].shape[0]) if data["feature"].ndim else 0
    x = _check_features(data["feature"], data_path, n, "rows of 'feature'")
    y = _check_labels(data["label"], data_path, n, "rows of 'feature'", nan_is_unlabelled=False)
    types = data["node_types"].reshape(-1)
    if types.shape[0] != n:
        raise _err(data_path, f"node_types has {types.shape[0]} entries for {n} vertices")
    graph_path = root / "reddit_graph.npz"
    adj = _load_sparse(graph_path)
    if adj.shape[0] != n:
        raise _err(graph_path, f"the adjacency matrix is {adj.shape[0]} x {adj.shape[0]} but "
                               f"{data_path.name} has {n} vertices")
    masks = {split: types == code for split, code in zip(SPLITS, (1, 2, 3))}
    _check_splits(masks, y, dict.fromkeys(SPLITS, f"{data_path} (node_types)"), str(data_path))
    return Graph(n, _edges_from_sparse(adj), x, y, masks, name=str(root),
                 meta={"format": "dgl-reddit", "source": str(root)}).validate()


# ----------------------------------------------------------------------------------------- Matrix Market, edge list


def read_mtx(path: PathLike, features: PathLike | None = None, labels: PathLike | None = None,
             split: PathLike | None = None, num_classes: int | None = None, seed: int = 0,
             num_features: int = 32) -> Graph:
    """Read a Matrix Market adjacency; a nonzero ``A[i, j]`` is the edge ``i -> j`` (row = source).

    Vertex data comes from the optional ``.npy``/``.npz`` files or is synthesized (see the module docstring).
    """
    path = _require(path)
    try:
        mat = scipy.io.mmread(path)
    except _CORRUPT as exc:
        raise _err(path, f"unreadable Matrix Market file ({_why(exc)})") from None
    if not sp.issparse(mat):
        raise _err(path, "a dense 'array' Matrix Market file; an adjacency must be in 'coordinate' format")
    if mat.shape[0] != mat.shape[1]:
        raise _err(path, f"the adjacency matrix is {mat.shape[0]} x {mat.shape[1]}, not square")
    n = int(mat.shape[0])
    ei = _edges_from_sparse(sp.coo_matrix(mat))
    return _with_vertex_data(path, ei, n, f"{path.name} is {n} x {n}", "mtx", features, labels, split,
                             num_classes, seed, num_features)


def read_edgelist(path: PathLike, features: PathLike | None = None, labels: PathLike | None = None,
                  split: PathLike | None = None, delimiter: str | None = None,
                  comment: str | Sequence[str] = ("#", "%"), num_nodes: int | None = None,
                  num_classes: int | None = None, seed: int = 0, num_features: int = 32) -> Graph:
    """Read a text/CSV edge list of 0-based vertex ids: a line ``u v [ignored columns...]`` is the edge ``u -> v``.

    Args:
        delimiter: ``None`` detects: ``,`` if the first data line has one, else any whitespace.
        comment: prefix(es) that start a comment, whole-line or trailing.
        num_nodes: ``n``; default: the largest of (max id + 1) and the row count of the features/labels files.

    A first data line whose tokens are not all numbers is a header and is skipped. The file may be gzipped.
    :func:`iter_edgelist_chunks` reads the same files in bounded memory.
    """
    path = _require(path)
    comments = (comment,) if isinstance(comment, str) else tuple(comment)
    skiprows, delimiter = _edgelist_layout(path, delimiter, comments)
    table = _read_table(path, np.int64, ncols=2, exact=False, delimiter=delimiter, comments=comments,
                        skiprows=skiprows)
    ei = table.T
    n, n_from = _edgelist_num_nodes(path, int(ei.max()) + 1 if ei.size else 0, num_nodes, features, labels)
    ei = _check_edges(ei, n, path, lambda e: f"line {_line_of_row(path, e, comments, skiprows)}")
    return _with_vertex_data(path, ei, n, n_from, "edgelist", features, labels, split, num_classes,
                             seed, num_features)


def iter_edgelist_chunks(path: PathLike, chunk_edges: int = 1 << 20, delimiter: str | None = None,
                         comment: str | Sequence[str] = ("#", "%"),
                         num_nodes: int | None = None) -> Iterator[np.ndarray]:
    """Stream the edges of a file :func:`read_edgelist` reads, as ``int64 [2, k]`` chunks of at most ``chunk_edges``.

    Same layout detection (header, delimiter, comments, gzip) and the same one-line errors naming the file and the
    line; ids are checked against ``num_nodes`` when given, else only for being negative. Memory: one chunk.
    """
    path = _require(path)
    comments = (comment,) if isinstance(comment, str) else tuple(comment)
    skiprows, delimiter = _edgelist_layout(path, delimiter, comments)
    bound = np.iinfo(np.int64).max if num_nodes is None else num_nodes
    done = 0  # data rows before this chunk

    def line_of(e: int) -> str:
        return f"line {_line_of_row(path, done + e, comments, skiprows)}"

    with _open_text(path) as f:
        try:
            for _ in range(skiprows):
                f.readline()
            while True:
                lines = list(itertools.islice(f, chunk_edges))
                if not lines:
                    return
                # numpy strips one comment prefix in C but several in Python, line by line (5x slower): pass only
                # the prefixes this chunk contains, usually none.
                text = "".join(lines)
                present = [c for c in comments if c in text]
                del text
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # a chunk of comments only has no data
                    table = np.loadtxt(lines, dtype=np.int64, delimiter=delimiter, usecols=(0, 1), ndmin=2,
                                       comments=(present[0] if len(present) == 1 else present) or None)
                del lines
                ei = table.T
                if ei.size and int(ei.min()) < 0:
                    e = int(np.argmax((ei < 0).any(axis=0)))
                    raise _err(path, f"{line_of(e)}: vertex id {int(ei[:, e].min())} is negative")
                yield _check_edges(ei, bound, path, line_of)
                done += ei.shape[1]
        except ValueError as exc:
            if isinstance(exc, GraphError):
                raise
            where = _locate_bad_line(path, np.int64, 2, False, delimiter, comments, skiprows)
            raise _err(path, where or f"unparsable ({_why(exc)})") from None
        except (OSError, EOFError, zlib.error) as exc:
            raise _err(path, f"truncated or corrupt file ({_why(exc)})") from None


def edgelist_vertex_data(path: PathLike, max_id: int, features: PathLike | None = None,
                         labels: PathLike | None = None, split: PathLike | None = None,
                         num_nodes: int | None = None, num_classes: int | None = None, seed: int = 0,
                         num_features: int = 32) -> tuple[int, np.ndarray, np.ndarray, dict[str, np.ndarray], int]:
    """The vertex data :func:`read_edgelist` attaches to the edges of ``path`` whose largest id is ``max_id``.

    Returns ``(n, x, y, masks, num_classes)``, checked as :func:`read_edgelist` checks them, for a reader that
    streamed the edges (:func:`iter_edgelist_chunks`) and now knows their largest id (-1: no edges).
    """
    path = Path(path)
    n, n_from = _edgelist_num_nodes(path, max_id + 1, num_nodes, features, labels)
    if num_nodes is not None and max_id >= num_nodes:
        raise _err(path, f"vertex id {max_id} is out of range [0, {num_nodes})")
    x, y, masks, num_classes = _vertex_data(path, n, n_from, features, labels, split, num_classes, seed,
                                            num_features)
    return n, x, y, masks, num_classes


def _edgelist_layout(path: Path, delimiter: str | None, comments: Sequence[str]) -> tuple[int, str | None]:
    """``(lines to skip, delimiter)``: a first data line that is not all numbers is a header; ``,`` if it has one."""
    skiprows, first = 0, _first_data_line(path, comments, 0)
    if first is not None and not all(_is_number(t) for t in first[1].replace(",", " ").split()):
        skiprows = first[0]  # a header line of column names
        first = _first_data_line(path, comments, skiprows)
    if delimiter is None and first is not None and "," in first[1]:
        delimiter = ","
    return skiprows, delimiter


def _edgelist_num_nodes(path: Path, ids_end: int, num_nodes: int | None, features: PathLike | None,
                        labels: PathLike | None) -> tuple[int, str]:
    """``n`` and where it came from: ``num_nodes``, else max(largest id + 1, rows of the features/labels files)."""
    if num_nodes is not None:
        return num_nodes, f"num_nodes={num_nodes}"
    rows = [ids_end]
    for extra in (features, labels):
        if extra is not None:
            arr = _load_npy(extra, mmap=True)  # only the row count is needed here
            rows.append(int(arr.shape[0]) if arr.ndim else 0)
    return max(rows), f"n = max(largest id in {path.name} + 1, rows of the features/labels files)"


def _first_data_line(path: Path, comments: Sequence[str], skiprows: int) -> tuple[int, str] | None:
    lines = _data_lines(path, comments, skiprows)
    try:
        return next(lines, None)
    finally:
        lines.close()


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _with_vertex_data(path: Path, ei: np.ndarray, n: int, n_from: str, fmt: str, features: PathLike | None,
                      labels: PathLike | None, split: PathLike | None, num_classes: int | None, seed: int,
                      num_features: int) -> Graph:
    x, y, masks, num_classes = _vertex_data(path, n, n_from, features, labels, split, num_classes, seed,
                                            num_features)
    return Graph(n, ei, x, y, masks, num_classes=num_classes, name=str(path),
                 meta={"format": fmt, "source": str(path)}).validate()


def _vertex_data(path: Path, n: int, n_from: str, features: PathLike | None, labels: PathLike | None,
                 split: PathLike | None, num_classes: int | None, seed: int,
                 num_features: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], int]:
    """Features, labels, split masks and class count from the optional files, the rest synthesized from ``seed``."""
    if n <= 0:
        raise _err(path, "the graph has no vertices")
    # One independent stream per kind, so supplying (say) real labels does not change the synthetic features.
    rng_x, rng_y, rng_split = (np.random.default_rng([seed, k]) for k in range(3))
    if features is not None:
        x = _check_features(_load_npy(features), features, n, n_from)
    else:
        x = rng_x.standard_normal((n, num_features), dtype=np.float32)

    if labels is not None:
        y = _check_labels(_load_npy(labels), labels, n, n_from, nan_is_unlabelled=False)
        num_classes = _check_label_range(y, num_classes, labels)
        labels_src = str(labels)
    else:
        num_classes = num_classes or 2
        y = rng_y.integers(0, num_classes, n, dtype=np.int64)
        labels_src = "the synthetic labels"

    if split is None:
        labelled = rng_split.permutation(np.flatnonzero(y >= 0))
        k = labelled.size
        cut = (max(1, k // 2), max(1, k // 2) + k // 4) if k else (0, 0)
        masks = {}
        for name, part in zip(SPLITS, np.split(labelled, cut)):
            masks[name] = np.zeros(n, dtype=bool)
            masks[name][part] = True
        split_src = f"the random split (from {labels_src})"
    else:
        masks, split_src = _load_split(Path(split), n, n_from), str(split)
    _check_splits(masks, y, dict.fromkeys(SPLITS, split_src), labels_src)
    return x, y, masks, num_classes


def _load_split(path: Path, n: int, n_from: str) -> dict[str, np.ndarray]:
    """A ``.npz`` of bool train/val/test masks, or an ``.npy`` code vector 0/1/2 (-1 = none)."""
    if path.suffix == ".npz":
        arrays = _load_npz(path, list(SPLITS))
        masks = {}
        for name in SPLITS:
            m = arrays[name].reshape(-1)
            if m.shape[0] != n:
                raise _err(path, f"'{name}' has {m.shape[0]} entries for {n} vertices ({n_from})")
            if m.dtype != bool and not (np.issubdtype(m.dtype, np.integer) and np.isin(m, (0, 1)).all()):
                raise _err(path, f"'{name}' must be a bool mask, got {m.dtype}")
            masks[name] = m.astype(bool)
        return masks
    codes = _load_npy(path).reshape(-1)
    if not np.issubdtype(codes.dtype, np.integer):
        raise _err(path, f"split codes must be integers (0 train, 1 val, 2 test, -1 none), got {codes.dtype}")
    if codes.shape[0] != n:
        raise _err(path, f"{codes.shape[0]} split codes for {n} vertices ({n_from})")
    bad = ~np.isin(codes, (-1, 0, 1, 2))
    if bad.any():
        v = int(np.argmax(bad))
        raise _err(path, f"split code {int(codes[v])} of vertex {v} is not one of 0, 1, 2, -1")
    return {name: codes == code for code, name in enumerate(SPLITS)}


# ------------------------------------------------------------------------------------------------- MG-GCN binary


def read_mggcn_bin(root: PathLike) -> Graph:
    """Read the original MG-GCN dataset directory (``graph.bin``, ``features.bin``, ``labels.bin``, ``sets.bin``).

    The byte layout is in the module docstring. ``graph.bin`` rows are targets: entry ``(r, c)`` is ``c -> r``.
    """
    root = Path(root)
    graph_path = root / "graph.bin"
    n, ei = _read_pigo_csr(graph_path)
    n_from = f"{graph_path.name} has {n} rows"
    feat_path = root / "features.bin"
    x = _check_features(_read_dense_bin(feat_path, np.float32), feat_path, n, n_from)
    label_path = root / "labels.bin"
    y = _read_dense_bin(label_path, np.int32, vector=True)
    y = _check_labels(y, label_path, n, n_from, nan_is_unlabelled=False)
    sets_path = root / "sets.bin"
    codes = _read_dense_bin(sets_path, np.int32, vector=True)
    if codes.shape[0] != n:
        raise _err(sets_path, f"{codes.shape[0]} rows for {n} vertices ({n_from})")
    masks = {name: codes == code for code, name in enumerate(SPLITS)}
    _check_splits(masks, y, dict.fromkeys(SPLITS, str(sets_path)), str(label_path))
    return Graph(n, ei, x, y, masks, name=str(root), meta={"format": "mggcn-bin", "source": str(root)}).validate()


def _read_pigo_csr(path: Path) -> tuple[int, np.ndarray]:
    path = _require(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(len(PIGO_MAGIC) + 2)
        if not (head[: len(PIGO_MAGIC)] == PIGO_MAGIC or PIGO_MAGIC.startswith(head)):
            raise _err(path, f"bad header {head[: len(PIGO_MAGIC)]!r}, expected {PIGO_MAGIC!r}")
        if len(head) < len(PIGO_MAGIC) + 2:
            raise _err(path, f"truncated header: {size} bytes")
        width_l, width_o = head[-2], head[-1]
        if width_l not in (4, 8) or width_o not in (4, 8):
            raise _err(path, f"id/offset byte widths {width_l}/{width_o} in the header are not 4 or 8")
        lab, ordi = np.dtype(f"<u{width_l}"), np.dtype(f"<u{width_o}")
        header_end = len(head) + 3 * width_l + width_o
        if size < header_end:
            raise _err(path, f"truncated header: expected at least {header_end} bytes, found {size}")
        n = int(np.frombuffer(f.read(width_l), lab)[0])
        nnz = int(np.frombuffer(f.read(width_o), ordi)[0])
        nrows, ncols = (int(v) for v in np.frombuffer(f.read(2 * width_l), lab))
        unweighted = header_end + width_o * (n + 1) + width_l * nnz
        weighted = unweighted + 4 * nnz
        if size not in (weighted, unweighted):
            state = "truncated" if size < weighted else "too long"
            raise _err(path, f"{state}: the header (n={n}, nnz={nnz}) implies {weighted} bytes, found {size}")
        if not n == nrows == ncols:
            raise _err(path, f"the header says n={n} for a {nrows} x {ncols} matrix; an adjacency is n x n")
        indptr = np.fromfile(f, ordi, n + 1).astype(np.int64)
        indices = np.fromfile(f, lab, nnz).astype(np.int64)
        values = np.fromfile(f, "<f4", nnz) if size == weighted else None
    if indptr[0] != 0 or indptr[-1] != nnz or (np.diff(indptr) < 0).any():
        raise _err(path, f"corrupt row offsets (must rise from 0 to nnz={nnz})")
    targets = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    ei = _check_edges(np.stack([indices, targets]), n, path, lambda e: f"indices[{e}] (row {targets[e]})")
    if values is not None:
        ei = ei[:, values != 0]
    return n, ei


def _read_dense_bin(path: Path, dtype: type, vector: bool = False) -> np.ndarray:
    path = _require(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size < 8:
            raise _err(path, f"truncated header: expected 8 bytes (uint32 rows, cols), found {size}")
        rows, cols = (int(v) for v in np.fromfile(f, "<u4", 2))
        expected = 8 + rows * cols * np.dtype(dtype).itemsize
        if size != expected:
            state = "truncated" if size < expected else "too long"
            raise _err(path, f"{state}: the header ({rows} x {cols}) implies {expected} bytes, found {size}")
        if vector and cols != 1:
            raise _err(path, f"expected one column, the header says {cols}")
        data = np.fromfile(f, np.dtype(dtype).newbyteorder("<"), rows * cols).reshape(rows, cols)
    return data[:, 0] if vector else data


def write_mggcn_bin(graph: Graph, root: PathLike) -> None:
    """Write ``graph`` as the four MG-GCN files under ``root`` (created if needed); see the module docstring.

    Edges are stored target-major (CSR row = target) with value 1, so :func:`read_mggcn_bin` returns the same
    edge multiset, ordered by (target, source).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    n, ei = graph.num_nodes, graph.edge_index
    order = np.lexsort((ei[0], ei[1]))
    sources, targets = ei[0, order], ei[1, order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(targets, minlength=n))])
    nnz = sources.shape[0]
    lab = np.dtype("<u4") if n < 2**32 else np.dtype("<u8")
    ordi = np.dtype("<u4") if nnz < 2**32 else np.dtype("<u8")
    with open(root / "graph.bin", "wb") as f:
        f.write(PIGO_MAGIC)
        f.write(bytes([lab.itemsize, ordi.itemsize]))
        f.write(np.array([n], lab).tobytes() + np.array([nnz], ordi).tobytes() + np.array([n, n], lab).tobytes())
        f.write(indptr.astype(ordi).tobytes())
        f.write(sources.astype(lab).tobytes())
        f.write(np.ones(nnz, "<f4").tobytes())
    sets = np.full(n, -1, dtype=np.int32)
    for code, name in enumerate(SPLITS):
        sets[graph.masks[name]] = code
    for fname, arr in (("features.bin", graph.x.astype("<f4")), ("labels.bin", graph.y.astype("<i4")[:, None]),
                       ("sets.bin", sets.astype("<i4")[:, None])):
        with open(root / fname, "wb") as f:
            f.write(np.array(arr.shape, "<u4").tobytes())
            f.write(np.ascontiguousarray(arr).tobytes())


# -------------------------------------------------------------------------------------------------- in-memory


def _to_numpy(t: Any) -> np.ndarray:
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.asarray(t)


def from_tensors(edge_index: Any, x: Any, y: Any, train_mask: Any, val_mask: Any, test_mask: Any,
                 num_nodes: int | None = None, name: str = "tensors") -> Graph:
    """Build a validated :class:`Graph` from torch tensors or numpy arrays (``edge_index`` is ``[2, E]``)."""
    x_np = _to_numpy(x)
    y_np = _to_numpy(y)
    if y_np.ndim == 2 and y_np.shape[1] == 1:
        y_np = y_np[:, 0]  # OGB-style [n, 1] labels
    if num_nodes is None:
        num_nodes = int(x_np.shape[0]) if x_np.ndim else 0
    masks = {k: _to_numpy(m).astype(bool) for k, m in zip(SPLITS, (train_mask, val_mask, test_mask))}
    ei = _to_numpy(edge_index)
    if ei.size == 0:
        ei = ei.reshape(2, 0)
    return Graph(int(num_nodes), ei, x_np, y_np, masks, name=name, meta={"format": "tensors"}).validate()


def from_pyg(data: Any, name: str = "pyg") -> Graph:
    """Build a :class:`Graph` from a PyG ``Data`` with ``edge_index``, ``x``, ``y`` and the three split masks."""
    fields = ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask")
    missing = [k for k in fields if getattr(data, k, None) is None]
    if missing:
        raise GraphError(f"{name}: the PyG Data has no {missing}; set them or use from_tensors")
    graph = from_tensors(*(getattr(data, k) for k in fields), num_nodes=data.num_nodes, name=name)
    graph.meta["format"] = "pyg"
    return graph


def transform(graph: Graph, undirected: bool = False, dedup: bool = False) -> Graph:
    """Return a copy of ``graph`` with reverse edges added (``undirected``) and/or duplicate edges dropped.

    With both, duplicates are dropped after adding the reverse edges, so an edge stored in both directions appears
    once per direction. Deduplication sorts edges by (source, target); self-loops are kept.
    """
    ei = graph.edge_index
    if undirected:
        ei = np.concatenate([ei, ei[::-1]], axis=1)
    if dedup and ei.size:
        key = np.unique(ei[0] * np.int64(graph.num_nodes) + ei[1])
        ei = np.stack([key // graph.num_nodes, key % graph.num_nodes])
    return dataclasses.replace(graph, edge_index=ei, masks=dict(graph.masks), meta=dict(graph.meta))


# ------------------------------------------------------------------------------------------------------ dispatch

_READERS: dict[str, Callable[..., Graph]] = {
    "ogb": read_ogb,
    "saint": read_saint,
    "dgl-reddit": read_dgl_reddit,
    "mtx": read_mtx,
    "edgelist": read_edgelist,
    "mggcn-bin": read_mggcn_bin,
}


def read(source: PathLike, fmt: str, **options: Any) -> Graph:
    """Read ``source`` in format ``fmt`` (one of :data:`FORMATS`); ``options`` go to that format's reader."""
    reader = _READERS.get(fmt)
    if reader is None:
        raise GraphError(f"{os.fspath(source)}: unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return reader(source, **options)
