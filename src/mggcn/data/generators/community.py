"""The degree-corrected stochastic block model (DC-SBM): the built-in ``synthetic`` graph and the bench's graphs.

Heavy-tailed degrees, labels = the community, features = a class centroid drowned in Gaussian noise: the graph
carries most of the label signal, so a 2-layer GCN clearly beats an MLP (the point of a GCN benchmark that is also a
correctness check).

Edges are drawn in blocks of :data:`COMMUNITY_BLOCK` pairs, block ``b`` from ``default_rng([seed, tag, b])``, on
every core at once. Drawing a vertex ∝ its weight is a search in the cumulative weights, answered by a table of 4n
equal slices of the total weight: where no vertex's cumulative weight ends inside the slice (three slices in four),
the table names the vertex found, in one read; elsewhere it says where to start, and a read or two of the cumulative
weights finish, instead of a binary search through an array larger than the cache. It returns what
``np.searchsorted`` would.

Legend: n = vertices, C = communities = classes, F = features, K = undirected edges.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from mggcn.data.csr import CSR, index_dtype
from mggcn.data.generators.common import (
    DEFAULT_SPLIT,
    CentroidFeatures,
    GeneratedGraph,
    GraphStream,
    PairGraph,
    random_split,
    rechunk,
)
from mggcn.data.graph import Graph
from mggcn.utils.errors import GraphError

__all__ = ["DEFAULT_NODES", "DEFAULT_CLASSES", "DEFAULT_FEATURES", "DEFAULT_DEGREE", "DEFAULT_P_IN", "DEFAULT_NOISE",
           "DEFAULT_DEGREE_EXPONENT", "COMMUNITY_BLOCK", "community_graph", "community_generated", "community_stream"]

# Defaults in one visible place; ``parse_spec("synthetic")`` uses exactly these.
# NOISE was tuned so that at the defaults (and at 3000 vertices) a 2-layer GCN beats a same-width MLP by > 25 points
# (see tests/data/test_generators.py::test_gcn_beats_mlp).
DEFAULT_NODES = 20_000
DEFAULT_CLASSES = 10
DEFAULT_FEATURES = 64
DEFAULT_DEGREE = 20.0
DEFAULT_P_IN = 0.8
DEFAULT_NOISE = 5.0
DEFAULT_DEGREE_EXPONENT = 2.5

COMMUNITY_BLOCK = 1 << 20  # undirected pairs drawn from one generator
_GUIDE_SLICES = 4  # guide-table slices per vertex
_TAG = 0xC0DE  # the edges' generators: default_rng([seed, _TAG, block])
_TOP_UP_ROUNDS = 8  # pairs drawn again for the duplicates dropped, at most this many times


@dataclass(frozen=True)
class _Communities:
    """The vertex side of the DC-SBM: communities ``y``, weights ``theta``, and what drawing ∝ theta needs.

    Vertices sorted by community (``order``) with one cumulative weight array ``cum``: drawing ∝ theta inside
    community c is a uniform draw in ``[start[c], start[c] + width[c])`` of that array, then a search, which names
    the vertex found by its id, or with ``clustered`` by its position in ``order``.
    """

    y: np.ndarray
    theta: np.ndarray
    order: np.ndarray
    cum: np.ndarray
    # table[g], slice g of GUIDE_SLICES · n equal slices of the total weight: the name of the vertex that every
    # position in the slice finds, or where no single one does, ~(how many positions have cum <= the slice's start)
    table: np.ndarray
    start: np.ndarray  # start[c] for c < 2C: community c mod C's (so that own + offset needs no modulo)
    width: np.ndarray
    p_in: float
    community: np.ndarray  # community[name]: the community of the vertex of that name
    clustered: bool = False

    @staticmethod
    def labels(n: int, C: int, rng: np.random.Generator) -> np.ndarray:
        """The communities, the first draw of the model's generator: balanced (every class has n // C or n // C + 1
        members) in random order."""
        return rng.permutation(np.arange(n, dtype=np.int64) % C)

    @staticmethod
    def draw(n: int, C: int, p_in: float, degree_exponent: float, rng: np.random.Generator,
             clustered: bool = False, y: np.ndarray | None = None) -> _Communities:
        """The model from its generator ``rng``, or from the rest of it after :meth:`labels` drew ``y``."""
        y = _Communities.labels(n, C, rng) if y is None else y
        # Pareto(alpha = gamma - 1) weights, capped so that no vertex expects more than ~n neighbours.
        theta = (1.0 - rng.random(n)) ** (-1.0 / (degree_exponent - 1.0))
        theta = np.minimum(theta, theta.mean() * np.sqrt(n))
        order = np.argsort(y.astype(np.min_scalar_type(C - 1)), kind="stable")  # a radix sort on narrow ints
        cum = np.cumsum(theta[order])
        by_position = y[order].astype(np.min_scalar_type(C))
        bounds = np.concatenate([[0.0], cum[np.searchsorted(by_position, np.arange(C), side="right") - 1]])
        names = None if clustered else order
        community = by_position if clustered else y.astype(by_position.dtype)
        start, width = np.tile(bounds[:-1], 2), np.tile(np.diff(bounds), 2)
        return _Communities(y, theta, order, cum, _table(cum, names), start, width, 1.0 if C == 1 else p_in,
                            community, clustered)

    def search(self, pos: np.ndarray) -> np.ndarray:
        """The names of ``np.minimum(np.searchsorted(cum, pos, side="right"), n - 1)`` for ``pos >= 0``: ids, or
        positions in ``order`` with ``clustered`` (int32 where ids fit)."""
        cum, slices = self.cum, self.table.size
        # the slice of each position, rounded down (never up: the scale is shrunk by far more than the rounding), so
        # that the vertices its table entry counts are all at or below the position: a start at or before the answer
        at = (pos * (slices / cum[-1] * (1 - 2**-40))).astype(np.intp)
        found = self.table[np.minimum(at, slices - 1, out=at)]
        miss = np.flatnonzero(found < 0)  # a vertex's cum inside the slice: a search from the slice's start
        if miss.size:
            found[miss] = self._step(~found[miss].astype(np.int64), pos[miss])
        return found

    def _step(self, at: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """The names of ``min(searchsorted(cum, pos, "right"), n - 1)`` from starts ``at`` at or before them."""
        cum, n = self.cum, self.cum.size
        np.minimum(at, n - 1, out=at)  # a start past the last vertex finds the last one, as a step to it would
        ahead = np.flatnonzero(cum[at] <= pos)
        while ahead.size:  # rarely more than one step: a slice holds a quarter of a vertex's mean weight
            at[ahead] += 1
            ahead = ahead[at[ahead] < n]
            ahead = ahead[cum[at[ahead]] <= pos[ahead]]
        np.minimum(at, n - 1, out=at)
        return at if self.clustered else self.order[at]

    def pairs(self, rng: np.random.Generator, want: int) -> tuple[np.ndarray, np.ndarray]:
        """``want`` raw edge draws ``(u, v)``: ``u`` ∝ theta; ``v`` ∝ theta in u's community w.p. p_in, else in
        a uniformly chosen other one. Self loops and duplicates included; vertices named as :meth:`search` does."""
        C = self.start.size // 2
        pos = rng.random(want)
        pos *= self.cum[-1]
        u = self.search(pos)
        outside = rng.random(want) >= self.p_in
        # own + 0 inside, own + a uniform 1 .. C - 1 outside: start and width repeat every C communities
        comm = rng.integers(1, max(C, 2), size=want)
        comm *= outside
        comm += self.community[u]
        del outside
        rng.random(want, out=pos)
        pos *= self.width[comm]
        pos += self.start[comm]
        return u, self.search(pos)

    def block(self, seed: int, block: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        return self.pairs(np.random.default_rng([seed, _TAG, block]), count)


def _table(cum: np.ndarray, names: np.ndarray | None) -> np.ndarray:
    """:attr:`_Communities.table` of the cumulative weights ``cum``: the vertices named by ``names[position]``, or by
    their position without ``names``."""
    n, dtype = cum.size, index_dtype(cum.size)
    slices = _GUIDE_SLICES * n
    step = cum[-1] / slices  # slice g starts at bounds[g] = g · step
    first = _bounds_below(cum, step, slices)  # vertex k's cum lies in slice first[k] - 1
    # guide[g]: how many vertices have cum <= bounds[g], the vertex that every position of the slice finds where the
    # slice holds no vertex's cum: a run of first[k] - first[k - 1] slices per vertex
    counts = np.diff(np.minimum(first, slices), prepend=0, append=slices)
    guide = np.repeat(np.arange(n + 1, dtype=dtype), counts)
    found = np.arange(n, dtype=dtype) if names is None else names.astype(dtype)
    table = np.repeat(np.append(found, found[-1:]), counts)
    del found, counts
    # Every position of slice g that search() puts there lies below bounds[g + 1] but for rounding (far below the
    # margin): slices g where a vertex's cum lies in (bounds[g], bounds[g + 1] · (1 + margin)] search. The last slice
    # also takes the positions past the total, so it always searches.
    near = _bounds_below(cum, step, slices, 1 + 2**-30)
    for back in range(int((first - near).max(initial=0)) + 1):
        g = first - 1 - back
        g = g[(g >= near - 1) & (g >= 0) & (g < slices)]
        table[g] = ~guide[g]
    table[-1] = ~guide[-1]
    return table


def _bounds_below(values: np.ndarray, step: float, slices: int, scale: float = 1.0) -> np.ndarray:
    """For each value, how many ``g`` in ``[0, slices]`` have ``(g · step) · scale < value`` (each product rounded
    as numpy rounds it): ``np.searchsorted(np.arange(slices + 1) * step * scale, values)``, without the bounds."""
    at = np.minimum(np.ceil(values / (step * scale)), slices + 1)  # off by a step at most, from the rounding
    while (back := (at > 0) & ((at - 1) * step * scale >= values)).any():
        at -= back
    while (ahead := (at <= slices) & (at * step * scale < values)).any():
        at += ahead
    return at.astype(np.int64)


def _check(name: str, num_nodes: int, num_classes: int, num_features: int, avg_degree: float,
           p_in: float, noise: float, degree_exponent: float) -> None:
    if num_nodes < 2 or num_classes < 1 or num_features < 1 or avg_degree <= 0:
        raise GraphError(f"{name}: need n >= 2, classes >= 1, features >= 1, avg_degree > 0")
    if num_classes > num_nodes:
        raise GraphError(f"{name}: {num_classes} classes for {num_nodes} vertices")
    if not 0.0 <= p_in <= 1.0 or noise < 0 or degree_exponent <= 2.0:
        raise GraphError(f"{name}: need 0 <= p_in <= 1, noise >= 0, degree_exponent > 2")


def _target(n: int, avg_degree: float) -> int:
    """Undirected edges for a mean degree of ``avg_degree``, at most every pair once."""
    return min(int(round(avg_degree * n / 2)), n * (n - 1) // 2)


def _blocks(first: int, pairs: int) -> dict[int, int]:
    """Block ids from ``first`` on and their pair counts, ``pairs`` in all."""
    return {first + i: min(COMMUNITY_BLOCK, pairs - begin) for i, begin in enumerate(range(0, pairs, COMMUNITY_BLOCK))}


def _model(n: int, C: int, p_in: float, degree_exponent: float, seed: int, clustered: bool = False):
    seeds = np.random.SeedSequence(seed).spawn(4)  # labels and weights, (unused), features, split
    return _Communities.draw(n, C, p_in, degree_exponent, np.random.default_rng(seeds[0]), clustered), seeds


def _edges(model: _Communities, n: int, target: int, seed: int, clustered: bool) -> CSR:
    """The CSR of ``target`` distinct pairs of the model's draws (fewer where the graph cannot hold them)."""
    graph, want, next_block = PairGraph(n), target, 0
    # Self loops and duplicates (frequent at hubs) are dropped, so pairs are drawn again until the count is met
    # (the last round's new pairs beyond it dropped by a hash order, so the mean degree is met exactly); the rounds
    # are capped so that a tiny dense request cannot loop forever.
    for _ in range(_TOP_UP_ROUNDS):
        blocks = _blocks(next_block, want)
        before = graph.num_pairs
        graph.add(blocks, lambda b, blocks=blocks: model.block(seed, b, blocks[b]), limit=target,
                  names=model.order if clustered else None)
        next_block += len(blocks)
        gained = graph.num_pairs - before
        if graph.num_pairs >= target or gained == 0:
            break
        want = int((target - graph.num_pairs) * want / gained * 1.02) + 16
    return graph.csr()


def community_generated(num_nodes: int = DEFAULT_NODES, num_classes: int = DEFAULT_CLASSES,
                        num_features: int = DEFAULT_FEATURES, avg_degree: float = DEFAULT_DEGREE,
                        p_in: float = DEFAULT_P_IN, noise: float = DEFAULT_NOISE,
                        degree_exponent: float = DEFAULT_DEGREE_EXPONENT,
                        split: tuple[float, float, float] = DEFAULT_SPLIT, seed: int = 0,
                        clustered: bool = False) -> GeneratedGraph:
    """:func:`community_graph` as a :class:`~mggcn.data.generators.common.GeneratedGraph` (its CSR, no edge list).

    ``clustered``: the vertices numbered community by community (by id within one), as crawled and real datasets
    often come with locality in their ids: the same edges and labels relabelled; the features and the split are
    drawn in that order (the same distribution, other draws)."""
    name = f"community_graph(n={num_nodes}, seed={seed})"
    _check(name, num_nodes, num_classes, num_features, avg_degree, p_in, noise, degree_exponent)
    n, C = num_nodes, num_classes
    seeds = np.random.SeedSequence(seed).spawn(4)  # as _model's
    rng = np.random.default_rng(seeds[0])
    y = _Communities.labels(n, C, rng)
    labels = y[np.argsort(y, kind="stable")] if clustered else y
    # the features need only the labels: drawn while the rest of the model, the split and the edges are made
    with CentroidFeatures(labels, C, num_features, noise, seeds[2]).aside() as features:
        model = _Communities.draw(n, C, p_in, degree_exponent, rng, clustered, y)
        masks = random_split(n, split, np.random.default_rng(seeds[3]))
        csr = _edges(model, n, _target(n, avg_degree), seed, clustered)
        x = features()
    meta = dict(generator="community_graph", p_in=model.p_in, noise=noise, degree_exponent=degree_exponent,
                avg_degree=avg_degree, seed=seed, clustered=clustered)
    return GeneratedGraph(name + (", clustered ids" if clustered else ""), csr, x, labels, masks, C, meta)


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
        avg_degree: the mean undirected degree, i.e. ``E / n`` after symmetrisation (default 20): met exactly
            (pairs drawn again for the self loops and duplicates dropped, then a random subset kept), unless the
            graph is too small to hold that many distinct edges.
        p_in: fraction of edges inside a community (default 0.8); forced to 1 when ``C == 1``.
        noise: standard deviation of the feature noise relative to the unit-variance centroids (default 5.0).
        degree_exponent: power-law exponent ``gamma > 2`` of the degree distribution (default 2.5).
        split: train/val/test fractions of a random split (default 0.5/0.25/0.25).
        seed: every draw derives from it; same seed, same arrays, whatever the thread count.

    Returns:
        A validated :class:`Graph` with ``edge_index`` symmetric, without self loops or duplicates.
    """
    return community_generated(num_nodes, num_classes, num_features, avg_degree, p_in, noise, degree_exponent,
                               split, seed).to_graph()


def community_stream(num_nodes: int = DEFAULT_NODES, num_classes: int = DEFAULT_CLASSES,
                     num_features: int = DEFAULT_FEATURES, avg_degree: float = DEFAULT_DEGREE,
                     p_in: float = DEFAULT_P_IN, noise: float = DEFAULT_NOISE,
                     degree_exponent: float = DEFAULT_DEGREE_EXPONENT,
                     split: tuple[float, float, float] = DEFAULT_SPLIT, seed: int = 0) -> GraphStream:
    """The DC-SBM of :func:`community_graph` at any size, as a :class:`GraphStream`.

    Memory is O(n) (the communities, weights and their cumulative sums), never O(E). The vertex data (labels,
    features, split) equal :func:`community_graph`'s for the same arguments, and the edges are its first round of
    draws: the ``round(avg_degree * n / 2)`` pairs, self loops dropped and duplicates merged, without drawing again,
    so the mean degree lands slightly below ``avg_degree`` (by the fraction of repeated pairs, which hubs make more
    frequent).
    """
    name = f"community_stream(n={num_nodes}, seed={seed})"
    _check(name, num_nodes, num_classes, num_features, avg_degree, p_in, noise, degree_exponent)
    n, C = num_nodes, num_classes
    model, seeds = _model(n, C, p_in, degree_exponent, seed)
    blocks = _blocks(0, _target(n, avg_degree))

    def pairs() -> Iterator[np.ndarray]:
        for block, count in blocks.items():
            u, v = model.block(seed, block, count)
            keep = u != v
            yield np.stack([u[keep], v[keep]]).astype(np.int64, copy=False)

    def vertex_data(in_degree: np.ndarray):
        masks = random_split(n, split, np.random.default_rng(seeds[3]))
        return model.y, masks, CentroidFeatures(model.y, C, num_features, noise, seeds[2]).chunks

    meta = dict(generator="community_stream", p_in=model.p_in, noise=noise, degree_exponent=degree_exponent,
                avg_degree=avg_degree, seed=seed)
    return GraphStream(name, n, num_features, C, _target(n, avg_degree),
                       lambda chunk: rechunk(pairs(), chunk), vertex_data, meta)
