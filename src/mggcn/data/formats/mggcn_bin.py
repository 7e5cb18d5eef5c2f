"""The original MG-GCN dataset files (PIGO's CSR ``graph.bin`` and three dense ``.bin`` files).

The ``mggcn-bin`` layout, as MG-GCN's ``test/data/prep.py`` writes it and PIGO's ``CSR::read_bin_`` reads it (all
little-endian, no padding):

* ``graph.bin``: the 11 ASCII bytes ``PIGO-CSR-v2``; ``uint8 L``, ``uint8 O`` (byte widths, 4 or 8, of vertex ids
  and of offsets); ``L n``, ``O nnz``, ``L nrows``, ``L ncols``; ``O indptr[n + 1]``; ``L indices[nnz]``; then
  ``float32 values[nnz]`` (a weighted CSR, which is what MG-GCN reads; a file that stops after ``indices`` is read as
  unweighted). Entry ``(row, indices[k])`` with a nonzero value is the edge ``indices[k] -> row``.
* ``features.bin``: ``uint32 rows, cols`` then ``float32 [rows, cols]`` row-major.
* ``labels.bin``: ``uint32 rows, 1`` then ``int32 [rows]``; ``-1`` = unlabelled (MG-GCN writes uint32; same bytes).
* ``sets.bin``: ``uint32 rows, 1`` then ``int32 [rows]``: 0 = train, 1 = val, 2 = test, anything else = no split.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mggcn.data.formats.checks import (
    PathLike,
    check_features,
    check_splits,
    file_error,
    require_file,
)
from mggcn.data.formats.labels import check_labels
from mggcn.data.formats.sparse import check_csr, edge_entries
from mggcn.data.graph import SPLITS, Graph

__all__ = ["PIGO_MAGIC", "read_mggcn_bin", "write_mggcn_bin"]


PIGO_MAGIC = b"PIGO-CSR-v2"


def read_mggcn_bin(root: PathLike) -> Graph:
    """Read the original MG-GCN dataset directory (``graph.bin``, ``features.bin``, ``labels.bin``, ``sets.bin``).

    The byte layout is in the module docstring. ``graph.bin`` rows are targets: entry ``(r, c)`` is ``c -> r``.
    """
    root = Path(root)
    graph_path = root / "graph.bin"
    n, ei = _read_pigo_csr(graph_path)
    n_from = f"{graph_path.name} has {n} rows"
    feat_path = root / "features.bin"
    x = check_features(_read_dense_bin(feat_path, np.float32), feat_path, n, n_from)
    label_path = root / "labels.bin"
    y = _read_dense_bin(label_path, np.int32, vector=True)
    y = check_labels(y, label_path, n, n_from, nan_is_unlabelled=False)
    sets_path = root / "sets.bin"
    codes = _read_dense_bin(sets_path, np.int32, vector=True)
    if codes.shape[0] != n:
        raise file_error(sets_path, f"{codes.shape[0]} rows for {n} vertices ({n_from})")
    masks = {name: codes == code for code, name in enumerate(SPLITS)}
    check_splits(masks, y, dict.fromkeys(SPLITS, str(sets_path)), str(label_path))
    return Graph(n, ei, x, y, masks, name=str(root), meta={"format": "mggcn-bin", "source": str(root)}).validate()


def _read_pigo_csr(path: Path) -> tuple[int, np.ndarray]:
    path = require_file(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(len(PIGO_MAGIC) + 2)
        if not (head[: len(PIGO_MAGIC)] == PIGO_MAGIC or PIGO_MAGIC.startswith(head)):
            raise file_error(path, f"bad header {head[: len(PIGO_MAGIC)]!r}, expected {PIGO_MAGIC!r}")
        if len(head) < len(PIGO_MAGIC) + 2:
            raise file_error(path, f"truncated header: {size} bytes")
        width_l, width_o = head[-2], head[-1]
        if width_l not in (4, 8) or width_o not in (4, 8):
            raise file_error(path, f"id/offset byte widths {width_l}/{width_o} in the header are not 4 or 8")
        lab, ordi = np.dtype(f"<u{width_l}"), np.dtype(f"<u{width_o}")
        header_end = len(head) + 3 * width_l + width_o
        if size < header_end:
            raise file_error(path, f"truncated header: expected at least {header_end} bytes, found {size}")
        n = int(np.frombuffer(f.read(width_l), lab)[0])
        nnz = int(np.frombuffer(f.read(width_o), ordi)[0])
        nrows, ncols = (int(v) for v in np.frombuffer(f.read(2 * width_l), lab))
        if not n == nrows == ncols:  # before the size it implies: which of them would size the file is unknown
            raise file_error(path, f"the header says n={n} for a {nrows} x {ncols} matrix; an adjacency is n x n")
        unweighted = header_end + width_o * (n + 1) + width_l * nnz
        weighted = unweighted + 4 * nnz
        if size not in (weighted, unweighted):
            state = "truncated" if size < weighted else "too long"
            raise file_error(path, f"{state}: the header (n={n}, nnz={nnz}) implies {weighted} bytes, found {size}")
        indptr, indices = np.fromfile(f, ordi, n + 1), np.fromfile(f, lab, nnz)  # cast to int64 once checked
        values = np.fromfile(f, "<f4", nnz) if size == weighted else None
    indptr, indices = check_csr(indptr, indices, n, n, path)
    targets = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    ei = np.stack([indices, targets])
    if values is not None:
        ei = ei[:, edge_entries(values, path, lambda k: f"{k} (edge {int(ei[0, k])} -> {int(ei[1, k])})")]
    return n, ei


def _read_dense_bin(path: Path, dtype: type, vector: bool = False) -> np.ndarray:
    path = require_file(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size < 8:
            raise file_error(path, f"truncated header: expected 8 bytes (uint32 rows, cols), found {size}")
        rows, cols = (int(v) for v in np.fromfile(f, "<u4", 2))
        expected = 8 + rows * cols * np.dtype(dtype).itemsize
        if size != expected:
            state = "truncated" if size < expected else "too long"
            raise file_error(path, f"{state}: the header ({rows} x {cols}) implies {expected} bytes, found {size}")
        if vector and cols != 1:
            raise file_error(path, f"expected one column, the header says {cols}")
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
