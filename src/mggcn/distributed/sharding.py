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

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from mggcn.config import NORMS, OPERATORS
from mggcn.data.datasets import Dataset, InMemoryDataset
from mggcn.data.graph import SPLITS, ConfigError, Graph, GraphError
from mggcn.data.mapped import drop_pages, gather, read_rows
from mggcn.data.prepared.reader import pair_hash
from mggcn.distributed.metis import metis_partition
from mggcn.distributed.partition import Partition, Shard, make_partition, to_blocks
from mggcn.distributed.tiled import TiledCSR
from mggcn.nn.norm import adds_self_loops, entry_values
from mggcn.utils.parallel import thread_budget, thread_map
from mggcn.utils.system import trim_heap

__all__ = ["SHARD_CHUNK_EDGES", "build_shard", "partition_dataset", "release_dataset"]

SHARD_CHUNK_EDGES = 1 << 16  # the most edges a rank reads at a time while building its shard
BATCH_CHUNKS = 8  # chunks per thread built, then placed, together (_entries)
# the least edges of a chunk worth a thread: below it the GIL, held by numpy between and within its calls on small
# arrays, serializes the threads and its hand-offs cost more than the cores gain
THREAD_CHUNK_EDGES = 1 << 12
MIN_CHUNK_EDGES = 1 << 12  # ... and the least, unless SHARD_CHUNK_EDGES is smaller
ROWS_PER_READ = 1 << 14  # vertex rows copied out of a mapped array between two drop_pages


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


@dataclass(frozen=True)
class _Rows:
    """One view of this rank's rows, as every chunk of it reads them: ``ids[i]`` (original id) is local row
    ``local[i]``, its CSR row in ``{view}_indices`` starts at ``starts[i]`` and holds ``counts[i]`` ids;
    ``degree`` is :func:`_degree` of the local rows; ``shift``: the bits of a key that hold a column
    (:func:`_chunk_keys`)."""

    dataset: Dataset
    view: str
    part: Partition
    first_row: int
    local: np.ndarray
    ids: np.ndarray
    starts: np.ndarray
    counts: np.ndarray
    degree: np.ndarray
    norm: str
    both: bool
    shift: int


def _spans(rows: _Rows) -> tuple[list[tuple[int, int]], int]:
    """The chunks of ``rows``, as ranges ``[begin, end)`` of its rows, and the threads to build them on. Whole rows,
    about ``chunk`` edges each: small enough that a chunk's temporaries stay under the allocator's mmap threshold
    (and are reused), and that a batch of chunks in flight is 1/8 of an average block at most; no more local rows
    than keep their keys within int64 (:func:`_chunk_keys`). Chunks too small for :data:`THREAD_CHUNK_EDGES` are
    built in the calling thread."""
    counts, local, part = rows.counts, rows.local, rows.part
    total = int(counts.sum())
    threads = thread_budget()
    chunk = min(SHARD_CHUNK_EDGES, max(MIN_CHUNK_EDGES, total // (8 * BATCH_CHUNKS * part.num_parts * threads)))
    if threads > 1 and chunk < THREAD_CHUNK_EDGES:
        threads = 1
        chunk = min(SHARD_CHUNK_EDGES, max(MIN_CHUNK_EDGES, total // (8 * BATCH_CHUNKS * part.num_parts)))
    tallest = min(part.rows_per_part, ((2**63 - 1) >> rows.shift) // part.num_parts)
    ends = np.cumsum(counts)
    spans, begin = [], 0
    while begin < local.size:
        done = int(ends[begin - 1]) if begin else 0
        end = int(np.searchsorted(ends, done + chunk, side="right"))
        end = max(begin + 1, min(end, int(np.searchsorted(local, local[begin] + tallest))))
        spans.append((begin, end))
        begin = end
    return spans, threads


def _check_in_degrees(rows: _Rows, begin: int, end: int, loop_rows: np.ndarray, height: int) -> None:
    """Rows ``ids[begin:end]`` of ``in``: the stored degree (which normalizes the GCN's Â) must count their in-edges
    other than self loops, plus one (``loop_rows``: the row, less the chunk's first, of each self loop)."""
    local, counts = rows.local[begin:end], rows.counts[begin:end]
    if adds_self_loops(rows.norm):
        stored = rows.degree[local]
    else:
        stored = np.asarray(rows.dataset.arrays["degree"][rows.ids[begin:end]])
    kept = counts - np.bincount(loop_rows, minlength=height)[local - local[0]] if loop_rows.size else counts
    wrong = kept + 1 != stored
    if wrong.any():
        k = int(np.argmax(wrong))
        raise _err(rows.dataset, "degree", f"degree {int(stored[k])} of vertex {int(rows.ids[begin + k])}, which has "
                                           f"{int(kept[k])} in-edges besides self loops (expected that plus one)")


def _chunk_keys(rows: _Rows, begin: int, end: int) -> tuple[np.ndarray, int, int, int]:
    """The entries of rows ``ids[begin:end]`` of Â (or Âᵀ) as sorted int64 keys, a parallel edge once per copy, the
    unit diagonal included for the GCN's norms; with the chunk's first local row ``r0``, its local rows ``height``
    and the bytes it read. The entry in column ``c`` of column block ``j`` and local row ``r`` is
    ``(j · height + r - r0) << shift | c``: increasing keys run block by block, each in CSR order. The ids read are
    checked, and so is the stored degree of the rows of ``in``."""
    dataset, part, m, shift = rows.dataset, rows.part, rows.part.rows_per_part, rows.shift
    local, counts = rows.local[begin:end], rows.counts[begin:end]
    indices = dataset.arrays[f"{rows.view}_indices"]
    nbr = gather(indices, rows.starts[begin:end], counts)
    drop_pages(indices)
    if nbr.size and (int(nbr.min()) < 0 or int(nbr.max()) >= dataset.num_nodes):
        bad_id = int(nbr.min()) if int(nbr.min()) < 0 else int(nbr.max())
        raise _err(dataset, f"{rows.view}_indices", f"vertex id {bad_id} is out of range [0, {dataset.num_nodes})")
    r0, height, nbytes = int(local[0]), int(local[-1] - local[0]) + 1, nbr.nbytes
    row = np.repeat(local - r0, counts)
    col = part.position[nbr]
    del nbr
    loop = col == row + (rows.first_row + r0)
    if rows.view == "in":
        _check_in_degrees(rows, begin, end, row[loop], height)
    loops = adds_self_loops(rows.norm)
    if loops and loop.any():  # the GCN's Â drops them for its unit diagonal
        col, row = col[~loop], row[~loop]
    del loop
    diag = local if loops else local[:0]
    keys = np.empty(col.size + diag.size, dtype=np.int64)
    edges = keys[:col.size]  # col + j · ((height << shift) - m) + (row << shift), j = col // m
    if part.num_parts > 1:
        np.floor_divide(col, m, out=edges)
        edges *= (height << shift) - m
        edges += col
    else:
        edges[:] = col
    row <<= shift
    edges += row
    keys[col.size:] = ((rows.first_row // m * height - r0 + diag) << shift) + diag  # column block = this rank
    keys.sort()
    return keys, r0, height, nbytes


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of sorted ``keys`` and how often each occurs."""
    new = np.empty(keys.size, dtype=bool)
    new[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=new[1:])
    if new.all():
        return keys, np.ones(keys.size, dtype=np.int64)
    heads = np.flatnonzero(new)
    return keys[heads], np.diff(heads, append=keys.size)


def _check_neighbours(rows: _Rows, found: list[tuple]) -> None:
    """The GCN's norms divide by the degree of every column: none may be below 1. ``found``: per column block of a
    chunk, ``(j, rows, columns, degrees)`` of its entries (rows less the chunk's first, columns within the block).
    Names the first such column in CSR order; its own rank reports its degree in full."""
    low = [(j, r, c, d) for j, r, c, d in found if int(d.min()) < 1]
    if not low:
        return
    m = rows.part.rows_per_part
    least = min(int(d.min()) for *_, d in low)
    _, col = min((int(r[k]), int(c[k]) + j * m) for j, r, c, d in low for k in [int(np.argmax(d < 1))])
    raise _err(rows.dataset, "degree", f"degree {least} of vertex {int(rows.part.order[col])} is below 1 (the self "
                                       "loop counts one)")


def _values(rows: _Rows, count: np.ndarray, here: np.ndarray, there: np.ndarray) -> list[np.ndarray | None]:
    """The float32 values of entries with multiplicity ``count`` of a row of degree ``here`` and a column of degree
    ``there``: Â's (Âᵀ's for ``out``), then, for ``both``, Âᵀ's, or None where they are Â's (then kept once)."""
    def values(deg_t: np.ndarray, deg_s: np.ndarray, at: Any = slice(None)) -> np.ndarray:
        return entry_values(count[at], deg_t[at], deg_s[at] if rows.norm == "sym" else None,
                            rows.norm).astype(np.float32, copy=False)

    # Â[t, s] with t = here for rows of Â, t = there (the column's) for rows of Âᵀ
    out = values(here, there) if rows.view == "in" else values(there, here)
    if not rows.both or rows.norm == "sum":  # "sum": the counts either way
        return [out, None]
    if rows.norm == "sym":  # D_t^-1/2 · count · D_s^-1/2 is the same product either way where count = 1
        at = np.flatnonzero(count != 1)
        if at.size == 0:
            return [out, None]
        some = values(there, here, at)
        if np.array_equal(some, out[at]):
            return [out, None]
        out_t = out.copy()
        out_t[at] = some
        return [out, out_t]
    out_t = values(there, here)
    return [out, None if np.array_equal(out_t, out) else out_t]


def _chunk_entries(rows: _Rows, span: tuple[int, int]) -> tuple[list[tuple | None], list[np.uint64], int, int]:
    """The entries of the chunk ``span`` of ``rows`` (:func:`_spans`): per column block, its piece ``(first local
    row, where each of its rows starts, columns, values, values of Âᵀ or None)`` in CSR order (None: no entry
    there); the chunk's sums of :func:`_check_symmetric_block` (``both``); the edges and the bytes it read."""
    begin, end = span
    keys, r0, height, nbytes = _chunk_keys(rows, begin, end)
    uniq, mult = _distinct(keys)
    del keys
    part, m, shift = rows.part, rows.part.rows_per_part, rows.shift
    bounds = np.searchsorted(uniq, np.arange(part.num_parts + 1, dtype=np.int64) * (height << shift)).tolist()
    found = []
    for j in range(part.num_parts):
        if bounds[j + 1] > bounds[j]:
            u = uniq[bounds[j]:bounds[j + 1]]
            r, c = u >> shift, u & ((1 << shift) - 1)
            r -= j * height
            deg = _degree(rows.dataset, part.order[c + j * m], rows.norm)
            nbytes += deg.nbytes
            found.append((j, r, c, deg))
    del uniq
    if adds_self_loops(rows.norm):
        _check_neighbours(rows, found)
    blocks: list[tuple | None] = [None] * part.num_parts
    sums = [np.uint64(0), np.uint64(0)]
    for j, r, c, deg in found:
        count = mult[bounds[j]:bounds[j + 1]]
        values = _values(rows, count, rows.degree[r0:r0 + height][r], deg)
        if rows.both and j == rows.first_row // m:  # the diagonal block; its unit diagonal adds the same to both sums
            pair, weight = ((r + r0).view(np.uint64), c.view(np.uint64)), count.view(np.uint64)
            sums = [(pair_hash(*pair) * weight).sum(dtype=np.uint64),
                    (pair_hash(*pair[::-1]) * weight).sum(dtype=np.uint64)]
        starts = np.zeros(height + 1, dtype=np.int64)
        np.cumsum(np.bincount(r, minlength=height), out=starts[1:])
        blocks[j] = (r0, starts, c.astype(np.int32 if m < 2**31 else np.int64), *values)
    return blocks, sums, int(rows.counts[begin:end].sum()), nbytes


class _Growing:
    """A 1-D array of ``dtype`` filled from the front: its capacity is allocated up front but its pages cost memory
    only once written (a large allocation is mapped on demand); copied into twice the room when outgrown, and cut
    to its size at the end without a copy (``realloc``)."""

    def __init__(self, dtype: Any, capacity: int) -> None:
        self.array = np.empty(max(1, capacity), dtype=dtype)

    def reserve(self, size: int, filled: int) -> None:
        """Room for ``size`` items, the first ``filled`` kept."""
        if size > self.array.size:
            grown = np.empty(max(size, 2 * self.array.size), dtype=self.array.dtype)
            grown[:filled] = self.array[:filled]
            self.array = grown

    def final(self, size: int) -> np.ndarray:
        self.array.resize(size, refcheck=False)  # this object holds the only reference
        return self.array


class _BlockFill:
    """The P column blocks (``m × m``) of one view of this rank's rows, filled in CSR order as the chunks come: a
    batch of chunks is placed in chunk order (:meth:`place`, one thread), then copied in on the rank's threads
    (:meth:`copy`). Per block: its row pointers, its columns and values (:class:`_Growing`, sized for the average
    block), and, with ``both``, Âᵀ's values, made once a chunk's differ from Â's (until then they are Â's)."""

    def __init__(self, part: Partition, edges: int, diagonal: int, both: bool) -> None:
        m, num_parts = part.rows_per_part, part.num_parts
        self.m, self.both = m, both
        ptr = np.int32 if max(edges + diagonal, m) < 2**31 else np.int64  # no block holds more
        guess = min(edges + diagonal, (edges + diagonal) * 5 // (4 * num_parts) + (1 << 12))
        self.indptr = [np.empty(m + 1, dtype=ptr) for _ in range(num_parts)]
        self.cols = [_Growing(np.int32 if m < 2**31 else np.int64, guess) for _ in range(num_parts)]
        self.values = [_Growing(np.float32, guess) for _ in range(num_parts)]
        self.values_t: list[_Growing | None] = [None] * num_parts
        self.size, self.next_row = [0] * num_parts, [0] * num_parts

    def place(self, pieces: list[tuple | None]) -> list[int]:
        """Where each of one chunk's pieces (:func:`_chunk_entries`) goes in its block, after the chunks before it:
        the room made, the row pointers of the rows since the block's last piece set."""
        spots = []
        for j, piece in enumerate(pieces):
            spots.append(self.size[j])
            if piece is None:
                continue
            r0, starts, cols, _, values_t = piece
            at = self.size[j]
            self.size[j] += cols.size
            for grown in (self.cols[j], self.values[j], self.values_t[j]):
                if grown is not None:
                    grown.reserve(self.size[j], at)
            self.indptr[j][self.next_row[j]:r0] = at
            self.next_row[j] = r0 + starts.size
            if values_t is not None and self.values_t[j] is None:
                self.values_t[j] = _Growing(np.float32, self.values[j].array.size)
                self.values_t[j].array[:at] = self.values[j].array[:at]  # the chunks of earlier batches
        return spots

    def copy(self, placed: tuple[list[tuple | None], list[int]]) -> None:
        """Copy one chunk's pieces where :meth:`place` put them."""
        for j, (piece, at) in enumerate(zip(*placed)):
            if piece is None:
                continue
            r0, starts, cols, values, values_t = piece
            self.indptr[j][r0:r0 + starts.size] = starts + at
            self.cols[j].array[at:at + cols.size] = cols
            self.values[j].array[at:at + cols.size] = values
            if self.values_t[j] is not None:
                self.values_t[j].array[at:at + cols.size] = values if values_t is None else values_t

    def take(self, j: int) -> list[sp.csr_matrix | None]:
        """Block ``j`` of Â and of Âᵀ (None: Â's, or not ``both``), handed over: the arrays
        ``coo_matrix(...).tocsr()`` would make of its entries (they are distinct and in CSR order)."""
        m, size = self.m, self.size[j]
        self.indptr[j][self.next_row[j]:] = size
        idx = np.int32 if max(size, m) < 2**31 else np.int64
        indptr, indices = self.indptr[j].astype(idx, copy=False), self.cols[j].final(size).astype(idx, copy=False)
        mats = [None if grown is None else sp.csr_matrix((grown.final(size), indices, indptr), shape=(m, m))
                for grown in (self.values[j], self.values_t[j])]
        self.indptr[j] = self.cols[j] = self.values[j] = self.values_t[j] = None
        return mats


def _entries(dataset: Dataset, view: str, part: Partition, first_row: int, local: np.ndarray, ids: np.ndarray,
             degree: np.ndarray, norm: str, reads: dict[str, int], both: bool = False) -> _BlockFill:
    """The column blocks of this rank's rows of Â (``view="in"``) or of Âᵀ (``"out"``), the unit diagonal
    included, and for ``both`` (a symmetric A) of Âᵀ too. The rows are read a chunk at a time, batches of chunks on
    the rank's threads (:func:`mggcn.utils.parallel.thread_map`), placed in chunk order, so that the blocks, and the
    first error found in damaged data, do not depend on the thread count."""
    indptr = dataset.arrays[f"{view}_indptr"]
    starts = np.asarray(indptr[ids])
    counts = np.asarray(indptr[ids + 1]) - starts
    reads["bytes"] += 2 * counts.nbytes
    bad = (counts < 0) | (starts < 0) | (starts + counts > dataset.num_edges)
    if bad.any():
        v = int(ids[np.argmax(bad)])
        raise _err(dataset, f"{view}_indptr", f"corrupt row offsets: row {v} runs from {int(indptr[v])} to "
                                              f"{int(indptr[v + 1])}, outside [0, E = {dataset.num_edges}]")
    rows = _Rows(dataset, view, part, first_row, local, ids, starts, counts, degree, norm, both,
                 (part.rows_per_part - 1).bit_length())
    fill = _BlockFill(part, int(counts.sum()), ids.size if adds_self_loops(norm) else 0, both)
    spans, threads = _spans(rows)
    sums = [np.uint64(0), np.uint64(0)]  # both: the diagonal block's hash sums (_check_symmetric_block)
    for first in range(0, len(spans), BATCH_CHUNKS * threads):
        chunks = thread_map(partial(_chunk_entries, rows), spans[first:first + BATCH_CHUNKS * threads], threads)
        pieces = [chunk[0] for chunk in chunks]
        thread_map(fill.copy, list(zip(pieces, [fill.place(p) for p in pieces])), threads)
        for _, chunk_sums, edges, nbytes in chunks:
            reads["edges"] += edges
            reads["bytes"] += nbytes
            with np.errstate(over="ignore"):
                sums = [a + b for a, b in zip(sums, chunk_sums)]
        del chunks, pieces
    trim_heap()  # the chunks' temporaries: their pages go back
    if both:
        _check_symmetric_block(dataset, sums)
    return fill


def _blocks(fill: _BlockFill, part: Partition, tile_cols: int | None) -> tuple[list[TiledCSR], list[TiledCSR]]:
    """The P column blocks of Â (and of Âᵀ, ``fill.both``) as tiles, one block at a time, each block's arrays
    released once it is cut. Without ``both`` the second list is empty; with it, a block whose values of Âᵀ equal
    Â's is shared."""
    adj, adj_t = [], []
    for j in range(part.num_parts):
        mat, mat_t = fill.take(j)
        adj.append(to_blocks(mat, 1, tile_cols)[0])
        if fill.both:
            adj_t.append(adj[-1] if mat_t is None else to_blocks(mat_t, 1, tile_cols)[0])
        del mat, mat_t
        trim_heap()  # a tiled block's entries, copied into its tiles
    return adj, adj_t


def _copy_rows(dataset: Dataset, name: str, ids: np.ndarray, local: np.ndarray, out: np.ndarray,
               counted: dict[str, int], check: Callable[[Dataset, np.ndarray, np.ndarray], None] | None = None) -> None:
    """``out[local] = arrays[name][ids]``, a chunk of rows at a time on the rank's threads (each chunk passed to
    ``check(dataset, ids, rows)``, the first error in row order raised), the pages of a mapped array dropped after
    each. A chunk of consecutive local rows is read straight into ``out``."""
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
                             part, tile_cols)
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
