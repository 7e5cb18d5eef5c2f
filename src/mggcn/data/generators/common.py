"""What the generators share: the symmetric graph of drawn vertex pairs, random splits, class-centroid features,
degree-bucket labels, and the stream of blocks that ``mggcn prepare`` writes.

Every random draw comes from a generator seeded by ``(seed, what, block)``: edges in blocks of a fixed number of
pairs, features in blocks of :data:`FEATURE_BLOCK_ROWS` rows. The blocks are drawn on every core at once
(:func:`mggcn.utils.parallel.thread_map`) and put together in block order, so a seed gives the same graph whatever
the thread count, the machine or the chunk size a caller streams it in.

Legend: n = vertices, F = features, C = classes, K = undirected pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from mggcn.data.csr import CSR, MAX_KEY_NODES, index_dtype, mix64, run_starts
from mggcn.data.graph import SPLITS, Graph
from mggcn.utils.errors import GraphError
from mggcn.utils.parallel import thread_budget, thread_map

__all__ = ["DEFAULT_SPLIT", "FEATURE_BLOCK_ROWS", "GeneratedGraph", "GraphStream", "CentroidFeatures", "PairGraph",
           "degree_buckets", "random_split", "rechunk", "undirected_keys"]

DEFAULT_SPLIT = (0.5, 0.25, 0.25)
RANGES_PER_THREAD = 4  # more key ranges than threads: a range of hub rows does not hold up the others
MAX_RANGES = 4096  # key ranges of a PairGraph at most (each a list of pieces while blocks come)
FEATURE_BLOCK_ROWS = 1 << 16  # feature rows drawn from one generator


@dataclass
class GeneratedGraph:
    """A generated dataset in memory: the CSR of its simple undirected graph (both directions of every edge, no self
    loop, no parallel edge) and its vertex data, as :class:`~mggcn.data.graph.Graph` has them."""

    name: str
    csr: CSR
    x: np.ndarray
    y: np.ndarray
    masks: dict[str, np.ndarray]
    num_classes: int
    meta: dict

    @property
    def num_nodes(self) -> int:
        return self.csr.num_nodes

    def to_graph(self) -> Graph:
        """The same dataset as an edge list (``edge_index`` sorted by target, then source), validated."""
        n = self.num_nodes
        targets = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.csr.indptr))
        edge_index = np.stack([self.csr.indices.astype(np.int64), targets])
        return Graph(n, edge_index, self.x, self.y, self.masks, self.num_classes, self.name, self.meta).validate()


def undirected_keys(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """The keys ``row · n + col`` of both directions of the pairs ``u[i] — v[i]``, self loops left out."""
    keep = u != v
    u, v = u[keep], v[keep]  # any integer dtype: the products below are formed in int64 (dtype=: numpy 1 would
    keys = np.empty(2 * u.size, dtype=np.int64)  # multiply int32 ids by an int64 scalar in int32, and overflow)
    np.multiply(u, n, out=keys[:u.size], dtype=np.int64)
    keys[:u.size] += v
    np.multiply(v, n, out=keys[u.size:], dtype=np.int64)
    keys[u.size:] += u
    return keys


class PairGraph:
    """The simple undirected graph of drawn pairs: self loops dropped, a pair drawn twice (either way) kept once.

    Held as the sorted keys ``row · n + col`` of both directions, cut into ranges of ``2^shift`` consecutive keys
    (:class:`_KeyRanges`), each kept as its keys less the range's first (uint32 where ``shift <= 32``: half the
    bytes of every pass, and numpy sorts them twice as fast), so that pairs drawn later merge in (:meth:`add`, which
    can also stop at a number of pairs) before :meth:`csr`.
    """

    def __init__(self, num_nodes: int) -> None:
        self.keys = _KeyRanges(num_nodes)
        self.ranges: list[np.ndarray] | None = None

    @property
    def num_pairs(self) -> int:
        return 0 if self.ranges is None else _pairs_in(self.ranges)

    def add(self, blocks: Iterable[int], pairs_of: Callable[[int], tuple[np.ndarray, np.ndarray]],
            limit: int | None = None, names: np.ndarray | None = None) -> None:
        """The pairs ``pairs_of(b)`` of every block ``b`` (drawn in threads), merged into the graph. ``limit``: at
        most that many pairs in all, those of this call that are new beyond it dropped: the last in the order of
        :func:`~mggcn.data.csr.mix64` on the undirected key ``min · n + max`` (a random-looking subset, the same on
        every machine), of ``names[vertex]`` with ``names`` (so that a relabelled graph keeps the same pairs)."""
        n = self.keys.num_nodes
        new = self.keys.sorted_unique(thread_map(lambda b: self.keys.split(undirected_keys(*pairs_of(b), n)),
                                                 blocks))
        places = None  # each new key's place among those held
        if self.ranges is not None:
            new, places = (list(x) for x in zip(*thread_map(_unseen, zip(self.ranges, new))))
        if limit is not None and _pairs_in(new) > limit - self.num_pairs:
            kept = self.keys.first_pairs(new, limit - self.num_pairs, names)
            new = [k[m] for k, m in zip(new, kept)]
            places = places and [p[m] for p, m in zip(places, kept)]
        self.ranges = new if places is None else \
            thread_map(lambda j: np.insert(self.ranges[j], places[j], new[j]), range(len(new)))

    def csr(self) -> CSR:
        ranges = self.ranges if self.ranges is not None else self.keys.sorted_unique([])
        self.ranges = None
        return self.keys.csr(ranges)

    @staticmethod
    def of(u: np.ndarray, v: np.ndarray, num_nodes: int) -> CSR:
        """The CSR of the simple undirected graph of the pairs ``u[i] — v[i]`` (a small graph, in one block)."""
        graph = PairGraph(num_nodes)
        graph.add([0], lambda _: (u, v))
        return graph.csr()


class _KeyRanges:
    """Keys ``row · n + col`` of an ``n``-vertex graph cut into the ranges ``[j · 2^shift, (j + 1) · 2^shift)``,
    each held as the keys less ``j · 2^shift`` (the low ``shift`` bits). Ranges cut rows where they fall: every
    decoding below takes a row split between two ranges.

    ``shift`` makes about as many ranges as :data:`RANGES_PER_THREAD` per thread, at most 32 bits (fewer where that
    made more than :data:`MAX_RANGES` ranges); the keys in order, and so the graph, do not depend on it.
    """

    def __init__(self, num_nodes: int) -> None:
        if num_nodes > MAX_KEY_NODES:
            raise ValueError(f"{num_nodes} vertices: row · n + col would overflow int64")
        self.num_nodes = n = num_nodes
        space = max(1, n * n)
        shift = min(32, max(0, space.bit_length() - (RANGES_PER_THREAD * thread_budget()).bit_length()))
        while (space - 1) >> shift >= MAX_RANGES:
            shift += 1
        self.shift, self.count = shift, ((space - 1) >> shift) + 1
        self.dtype = np.dtype(np.uint32 if shift <= 32 else np.int64)
        self.bounds = np.arange(1, self.count, dtype=np.int64) << shift  # the first key of range 1, 2, ...

    def split(self, keys: np.ndarray) -> list[np.ndarray]:
        """int64 ``keys`` (changed in place) sorted and cut into the ranges, each less its first key."""
        keys.sort()
        cut = np.searchsorted(keys, self.bounds)
        if self.shift != 32:  # at 32, the cast to uint32 keeps just the low bits
            np.bitwise_and(keys, (1 << self.shift) - 1, out=keys)
        return np.split(keys.astype(self.dtype, copy=False), cut)

    def sorted_unique(self, blocks: list[list[np.ndarray]]) -> list[np.ndarray]:
        """Each range's keys of the blocks' pieces (:meth:`split`), sorted, each once; the pieces released."""
        pieces = [[block[j] for block in blocks if block[j].size] for j in range(self.count)]
        blocks.clear()

        def one(j: int) -> np.ndarray:
            held, pieces[j] = pieces[j], []
            if len(held) == 1:  # a piece of one sorted block: sorted already
                keys = held[0]
            else:
                keys = np.concatenate(held) if held else np.empty(0, dtype=self.dtype)
                keys.sort()
            return keys[run_starts(keys)]

        return thread_map(one, range(self.count))

    def rows(self, j: int) -> tuple[int, int]:
        """The rows whose first key lies in range ``j``, ``[first, end)``."""
        n, lo = self.num_nodes, j << self.shift
        return min(-(-lo // n), n), min(-(-(lo + (1 << self.shift)) // n), n)

    def csr(self, ranges: list[np.ndarray]) -> CSR:
        """The CSR of the sorted keys of every range."""
        n = self.num_nodes
        indptr = np.empty(n + 1, dtype=np.int64)
        offsets = np.cumsum([0] + [k.size for k in ranges])
        indices = np.empty(int(offsets[-1]), dtype=index_dtype(n))
        indptr[n] = offsets[-1]

        def decode(j: int) -> None:
            keys, (first, end) = ranges[j], self.rows(j)
            base = j << self.shift
            # rows first..end-1 begin in this range; the row before them may begin in an earlier one
            at = np.searchsorted(keys, (np.arange(first, end, dtype=np.int64) * n - base).astype(self.dtype))
            indptr[first:end] = at + offsets[j]
            # col = key - row · n, in the keys' dtype: wrapping arithmetic is exact since the col fits
            row_keys = (np.arange(first - 1, end, dtype=np.int64) * n - base).astype(self.dtype)
            lengths = np.diff(at, prepend=0, append=keys.size)
            np.subtract(keys, np.repeat(row_keys, lengths), out=indices[offsets[j]:offsets[j + 1]], casting="unsafe")

        thread_map(decode, range(self.count))
        return CSR(indptr, indices)

    def first_pairs(self, ranges: list[np.ndarray], count: int, names: np.ndarray | None) -> list[np.ndarray]:
        """Which of the ranges' keys are the ``count`` pairs that come first in the hash order of their undirected
        keys (of ``names[vertex]`` with ``names``): a mask per range."""
        if count <= 0:
            return [np.zeros(r.size, dtype=bool) for r in ranges]
        n = self.num_nodes

        def pair_hash(j: int) -> tuple[np.ndarray, np.ndarray]:
            keys = ranges[j].astype(np.int64) + (j << self.shift)
            rows = keys // n
            cols = keys - rows * n
            upper = cols > rows
            if names is not None:
                rows, cols = names[rows], names[cols]
            return mix64(np.minimum(rows, cols) * n + np.maximum(rows, cols)), upper

        hashes = thread_map(pair_hash, range(len(ranges)))
        upper = np.concatenate([h[up] for h, up in hashes])  # each pair once
        cut = np.partition(upper, count - 1)[count - 1]
        del upper
        return [h <= cut for h, _ in hashes]


def _pairs_in(ranges: list[np.ndarray]) -> int:
    return sum(r.size for r in ranges) // 2  # both directions of every pair


def _unseen(pair: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The keys of a sorted array of distinct keys that another sorted array does not hold, and where they go in
    it."""
    held, new = pair
    at = np.searchsorted(held, new)
    seen = at < held.size
    seen[seen] = held[at[seen]] == new[seen]
    return new[~seen], at[~seen]


def random_split(n: int, split: tuple[float, float, float], rng: np.random.Generator,
                 y: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Disjoint random train/val/test masks with the given fractions (the rest, if any, is in no split).

    With ``y`` the split is stratified per class and every class present gets at least one training vertex, which
    matters on tiny graphs such as karate.
    """
    if len(split) != 3 or min(split) < 0 or sum(split) > 1 + 1e-9 or split[0] <= 0:
        raise GraphError(f"split {split}: need three non-negative fractions, train > 0, summing to at most 1")
    masks = {s: np.zeros(n, dtype=bool) for s in SPLITS}
    groups = [np.arange(n)] if y is None else [np.flatnonzero(y == c) for c in np.unique(y[y >= 0])]
    for members in groups:
        perm = members[rng.permutation(members.size)]
        k = perm.size
        n_train = max(1, int(round(split[0] * k)))
        n_val = min(k - n_train, int(round(split[1] * k)))
        n_test = min(k - n_train - n_val, int(round(split[2] * k)))
        masks["train"][perm[:n_train]] = True
        masks["val"][perm[n_train:n_train + n_val]] = True
        masks["test"][perm[n_train + n_val:n_train + n_val + n_test]] = True
    return masks


class CentroidFeatures:
    """``x[v] = mu[y[v]] + noise · N(0, I_F)`` with ``mu[c] ~ N(0, I_F)``, float32, drawn in blocks of
    :data:`FEATURE_BLOCK_ROWS` rows, block ``b`` from its own generator (``seq``'s child ``b``)."""

    def __init__(self, y: np.ndarray, num_classes: int, num_features: int, noise: float,
                 seq: np.random.SeedSequence) -> None:
        self.y, self.num_features, self.noise, self.seq = y, num_features, np.float32(noise), seq
        self.mu = np.random.default_rng(seq).standard_normal((num_classes, num_features), dtype=np.float32)

    def _fill(self, begin: int, out: np.ndarray) -> None:
        """Rows ``[begin, begin + len(out))``, which lie in one block."""
        block = begin // FEATURE_BLOCK_ROWS
        rng = np.random.default_rng(np.random.SeedSequence(self.seq.entropy, spawn_key=(*self.seq.spawn_key, block)))
        if begin > block * FEATURE_BLOCK_ROWS:  # the block's earlier rows: drawn and dropped, the same stream
            rng.standard_normal((begin - block * FEATURE_BLOCK_ROWS, self.num_features), dtype=np.float32)
        rng.standard_normal(dtype=np.float32, out=out)
        out *= self.noise
        out += self.mu[self.y[begin:begin + out.shape[0]]]

    def rows(self, begin: int, end: int) -> np.ndarray:
        """Rows ``[begin, end)`` (float32 ``[end - begin, F]``), their blocks in threads."""
        out = np.empty((max(0, end - begin), self.num_features), dtype=np.float32)
        starts = [begin, *range((begin // FEATURE_BLOCK_ROWS + 1) * FEATURE_BLOCK_ROWS, end, FEATURE_BLOCK_ROWS)]
        bounds = [*starts, end] if end > begin else [begin]
        thread_map(lambda i: self._fill(bounds[i], out[bounds[i] - begin:bounds[i + 1] - begin]),
                   range(len(bounds) - 1))
        return out

    def all(self) -> np.ndarray:
        return self.rows(0, self.y.size)

    @contextmanager
    def aside(self) -> Iterator[Callable[[], np.ndarray]]:
        """All the features, drawn block by block on a thread of their own while the caller goes on (on cores its
        own work leaves idle); the callable given waits for them. Blocks not yet begun when the caller leaves the
        block early are dropped."""
        out = np.empty((self.y.size, self.num_features), dtype=np.float32)
        pool = ThreadPoolExecutor(1, thread_name_prefix="mggcn-features")
        jobs = [pool.submit(self._fill, b, out[b:b + FEATURE_BLOCK_ROWS]) for b in range(0, self.y.size,
                                                                                        FEATURE_BLOCK_ROWS)]

        def done() -> np.ndarray:
            for job in jobs:
                job.result()
            return out

        try:
            yield done
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        """The features about ``rows`` rows at a time (whole blocks where ``rows`` allows; the last chunk may be
        shorter)."""
        if rows >= FEATURE_BLOCK_ROWS:
            rows -= rows % FEATURE_BLOCK_ROWS
        for begin in range(0, self.y.size, rows):
            yield self.rows(begin, min(begin + rows, self.y.size))


def degree_buckets(deg: np.ndarray, num_classes: int) -> np.ndarray:
    """Labels = ``num_classes`` quantile buckets of the degree; rank-based (ties in vertex order), so classes stay
    balanced even though many vertices share a degree."""
    order = np.argsort(deg, kind="stable")
    rank = np.empty(deg.size, dtype=np.int64)
    rank[order] = np.arange(deg.size, dtype=np.int64)
    return rank * num_classes // max(1, deg.size)


def rechunk(blocks: Iterable[np.ndarray], chunk_size: int) -> Iterator[np.ndarray]:
    """Re-cut a stream of ``[2, k]`` blocks into chunks of exactly ``chunk_size`` columns (the last may be shorter)."""
    pending: list[np.ndarray] = []
    pending_len = 0
    for e in blocks:
        pending.append(e)
        pending_len += e.shape[1]
        if pending_len < chunk_size:
            continue
        buf = np.concatenate(pending, axis=1) if len(pending) > 1 else pending[0]
        cut = (buf.shape[1] // chunk_size) * chunk_size
        for i in range(0, cut, chunk_size):
            yield buf[:, i:i + chunk_size]
        pending = [buf[:, cut:]] if cut < buf.shape[1] else []
        pending_len = buf.shape[1] - cut
    if pending_len:
        yield np.concatenate(pending, axis=1)


@dataclass(frozen=True)
class GraphStream:
    """A generated graph that is written piece by piece (``mggcn prepare``): edge chunks first, then vertex data.

    The graph is the symmetric closure of the streamed edges with duplicates merged: the writer adds the reverse of
    every edge and deduplicates. Self loops are never streamed.

    Attributes:
        edges: ``edges(chunk_size)`` yields ``int64 [2, k]`` chunks, ``k <= chunk_size``; deterministic.
        max_edges: how many edges ``edges`` yields at most (before the reverse edges are added).
        vertex_data: ``vertex_data(in_degree)`` -> ``(y, masks, x_chunks)``, given the in-degree of every vertex in
            the final (symmetric, deduplicated) graph; ``x_chunks(rows)`` yields the features ``rows`` at a time.
    """

    name: str
    num_nodes: int
    num_features: int
    num_classes: int
    max_edges: int
    edges: Callable[[int], Iterator[np.ndarray]]
    vertex_data: Callable[[np.ndarray], tuple[np.ndarray, dict[str, np.ndarray],
                                              Callable[[int], Iterator[np.ndarray]]]]
    meta: dict
