"""Tiny real datasets shipped inside packages (no download): ``builtin:karate`` (networkx) and ``builtin:digits``
(scikit-learn), both optional dependencies: ``pip install 'mggcn[datasets]'``."""

from __future__ import annotations

import numpy as np

from mggcn.data.generators.common import DEFAULT_SPLIT, GeneratedGraph, PairGraph, random_split
from mggcn.data.graph import Graph
from mggcn.utils.errors import GraphError
from mggcn.utils.optional import require

__all__ = ["karate_generated", "karate_graph", "digits_generated", "digits_graph", "DIGITS_NODES"]

DIGITS_NODES = 1797


def karate_generated(seed: int = 0) -> GeneratedGraph:
    """:func:`karate_graph` as a :class:`~mggcn.data.generators.common.GeneratedGraph`."""
    nx = require("networkx", "datasets", "builtin:karate")  # an optional dependency: say how to get it
    g = nx.karate_club_graph()
    n = g.number_of_nodes()
    e = np.array(list(g.edges()), dtype=np.int64).T
    y = np.array([0 if g.nodes[v]["club"] == "Mr. Hi" else 1 for v in range(n)], dtype=np.int64)
    masks = random_split(n, DEFAULT_SPLIT, np.random.default_rng(seed), y=y)
    return GeneratedGraph("builtin:karate", PairGraph.of(e[0], e[1], n), np.eye(n, dtype=np.float32), y, masks, 2,
                          dict(generator="karate", seed=seed))


def karate_graph(seed: int = 0) -> Graph:
    """Zachary's karate club (networkx): 34 vertices, 78 undirected edges, 2 classes.

    Labels are networkx's ``club`` attribute (0 = "Mr. Hi", 1 = "Officer"), the observed split of the club — not
    PyG's 4-class modularity labels. Features are the identity (one-hot ids), as PyG's ``KarateClub``. The split is
    stratified 50/25/25 with ``seed``, at least one training vertex per class.
    """
    return karate_generated(seed).to_graph()


def digits_generated(k: int = 10, seed: int = 0) -> GeneratedGraph:
    """:func:`digits_graph` as a :class:`~mggcn.data.generators.common.GeneratedGraph`."""
    load_digits = require("sklearn.datasets", "datasets", "builtin:digits").load_digits
    NearestNeighbors = require("sklearn.neighbors", "datasets", "builtin:digits").NearestNeighbors
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    n = x.shape[0]
    if not 1 <= k < n:
        raise GraphError(f"builtin:digits:k={k}: k must be in [1, {n - 1}]")
    # k + 1 because each point is its own nearest neighbour; that self loop is dropped with the pairs' duplicates.
    _, nbr = NearestNeighbors(n_neighbors=k + 1).fit(x).kneighbors(x)
    src = np.repeat(np.arange(n, dtype=np.int64), k + 1)
    masks = random_split(n, DEFAULT_SPLIT, np.random.default_rng(seed), y=y)
    name = "builtin:digits" if k == 10 else f"builtin:digits:k={k}"
    return GeneratedGraph(name, PairGraph.of(src, nbr.reshape(-1).astype(np.int64), n), x, y, masks, 10,
                          dict(generator="digits", k=k, seed=seed))


def digits_graph(k: int = 10, seed: int = 0) -> Graph:
    """scikit-learn's handwritten digits as a k-nearest-neighbour graph: 1797 vertices, 64 features, 10 classes.

    Features are the 8x8 pixel values scaled to ``[0, 1]`` (divided by 16); an undirected edge joins ``u`` and ``v``
    when either is among the other's ``k`` nearest neighbours (Euclidean, on the scaled pixels). The split is
    stratified 50/25/25 with ``seed``.

    Args:
        k: neighbours per vertex before symmetrisation (default 10).
        seed: split seed.
    """
    return digits_generated(k, seed).to_graph()
