"""R-MAT (Kronecker) graphs, as Graph500 draws them: ``rmat:`` datasets in memory and streamed at any scale.

Edges are drawn in blocks of :data:`RMAT_BLOCK`, block ``b`` from ``default_rng([seed, b])``, on every core at
once; the graph is their symmetric closure with self loops and duplicates dropped. Labels are quantile buckets of the
degree (a structural task), features a noisy centroid of the label.

Legend: n = 2^scale vertices, E = edges, F = features, C = classes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from mggcn.data.generators.common import (
    DEFAULT_SPLIT,
    CentroidFeatures,
    GeneratedGraph,
    GraphStream,
    PairGraph,
    degree_buckets,
    random_split,
    rechunk,
)
from mggcn.data.graph import Graph
from mggcn.utils.errors import GraphError
from mggcn.utils.parallel import thread_budget, thread_map

__all__ = ["RMAT_BLOCK", "MAX_MEMORY_SCALE", "rmat_edges", "rmat_generated", "rmat_graph", "rmat_stream"]

# R-MAT edges are drawn in blocks of this many edges, each from its own seed (seed, block index), so the stream is
# the same whatever chunk size the caller asks for.
RMAT_BLOCK = 1 << 20
MAX_MEMORY_SCALE = 30  # rmat_graph holds the graph in memory: 2^30 vertices, 2^34 edges at edge_factor 16


def _at_least(r: np.ndarray, p: float, out: np.ndarray) -> None:
    """``out = (u >= float32(p))`` for the uniform float32 ``u`` that numpy makes of each uint32 ``r`` (its top 24
    bits over 2^24): the same comparison on the integers, without making the floats."""
    k = math.ceil(float(np.float32(p)) * 2**24)  # exact: u >= p32 iff (r >> 8) >= ceil(p32 · 2^24)
    if k >= 1 << 24:
        out[:] = False
    else:
        np.greater_equal(r, np.uint32(max(k, 0) << 8), out=out)


def _rmat_block(scale: int, count: int, a: float, b: float, c: float, seed: int, block: int) -> np.ndarray:
    """``count`` raw R-MAT edges of block ``block``: ``[2, count]`` uint32 (uint64 beyond scale 32), self loops and
    duplicates included.

    At each of ``scale`` levels one uniform float32 draw ``u`` (``Generator.random``) picks a quadrant: ``[0, a)``
    top-left, ``[a, a+b)`` top-right, ``[a+b, a+b+c)`` bottom-left, the rest bottom-right; the source bit is 1 in
    the bottom half, the target bit 1 in the right half.
    """
    rng = np.random.default_rng([seed, block])
    ids = np.uint32 if scale <= 32 else np.uint64  # half the bytes of every pass where the ids fit
    src, dst = np.zeros(count, dtype=ids), np.zeros(count, dtype=ids)
    if count % 2:  # numpy's float32 draws take the halves of 64-bit words; an odd count leaves one for the next
        draw = _float_draws(rng, count)
    else:  # those words themselves, the low half first (what Generator.random(float32) turns into floats)
        draw = (rng.bit_generator.random_raw(count // 2).view(np.uint32) for _ in range(scale))
    bottom, right, past = (np.empty(count, dtype=bool) for _ in range(3))
    # the bits of up to 8 levels gather in bytes, then join the ids: the wide arrays are shifted once per 8 levels
    src8, dst8 = np.empty(count, dtype=np.uint8), np.empty(count, dtype=np.uint8)
    for first in range(0, scale, 8):
        levels = min(8, scale - first)
        for level in range(levels):
            r = next(draw)
            _at_least(r, a + b, bottom)
            _at_least(r, a, right)  # right: [a, a+b) or [a+b+c, 1), i.e. (u >= a) xor bottom xor (u >= a+b+c)
            np.not_equal(right, bottom, out=right)
            _at_least(r, a + b + c, past)
            np.not_equal(right, past, out=right)
            if level:
                src8 <<= 1
                dst8 <<= 1
                src8 |= bottom.view(np.uint8)
                dst8 |= right.view(np.uint8)
            else:
                np.copyto(src8, bottom.view(np.uint8))
                np.copyto(dst8, right.view(np.uint8))
        src <<= levels
        dst <<= levels
        src |= src8
        dst |= dst8
    return np.stack([src, dst])


def _float_draws(rng: np.random.Generator, count: int) -> Iterator[np.ndarray]:
    """The levels' draws as the uint32 whose top 24 bits numpy's float32 ``u`` is (``u · 2^32``, exact)."""
    r = np.empty(count, dtype=np.float32)
    while True:
        rng.random(dtype=np.float32, out=r)
        r *= np.float32(2**32)
        yield r


def _scramble(ids: np.ndarray, scale: int, seed: int) -> np.ndarray:
    """A seeded bijection of ``[0, 2^scale)`` (odd multiply and xor-shift rounds, all mod ``2^scale``), as uint32
    (uint64 beyond scale 32).

    R-MAT puts every hub at a small id; scrambling spreads them, like Graph500, so contiguous-range partitions are not
    trivially unbalanced. O(1) memory, unlike a stored permutation of 2^scale ids.
    """
    if scale == 0:
        return ids.copy()
    # The low `scale` bits of a product depend only on the low `scale` bits of its factors: where the ids fit,
    # uint32 arithmetic (wrapping mod 2^32) gives the bits uint64 would, at half the bytes.
    word = np.uint32 if scale <= 32 else np.uint64
    mask = word((1 << scale) - 1)
    rng = np.random.default_rng([seed, 0x5C4A])
    h = ids.astype(word)
    shift = word(max(1, scale // 2))
    for mult in rng.integers(0, 1 << 62, size=3, dtype=np.uint64) | np.uint64(1):
        h *= word(int(mult) & int(np.iinfo(word).max))  # odd: a bijection mod 2^scale (wraparound intended)
        h &= mask
        h ^= h >> shift  # xor with a right shift of itself: invertible
    return h


def _edge_block(scale: int, edge_factor: int, a: float, b: float, c: float, seed: int, scramble: bool,
                block: int, wide: bool = True) -> np.ndarray:
    """Block ``block`` of the edge stream, int64 (``wide``) or the narrowest unsigned dtype of the ids."""
    total = edge_factor << scale
    e = _rmat_block(scale, min(RMAT_BLOCK, total - block * RMAT_BLOCK), a, b, c, seed, block)
    if scramble:
        e = _scramble(e, scale, seed)
    return e.astype(np.int64) if wide else e


def _check_edges(scale: int, edge_factor: int, a: float, b: float, c: float, chunk_size: int = 1) -> None:
    if not 0 <= scale <= 62:
        raise GraphError(f"rmat(scale={scale}): scale must be in [0, 62]")
    if edge_factor < 1 or chunk_size < 1:
        raise GraphError(f"rmat(scale={scale}): edge_factor and chunk_size must be positive")
    if min(a, b, c) < 0 or a + b + c > 1 + 1e-9:
        raise GraphError(f"rmat(scale={scale}): need a, b, c >= 0 and a + b + c <= 1")


def rmat_edges(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19, c: float = 0.19, seed: int = 0,
               chunk_size: int = RMAT_BLOCK, scramble: bool = True) -> Iterator[np.ndarray]:
    """Stream the ``edge_factor * 2^scale`` directed edges of an R-MAT graph over ``2^scale`` vertices.

    Edges are drawn in fixed blocks of :data:`RMAT_BLOCK`, block ``i`` from ``default_rng([seed, i])``, and re-cut to
    ``chunk_size``, so the concatenated stream depends only on the parameters and ``seed``. The raw edges include
    self loops and duplicates and are not symmetrised; see :func:`rmat_graph` for a clean in-memory graph.

    Args:
        scale: ``log2`` of the vertex count (0..62).
        edge_factor: edges per vertex (default 16, as Graph500).
        a, b, c: quadrant probabilities (``d = 1 - a - b - c``), defaults 0.57/0.19/0.19 as Graph500.
        seed: stream seed.
        chunk_size: edges per yielded chunk (the last one may be shorter); default :data:`RMAT_BLOCK`.
        scramble: relabel vertices with a seeded bijection so hubs are not all at small ids (default True).

    Yields:
        ``int64 [2, k]`` arrays, ``k <= chunk_size``, row 0 source, row 1 target.
    """
    _check_edges(scale, edge_factor, a, b, c, chunk_size)
    blocks = -(-(edge_factor << scale) // RMAT_BLOCK)

    def drawn() -> Iterator[np.ndarray]:  # a block per thread at a time, in block order
        step = thread_budget()
        for first in range(0, blocks, step):
            yield from thread_map(lambda k: _edge_block(scale, edge_factor, a, b, c, seed, scramble, k),
                                  range(first, min(first + step, blocks)))

    yield from rechunk(drawn(), chunk_size)


def _check_vertex_data(name: str, scale: int, num_classes: int, num_features: int, noise: float) -> int:
    """The vertex count ``2^scale`` after checking the vertex-data arguments."""
    if num_classes < 1 or num_features < 1 or noise < 0:
        raise GraphError(f"{name}: need classes >= 1, features >= 1, noise >= 0")
    n = 1 << scale
    if num_classes > n:
        raise GraphError(f"{name}: {num_classes} classes for {n} vertices")
    return n


def _meta(scale: int, edge_factor: int, a: float, b: float, c: float, seed: int) -> dict:
    return dict(generator="rmat_graph", scale=scale, edge_factor=edge_factor, a=a, b=b, c=c, seed=seed)


def _vertex_seeds(seed: int) -> list[np.random.SeedSequence]:
    """The (features, split) seed sequences of an R-MAT dataset."""
    return np.random.SeedSequence([seed, 1]).spawn(2)


def rmat_generated(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19, c: float = 0.19,
                   num_classes: int = 4, num_features: int = 16, noise: float = 1.0,
                   split: tuple[float, float, float] = DEFAULT_SPLIT, seed: int = 0) -> GeneratedGraph:
    """:func:`rmat_graph` as a :class:`~mggcn.data.generators.common.GeneratedGraph` (its CSR, no edge list)."""
    name = f"rmat_graph(scale={scale}, seed={seed})"
    if scale > MAX_MEMORY_SCALE:
        raise GraphError(f"{name}: rmat_graph holds everything in memory; stream rmat_edges for scale > "
                         f"{MAX_MEMORY_SCALE}")
    n = _check_vertex_data(name, scale, num_classes, num_features, noise)
    _check_edges(scale, edge_factor, a, b, c)
    graph = PairGraph(n)

    def pairs(block: int) -> tuple[np.ndarray, np.ndarray]:
        src, dst = _edge_block(scale, edge_factor, a, b, c, seed, True, block, wide=False)
        return src, dst

    graph.add(range(-(-(edge_factor << scale) // RMAT_BLOCK)), pairs)
    csr = graph.csr()
    y = degree_buckets(np.diff(csr.indptr), num_classes)
    features, splits = _vertex_seeds(seed)
    x = CentroidFeatures(y, num_classes, num_features, noise, features).all()
    masks = random_split(n, split, np.random.default_rng(splits))
    return GeneratedGraph(name, csr, x, y, masks, num_classes, _meta(scale, edge_factor, a, b, c, seed))


def rmat_graph(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19, c: float = 0.19,
               num_classes: int = 4, num_features: int = 16, noise: float = 1.0,
               split: tuple[float, float, float] = DEFAULT_SPLIT, seed: int = 0) -> Graph:
    """An in-memory R-MAT graph with labels from degree buckets.

    Edges from :func:`rmat_edges` are symmetrised, self loops and duplicates dropped (so ``E / n`` is somewhat below
    ``2 * edge_factor``). Labels are ``C`` quantile buckets of the degree (isolated vertices in the lowest), so the
    task is structural; features are ``mu[y] + noise * N(0, I_F)`` as in
    :func:`~mggcn.data.generators.community.community_graph`.

    Args:
        scale, edge_factor, a, b, c: as :func:`rmat_edges`.
        num_classes: ``C`` degree buckets (default 4).
        num_features: ``F`` (default 16).
        noise: feature noise standard deviation (default 1.0).
        split: train/val/test fractions (default 0.5/0.25/0.25).
        seed: edge stream, features and split all derive from it.
    """
    return rmat_generated(scale, edge_factor, a, b, c, num_classes, num_features, noise, split, seed).to_graph()


def rmat_stream(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19, c: float = 0.19,
                num_classes: int = 4, num_features: int = 16, noise: float = 1.0,
                split: tuple[float, float, float] = DEFAULT_SPLIT, seed: int = 0) -> GraphStream:
    """:func:`rmat_graph` at any scale, as a :class:`GraphStream`: once written, the same dataset (edges, labels,
    features, split) as :func:`rmat_graph` with the same arguments, in O(n) memory instead of O(E)."""
    name = f"rmat_stream(scale={scale}, seed={seed})"
    if not 0 <= scale <= 40:
        raise GraphError(f"{name}: scale must be in [0, 40]")
    n = _check_vertex_data(name, scale, num_classes, num_features, noise)

    def edges(chunk_size: int) -> Iterator[np.ndarray]:
        for e in rmat_edges(scale, edge_factor, a, b, c, seed=seed, chunk_size=chunk_size):
            yield e[:, e[0] != e[1]]

    def vertex_data(in_degree: np.ndarray):
        y = degree_buckets(in_degree, num_classes)
        features, splits = _vertex_seeds(seed)
        masks = random_split(n, split, np.random.default_rng(splits))
        return y, masks, CentroidFeatures(y, num_classes, num_features, noise, features).chunks

    return GraphStream(name, n, num_features, num_classes, edge_factor << scale, edges, vertex_data,
                       _meta(scale, edge_factor, a, b, c, seed))

