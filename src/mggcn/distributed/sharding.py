"""A dataset's partition and each rank's shard: the one place that cuts shards, for every kind of dataset.

A dataset (:class:`mggcn.data.datasets.Dataset`: a graph in memory, or a directory ``mggcn prepare`` wrote) holds
the graph as arrays indexed by original vertex id (:data:`mggcn.data.datasets.ROW_ARRAYS`). :func:`build_shard`
reads from them only what rank ``rank`` needs: its rows of both CSRs, the degree of those rows and of their
neighbours, and its rows of features, labels and split. From a prepared dataset these are memory-mapped reads, so a
rank's host memory grows with its share of the graph, not with the whole graph.

Â is built as :func:`mggcn.nn.norm.normalize` builds it, entry for entry and bit for bit, for every operator
(:data:`mggcn.config.OPERATORS`): self loops dropped for one unit loop (the GCN's norms; GraphSAGE's ``in-mean`` and
GIN's ``sum`` keep the edges as given and add no diagonal), parallel edges summed into one entry, values from
:func:`mggcn.nn.norm.entry_values` with the degrees of :func:`_degree` (``Â[t, s]``: t is the row of Â, the column of
Âᵀ).

Memory: the setup holds at most the shard plus about one block in flight. The rows are read a chunk of edges at a
time (:data:`SHARD_CHUNK_EDGES`, at most 1/16 of an average block's: an edge's temporaries take ~12 times its bytes in
the block), the heap trimmed after each chunk; each chunk's entries go to the column block they belong to, in CSR
order, as columns, values and counts per row (8 bytes an entry, as in the block; 12 with the values of a symmetric
A's Âᵀ when they differ from Â's); a block is then assembled and cut into tiles while the entries of the blocks after
it wait, and its entries are released as they are copied: never the rank's entries and its CSR at once.

Legend: n = vertices, m = rows of a rank, P = ranks.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from mggcn.config import NORMS, OPERATORS
from mggcn.data.datasets import Dataset, InMemoryDataset
from mggcn.data.graph import SPLITS, ConfigError, Graph, GraphError
from mggcn.data.prepared.reader import pair_hash
from mggcn.distributed.metis import metis_partition
from mggcn.distributed.partition import Partition, Shard, make_partition, to_blocks
from mggcn.distributed.tiled import TiledCSR
from mggcn.nn.norm import adds_self_loops, entry_values
from mggcn.utils.system import trim_heap

__all__ = ["SHARD_CHUNK_EDGES", "build_shard", "partition_dataset", "release_dataset"]

SHARD_CHUNK_EDGES = 1 << 20  # the most edges a rank reads at a time while building its shard
MIN_CHUNK_EDGES = 1 << 12  # ... and the least, unless SHARD_CHUNK_EDGES is smaller
ROWS_PER_READ = 1 << 14  # vertex rows copied out of a mapped array between two _drop_pages


def _drop_pages(arr: Any) -> None:
    """Take the pages of a memory-mapped array read so far out of this process's resident set (they stay in the
    page cache, and a later read maps them again): a rank's RSS then holds what it copied out of the files, not the
    files. A no-op for arrays that are not mapped, and where ``madvise`` is missing."""
    while arr is not None and not isinstance(getattr(arr, "_mmap", None), mmap.mmap):
        arr = getattr(arr, "base", None)
    if arr is not None and hasattr(mmap, "MADV_DONTNEED"):
        arr._mmap.madvise(mmap.MADV_DONTNEED)


def partition_dataset(dataset: Dataset | Graph, num_parts: int, seed: int = 0, ordering: str = "random") -> Partition:
    """The renumbering of ``dataset``'s vertices for ``num_parts`` ranks (:mod:`mggcn.distributed.partition`).

    ``metis`` reads the whole in-edge CSR (every rank computes the same result): unlike the shards, it needs the
    whole graph in memory, ~12 bytes per edge while METIS runs.
    """
    if isinstance(dataset, Graph):
        dataset = InMemoryDataset(dataset)
    if ordering == "metis":
        indptr = np.asarray(dataset.arrays["in_indptr"])
        targets = np.repeat(np.arange(dataset.num_nodes, dtype=np.int64), np.diff(indptr))
        sources = np.asarray(dataset.arrays["in_indices"]).astype(np.int64)
        return metis_partition(targets, sources, dataset.num_nodes, num_parts, seed)  # rows of Â are targets
    return make_partition(dataset.num_nodes, num_parts, seed, ordering)


def _err(dataset: Dataset, array: str, msg: str) -> GraphError:
    return GraphError(" ".join(f"{dataset.source(array)}: {msg}".split()))


def _check_rows(dataset: Dataset, ids: np.ndarray, degree: np.ndarray, y: np.ndarray, codes: np.ndarray) -> None:
    """The vertex data of the rows a rank loads, checked (together, the ranks check every row once): a damaged
    prepared dataset is named by its file instead of training on garbage. (The features: :func:`_check_features`.)"""
    bad = (y < -1) | (y >= dataset.num_classes)
    if bad.any():
        raise _err(dataset, "labels", f"label {int(y[np.argmax(bad)])} of vertex {int(ids[np.argmax(bad)])} is out "
                                      f"of range [-1, {dataset.num_classes}) (num_classes of manifest.json)")
    bad = ~np.isin(codes, (-1, 0, 1, 2))
    if bad.any():
        raise _err(dataset, "split", f"split code {int(codes[np.argmax(bad)])} of vertex "
                                     f"{int(ids[np.argmax(bad)])} is not one of 0, 1, 2, -1")
    bad = (codes >= 0) & (y < 0)
    if bad.any():
        raise _err(dataset, "split", f"vertex {int(ids[np.argmax(bad)])} is in a split but has no label")
    bad = degree < 1
    if bad.any():
        raise _err(dataset, "degree", f"degree {int(degree[np.argmax(bad)])} of vertex {int(ids[np.argmax(bad)])} "
                                      "is below 1 (the self loop counts one)")


def _check_features(dataset: Dataset, ids: np.ndarray, x: np.ndarray) -> None:
    """Rows ``x`` of vertices ``ids``: finite features."""
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise _err(dataset, "features", f"the features of vertex {int(ids[np.argmax(bad)])} contain NaN or inf")


def _check_symmetric_block(dataset: Dataset, sums: list) -> None:
    """A symmetric dataset lets a rank use its rows of A as its rows of Aᵀ: check it where a rank can, on its
    diagonal block (i, i), which must equal its transpose (with P = 1, the whole graph; with P > 1, the edges among
    its own rows, so an asymmetric graph is caught unless every asymmetric edge crosses ranks). ``sums``: the sums
    over the block's entries of multiplicity × :func:`~mggcn.data.prepared.reader.pair_hash` of (row, column) and of
    (column, row), accumulated chunk by chunk (multisets compared in O(1) memory, as ``mggcn verify`` does)."""
    if sums[0] != sums[1]:
        raise _err(dataset, "manifest", "says \"symmetric\": true but the edges of in_indices are not "
                                        "symmetric: prepare the dataset again")


def _degree(dataset: Dataset, ids: np.ndarray, norm: str) -> np.ndarray:
    """The ``D`` of :func:`mggcn.nn.norm.entry_values` for the vertices ``ids``: the stored degree (in-edges other
    than self loops, plus one) for the GCN's norms, the in-edges as given (``in_indptr``) otherwise."""
    if adds_self_loops(norm):
        return np.asarray(dataset.arrays["degree"][ids])
    indptr = dataset.arrays["in_indptr"]
    return np.asarray(indptr[ids + 1]) - np.asarray(indptr[ids])


def _file_of(arr: Any) -> tuple[str, int] | None:
    """``(path, byte offset)`` of a C-contiguous memory-mapped ``.npy`` array (``np.load(..., mmap_mode="r")``),
    None for an array in memory."""
    if isinstance(arr, np.memmap) and arr.filename and arr.flags.c_contiguous and hasattr(os, "preadv"):
        return arr.filename, int(arr.offset)
    return None


def _pread(path: str, offset: int, out: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> None:
    """Fill ``out`` with the byte ranges ``[offset + start, + size)`` of ``path``, one after the other, through the
    page cache with ``preadv``: unlike reading a memory map at scattered places, no file page becomes this process's
    (each fault on a map brings its neighbours in too, so a chunk of scattered rows maps most of the file)."""
    view, at = memoryview(out.reshape(-1)).cast("B"), 0
    fd = os.open(path, os.O_RDONLY)
    try:
        for start, size in zip(starts.tolist(), sizes.tolist()):
            if size and os.preadv(fd, [view[at:at + size]], offset + start) != size:
                raise GraphError(f"{path}: shorter than its header says")
            at += size
    finally:
        os.close(fd)


def _read_rows(arr: Any, ids: np.ndarray) -> np.ndarray:
    """Rows ``ids`` of a vertex array (``arr[ids]``), read without mapping the file's pages when it is mapped."""
    where = _file_of(arr)
    if where is None or arr.ndim != 2:
        return np.asarray(arr[ids])
    out = np.empty((ids.size, *arr.shape[1:]), dtype=arr.dtype)
    row = arr.strides[0]
    _pread(*where, out, ids.astype(np.int64) * row, np.full(ids.size, row, dtype=np.int64))
    return out


def _gather(indices: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The CSR rows starting at ``starts`` (``counts`` long), concatenated, read from ``indices`` (a memory map, read
    with ``preadv``, or an array)."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    where = _file_of(indices)
    if where is not None:
        out = np.empty(total, dtype=indices.dtype)
        item = indices.dtype.itemsize
        _pread(*where, out, starts.astype(np.int64) * item, counts.astype(np.int64) * item)
        return out.astype(np.int64, copy=False)
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    offsets += np.arange(total, dtype=np.int64)
    return np.asarray(indices[offsets]).astype(np.int64, copy=False)


def _entries(dataset: Dataset, view: str, part: Partition, first_row: int, local: np.ndarray, ids: np.ndarray,
             degree: np.ndarray, norm: str, reads: dict[str, int], both: bool = False) -> list[list[tuple]]:
    """The entries of this rank's rows of Â (``view="in"``) or of Âᵀ (``"out"``), the unit diagonal included, by
    column block: for block j, one ``(first row, entries per row, col, values, [values of Âᵀ])`` per chunk read
    (``both``: a symmetric A; None where they equal Â's), rows local (local row i is new id ``first_row + i``),
    columns local to the block, sorted by row then column (the CSR order; a chunk holds whole rows and the chunks
    come in row order): 8 bytes per entry, as in the block it becomes."""
    arrays = dataset.arrays
    loops = adds_self_loops(norm)
    indptr, indices = arrays[f"{view}_indptr"], arrays[f"{view}_indices"]
    starts = np.asarray(indptr[ids])
    counts = np.asarray(indptr[ids + 1]) - starts
    reads["bytes"] += 2 * counts.nbytes
    bad = (counts < 0) | (starts < 0) | (starts + counts > dataset.num_edges)
    if bad.any():
        v = int(ids[np.argmax(bad)])
        raise _err(dataset, f"{view}_indptr", f"corrupt row offsets: row {v} runs from {int(indptr[v])} to "
                                              f"{int(indptr[v + 1])}, outside [0, E = {dataset.num_edges}]")
    n_nodes = dataset.num_nodes
    sums = [np.uint64(0), np.uint64(0)]  # both: the diagonal block's hash sums (_check_symmetric_block)
    ends = np.cumsum(counts)
    n_pad, m, num_parts = part.padded_nodes, part.rows_per_part, part.num_parts
    ids_dtype = np.int32 if m < 2**31 else np.int64
    chunk = min(SHARD_CHUNK_EDGES, max(MIN_CHUNK_EDGES, int(counts.sum()) // (16 * num_parts)))
    pieces: list[list[tuple]] = [[] for _ in range(num_parts)]
    begin = 0
    while begin < ids.size:
        done = int(ends[begin - 1]) if begin else 0
        end = max(begin + 1, int(np.searchsorted(ends, done + chunk, side="right")))
        nbr = _gather(indices, starts[begin:end], counts[begin:end])
        _drop_pages(indices)
        reads["edges"] += nbr.size
        reads["bytes"] += nbr.nbytes
        if nbr.size and (int(nbr.min()) < 0 or int(nbr.max()) >= n_nodes):
            bad_id = int(nbr.min()) if int(nbr.min()) < 0 else int(nbr.max())
            raise _err(dataset, f"{view}_indices", f"vertex id {bad_id} is out of range [0, {n_nodes})")
        keep = nbr != np.repeat(ids[begin:end], counts[begin:end])
        if view == "in":  # the stored degree normalizes the GCN's Â: it must count these edges
            stored = degree[local[begin:end]] if loops else np.asarray(arrays["degree"][ids[begin:end]])
            kept = np.bincount(np.repeat(np.arange(end - begin), counts[begin:end])[keep], minlength=end - begin)
            wrong = kept + 1 != stored
            if wrong.any():
                k = int(np.argmax(wrong))
                raise _err(dataset, "degree", f"degree {int(stored[k])} of vertex {int(ids[begin + k])}"
                                              f", which has {int(kept[k])} in-edges besides self loops (expected that "
                                              "plus one)")
        if not loops:  # GraphSAGE's and GIN's Â keep the self loops as given
            keep = slice(None)
        key = np.repeat(local[begin:end], counts[begin:end])[keep] * n_pad + part.position[nbr[keep]]
        del nbr, keep
        key, mult = np.unique(key, return_counts=True)
        diag = local[begin:end] if loops else local[:0]
        r = np.concatenate([key // n_pad, diag])
        c = np.concatenate([key % n_pad, first_row + diag])
        del key
        if both:
            own = (c[:mult.size] >= first_row) & (c[:mult.size] < first_row + part.rows_per_part)
            rows, cols = r[:mult.size][own].astype(np.uint64), (c[:mult.size][own] - first_row).astype(np.uint64)
            weight = mult[own].astype(np.uint64)
            with np.errstate(over="ignore"):
                sums[0] += (pair_hash(rows, cols) * weight).sum(dtype=np.uint64)
                sums[1] += (pair_hash(cols, rows) * weight).sum(dtype=np.uint64)
            del rows, cols, weight
        deg_nbr = _degree(dataset, part.order[c[:mult.size]], norm)
        if loops and deg_nbr.size and int(deg_nbr.min()) < 1:  # its own rank says more; no division by it here
            v = int(part.order[c[:mult.size]][np.argmax(deg_nbr < 1)])
            raise _err(dataset, "degree", f"degree {int(deg_nbr.min())} of vertex {v} is below 1 (the self loop "
                                          "counts one)")
        reads["bytes"] += deg_nbr.nbytes
        mult = np.concatenate([mult, np.ones(diag.size, dtype=mult.dtype)])
        here, there = degree[r], np.concatenate([deg_nbr, degree[diag]])
        # Â[t, s] with t = here for rows of Â, t = there for rows of Âᵀ
        orders = [(here, there)] if view == "in" else [(there, here)]
        if both:
            orders.append((there, here))
        values = [entry_values(mult, deg_t, deg_s if norm == "sym" else None, norm).astype(np.float32, copy=False)
                  for deg_t, deg_s in orders]
        del mult, here, there, deg_nbr
        if both and np.array_equal(values[0], values[1]):
            values[1] = None  # Âᵀ's values are Â's (the sym norm): not kept twice
        blk = c // m
        order = np.lexsort((c, r, blk))  # by block, then row, then column
        blk, r, c = blk[order], r[order], (c[order] - blk[order] * m).astype(ids_dtype)
        values = [None if v is None else v[order] for v in values]
        bounds = np.searchsorted(blk, np.arange(num_parts + 1))
        row0 = int(r.min()) if r.size else 0
        for j in range(num_parts):
            lo, hi = int(bounds[j]), int(bounds[j + 1])
            if hi > lo:  # copies, so that a block's entries are released as it is built; rows as counts per row
                per_row = np.bincount(r[lo:hi] - row0).astype(np.int32)
                pieces[j].append((row0, per_row, c[lo:hi].copy(),
                                  *(None if v is None else v[lo:hi].copy() for v in values)))
        del blk, r, c, values, order
        trim_heap()  # the chunk's temporaries were freed among the pieces kept: their pages go back
        begin = end
    if both:
        _check_symmetric_block(dataset, sums)
    return pieces


def _block_csr(pieces: list[tuple | None], k: int, m: int, release: bool) -> sp.csr_matrix:
    """Block ``m × m`` from its entries in CSR order (values ``k`` of each piece; ``release``: each piece dropped from
    ``pieces`` once copied): the arrays ``coo_matrix(...).tocsr()`` would make of them (the entries are distinct),
    which :func:`~mggcn.distributed.partition.to_blocks` checks (``sum_duplicates``) before cutting tiles."""
    counts = np.zeros(m, dtype=np.int64)
    for row0, per_row, *_ in pieces:
        counts[row0:row0 + per_row.size] += per_row
    nnz = int(counts.sum())
    idx = np.int32 if max(nnz, m) < 2**31 else np.int64
    indptr = np.zeros(m + 1, dtype=idx)
    np.cumsum(counts, out=indptr[1:])
    del counts
    indices, data = np.empty(nnz, dtype=idx), np.empty(nnz, dtype=np.float32)
    at = 0
    for i, piece in enumerate(pieces):
        n = piece[2].size
        indices[at:at + n] = piece[2]
        data[at:at + n] = piece[3] if piece[3 + k] is None else piece[3 + k]
        at += n
        if release:
            pieces[i] = None
    if release:
        trim_heap()  # the pages of the entries copied
    return sp.csr_matrix((data, indices, indptr), shape=(m, m))


def _blocks(pieces: list[list[tuple]], part: Partition, tile_cols: int | None,
            both: bool = False) -> tuple[list[TiledCSR], list[TiledCSR]]:
    """The P column blocks (``m × m``) of Â (and of Âᵀ from the second values, ``both``) from :func:`_entries`,
    one block at a time, each block's entries released once it is built. Without ``both`` the second list is
    empty; with it, a block whose values of Âᵀ equal Â's is shared."""
    m, adj, adj_t = part.rows_per_part, [], []
    for j in range(part.num_parts):
        same = both and all(p[4] is None for p in pieces[j])
        adj.append(to_blocks(_block_csr(pieces[j], 0, m, release=same or not both), 1, tile_cols)[0])
        if both:
            adj_t.append(adj[-1] if same else to_blocks(_block_csr(pieces[j], 1, m, release=True), 1, tile_cols)[0])
        pieces[j] = []
        trim_heap()  # the pages of the entries just copied
    return adj, adj_t


def _copy_rows(dataset: Dataset, name: str, ids: np.ndarray, local: np.ndarray, out: np.ndarray,
               counted: dict[str, int], check: Callable[[Dataset, np.ndarray, np.ndarray], None] | None = None) -> None:
    """``out[local] = arrays[name][ids]``, a chunk of rows at a time (each passed to ``check(dataset, ids, rows)``),
    the pages of a mapped array dropped after each."""
    for start in range(0, ids.size, ROWS_PER_READ):
        rows = _read_rows(dataset.arrays[name], ids[start: start + ROWS_PER_READ])
        if check is not None:
            check(dataset, ids[start: start + ROWS_PER_READ], rows)
        out[local[start: start + ROWS_PER_READ]] = rows
        counted["bytes"] += rows.nbytes
        _drop_pages(dataset.arrays[name])


def release_dataset(dataset: Dataset) -> None:
    """Once this rank has cut its shard: drop what ``dataset`` holds (an in-memory graph's arrays, also when the
    caller holds the dataset, at P = 1 in its process) and give the heap pages the setup freed back to the system, so
    that the rank keeps only its shard."""
    release = getattr(dataset, "release", None)
    if release is not None:
        release()
    trim_heap()


def build_shard(dataset: Dataset | Graph, part: Partition, rank: int, norm: str = "sym",
                tile_cols: int | None = None, reads: dict[str, Any] | None = None) -> Shard:
    """Rank ``rank``'s :class:`~mggcn.distributed.partition.Shard` of ``dataset``, reading only its rows.

    Args:
        dataset: a :class:`~mggcn.data.datasets.Dataset`, or a :class:`~mggcn.data.graph.Graph` in memory.
        part: the renumbering (:func:`partition_dataset`).
        rank: whose rows.
        norm: the operator, one of :data:`mggcn.config.OPERATORS` (:mod:`mggcn.nn.norm`; ``TrainConfig.operator``:
            the GCN's ``"sym"`` or ``"mean"``, GraphSAGE's ``"in-mean"``, GIN's ``"sum"``).
        tile_cols: columns per tile of the blocks (:func:`mggcn.distributed.tiled.tile_columns`; None: untiled).
        reads: if given, filled with what the shard read: ``rows``, ``edges`` (CSR entries of both views) and
            ``bytes`` (all it gathered from the arrays).

    When Â = Âᵀ on this rank's rows (a symmetric A with the ``sym`` norm), the backward blocks ARE the forward blocks.
    """
    if isinstance(dataset, Graph):
        dataset = InMemoryDataset(dataset)
    if norm not in OPERATORS:
        raise ConfigError(f"norm must be one of {', '.join(NORMS)}, got '{norm}'", "norm")
    if part.num_nodes != dataset.num_nodes:
        raise GraphError(f"{dataset.name}: a partition of {part.num_nodes} vertices for {dataset.num_nodes}")
    arrays = dataset.arrays
    counted = {"rows": 0, "edges": 0, "bytes": 0}
    first = part.rows(rank).start
    orig = part.order[part.rows(rank)]
    local = np.flatnonzero(orig >= 0)
    ids = orig[local]
    counted["rows"] = int(ids.size)
    m = orig.shape[0]
    degree = np.zeros(m, dtype=np.int64)  # of this rank's rows; padding rows have none
    degree[local] = _degree(dataset, ids, norm)
    counted["bytes"] += 8 * ids.size
    y = np.full(m, -1, dtype=np.int64)
    codes = np.full(m, -1, dtype=np.int8)
    _copy_rows(dataset, "labels", ids, local, y, counted)
    _copy_rows(dataset, "split", ids, local, codes, counted)
    stored = degree[local] if adds_self_loops(norm) else np.asarray(arrays["degree"][ids])
    _check_rows(dataset, ids, stored, y[local], codes[local])
    if dataset.symmetric:  # the rows of Aᵀ are the rows of A: read once, weighted twice
        adj, adj_t = _blocks(_entries(dataset, "in", part, first, local, ids, degree, norm, counted, both=True),
                             part, tile_cols, both=True)
        if all(a is t for a, t in zip(adj, adj_t)):
            adj_t = adj
    else:
        adj, _ = _blocks(_entries(dataset, "in", part, first, local, ids, degree, norm, counted), part, tile_cols)
        adj_t, _ = _blocks(_entries(dataset, "out", part, first, local, ids, degree, norm, counted), part,
                           tile_cols)
    # the features last: while the blocks were built, the rank did not hold them yet
    x = np.zeros((m, dataset.num_features), dtype=np.float32)
    _copy_rows(dataset, "features", ids, local, x, counted, check=_check_features)
    if reads is not None:
        reads.update(counted)
    masks = {s: torch.from_numpy(codes == k) for k, s in enumerate(SPLITS)}
    return Shard(rank=rank, partition=part, adj=adj, adj_t=adj_t, x=torch.from_numpy(x), y=torch.from_numpy(y),
                 masks=masks, num_classes=dataset.num_classes, split_sizes=dict(dataset.split_sizes))
