"""CSR arrays from edges at memory speed: sorted int64 keys, cut into row ranges that sort on every core at once.

An edge ``(row, col)`` of an ``n``-vertex graph is the key ``row · n + col``: the keys in increasing order are the
entries of the CSR in order, rows first, so one sort builds it, and equal keys are parallel edges. :class:`RowBuckets`
cuts the keys into contiguous ranges of rows as they come (block by block, from a generator or a file), and
:meth:`RowBuckets.finish` sorts each range on its own, in threads (:func:`mggcn.utils.parallel.thread_map`): the
ranges concatenated are the whole sorted array, so the result never depends on the thread count. A block is sorted
once when it comes (its keys then split at the range bounds by binary search), a range once at the end.

Memory: 8 bytes per key while they wait in their ranges, plus one range being sorted per thread and the result
(int32 columns where ids fit: 4 bytes per entry).

Keys need ``n · n < 2^63`` (``n`` up to 3,037,000,499); the graphs in memory here have ``n < 2^31``.

Legend: n = vertices, E = entries (edges), R = row ranges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from mggcn.utils.parallel import thread_budget, thread_map

__all__ = ["MAX_KEY_NODES", "CSR", "RowBuckets", "keys_csr", "directed_csr", "distinct_keys", "run_starts", "mix64"]

MAX_KEY_NODES = 3_037_000_499  # the largest n with n · n < 2^63
RANGES_PER_THREAD = 4  # more row ranges than threads: a range of hub rows does not hold up the others


@dataclass
class CSR:
    """``indptr`` int64 [n+1], ``indices`` int32 (int64 when n ≥ 2^31) [E]: row ``r``'s columns, sorted, are
    ``indices[indptr[r]:indptr[r+1]]``."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_nodes(self) -> int:
        return self.indptr.size - 1

    @property
    def nnz(self) -> int:
        return int(self.indices.size)


def index_dtype(num_nodes: int) -> np.dtype:
    """Vertex ids in memory and on disk: int32 while they fit (half the bytes, and what torch's CSR kernels like
    best)."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


def run_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Whether each element of a sorted array starts a run of equal values (bool, the first always True)."""
    first = np.empty(sorted_keys.size, dtype=bool)
    first[:1] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    return first


def mix64(keys: np.ndarray) -> np.ndarray:
    """A bijection of the 64-bit integers that scatters neighbouring keys (splitmix64's finalizer), as uint64: an
    order on keys that is random-looking, the same on every machine, and without ties."""
    h = keys.astype(np.uint64)  # a copy, changed in place below
    with np.errstate(over="ignore"):
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return h


class RowBuckets:
    """Keys ``row · n + col`` gathered into ``R`` contiguous row ranges, block by block, then sorted range by range.

    ``add`` and ``split`` take any number of blocks in any order; ``finish`` returns the sorted keys of every range
    (deduplicated with ``dedup``), ranges in row order. ``split`` is a pure function of its block, so callers run it
    in threads (:func:`add_blocks`).
    """

    def __init__(self, num_nodes: int, ranges: int | None = None) -> None:
        if num_nodes > MAX_KEY_NODES:
            raise ValueError(f"{num_nodes} vertices: row · n + col would overflow int64")
        self.num_nodes = num_nodes
        ranges = ranges or RANGES_PER_THREAD * thread_budget()
        self.width = max(1, -(-num_nodes // max(1, ranges)))  # rows per range
        self.count = -(-num_nodes // self.width) if num_nodes else 1
        self.bounds = np.arange(1, self.count, dtype=np.int64) * (self.width * num_nodes)  # first key of range 1..
        self.pieces: list[list[np.ndarray]] = [[] for _ in range(self.count)]

    def split(self, keys: np.ndarray) -> list[np.ndarray]:
        """``keys`` sorted in place and cut at the range bounds (views; safe in threads on distinct blocks)."""
        keys.sort()  # in place: the caller's block is not used again
        cut = np.searchsorted(keys, self.bounds)
        return np.split(keys, cut)

    def add(self, pieces: list[np.ndarray]) -> None:
        for held, piece in zip(self.pieces, pieces):
            if piece.size:
                held.append(piece)

    def add_blocks(self, blocks: Iterable[int], keys_of: Callable[[int], np.ndarray]) -> None:
        """``keys_of(b)`` for every block ``b``, in threads, each split into the ranges as it comes."""
        for pieces in thread_map(lambda b: self.split(keys_of(b)), blocks):
            self.add(pieces)

    def rows(self, j: int) -> tuple[int, int]:
        return j * self.width, min((j + 1) * self.width, self.num_nodes)

    def finish(self, dedup: bool) -> list[np.ndarray]:
        """The sorted keys of each range (each value once with ``dedup``); the pieces are released as they go."""
        def one(j: int) -> np.ndarray:
            pieces, self.pieces[j] = self.pieces[j], []
            if len(pieces) == 1:  # a piece of one sorted block: sorted already
                keys = pieces[0]
            else:
                keys = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)
                del pieces
                keys.sort()
            return keys[run_starts(keys)] if dedup else keys

        return thread_map(one, range(self.count))


def keys_csr(ranges: list[np.ndarray], buckets: RowBuckets) -> CSR:
    """The CSR of the sorted keys of each row range (:meth:`RowBuckets.finish`)."""
    n = buckets.num_nodes
    counts = np.zeros(n, dtype=np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    offsets = np.cumsum([0] + [k.size for k in ranges])
    indices = np.empty(int(offsets[-1]), dtype=index_dtype(n))

    def decode(j: int) -> None:  # GIL-free passes only (np.bincount holds the GIL)
        keys = ranges[j]
        rows = keys // n
        starts = np.flatnonzero(run_starts(rows))
        counts[rows[starts]] = np.diff(starts, append=rows.size)
        np.subtract(keys, rows * n, out=indices[offsets[j]:offsets[j + 1]], casting="unsafe")

    thread_map(decode, range(len(ranges)))
    np.cumsum(counts, out=indptr[1:])
    return CSR(indptr, indices)


def _bucketed(rows: np.ndarray, cols: np.ndarray, num_nodes: int, block: int) -> RowBuckets:
    """The keys ``rows[e] · n + cols[e]`` of every entry in :class:`RowBuckets`, block by block in threads."""
    buckets = RowBuckets(num_nodes)

    def keys_of(b: int) -> np.ndarray:
        part = slice(b * block, (b + 1) * block)
        keys = rows[part].astype(np.int64)
        keys *= num_nodes
        keys += cols[part]
        return keys

    buckets.add_blocks(range(-(-rows.size // block)), keys_of)
    return buckets


def directed_csr(rows: np.ndarray, cols: np.ndarray, num_nodes: int, block: int = 1 << 22) -> CSR:
    """The CSR of the entries ``(rows[e], cols[e])``, parallel entries repeated (int32 or int64 id arrays)."""
    buckets = _bucketed(rows, cols, num_nodes, block)
    return keys_csr(buckets.finish(dedup=False), buckets)


def distinct_keys(rows: np.ndarray, cols: np.ndarray, num_nodes: int, block: int = 1 << 22) -> np.ndarray:
    """The keys ``row · n + col`` of the entries ``(rows[e], cols[e])``, sorted, each once: sorts on every core
    (``np.unique``'s hashing of int64 keys runs on one, many times slower than a sort)."""
    ranges = _bucketed(rows, cols, num_nodes, block).finish(dedup=True)
    return np.concatenate(ranges) if len(ranges) > 1 else ranges[0]
