"""Sparse adjacency files: scipy's sparse ``.npz`` (csr, csc, coo), the CSR arrays of other archives, and a sparse
matrix's entries as edges; each check raises a one-line :class:`~mggcn.utils.errors.GraphError` naming the file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from mggcn.data.formats.checks import CORRUPT, PathLike, file_error, load_npz, open_npz, require_file, why
from mggcn.utils.errors import GraphError

SPARSE_CHUNK = 1 << 16  # entries whose row ids load_sparse writes at a time (a temporary of 512 KiB)


def matrix_shape(shape: np.ndarray, path: PathLike, name: str) -> tuple[int, int]:
    """``(rows, columns)`` of a sparse matrix's stored shape, the array ``name`` of ``path``, checked."""
    shape = shape.reshape(-1)
    if shape.shape != (2,) or not np.issubdtype(shape.dtype, np.integer) or (shape < 0).any():
        raise file_error(path, f"{name} {shape.tolist()} is not two non-negative integers")
    return int(shape[0]), int(shape[1])


def square_shape(shape: np.ndarray, path: PathLike, name: str) -> int:
    """The ``n`` of an adjacency matrix's stored shape ``n x n`` (:func:`matrix_shape`), refused unless square."""
    rows, cols = matrix_shape(shape, path, name)
    if rows != cols:
        raise file_error(path, f"the adjacency matrix is {rows} x {cols}, not square")
    return rows


def load_sparse(path: PathLike) -> tuple[int, np.ndarray]:
    """A square scipy sparse ``.npz`` (``sp.save_npz``: CSR, CSC or COO) as ``(n, edge_index)``: one edge row ->
    column, int64 ``[2, E]``, for every entry whose value is nonzero (explicit zeros are no edge). Its arrays are read
    and checked here (:func:`check_csr`, :func:`check_coo`): scipy's own loader trusts the row offsets, and a file
    whose offsets point past its arrays crashes the process in scipy's C code. The edges are written straight into
    their int64 array (no int64 copy of the file's indices, no COO matrix): a file's arrays and the edges are all
    that is held at once."""
    path = require_file(path)
    fmt = _sparse_format(path)
    members = ["shape", "data", *(("indptr", "indices") if fmt != "coo" else ())]
    arrays = load_npz(path, members, optional=("row", "col", "coords"))
    rows = cols = square_shape(arrays["shape"], path, "shape")
    data = arrays.pop("data")
    data = data.reshape(-1) if data.ndim <= 1 else data
    # bool: GraphSAINT's own converter (ogbn_converter.py) saves adj_full with True for every edge
    if data.ndim != 1 or not (np.issubdtype(data.dtype, np.number) or data.dtype == np.bool_):
        raise file_error(path, f"'data' must be a vector of numbers or bools, got {data.dtype} {list(data.shape)}")
    edges = np.empty((2, data.shape[0]), dtype=np.int64)
    if fmt == "coo":
        _coo_edges(arrays, edges, rows, cols, path)
    else:
        _compressed_edges(arrays, edges, fmt, rows, cols, path)
    del arrays
    keep = edge_entries(data, path, lambda k: f"{k} of 'data' (edge {int(edges[0][k])} -> {int(edges[1][k])})")
    if not keep.all():  # explicit zeros (rare): the edges of the nonzero entries, C-contiguous
        kept = np.empty((2, int(keep.sum())), dtype=np.int64)
        kept[0], kept[1] = edges[0][keep], edges[1][keep]
        edges = kept
    return rows, edges


def _sparse_format(path: Path) -> str:
    """The ``format`` a scipy sparse ``.npz`` says it holds: ``csr``, ``csc`` or ``coo``."""
    try:
        with open_npz(path, "a scipy sparse .npz archive") as probe:
            fmt = probe["format"].item() if "format" in probe.files else None
    except GraphError:
        raise
    except CORRUPT as exc:
        raise file_error(path, f"truncated or corrupt scipy sparse .npz file ({why(exc)})") from None
    if isinstance(fmt, bytes):
        fmt = fmt.decode("ascii", errors="replace")
    if fmt not in ("csr", "csc", "coo"):
        raise file_error(path, f"not a scipy sparse .npz of format csr, csc or coo (format {fmt!r})")
    return fmt


def _coo_edges(arrays: dict[str, np.ndarray], edges: np.ndarray, rows: int, cols: int, path: Path) -> None:
    """A coo matrix's ``row`` and ``col`` (or scipy's newer ``coords``), checked, into ``edges`` [2, nnz]."""
    if "coords" in arrays and "row" not in arrays:
        coords = arrays["coords"]
        if coords.ndim != 2 or coords.shape[0] != 2:
            raise file_error(path, f"'coords' must be [2, nnz], got {list(coords.shape)}")
        arrays["row"], arrays["col"] = coords[0], coords[1]
    if "row" not in arrays or "col" not in arrays:
        raise file_error(path, "a coo matrix without 'row' and 'col'")
    edges[0], edges[1] = check_coo(arrays["row"], arrays["col"], edges.shape[1], rows, cols, path, as_int64=False)


def _compressed_edges(arrays: dict[str, np.ndarray], edges: np.ndarray, fmt: str, rows: int, cols: int,
                      path: Path) -> None:
    """A csr or csc matrix's ``indptr`` and ``indices``, checked, into ``edges`` [2, nnz]: the indices copied, the
    row (csr) or column (csc) of each entry written from the offsets, about :data:`SPARSE_CHUNK` entries at a
    time."""
    nnz = edges.shape[1]
    major, minor = (rows, cols) if fmt == "csr" else (cols, rows)
    indptr, indices = check_csr(arrays["indptr"], arrays["indices"], major, minor, path, as_int64=False)
    if nnz != indices.shape[0]:
        raise file_error(path, f"'data' has {nnz} entries for {indices.shape[0]} indices")
    outer, inner = (0, 1) if fmt == "csr" else (1, 0)
    edges[inner] = indices
    indptr = indptr.astype(np.int64, copy=False)
    step = max(1, major * SPARSE_CHUNK // max(1, nnz))  # rows of about SPARSE_CHUNK entries at a time
    for r in range(0, major, step):
        stop = min(major, r + step)
        edges[outer, indptr[r]:indptr[stop]] = np.repeat(np.arange(r, stop, dtype=np.int64),
                                                         np.diff(indptr[r:stop + 1]))


def check_csr(indptr: np.ndarray, indices: np.ndarray, num_rows: int, num_cols: int,
              path: PathLike, as_int64: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The arrays of a CSR (or CSC) matrix read from ``path``, checked before anything indexes with them.

    ``indptr`` must be ``[num_rows + 1]`` integers rising (not strictly) from 0 to ``len(indices)``, and
    ``indices`` integers in ``[0, num_cols)``. Returns both as int64 vectors (``as_int64=False``: as read), cast only
    once checked: an unsigned value beyond int64 would wrap to a negative one.
    """
    for name, arr in (("indptr", indptr), ("indices", indices)):
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise file_error(path, f"'{name}' must be an integer vector, got {arr.dtype} {list(arr.shape)}")
    if indptr.shape[0] != num_rows + 1:
        raise file_error(path, f"'indptr' has {indptr.shape[0]} entries for {num_rows} rows (expected "
                               f"{num_rows + 1})")
    nnz = indices.shape[0]
    if indptr[0] != 0 or indptr[-1] != nnz:
        raise file_error(path, f"corrupt row offsets: 'indptr' runs from {int(indptr[0])} to {int(indptr[-1])}, "
                               f"not from 0 to the {nnz} entries of 'indices'")
    falls = indptr[1:] < indptr[:-1]  # not np.diff: on unsigned offsets a fall wraps to a large rise
    if falls.any():
        r = int(np.argmax(falls))
        raise file_error(path, f"corrupt row offsets: 'indptr' falls from {int(indptr[r])} to "
                               f"{int(indptr[r + 1])} at row {r}")
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= num_cols):  # no mask of the entries' size
        k = int(np.argmax((indices < 0) | (indices >= num_cols)))
        raise file_error(path, f"'indices'[{k}]: vertex id {int(indices[k])} is out of range [0, {num_cols})")
    if as_int64:
        indptr, indices = indptr.astype(np.int64, copy=False), indices.astype(np.int64, copy=False)
    return indptr, indices


def check_coo(row: np.ndarray, col: np.ndarray, nnz: int, num_rows: int, num_cols: int,
              path: PathLike, as_int64: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The ``row``/``col`` vectors of a COO matrix with ``nnz`` values read from ``path``: integers, ``nnz`` long,
    in range. Returns both as int64 (``as_int64=False``: as read)."""
    for name, arr, bound in (("row", row, num_rows), ("col", col, num_cols)):
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise file_error(path, f"'{name}' must be an integer vector, got {arr.dtype} {list(arr.shape)}")
        if arr.shape[0] != nnz:
            raise file_error(path, f"'{name}' has {arr.shape[0]} entries for {nnz} values")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= bound):
            k = int(np.argmax((arr < 0) | (arr >= bound)))
            raise file_error(path, f"'{name}'[{k}]: vertex id {int(arr[k])} is out of range [0, {bound})")
    if not as_int64:
        return row, col
    return row.astype(np.int64, copy=False), col.astype(np.int64, copy=False)


def edges_from_sparse(mat: sp.coo_matrix, path: Path) -> np.ndarray:
    """``[2, E]`` with row -> column for every entry whose value is nonzero (explicit zeros are no edge)."""
    keep = edge_entries(mat.data, path, lambda k: f"row {int(mat.row[k]) + 1}, column {int(mat.col[k]) + 1}")
    return np.stack([mat.row[keep], mat.col[keep]]).astype(np.int64)


def edge_entries(data: np.ndarray, path: Path, where: Callable[[int], str]) -> np.ndarray:
    """Which entries of a sparse adjacency are edges: those of a nonzero value (explicit zeros are none). A NaN or
    an infinity is neither an edge nor none: refused, naming the entry (``where(k)``)."""
    if data.dtype.kind in "fc":
        bad = ~np.isfinite(data)
        if bad.any():
            k = int(np.argmax(bad))
            raise file_error(path, f"the adjacency's entry at {where(k)} is {data[k]}: its values must be finite "
                                   "(any nonzero is an edge)")
    return data != 0
