"""The degree-corrected stochastic block model (DC-SBM): the built-in ``synthetic`` graph and the bench's graphs.

Heavy-tailed degrees, labels = the community, features = a class centroid drowned in Gaussian noise: the graph
carries most of the label signal, so a 2-layer GCN clearly beats an MLP (the point of a GCN benchmark that is also a
correctness check).

Edges are drawn in blocks of :data:`COMMUNITY_BLOCK` pairs, block ``b`` from ``default_rng([seed, tag, b])``, on
every core at once. Drawing a vertex ∝ its weight is a search in the cumulative weights, started from a guide table
(how many vertices' cumulative weight lies at or below each of 4n equal slices of the total weight), so it costs two
reads and rarely a step instead of a binary search through an array larger than the cache; it returns what
``np.searchsorted`` would.

Legend: n = vertices, C = communities = classes, F = features, K = undirected edges.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from mggcn.data.csr import index_dtype
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
    community c is a uniform draw in ``[start[c], start[c] + width[c])`` of that array, then a search.
    """

    y: np.ndarray
    theta: np.ndarray
    order: np.ndarray
    cum: np.ndarray
    guide: np.ndarray  # guide[g]: how many positions have cum <= g · total / (GUIDE_SLICES · n)
    start: np.ndarray
    width: np.ndarray
    p_in: float
    community: np.ndarray  # community[i]: the community of the vertex at position i of order (y[order])

    @staticmethod
    def draw(n: int, C: int, p_in: float, degree_exponent: float, rng: np.random.Generator) -> _Communities:
        # Balanced communities in random order: every class has n // C or n // C + 1 members.
        y = rng.permutation(np.arange(n, dtype=np.int64) % C)
        # Pareto(alpha = gamma - 1) weights, capped so that no vertex expects more than ~n neighbours.
        theta = (1.0 - rng.random(n)) ** (-1.0 / (degree_exponent - 1.0))
        theta = np.minimum(theta, theta.mean() * np.sqrt(n))
        order = np.argsort(y, kind="stable")
        cum = np.cumsum(theta[order])
        # what np.searchsorted(cum, bounds, side="right") gives, from one search per vertex instead of per slice
        slices = _GUIDE_SLICES * n
        bounds = np.arange(slices + 1) * (cum[-1] / slices)
        first = np.searchsorted(bounds, cum, side="left")  # the first slice bound at or past each vertex's cum
        guide = np.cumsum(np.bincount(first, minlength=slices + 2)[:slices + 1]).astype(index_dtype(n))
        bounds = np.concatenate([[0.0], cum[np.searchsorted(y[order], np.arange(C), side="right") - 1]])
        community = y[order].astype(np.min_scalar_type(C))
        return _Communities(y, theta, order, cum, guide, bounds[:-1], np.diff(bounds), 1.0 if C == 1 else p_in,
                            community)

    def search(self, pos: np.ndarray) -> np.ndarray:
        """``np.minimum(np.searchsorted(cum, pos, side="right"), n - 1)`` for ``pos >= 0``, from the guide table."""
        cum, n, slices = self.cum, self.cum.size, self.guide.size - 1
        # the slice of each position, rounded down (never up: the scale is shrunk by far more than the rounding), so
        # that its guide entry counts only vertices at or below the position: a start at or before the answer
        at = self.guide[np.minimum((pos * (slices / cum[-1] * (1 - 2**-40))).astype(np.intp), slices - 1)]
        ahead = np.flatnonzero(cum[np.minimum(at, n - 1)] <= pos)
        ahead = ahead[at[ahead] < n]
        while ahead.size:  # rarely more than one step: a slice holds a quarter of a vertex's mean weight
            at[ahead] += 1
            ahead = ahead[at[ahead] < n]
            ahead = ahead[cum[at[ahead]] <= pos[ahead]]
        return np.minimum(at, n - 1).astype(np.int64, copy=False)

    def pairs(self, rng: np.random.Generator, want: int, clustered: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``want`` raw edge draws ``(u, v)``: ``u`` ∝ theta; ``v`` ∝ theta in u's community w.p. p_in, else in
        a uniformly chosen other one. Self loops and duplicates included. ``clustered``: vertices named by their
        position in ``order`` (community by community) instead of their id."""
        C = self.start.size
        u = self.search(rng.random(want) * self.cum[-1])  # positions in order
        own = self.community[u].astype(np.int64)
        inside = rng.random(want) < self.p_in
        other = (own + rng.integers(1, max(C, 2), size=want)) % C  # a uniformly chosen different community
        comm = np.where(inside, own, other)
        v = self.search(self.start[comm] + rng.random(comm.size) * self.width[comm])
        return (u, v) if clustered else (self.order[u], self.order[v])

    def block(self, seed: int, block: int, count: int, clustered: bool = False) -> tuple[np.ndarray, np.ndarray]:
        return self.pairs(np.random.default_rng([seed, _TAG, block]), count, clustered)


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


def _model(n: int, C: int, p_in: float, degree_exponent: float, seed: int):
    seeds = np.random.SeedSequence(seed).spawn(4)  # labels and weights, (unused), features, split
    return _Communities.draw(n, C, p_in, degree_exponent, np.random.default_rng(seeds[0])), seeds


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
    model, seeds = _model(n, C, p_in, degree_exponent, seed)
    target = _target(n, avg_degree)
    graph, want, next_block = PairGraph(n), target, 0
    # Self loops and duplicates (frequent at hubs) are dropped, so pairs are drawn again until the count is met
    # (the last round's new pairs beyond it dropped by a hash order, so the mean degree is met exactly); the rounds
    # are capped so that a tiny dense request cannot loop forever.
    for _ in range(_TOP_UP_ROUNDS):
        blocks = _blocks(next_block, want)
        before = graph.num_pairs
        graph.add(blocks, lambda b, blocks=blocks: model.block(seed, b, blocks[b], clustered), limit=target,
                  names=model.order if clustered else None)
        next_block += len(blocks)
        gained = graph.num_pairs - before
        if graph.num_pairs >= target or gained == 0:
            break
        want = int((target - graph.num_pairs) * want / gained * 1.02) + 16
    y = model.y[model.order] if clustered else model.y
    x = CentroidFeatures(y, C, num_features, noise, seeds[2]).all()
    masks = random_split(n, split, np.random.default_rng(seeds[3]))
    meta = dict(generator="community_graph", p_in=model.p_in, noise=noise, degree_exponent=degree_exponent,
                avg_degree=avg_degree, seed=seed, clustered=clustered)
    return GeneratedGraph(name + (", clustered ids" if clustered else ""), graph.csr(), x, y, masks, C, meta)


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
            yield np.stack([u[keep], v[keep]])

    def vertex_data(in_degree: np.ndarray):
        masks = random_split(n, split, np.random.default_rng(seeds[3]))
        return model.y, masks, CentroidFeatures(model.y, C, num_features, noise, seeds[2]).chunks

    meta = dict(generator="community_stream", p_in=model.p_in, noise=noise, degree_exponent=degree_exponent,
                avg_degree=avg_degree, seed=seed)
    return GraphStream(name, n, num_features, C, _target(n, avg_degree),
                       lambda chunk: rechunk(pairs(), chunk), vertex_data, meta)
