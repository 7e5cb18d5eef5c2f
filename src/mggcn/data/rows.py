"""What a rank reads of a dataset to cut its shard (:func:`mggcn.distributed.sharding.build_shard`): its rows of the
vertex arrays and its rows of a CSR, a chunk at a time, each chunk checked as it enters, so that a damaged prepared
dataset is named by its file instead of training on garbage. From a prepared dataset the reads go through
:mod:`mggcn.data.mapped` (``preadv``, the pages dropped after each chunk), so a rank's memory grows with its rows,
not with the files.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mggcn.data.datasets import Dataset
from mggcn.data.mapped import drop_pages, gather, read_rows
from mggcn.utils.errors import GraphError
from mggcn.utils.parallel import thread_map

__all__ = ["ROWS_PER_READ", "dataset_error", "check_vertex_rows", "check_features", "check_symmetric_sums",
           "copy_rows", "read_row_spans", "read_neighbours"]

ROWS_PER_READ = 1 << 14  # vertex rows copied out of a mapped array between two drop_pages


def dataset_error(dataset: Dataset, array: str, msg: str) -> GraphError:
    """A :class:`GraphError` naming where ``array`` of ``dataset`` comes from (a file of a prepared dataset)."""
    return GraphError(" ".join(f"{dataset.source(array)}: {msg}".split()))


def check_vertex_rows(dataset: Dataset, ids: np.ndarray, degree: np.ndarray, y: np.ndarray,
                      codes: np.ndarray) -> None:
    """The vertex data of the rows a rank loads, checked (together, the ranks check every row once): labels in
    range, split codes, a label for every vertex in a split, stored degrees of at least 1. (The features:
    :func:`check_features`.)"""
    if y.ndim == 2:  # multi-label: a 0/1 per label, and every vertex labelled
        bad = y > 1
        if bad.any():
            row, col = np.unravel_index(int(np.argmax(bad)), y.shape)
            raise dataset_error(dataset, "labels", f"vertex {int(ids[row])} has {int(y[row, col])} for label {col}; "
                                                   "multi-label labels are 0 or 1")
        y = np.zeros(y.shape[0], dtype=np.int64)
    bad = (y < -1) | (y >= dataset.num_classes)
    if bad.any():
        raise dataset_error(dataset, "labels", f"label {int(y[np.argmax(bad)])} of vertex {int(ids[np.argmax(bad)])} "
                                               f"is out of range [-1, {dataset.num_classes}) (num_classes of "
                                               "manifest.json)")
    bad = ~np.isin(codes, (-1, 0, 1, 2))
    if bad.any():
        raise dataset_error(dataset, "split", f"split code {int(codes[np.argmax(bad)])} of vertex "
                                              f"{int(ids[np.argmax(bad)])} is not one of 0, 1, 2, -1")
    bad = (codes >= 0) & (y < 0)
    if bad.any():
        raise dataset_error(dataset, "split", f"vertex {int(ids[np.argmax(bad)])} is in a split but has no label")
    bad = degree < 1
    if bad.any():
        raise dataset_error(dataset, "degree", f"degree {int(degree[np.argmax(bad)])} of vertex "
                                               f"{int(ids[np.argmax(bad)])} is below 1 (the self loop counts one)")


def check_features(dataset: Dataset, ids: np.ndarray, x: np.ndarray) -> None:
    """Rows ``x`` of vertices ``ids``: finite features."""
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise dataset_error(dataset, "features", f"the features of vertex {int(ids[np.argmax(bad)])} contain NaN or "
                                                 "inf")


def check_symmetric_sums(dataset: Dataset, sums: list) -> None:
    """A symmetric dataset lets a rank use its rows of A as its rows of Aᵀ: check it where a rank can, on its
    diagonal block (i, i), which must equal its transpose (with P = 1, the whole graph; with P > 1, the edges among
    its own rows, so an asymmetric graph is caught unless every asymmetric edge crosses ranks). ``sums``: the sums
    over the block's entries of multiplicity × :func:`~mggcn.data.prepared.reader.pair_hash` of (row, column) and of
    (column, row), accumulated chunk by chunk (multisets compared in O(1) memory, as ``mggcn verify`` does)."""
    if sums[0] != sums[1]:
        raise dataset_error(dataset, "manifest", "says \"symmetric\": true but the edges of in_indices are not "
                                                 "symmetric: prepare the dataset again")


def copy_rows(dataset: Dataset, name: str, ids: np.ndarray, local: np.ndarray, out: np.ndarray,
              counted: dict[str, int], check: Callable[[Dataset, np.ndarray, np.ndarray], None] | None = None) -> None:
    """``out[local] = arrays[name][ids]``, a chunk of rows at a time on the rank's threads (each chunk passed to
    ``check(dataset, ids, rows)``, the first error in row order raised), the pages of a mapped array dropped after
    each; the bytes read added to ``counted["bytes"]``. A chunk of consecutive local rows is read straight into
    ``out``."""
    arr = dataset.arrays[name]

    def copy(start: int) -> int:
        where, chunk = local[start: start + ROWS_PER_READ], ids[start: start + ROWS_PER_READ]
        if where[-1] - where[0] == where.size - 1:
            rows = read_rows(arr, chunk, out[where[0]: where[-1] + 1])
        else:
            rows = read_rows(arr, chunk)
            out[where] = rows
        if check is not None:
            check(dataset, chunk, rows)
        drop_pages(arr)
        return rows.nbytes

    counted["bytes"] += sum(thread_map(copy, range(0, ids.size, ROWS_PER_READ)))


def read_row_spans(dataset: Dataset, view: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the CSR rows ``ids`` of ``{view}_indptr`` start in ``{view}_indices`` and how many ids each holds,
    checked to lie within the dataset's edges."""
    indptr = dataset.arrays[f"{view}_indptr"]
    starts = np.asarray(indptr[ids])
    counts = np.asarray(indptr[ids + 1]) - starts
    bad = (counts < 0) | (starts < 0) | (starts + counts > dataset.num_edges)
    if bad.any():
        v = int(ids[np.argmax(bad)])
        raise dataset_error(dataset, f"{view}_indptr", f"corrupt row offsets: row {v} runs from {int(indptr[v])} "
                                                       f"to {int(indptr[v + 1])}, outside [0, E = {dataset.num_edges}]")
    return starts, counts


def read_neighbours(dataset: Dataset, view: str, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The ids in ``{view}_indices`` of the CSR rows starting at ``starts`` with ``counts`` ids each, concatenated
    (the pages of a mapped array dropped after), checked to be vertex ids."""
    indices = dataset.arrays[f"{view}_indices"]
    nbr = gather(indices, starts, counts)
    drop_pages(indices)
    if nbr.size and (int(nbr.min()) < 0 or int(nbr.max()) >= dataset.num_nodes):
        bad_id = int(nbr.min()) if int(nbr.min()) < 0 else int(nbr.max())
        raise dataset_error(dataset, f"{view}_indices", f"vertex id {bad_id} is out of range "
                                                        f"[0, {dataset.num_nodes})")
    return nbr
