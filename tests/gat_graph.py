"""The small graph of the GAT tests: directed, with parallel edges, self loops and isolated vertices."""

from __future__ import annotations

import numpy as np

from mggcn.data.graph import Graph

N, FEATURES, CLASSES = 23, 5, 3  # 23 vertices: not divisible by 2, 3 or 4


def gat_graph(n: int = N, seed: int = 0) -> Graph:
    """A directed graph on ``n`` vertices whose last three are isolated, with parallel edges and self loops."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n - 3, 80), rng.integers(0, n - 3, 80)
    extra = np.array([[1, 1, 1, 4, 4, 6, 6], [2, 2, 2, 4, 4, 6, 7]])  # a triple edge, a double self loop, a loop
    ei = np.concatenate([np.stack([src, dst]), extra], axis=1)
    y = rng.integers(0, CLASSES, n)
    masks = {"train": np.ones(n, dtype=bool), "val": np.zeros(n, dtype=bool), "test": np.zeros(n, dtype=bool)}
    return Graph(n, ei, rng.standard_normal((n, FEATURES)).astype(np.float32), y, masks, num_classes=CLASSES,
                 name="gat")
