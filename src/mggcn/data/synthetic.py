"""Synthetic and small built-in datasets, and the ``--dataset`` spec strings that name them.

Three families:

* :func:`community_graph` — a degree-corrected stochastic block model (DC-SBM): heavy-tailed degrees, labels = the
  community, features = a class centroid drowned in Gaussian noise. The graph carries most of the label signal, so a
  2-layer GCN clearly beats an MLP (the point of a GCN benchmark that is also a correctness check).
* :func:`rmat_edges` / :func:`rmat_graph` — R-MAT (Kronecker) edges, streamed in chunks for graphs too big to hold,
  or assembled into a small :class:`~mggcn.data.graph.Graph`.
* ``builtin:karate`` and ``builtin:digits`` — tiny real datasets shipped with networkx and scikit-learn.

:func:`parse_spec` turns ``"synthetic:n=50000,classes=8"``-style strings into a validated :class:`Graph`;
:func:`stream_spec` turns ``synthetic:`` and ``rmat:`` specs into a :class:`GraphStream` that ``mggcn prepare`` writes
to disk chunk by chunk, at sizes that do not fit in memory as a :class:`Graph`.

Legend: n = vertices, E = directed edges (each undirected edge counted twice), F = features, C = classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from mggcn.data.graph import SPLITS, Graph, GraphError

__all__ = [
    "community_graph",
    "community_stream",
    "GraphStream",
    "rmat_edges",
    "rmat_stream",
    "stream_spec",
    "rmat_graph",
    "karate_graph",
    "digits_graph",
    "parse_spec",
    "SPEC_PREFIXES",
    "GENERATED_PREFIXES",
    "is_generated",
    "RMAT_BLOCK",
]

# Defaults in one visible place; ``parse_spec("synthetic")`` uses exactly these.
# NOISE was tuned so that at the defaults (and at 3000 vertices) a 2-layer GCN beats a same-width MLP by > 25 points
# (see tests/data/test_synthetic.py::test_gcn_beats_mlp).
DEFAULT_NODES = 20_000
DEFAULT_CLASSES = 10
DEFAULT_FEATURES = 64
DEFAULT_DEGREE = 20.0
DEFAULT_P_IN = 0.8
DEFAULT_NOISE = 5.0
DEFAULT_DEGREE_EXPONENT = 2.5
DEFAULT_SPLIT = (0.5, 0.25, 0.25)

# R-MAT edges are drawn in blocks of this many edges, each from its own seed (seed, block index), so the stream is
# the same whatever chunk size the caller asks for.
RMAT_BLOCK = 1 << 20
# The streamed community graph draws its undirected edges in blocks of this many, block i from (seed, tag, i).
COMMUNITY_BLOCK = 1 << 20
_COMMUNITY_STREAM_TAG = 0xC0DE


# ----------------------------------------------------------------------------------------------------------------------
# helpers


def _random_split(n: int, split: tuple[float, float, float], rng: np.random.Generator,
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


def _symmetrize(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Undirected ``int64 [2, E]`` edge list: self loops dropped, duplicates merged, both directions present."""
    keep = src != dst
    lo = np.minimum(src[keep], dst[keep]).astype(np.int64)
    hi = np.maximum(src[keep], dst[keep]).astype(np.int64)
    key = np.unique(lo * n + hi)  # one key per undirected pair; sorting once is cheaper than a hash set
    lo, hi = key // n, key % n
    return np.stack([np.concatenate([lo, hi]), np.concatenate([hi, lo])])


def _centroid_feature_chunks(y: np.ndarray, num_classes: int, num_features: int, noise: float,
                             rng: np.random.Generator, rows: int) -> Iterator[np.ndarray]:
    """``x[v] = mu[y[v]] + noise * N(0, I)`` with ``mu[c] ~ N(0, I_F)``, as float32 ``[<= rows, F]`` row chunks.

    The generator fills consecutive draws, so the rows do not depend on ``rows``.
    """
    mu = rng.standard_normal((num_classes, num_features), dtype=np.float32)
    for begin in range(0, y.size, rows):
        x = rng.standard_normal((min(rows, y.size - begin), num_features), dtype=np.float32)
        x *= np.float32(noise)
        x += mu[y[begin:begin + rows]]
        yield x


def _centroid_features(y: np.ndarray, num_classes: int, num_features: int, noise: float,
                       rng: np.random.Generator) -> np.ndarray:
    """:func:`_centroid_feature_chunks` in one piece: float32 ``[n, F]``."""
    return next(_centroid_feature_chunks(y, num_classes, num_features, noise, rng, rows=max(1, y.size)))


def _rechunk(blocks: Iterable[np.ndarray], chunk_size: int) -> Iterator[np.ndarray]:
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
    every edge and deduplicates (as :func:`_symmetrize` does in memory). Self loops are never streamed.

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


# ----------------------------------------------------------------------------------------------------------------------
# degree-corrected stochastic block model


def community_graph(num_nodes: int = DEFAULT_NODES, num_classes: int = DEFAULT_CLASSES,
                    num_features: int = DEFAULT_FEATURES, avg_degree: float = DEFAULT_DEGREE,
                    p_in: float = DEFAULT_P_IN, noise: float = DEFAULT_NOISE,
                    degree_exponent: float = DEFAULT_DEGREE_EXPONENT,
                    split: tuple[float, float, float] = DEFAULT_SPLIT, seed: int = 0) -> Graph:
    """A degree-corrected stochastic block model with noisy class-centroid features.

    Every vertex gets a community ``y[v]`` (uniform) and a weight ``theta[v] ~ Pareto`` with tail exponent
    ``degree_exponent`` (``P(theta > t) ~ t^-(gamma-1)``), so degrees follow a power law. Each undirected edge picks
    its first end with probability ``∝ theta``; with probability ``p_in`` the second end is drawn ``∝ theta`` inside the
    same community, otherwise inside a uniformly chosen other community. Features are
    ``x[v] = mu[y[v]] + noise * N(0, I_F)``, ``mu[c] ~ N(0, I_F)``: with the default noise an MLP sees a blurred
    signal, while averaging over a neighbourhood that is ~``p_in`` same-class recovers it.

    Args:
        num_nodes: ``n`` (default 20000).
        num_classes: ``C`` communities = label classes (default 10).
        num_features: ``F`` (default 64).
        avg_degree: target mean of the undirected degree, i.e. ``E / n`` after symmetrisation (default 20); met
            within ~1% unless the graph is too small to hold that many distinct edges.
        p_in: fraction of edges inside a community (default 0.8); forced to 1 when ``C == 1``.
        noise: standard deviation of the feature noise relative to the unit-variance centroids (default 5.0).
        degree_exponent: power-law exponent ``gamma > 2`` of the degree distribution (default 2.5).
        split: train/val/test fractions of a random split (default 0.5/0.25/0.25).
        seed: all randomness comes from ``numpy.random.default_rng(seed)``; same seed, same arrays.

    Returns:
        A validated :class:`Graph` with ``edge_index`` symmetric, without self loops or duplicates; ``meta`` holds the
        generator parameters and ``theta``.
    """
    name = f"community_graph(n={num_nodes}, seed={seed})"
    _check_community(name, num_nodes, num_classes, num_features, avg_degree, p_in, noise, degree_exponent)
    # Independent streams per component so that, e.g., changing the feature width does not change the edges.
    rng_lab, rng_edge, rng_feat, rng_split = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))
    n, C = num_nodes, num_classes
    model = _Communities.draw_model(n, C, p_in, degree_exponent, rng_lab)
    y, theta, p_in = model.y, model.theta, model.p_in

    target = _community_target(n, avg_degree)
    src_all, dst_all = [], []
    have = 0
    # Duplicates and self loops (frequent at hub vertices) are dropped, so top up until the count is met; a few
    # rounds suffice, and the cap keeps tiny dense requests from looping forever.
    for _ in range(8):
        want = int((target - have) * 1.05) + 16
        u, v = model.pairs(rng_edge, want)
        src_all.append(u)
        dst_all.append(v)
        ei = _symmetrize(np.concatenate(src_all), np.concatenate(dst_all), n)
        have = ei.shape[1] // 2
        if have >= target:
            break
    if have > target:
        # Keep a random subset of undirected pairs so the mean degree is hit exactly, not overshot by the margin.
        half = ei[:, : ei.shape[1] // 2]
        half = half[:, np.sort(rng_edge.choice(half.shape[1], size=target, replace=False))]
        ei = np.concatenate([half, half[::-1]], axis=1)

    x = _centroid_features(y, C, num_features, noise, rng_feat)
    masks = _random_split(n, split, rng_split)
    meta = dict(generator="community_graph", p_in=p_in, noise=noise, degree_exponent=degree_exponent,
                avg_degree=avg_degree, seed=seed, theta=theta.astype(np.float32))
    return Graph(n, ei, x, y, masks, num_classes=C, name=name, meta=meta).validate()


def _check_community(name: str, num_nodes: int, num_classes: int, num_features: int, avg_degree: float,
                     p_in: float, noise: float, degree_exponent: float) -> None:
    if num_nodes < 2 or num_classes < 1 or num_features < 1 or avg_degree <= 0:
        raise GraphError(f"{name}: need n >= 2, classes >= 1, features >= 1, avg_degree > 0")
    if num_classes > num_nodes:
        raise GraphError(f"{name}: {num_classes} classes for {num_nodes} vertices")
    if not 0.0 <= p_in <= 1.0 or noise < 0 or degree_exponent <= 2.0:
        raise GraphError(f"{name}: need 0 <= p_in <= 1, noise >= 0, degree_exponent > 2")


def _community_target(n: int, avg_degree: float) -> int:
    """Undirected edges for a mean degree of ``avg_degree``, at most every pair once."""
    return min(int(round(avg_degree * n / 2)), n * (n - 1) // 2)


@dataclass(frozen=True)
class _Communities:
    """The vertex side of the DC-SBM: communities ``y``, weights ``theta``, and what drawing ∝ theta needs.

    Vertices sorted by community (``order``) with one cumulative weight array ``cum``: drawing ∝ theta inside
    community c is a uniform draw in ``[start[c], start[c] + width[c])`` of that array followed by a binary search.
    """

    y: np.ndarray
    theta: np.ndarray
    order: np.ndarray
    cum: np.ndarray
    start: np.ndarray
    width: np.ndarray
    p_in: float

    @staticmethod
    def draw_model(n: int, C: int, p_in: float, degree_exponent: float, rng: np.random.Generator) -> _Communities:
        # Balanced communities in random order: every class has n // C or n // C + 1 members.
        y = rng.permutation(np.arange(n, dtype=np.int64) % C)
        # Pareto(alpha = gamma - 1) weights, capped so that no vertex expects more than ~n neighbours.
        theta = (1.0 - rng.random(n)) ** (-1.0 / (degree_exponent - 1.0))
        theta = np.minimum(theta, theta.mean() * np.sqrt(n))
        order = np.argsort(y, kind="stable")
        cum = np.cumsum(theta[order])
        bounds = np.concatenate([[0.0], cum[np.searchsorted(y[order], np.arange(C), side="right") - 1]])
        return _Communities(y, theta, order, cum, bounds[:-1], np.diff(bounds), 1.0 if C == 1 else p_in)

    def pairs(self, rng: np.random.Generator, want: int) -> tuple[np.ndarray, np.ndarray]:
        """``want`` raw edge draws ``(u, v)``: ``u`` ∝ theta; ``v`` ∝ theta in u's community w.p. p_in, else in
        a uniformly chosen other one. Self loops and duplicates included."""
        n, C = self.y.size, self.start.size
        u = self.order[np.minimum(np.searchsorted(self.cum, rng.random(want) * self.cum[-1], side="right"), n - 1)]
        inside = rng.random(want) < self.p_in
        other = (self.y[u] + rng.integers(1, max(C, 2), size=want)) % C  # a uniformly chosen different community
        comm = np.where(inside, self.y[u], other)
        pos = self.start[comm] + rng.random(comm.size) * self.width[comm]
        v = self.order[np.minimum(np.searchsorted(self.cum, pos, side="right"), n - 1)]
        return u, v


def community_stream(num_nodes: int = DEFAULT_NODES, num_classes: int = DEFAULT_CLASSES,
                     num_features: int = DEFAULT_FEATURES, avg_degree: float = DEFAULT_DEGREE,
                     p_in: float = DEFAULT_P_IN, noise: float = DEFAULT_NOISE,
                     degree_exponent: float = DEFAULT_DEGREE_EXPONENT,
                     split: tuple[float, float, float] = DEFAULT_SPLIT, seed: int = 0) -> GraphStream:
    """The DC-SBM of :func:`community_graph` at any size, as a :class:`GraphStream`.

    Memory is O(n) (the communities, weights and their cumulative sums), never O(E). The vertex data (labels,
    features, split) equal :func:`community_graph`'s for the same arguments; the edges are drawn differently: the
    ``round(avg_degree * n / 2)`` undirected draws come in blocks of :data:`COMMUNITY_BLOCK`, block ``i`` from
    ``default_rng([seed, tag, i])``, self loops dropped and duplicates merged without topping up, so the mean degree
    lands slightly below ``avg_degree`` (by the fraction of repeated pairs, which hubs make more frequent).
    """
    name = f"community_stream(n={num_nodes}, seed={seed})"
    _check_community(name, num_nodes, num_classes, num_features, avg_degree, p_in, noise, degree_exponent)
    seeds = np.random.SeedSequence(seed).spawn(4)  # the streams of community_graph: labels, edges, features, split
    n, C = num_nodes, num_classes
    model = _Communities.draw_model(n, C, p_in, degree_exponent, np.random.default_rng(seeds[0]))
    target = _community_target(n, avg_degree)

    def blocks() -> Iterator[np.ndarray]:
        for block, begin in enumerate(range(0, target, COMMUNITY_BLOCK)):
            u, v = model.pairs(np.random.default_rng([seed, _COMMUNITY_STREAM_TAG, block]),
                               min(COMMUNITY_BLOCK, target - begin))
            keep = u != v
            yield np.stack([u[keep], v[keep]])

    def vertex_data(in_degree: np.ndarray):
        masks = _random_split(n, split, np.random.default_rng(seeds[3]))
        return model.y, masks, lambda rows: _centroid_feature_chunks(model.y, C, num_features, noise,
                                                                     np.random.default_rng(seeds[2]), rows)

    meta = dict(generator="community_stream", p_in=model.p_in, noise=noise, degree_exponent=degree_exponent,
                avg_degree=avg_degree, seed=seed)
    return GraphStream(name, n, num_features, C, target, lambda chunk: _rechunk(blocks(), chunk), vertex_data, meta)


# ----------------------------------------------------------------------------------------------------------------------
# R-MAT


def _rmat_block(scale: int, count: int, a: float, b: float, c: float, seed: int, block: int) -> np.ndarray:
    """``count`` raw R-MAT edges of block ``block``: ``int64 [2, count]``, self loops and duplicates included.

    At each of ``scale`` levels one uniform draw picks a quadrant: ``[0, a)`` top-left, ``[a, a+b)`` top-right,
    ``[a+b, a+b+c)`` bottom-left, the rest bottom-right; the source bit is 1 in the bottom half, the target bit 1 in
    the right half.
    """
    rng = np.random.default_rng([seed, block])
    src = np.zeros(count, dtype=np.int64)
    dst = np.zeros(count, dtype=np.int64)
    ab, abc = np.float32(a + b), np.float32(a + b + c)
    fa = np.float32(a)
    for _ in range(scale):
        r = rng.random(count, dtype=np.float32)  # float32 halves the bandwidth; 2^-24 resolution is ample here
        bottom = r >= ab
        right = (r >= abc) | ((r >= fa) & ~bottom)
        src <<= 1
        dst <<= 1
        src |= bottom
        dst |= right
    return np.stack([src, dst])


def _scramble(ids: np.ndarray, scale: int, seed: int) -> np.ndarray:
    """A seeded bijection of ``[0, 2^scale)`` (odd multiply and xor-shift rounds, all mod ``2^scale``).

    R-MAT puts every hub at a small id; scrambling spreads them, like Graph500, so contiguous-range partitions are not
    trivially unbalanced. O(1) memory, unlike a stored permutation of 2^scale ids.
    """
    if scale == 0:
        return ids
    mask = np.uint64((1 << scale) - 1)
    rng = np.random.default_rng([seed, 0x5C4A])
    h = ids.astype(np.uint64)
    shift = np.uint64(max(1, scale // 2))
    for mult in rng.integers(0, 1 << 62, size=3, dtype=np.uint64) | np.uint64(1):
        h = (h * mult) & mask  # odd multiplier: a bijection mod 2^scale (uint64 wraparound is intended)
        h ^= h >> shift  # xor with a right shift of itself: invertible
    return h.astype(np.int64)


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
    if not 0 <= scale <= 62:
        raise GraphError(f"rmat(scale={scale}): scale must be in [0, 62]")
    if edge_factor < 1 or chunk_size < 1:
        raise GraphError(f"rmat(scale={scale}): edge_factor and chunk_size must be positive")
    if min(a, b, c) < 0 or a + b + c > 1 + 1e-9:
        raise GraphError(f"rmat(scale={scale}): need a, b, c >= 0 and a + b + c <= 1")
    total = edge_factor << scale

    def blocks() -> Iterator[np.ndarray]:
        for block, begin in enumerate(range(0, total, RMAT_BLOCK)):
            e = _rmat_block(scale, min(RMAT_BLOCK, total - begin), a, b, c, seed, block)
            yield _scramble(e, scale, seed) if scramble else e

    yield from _rechunk(blocks(), chunk_size)


def rmat_graph(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19, c: float = 0.19,
               num_classes: int = 4, num_features: int = 16, noise: float = 1.0,
               split: tuple[float, float, float] = DEFAULT_SPLIT, seed: int = 0) -> Graph:
    """A small in-memory R-MAT graph with labels from degree buckets.

    Edges from :func:`rmat_edges` are symmetrised, self loops and duplicates dropped (so ``E / n`` is somewhat below
    ``2 * edge_factor``). Labels are ``C`` quantile buckets of ``log(1 + degree)`` (isolated vertices included in
    the lowest), so the task is structural; features are ``mu[y] + noise * N(0, I_F)`` as in :func:`community_graph`.

    Args:
        scale, edge_factor, a, b, c: as :func:`rmat_edges`.
        num_classes: ``C`` degree buckets (default 4).
        num_features: ``F`` (default 16).
        noise: feature noise standard deviation (default 1.0).
        split: train/val/test fractions (default 0.5/0.25/0.25).
        seed: edge stream, features and split all derive from it.
    """
    name = f"rmat_graph(scale={scale}, seed={seed})"
    if scale > 24:
        raise GraphError(f"{name}: rmat_graph holds everything in memory; stream rmat_edges for scale > 24")
    n = _check_rmat(name, scale, num_classes, num_features, noise)
    raw = np.concatenate(list(rmat_edges(scale, edge_factor, a, b, c, seed=seed)), axis=1)
    ei = _symmetrize(raw[0], raw[1], n)
    y = _degree_buckets(np.bincount(ei[1], minlength=n), num_classes)
    rng_feat, rng_split = _rmat_vertex_rngs(seed)
    x = _centroid_features(y, num_classes, num_features, noise, rng_feat)
    masks = _random_split(n, split, rng_split)
    meta = _rmat_meta(scale, edge_factor, a, b, c, seed)
    return Graph(n, ei, x, y, masks, num_classes=num_classes, name=name, meta=meta).validate()


def _check_rmat(name: str, scale: int, num_classes: int, num_features: int, noise: float) -> int:
    """The vertex count ``2^scale`` after checking the vertex-data arguments."""
    if num_classes < 1 or num_features < 1 or noise < 0:
        raise GraphError(f"{name}: need classes >= 1, features >= 1, noise >= 0")
    n = 1 << scale
    if num_classes > n:
        raise GraphError(f"{name}: {num_classes} classes for {n} vertices")
    return n


def _rmat_meta(scale: int, edge_factor: int, a: float, b: float, c: float, seed: int) -> dict:
    return dict(generator="rmat_graph", scale=scale, edge_factor=edge_factor, a=a, b=b, c=c, seed=seed)


def _degree_buckets(deg: np.ndarray, num_classes: int) -> np.ndarray:
    """Labels = ``num_classes`` quantile buckets of the degree; rank-based, so classes stay balanced even though
    many vertices share a degree."""
    rank = np.argsort(np.argsort(deg, kind="stable"), kind="stable")
    return (rank * num_classes // deg.size).astype(np.int64)


def _rmat_vertex_rngs(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """The (features, split) generators of an R-MAT dataset."""
    rng_feat, rng_split = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, 1]).spawn(2))
    return rng_feat, rng_split


def rmat_stream(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19, c: float = 0.19,
                num_classes: int = 4, num_features: int = 16, noise: float = 1.0,
                split: tuple[float, float, float] = DEFAULT_SPLIT, seed: int = 0) -> GraphStream:
    """:func:`rmat_graph` at any scale, as a :class:`GraphStream`: once written, the same dataset (edges, labels,
    features, split) as :func:`rmat_graph` with the same arguments, in O(n) memory instead of O(E)."""
    name = f"rmat_stream(scale={scale}, seed={seed})"
    if not 0 <= scale <= 40:
        raise GraphError(f"{name}: scale must be in [0, 40]")
    n = _check_rmat(name, scale, num_classes, num_features, noise)

    def edges(chunk_size: int) -> Iterator[np.ndarray]:
        for e in rmat_edges(scale, edge_factor, a, b, c, seed=seed, chunk_size=chunk_size):
            yield e[:, e[0] != e[1]]

    def vertex_data(in_degree: np.ndarray):
        y = _degree_buckets(in_degree, num_classes)
        rng_split = _rmat_vertex_rngs(seed)[1]
        masks = _random_split(n, split, rng_split)
        return y, masks, lambda rows: _centroid_feature_chunks(y, num_classes, num_features, noise,
                                                               _rmat_vertex_rngs(seed)[0], rows)

    meta = _rmat_meta(scale, edge_factor, a, b, c, seed)
    return GraphStream(name, n, num_features, num_classes, edge_factor << scale, edges, vertex_data, meta)


# ----------------------------------------------------------------------------------------------------------------------
# built-in real datasets


def karate_graph(seed: int = 0) -> Graph:
    """Zachary's karate club (networkx): 34 vertices, 78 undirected edges, 2 classes.

    Labels are networkx's ``club`` attribute (0 = "Mr. Hi", 1 = "Officer"), the observed split of the club — not
    PyG's 4-class modularity labels. Features are the identity (one-hot ids), as PyG's ``KarateClub``. The split is
    stratified 50/25/25 with ``seed``, at least one training vertex per class.
    """
    try:
        import networkx as nx
    except ImportError as exc:  # an optional dependency; say how to get it
        raise GraphError("builtin:karate: needs networkx (pip install networkx)") from exc
    g = nx.karate_club_graph()
    n = g.number_of_nodes()
    e = np.array(list(g.edges()), dtype=np.int64).T
    ei = _symmetrize(e[0], e[1], n)
    y = np.array([0 if g.nodes[v]["club"] == "Mr. Hi" else 1 for v in range(n)], dtype=np.int64)
    masks = _random_split(n, DEFAULT_SPLIT, np.random.default_rng(seed), y=y)
    return Graph(n, ei, np.eye(n, dtype=np.float32), y, masks, num_classes=2, name="builtin:karate",
                 meta=dict(generator="karate", seed=seed)).validate()


def digits_graph(k: int = 10, seed: int = 0) -> Graph:
    """scikit-learn's handwritten digits as a k-nearest-neighbour graph: 1797 vertices, 64 features, 10 classes.

    Features are the 8x8 pixel values scaled to ``[0, 1]`` (divided by 16); an undirected edge joins ``u`` and ``v``
    when either is among the other's ``k`` nearest neighbours (Euclidean, on the scaled pixels). The split is
    stratified 50/25/25 with ``seed``.

    Args:
        k: neighbours per vertex before symmetrisation (default 10).
        seed: split seed.
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.neighbors import NearestNeighbors
    except ImportError as exc:
        raise GraphError("builtin:digits: needs scikit-learn (pip install scikit-learn)") from exc
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    n = x.shape[0]
    if not 1 <= k < n:
        raise GraphError(f"builtin:digits:k={k}: k must be in [1, {n - 1}]")
    # k + 1 because each point is its own nearest neighbour; _symmetrize drops that self loop.
    _, nbr = NearestNeighbors(n_neighbors=k + 1).fit(x).kneighbors(x)
    src = np.repeat(np.arange(n, dtype=np.int64), k + 1)
    ei = _symmetrize(src, nbr.reshape(-1).astype(np.int64), n)
    masks = _random_split(n, DEFAULT_SPLIT, np.random.default_rng(seed), y=y)
    name = "builtin:digits" if k == 10 else f"builtin:digits:k={k}"
    meta = dict(generator="digits", k=k, seed=seed)
    return Graph(n, ei, x, y, masks, num_classes=10, name=name, meta=meta).validate()


# ----------------------------------------------------------------------------------------------------------------------
# spec strings


def _pos_int(spec: str, key: str, value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        v = 0
    if v < 1:
        raise GraphError(f"{spec}: {key} must be a positive integer, got {value!r}")
    return v


def _nonneg_int(spec: str, key: str, value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        v = -1
    if v < 0:
        raise GraphError(f"{spec}: {key} must be a non-negative integer, got {value!r}")
    return v


def _float_in(lo: float, hi: float, lo_open: bool = False) -> Callable[[str, str, str], float]:
    def parse(spec: str, key: str, value: str) -> float:
        try:
            v = float(value)
        except ValueError:
            v = float("nan")
        ok = (v > lo if lo_open else v >= lo) and v <= hi  # NaN fails every comparison
        if not ok:
            rng = f"{'(' if lo_open else '['}{lo}, {hi}]"
            raise GraphError(f"{spec}: {key} must be a number in {rng}, got {value!r}")
        return v
    return parse


_Parser = Callable[[str, str, str], object]

# spec key -> (keyword argument, parser)
_SYNTHETIC_KEYS: dict[str, tuple[str, _Parser]] = {
    "n": ("num_nodes", _pos_int),
    "classes": ("num_classes", _pos_int),
    "features": ("num_features", _pos_int),
    "degree": ("avg_degree", _float_in(0.0, float("inf"), lo_open=True)),
    "seed": ("seed", _nonneg_int),
    "p_in": ("p_in", _float_in(0.0, 1.0)),
    "noise": ("noise", _float_in(0.0, float("inf"))),
    "exponent": ("degree_exponent", _float_in(2.0, float("inf"), lo_open=True)),
}
_RMAT_KEYS: dict[str, tuple[str, _Parser]] = {
    "scale": ("scale", _pos_int),
    "edge_factor": ("edge_factor", _pos_int),
    "seed": ("seed", _nonneg_int),
    "classes": ("num_classes", _pos_int),
    "features": ("num_features", _pos_int),
    "noise": ("noise", _float_in(0.0, float("inf"))),
    "a": ("a", _float_in(0.0, 1.0)),
    "b": ("b", _float_in(0.0, 1.0)),
    "c": ("c", _float_in(0.0, 1.0)),
}
_DIGITS_KEYS: dict[str, tuple[str, _Parser]] = {"k": ("k", _pos_int), "seed": ("seed", _nonneg_int)}
_KARATE_KEYS: dict[str, tuple[str, _Parser]] = {"seed": ("seed", _nonneg_int)}

# The one list of dataset specs that need no file: their first words, and the full forms an error lists.
BUILTINS = ("karate", "digits")
GENERATED_PREFIXES = ("synthetic", "rmat", "builtin")
SPEC_PREFIXES = ("synthetic", "rmat") + tuple(f"builtin:{name}" for name in BUILTINS)


def is_generated(spec: str) -> bool:
    """Whether ``spec`` names a generated or built-in dataset (``synthetic...``, ``rmat...``, ``builtin:...``)."""
    return spec.strip().split(":", 1)[0] in GENERATED_PREFIXES



def _options(spec: str, text: str, keys: dict[str, tuple[str, _Parser]]) -> dict[str, object]:
    """``"k1=v1,k2=v2"`` -> keyword arguments, each value parsed and checked; errors name the spec and the key."""
    out: dict[str, object] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key not in keys:
            raise GraphError(f"{spec}: unknown key '{key}' (known: {', '.join(keys)})")
        if not eq or not value:
            raise GraphError(f"{spec}: {key} needs a value, as in {key}=...")
        kwarg, parse = keys[key]
        if kwarg in out:
            raise GraphError(f"{spec}: {key} is given twice")
        out[kwarg] = parse(spec, key, value)
    return out


def _synthetic_options(spec: str, rest: str) -> dict[str, object]:
    kw = _options(spec, rest, _SYNTHETIC_KEYS)
    if kw.get("num_classes", DEFAULT_CLASSES) > kw.get("num_nodes", DEFAULT_NODES):
        raise GraphError(f"{spec}: classes must not exceed n")
    if kw.get("num_nodes", DEFAULT_NODES) < 2:
        raise GraphError(f"{spec}: n must be at least 2")
    return kw


def _rmat_options(spec: str, rest: str, max_scale: int) -> dict[str, object]:
    kw = _options(spec, rest, _RMAT_KEYS)
    kw.setdefault("scale", 12)
    if kw["scale"] > max_scale:
        where = "for an in-memory graph" if max_scale == 24 else ""
        raise GraphError(f"{spec}: scale must be at most {max_scale} {where}".rstrip())
    if kw.get("a", 0.57) + kw.get("b", 0.19) + kw.get("c", 0.19) > 1.0:
        raise GraphError(f"{spec}: a + b + c must be at most 1")
    if kw.get("num_classes", 4) > 1 << kw["scale"]:
        raise GraphError(f"{spec}: classes must not exceed 2^scale")
    return kw


def stream_spec(spec: str) -> GraphStream:
    """The :class:`GraphStream` of a ``synthetic:...`` or ``rmat:...`` spec (same keys as :func:`parse_spec`).

    ``rmat:`` streams :func:`rmat_graph`'s dataset exactly, at scales up to 40; ``synthetic:`` streams
    :func:`community_stream`, the same model as :func:`community_graph` with edges drawn block by block.
    """
    spec = spec.strip()
    head, _, rest = spec.partition(":")
    if head not in ("synthetic", "rmat"):
        raise GraphError(f"{spec}: only synthetic: and rmat: specs stream (builtin: datasets are small)")
    stream = (community_stream(**_synthetic_options(spec, rest)) if head == "synthetic"
              else rmat_stream(**_rmat_options(spec, rest, max_scale=40)))
    return dataclasses.replace(stream, name=spec)


def parse_spec(spec: str) -> Graph:
    """Build the dataset a spec string names; the result has passed :meth:`Graph.validate`.

    Forms (options are ``key=value`` pairs separated by commas, all optional):

    * ``synthetic[:n=,classes=,features=,degree=,seed=,p_in=,noise=,exponent=]`` — :func:`community_graph`.
    * ``rmat[:scale=,edge_factor=,seed=,classes=,features=,noise=,a=,b=,c=]`` — :func:`rmat_graph`, scale default 12.
    * ``builtin:karate[:seed=]`` — :func:`karate_graph`.
    * ``builtin:digits[:k=,seed=]`` — :func:`digits_graph`.

    Raises:
        GraphError: unknown prefix (the message lists the known ones), unknown key, or a bad value (the message names
            the spec and the key, e.g. ``"synthetic:n=abc: n must be a positive integer, got 'abc'"``).
    """
    spec = spec.strip()
    head, _, rest = spec.partition(":")
    if head == "synthetic":
        g = community_graph(**_synthetic_options(spec, rest))
    elif head == "rmat":
        g = rmat_graph(**_rmat_options(spec, rest, max_scale=24))
    elif head == "builtin":
        name, _, opts = rest.partition(":")
        if name == BUILTINS[0]:
            g = karate_graph(**_options(spec, opts, _KARATE_KEYS))
        elif name == BUILTINS[1]:
            kw = _options(spec, opts, _DIGITS_KEYS)
            if kw.get("k", 10) >= 1797:
                raise GraphError(f"{spec}: k must be below the 1797 vertices")
            g = digits_graph(**kw)
        else:
            raise GraphError(f"{spec}: unknown dataset spec (known: {', '.join(SPEC_PREFIXES)})")
    else:
        raise GraphError(f"{spec}: unknown dataset spec (known: {', '.join(SPEC_PREFIXES)})")
    g.name = spec
    return g.validate()
