"""A dataset's partition and each rank's shard: the one place that cuts shards, for every kind of dataset.

A dataset (:class:`mggcn.data.datasets.Dataset`: a graph in memory, or a directory ``mggcn prepare`` wrote) holds
the graph as arrays indexed by original vertex id (:data:`mggcn.data.datasets.ROW_ARRAYS`). :func:`build_shard`
reads from them only what rank ``rank`` needs: its rows of both CSRs, the degree of those rows and of their
neighbours, and its rows of features, labels and split, each checked as it is read (:mod:`mggcn.data.rows`). From
a prepared dataset these are memory-mapped reads, so a rank's host memory grows with its share of the graph, not
with the whole graph.

Â is built as :func:`mggcn.nn.norm.normalize` builds it, entry for entry and bit for bit, for every operator
(:data:`mggcn.config.OPERATORS`): self loops dropped for one unit loop (the GCN's norms; GraphSAGE's ``in-mean`` and
GIN's ``sum`` keep the edges as given and add no diagonal), parallel edges summed into one entry, values from
:func:`mggcn.nn.norm.entry_values` with the degrees of :func:`_degree` (``Â[t, s]``: t is the row of Â, the column of
Âᵀ).

Speed and memory: the rows are read a chunk of edges at a time (:data:`SHARD_CHUNK_EDGES`, fewer on a small graph,
so that a batch of chunks in flight stays within half an average block), batches of chunks on the rank's threads.
A chunk's entries are one sorted int64 key each (:func:`_chunk_keys`: column group, row, column, and the column's
degree riding along; parallel edges are runs of equal keys), decoded into values and written in chunk order
straight into the arrays of their column group (:class:`_BlockFill`; a group is a tile of a column block, or the
block), which become the tiles without a copy: the setup holds the shard plus the chunks in flight, never the
rank's entries and its CSR at once.

Legend: n = vertices, m = rows of a rank, P = ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from mggcn.config import OPERATORS
from mggcn.data.datasets import Dataset, InMemoryDataset
from mggcn.data.graph import SPLITS, Graph
from mggcn.data.prepared.reader import pair_hash
from mggcn.data.rows import (
    check_features,
    check_symmetric_sums,
    check_vertex_rows,
    copy_rows,
    dataset_error,
    read_neighbours,
    read_row_spans,
)
from mggcn.distributed.metis import metis_partition
from mggcn.distributed.partition import Partition, Shard, make_partition
from mggcn.kernels.tiled import TiledCSR, csr_to_torch, num_tiles
from mggcn.nn.norm import adds_self_loops, entry_values
from mggcn.utils.errors import ConfigError, GraphError
from mggcn.utils.parallel import thread_budget, thread_map
from mggcn.utils.system import trim_heap

__all__ = ["SHARD_CHUNK_EDGES", "build_shard", "partition_dataset", "release_dataset"]

# the most edges a rank reads at a time while building its shard: a chunk's temporaries (8 bytes an edge each) stay
# under the allocator's mmap threshold (mggcn.config.MMAP_THRESHOLD), so the heap reuses their pages
SHARD_CHUNK_EDGES = 1 << 16
MIN_CHUNK_EDGES = 1 << 12  # ... and the least, unless SHARD_CHUNK_EDGES is smaller
BATCH_CHUNKS = 16  # chunks per thread built, then placed, together (_entries)
# the least edges of a chunk worth a thread: below it the GIL, held by numpy between and within its calls on small
# arrays, serializes the threads and its hand-offs cost more than the cores gain
THREAD_CHUNK_EDGES = 1 << 12
KEY_BITS = 63  # of an int64 sort key (_chunk_keys)


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


def _degree(dataset: Dataset, ids: np.ndarray, norm: str) -> np.ndarray:
    """The ``D`` of :func:`mggcn.nn.norm.entry_values` for the vertices ``ids``: the stored degree (in-edges other
    than self loops, plus one) for the GCN's norms, the in-edges as given (``in_indptr``) otherwise."""
    if adds_self_loops(norm):  # np.take: a gather from a memory map, faster than indexing it
        return np.take(np.asarray(dataset.arrays["degree"]), ids)
    indptr = np.asarray(dataset.arrays["in_indptr"])
    return np.take(indptr, ids + 1) - np.take(indptr, ids)


@dataclass(frozen=True)
class _Rows:
    """One view of this rank's rows, as every chunk of it reads them: ``ids[i]`` (original id) is local row
    ``local[i]``, its CSR row in ``{view}_indices`` starts at ``starts[i]`` and holds ``counts[i]`` ids;
    ``degree`` is :func:`_degree` of the local rows. The columns fall in groups of ``width``: the tiles of each
    column block, ``tiles`` of them (group ``j · tiles + t`` is tile t of block j), or the blocks themselves."""

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
    width: int
    tiles: int

    @property
    def groups(self) -> int:
        return self.part.num_parts * self.tiles

    @property
    def shift(self) -> int:
        """The bits of a key that hold a column within its group (:func:`_chunk_keys`)."""
        return (self.width - 1).bit_length()

    def group_columns(self, col: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """The group of each new id ``col`` (None: there is one) and its column within the group."""
        if self.groups == 1:
            return None, col
        m = self.part.rows_per_part
        block = col // m if self.part.num_parts > 1 else 0
        within = col - block * m
        tile = within // self.width if self.tiles > 1 else 0
        return block * self.tiles + tile, within - tile * self.width

    def first_column(self, group: int) -> int:
        """The new id of the first column of ``group``."""
        return group // self.tiles * self.part.rows_per_part + group % self.tiles * self.width


def _spans(rows: _Rows) -> tuple[list[tuple[int, int]], int, int]:
    """The chunks of ``rows``, as ranges ``[begin, end)`` of its rows, the threads to build them on and the chunks
    of a batch. Whole rows, about ``chunk`` edges each: a chunk's temporaries stay under the allocator's mmap
    threshold (and are reused), and take 1/16 of an average block at most per thread; a batch, up to
    :data:`BATCH_CHUNKS` chunks a thread, holds half an average block at most; no more local rows than keep their
    keys within int64 (:func:`_chunk_keys`). Chunks too small for :data:`THREAD_CHUNK_EDGES` are built in the
    calling thread."""
    counts, local, part = rows.counts, rows.local, rows.part
    total = int(counts.sum())
    threads = thread_budget()
    chunk = min(SHARD_CHUNK_EDGES, max(MIN_CHUNK_EDGES, total // (16 * part.num_parts * threads)))
    if threads > 1 and chunk < THREAD_CHUNK_EDGES:
        threads = 1
        chunk = min(SHARD_CHUNK_EDGES, max(MIN_CHUNK_EDGES, total // (16 * part.num_parts)))
    batch = threads * max(1, min(BATCH_CHUNKS, total // (2 * part.num_parts * threads * chunk)))
    tallest = min(part.rows_per_part, ((2**63 - 1) >> rows.shift) // rows.groups)
    ends = np.cumsum(counts)
    spans, begin = [], 0
    while begin < local.size:
        done = int(ends[begin - 1]) if begin else 0
        end = int(np.searchsorted(ends, done + chunk, side="right"))
        end = max(begin + 1, min(end, int(np.searchsorted(local, local[begin] + tallest))))
        spans.append((begin, end))
        begin = end
    return spans, threads, batch


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
        raise dataset_error(rows.dataset, "degree", f"degree {int(stored[k])} of vertex {int(rows.ids[begin + k])}, "
                                                    f"which has {int(kept[k])} in-edges besides self loops (expected "
                                                    "that plus one)")


def _column_degrees(rows: _Rows) -> bool:
    """Whether the values of ``rows`` need the degree of each entry's column: ``D_s`` of ``sym``, ``D_t`` of Âᵀ's
    rows (``out``, ``both``), and the GCN's norms check it (no division by less than 1); ``sum`` needs none."""
    return adds_self_loops(rows.norm) or (rows.norm != "sum" and (rows.view == "out" or rows.both))


def _read_chunk(rows: _Rows, begin: int, end: int) -> tuple[np.ndarray, ...]:
    """The edges of rows ``ids[begin:end]``: per edge its row less the chunk's first ``r0``, its column (new id)
    and the column's degree (empty unless :func:`_column_degrees`), the GCN's norms without the self loops; with
    ``r0``, the chunk's local rows ``height`` and the bytes read. Checks the ids read, the stored degree of the rows
    of ``in``, and the degree of the columns."""
    dataset, part = rows.dataset, rows.part
    local, counts = rows.local[begin:end], rows.counts[begin:end]
    nbr = read_neighbours(dataset, rows.view, rows.starts[begin:end], counts)
    r0, height, nbytes = int(local[0]), int(local[-1] - local[0]) + 1, nbr.nbytes
    row = np.repeat(local - r0, counts)
    col = np.take(part.position, nbr)
    loop = col == row + (rows.first_row + r0)  # self loops
    if rows.view == "in":
        _check_in_degrees(rows, begin, end, row[loop], height)
    if adds_self_loops(rows.norm) and loop.any():  # the GCN's Â drops them for its unit diagonal
        nbr, col, row = nbr[~loop], col[~loop], row[~loop]
    del loop
    deg = _degree(dataset, nbr, rows.norm) if _column_degrees(rows) else np.empty(0, dtype=np.int64)
    if adds_self_loops(rows.norm) and deg.size and int(deg.min()) < 1:  # its own rank says more
        low = np.flatnonzero(deg < 1)
        first = low[np.lexsort((col[low], row[low]))[0]]  # in CSR order
        raise dataset_error(dataset, "degree", f"degree {int(deg.min())} of vertex {int(nbr[first])} is below 1 "
                                               "(the self loop counts one)")
    return row, col, deg, r0, height, nbytes + deg.nbytes


def _chunk_keys(rows: _Rows, begin: int, end: int) -> tuple[np.ndarray, int, int, int, int]:
    """The entries of rows ``ids[begin:end]`` of Â (or Âᵀ) as sorted int64 keys, a parallel edge once per copy, the
    unit diagonal included for the GCN's norms; with the chunk's first local row ``r0``, its local rows ``height``,
    the bits of a key that hold its column's degree (0: none) and the bytes read. The entry in column ``c`` of
    column group ``g`` (:class:`_Rows`) and local row ``r`` is ``((g · height + r - r0) << shift | c) << bits |
    degree``: increasing keys run group by group, each in CSR order. The degrees ride along where they fit (else 0
    bits), so that the sorted entries need no gather of them by column."""
    shift = rows.shift
    row, col, deg, r0, height, nbytes = _read_chunk(rows, begin, end)
    local = rows.local[begin:end]
    diag = local if adds_self_loops(rows.norm) else local[:0]
    keys = np.empty(col.size + diag.size, dtype=np.int64)
    for at, rel, new in ((slice(None, col.size), row, col), (slice(col.size, None), diag - r0, diag + rows.first_row)):
        group, within = rows.group_columns(new)
        out = keys[at]
        if group is None:
            out[:] = within
        else:
            np.multiply(group, height << shift, out=out)
            out += within
        out += rel << shift
    del row, col
    bits = 0
    if _column_degrees(rows) and keys.size:
        most = max(int(deg.max()) if deg.size else 0, int(rows.degree[diag].max()) if diag.size else 0)
        fits = int(deg.min()) >= 0 if deg.size else True
        if fits and ((rows.groups * height << shift) - 1).bit_length() + most.bit_length() <= KEY_BITS:
            bits = most.bit_length()
            keys <<= bits
            keys[:deg.size] |= deg
            keys[deg.size:] |= rows.degree[diag]
    keys.sort()
    return keys, r0, height, bits, nbytes


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of sorted ``keys`` and how often each occurs."""
    new = np.empty(keys.size, dtype=bool)
    new[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=new[1:])
    if new.all():
        return keys, np.ones(keys.size, dtype=np.int64)
    heads = np.flatnonzero(new)
    return keys[heads], np.diff(heads, append=keys.size)


def _values(rows: _Rows, count: np.ndarray, here: np.ndarray, there: np.ndarray | None) -> list[np.ndarray | None]:
    """The float32 values of entries with multiplicity ``count`` of a row of degree ``here`` and a column of degree
    ``there`` (None where unused: :func:`_column_degrees`): Â's (Âᵀ's for ``out``), then, for ``both``, Âᵀ's, or
    None where they are Â's (then kept once)."""
    def values(deg_t: np.ndarray | None, deg_s: np.ndarray | None, at: Any = slice(None)) -> np.ndarray:
        return entry_values(count[at], None if deg_t is None else deg_t[at],
                            deg_s[at] if rows.norm == "sym" else None, rows.norm).astype(np.float32, copy=False)

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
    """The entries of the chunk ``span`` of ``rows`` (:func:`_spans`): per column group, its piece ``(first local
    row, where each of its rows starts, columns, values, values of Âᵀ or None)`` in CSR order (None: no entry
    there); the chunk's sums of :func:`~mggcn.data.rows.check_symmetric_sums` (``both``); the edges and the bytes
    it read."""
    begin, end = span
    keys, r0, height, bits, nbytes = _chunk_keys(rows, begin, end)
    uniq, count = _distinct(keys)
    del keys
    deg = uniq & ((1 << bits) - 1) if bits else None
    line = uniq >> (rows.shift + bits)  # group · height + row - r0
    col = (uniq >> bits & ((1 << rows.shift) - 1)).astype(np.int32 if rows.width < 2**31 else np.int64)
    del uniq
    row, group = (line % height, line // height) if rows.groups > 1 else (line, np.zeros(1, dtype=np.int64))
    if deg is None and _column_degrees(rows):  # too many bits to ride along: gathered by column
        firsts = np.array([rows.first_column(g) for g in range(rows.groups)], dtype=np.int64)
        deg = _degree(rows.dataset, np.take(rows.part.order, firsts[group] + col), rows.norm)
        nbytes += deg.nbytes
    values, values_t = _values(rows, count, rows.degree[r0:r0 + height][row], deg)
    bounds = np.searchsorted(line, np.arange(rows.groups * height + 1, dtype=np.int64))
    sums = [np.uint64(0), np.uint64(0)]
    if rows.both:  # the diagonal block's entries (its unit diagonal adds the same to both sums)
        first_group = rows.first_row // rows.part.rows_per_part * rows.tiles
        lo, hi = bounds[first_group * height], bounds[(first_group + rows.tiles) * height]
        block_col = col[lo:hi].astype(np.uint64)  # the column within the block
        if rows.tiles > 1:
            block_col += ((group[lo:hi] - first_group) * rows.width).view(np.uint64)
        pair = ((row[lo:hi] + r0).view(np.uint64), block_col)
        with np.errstate(over="ignore"):
            sums = [(pair_hash(*pair) * count[lo:hi].view(np.uint64)).sum(dtype=np.uint64),
                    (pair_hash(*pair[::-1]) * count[lo:hi].view(np.uint64)).sum(dtype=np.uint64)]
    pieces: list[tuple | None] = [None] * rows.groups
    for g in range(rows.groups):
        lo, hi = int(bounds[g * height]), int(bounds[(g + 1) * height])
        if hi > lo:
            same = values_t is None or np.array_equal(values_t[lo:hi], values[lo:hi])
            pieces[g] = (r0, bounds[g * height: (g + 1) * height + 1] - lo, col[lo:hi], values[lo:hi],
                         None if same else values_t[lo:hi])
    return pieces, sums, int(rows.counts[begin:end].sum()), nbytes


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
    """The column groups (:class:`_Rows`: the tiles of the P column blocks) of one view of this rank's rows, filled
    in CSR order as the chunks come: a batch of chunks is placed in chunk order (:meth:`place`, one thread), then
    copied in on the rank's threads (:meth:`copy`). Per group: its row pointers, its columns and values
    (:class:`_Growing`, sized for the average group), and, with ``both``, Âᵀ's values, made once a chunk's differ
    from Â's (until then they are Â's)."""

    def __init__(self, rows: _Rows, edges: int, diagonal: int) -> None:
        m, groups = rows.part.rows_per_part, rows.groups
        self.m, self.both = m, rows.both
        self.widths = [min(rows.width, m - g % rows.tiles * rows.width) for g in range(groups)]
        ptr = np.int32 if max(edges + diagonal, m) < 2**31 else np.int64  # no group holds more
        guess = min(edges + diagonal, (edges + diagonal) * 5 // (4 * groups) + (1 << 12))
        self.indptr = [np.empty(m + 1, dtype=ptr) for _ in range(groups)]
        self.cols = [_Growing(np.int32 if rows.width < 2**31 else np.int64, guess) for _ in range(groups)]
        self.values = [_Growing(np.float32, guess) for _ in range(groups)]
        self.values_t: list[_Growing | None] = [None] * groups
        self.size, self.next_row = [0] * groups, [0] * groups

    def place(self, pieces: list[tuple | None]) -> list[int]:
        """Where each of one chunk's pieces (:func:`_chunk_entries`) goes in its group, after the chunks before it:
        the room made, the row pointers of the rows since the group's last piece set."""
        spots = []
        for g, piece in enumerate(pieces):
            spots.append(self.size[g])
            if piece is None:
                continue
            r0, starts, cols, _, values_t = piece
            at = self.size[g]
            self.size[g] += cols.size
            for grown in (self.cols[g], self.values[g], self.values_t[g]):
                if grown is not None:
                    grown.reserve(self.size[g], at)
            self.indptr[g][self.next_row[g]:r0] = at
            self.next_row[g] = r0 + starts.size
            if values_t is not None and self.values_t[g] is None:
                self.values_t[g] = _Growing(np.float32, self.values[g].array.size)
                self.values_t[g].array[:at] = self.values[g].array[:at]  # the chunks of earlier batches
        return spots

    def copy(self, placed: tuple[list[tuple | None], list[int]]) -> None:
        """Copy one chunk's pieces where :meth:`place` put them."""
        for g, (piece, at) in enumerate(zip(*placed)):
            if piece is None:
                continue
            r0, starts, cols, values, values_t = piece
            self.indptr[g][r0:r0 + starts.size] = starts + at
            self.cols[g].array[at:at + cols.size] = cols
            self.values[g].array[at:at + cols.size] = values
            if self.values_t[g] is not None:
                self.values_t[g].array[at:at + cols.size] = values if values_t is None else values_t

    def take(self, g: int) -> list[torch.Tensor | None]:
        """Group ``g`` of Â and of Âᵀ (None: Â's, or not ``both``) as torch CSR tiles, handed over: the arrays
        ``coo_matrix(...).tocsr()`` would make of its entries (they are distinct and in CSR order)."""
        m, size = self.m, self.size[g]
        self.indptr[g][self.next_row[g]:] = size
        idx = np.int32 if max(size, m) < 2**31 else np.int64
        indptr, indices = self.indptr[g].astype(idx, copy=False), self.cols[g].final(size).astype(idx, copy=False)
        tiles = [None if grown is None else
                 csr_to_torch(sp.csr_matrix((grown.final(size), indices, indptr), shape=(m, self.widths[g])))
                 for grown in (self.values[g], self.values_t[g])]
        self.indptr[g] = self.cols[g] = self.values[g] = self.values_t[g] = None
        return tiles


def _entries(dataset: Dataset, view: str, part: Partition, first_row: int, local: np.ndarray, ids: np.ndarray,
             degree: np.ndarray, norm: str, tile_cols: int | None, reads: dict[str, int],
             both: bool = False) -> tuple[_BlockFill, _Rows]:
    """The column groups (tiles of ``tile_cols`` columns of the column blocks, or the blocks) of this rank's rows of
    Â (``view="in"``) or of Âᵀ (``"out"``), the unit diagonal included, and for ``both`` (a symmetric A) of Âᵀ
    too. The rows are read a chunk at a time, batches of chunks on the rank's threads
    (:func:`mggcn.utils.parallel.thread_map`), placed in chunk order, so that the blocks, and the first error found
    in damaged data, do not depend on the thread count."""
    starts, counts = read_row_spans(dataset, view, ids)
    reads["bytes"] += 2 * counts.nbytes
    m, tiles = part.rows_per_part, num_tiles(part.rows_per_part, tile_cols)
    rows = _Rows(dataset, view, part, first_row, local, ids, starts, counts, degree, norm, both,
                 m if tiles == 1 else tile_cols, tiles)
    fill = _BlockFill(rows, int(counts.sum()), ids.size if adds_self_loops(norm) else 0)
    spans, threads, batch = _spans(rows)
    sums = [np.uint64(0), np.uint64(0)]  # both: the diagonal block's hash sums (check_symmetric_sums)
    for first in range(0, len(spans), batch):
        chunks = thread_map(partial(_chunk_entries, rows), spans[first:first + batch], threads)
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
        check_symmetric_sums(dataset, sums)
    return fill, rows


def _blocks(fill: _BlockFill, rows: _Rows) -> tuple[list[TiledCSR], list[TiledCSR]]:
    """The P column blocks of Â (and of Âᵀ, ``fill.both``) from their groups, one block at a time, each group's
    arrays handed to its tile. Without ``both`` the second list is empty; with it, a block whose values of Âᵀ equal
    Â's is shared."""
    adj, adj_t = [], []
    starts = [t * rows.width for t in range(rows.tiles)]
    for j in range(rows.part.num_parts):
        tiles = [fill.take(j * rows.tiles + t) for t in range(rows.tiles)]
        adj.append(TiledCSR([tile for tile, _ in tiles], starts, rows.part.rows_per_part))
        if fill.both:
            same = all(tile_t is None for _, tile_t in tiles)
            adj_t.append(adj[-1] if same else TiledCSR([tile if tile_t is None else tile_t for tile, tile_t in tiles],
                                                       starts, rows.part.rows_per_part))
        del tiles
        trim_heap()
    return adj, adj_t


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
        norm: the operator, one of :data:`mggcn.config.OPERATORS` (:mod:`mggcn.nn.norm`; a model's is
            :func:`mggcn.nn.models.operator_for`: the GCN's ``"sym"`` or ``"mean"``, GraphSAGE's ``"in-mean"``,
            GIN's ``"sum"``).
        tile_cols: columns per tile of the blocks (:func:`mggcn.kernels.policy.tile_columns`; None: untiled).
        reads: if given, filled with what the shard read: ``rows``, ``edges`` (CSR entries of both views) and
            ``bytes`` (all it gathered from the arrays).

    When Â = Âᵀ on this rank's rows (a symmetric A with the ``sym`` norm), the backward blocks ARE the forward blocks.
    """
    if isinstance(dataset, Graph):
        dataset = InMemoryDataset(dataset)
    if norm not in OPERATORS:
        raise ConfigError(f"norm must be one of {', '.join(OPERATORS)}, got '{norm}'", "norm")
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
    labels = arrays["labels"]  # int64 [n] (-1: none), or multi-label uint8 [n, C] (padding rows: no label)
    y = np.zeros((m, labels.shape[1]), dtype=np.uint8) if labels.ndim == 2 else np.full(m, -1, dtype=np.int64)
    codes = np.full(m, -1, dtype=np.int8)
    copy_rows(dataset, "labels", ids, local, y, counted)
    copy_rows(dataset, "split", ids, local, codes, counted)
    stored = degree[local] if adds_self_loops(norm) else np.asarray(arrays["degree"][ids])
    check_vertex_rows(dataset, ids, stored, y[local], codes[local])
    view = partial(_entries, dataset, part=part, first_row=first, local=local, ids=ids, degree=degree, norm=norm,
                   tile_cols=tile_cols, reads=counted)
    if dataset.symmetric:  # the rows of Aᵀ are the rows of A: read once, weighted twice
        adj, adj_t = _blocks(*view("in", both=True))
        if all(a is t for a, t in zip(adj, adj_t)):
            adj_t = adj
    else:
        adj, _ = _blocks(*view("in"))
        adj_t, _ = _blocks(*view("out"))
    # the features last: while the blocks were built, the rank did not hold them yet
    x = np.zeros((m, dataset.num_features), dtype=np.float32)
    copy_rows(dataset, "features", ids, local, x, counted, check=check_features)
    if reads is not None:
        reads.update(counted)
    masks = {s: torch.from_numpy(codes == k) for k, s in enumerate(SPLITS)}
    return Shard(rank=rank, partition=part, adj=adj, adj_t=adj_t, x=torch.from_numpy(x), y=torch.from_numpy(y),
                 masks=masks, num_classes=dataset.num_classes, split_sizes=dict(dataset.split_sizes))
