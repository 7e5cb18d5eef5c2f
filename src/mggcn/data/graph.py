"""The in-memory graph dataset, in the user's ORIGINAL vertex ids.

A :class:`Graph` is what every reader and generator produces and what the partitioner consumes. Edges follow PyG's
convention: ``edge_index[0]`` is the source, ``edge_index[1]`` the target, and a vertex aggregates over its incoming
edges (``Â[target, source]`` is nonzero).

Legend: n = vertices, E = edges, F = feature dimension, C = classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mggcn.utils.errors import GraphError

__all__ = ["Graph", "SPLITS"]

SPLITS = ("train", "val", "test")


@dataclass
class Graph:
    """A node-classification dataset held in memory.

    Args:
        num_nodes: number of vertices ``n``.
        edge_index: ``int64 [2, E]`` array, row 0 source, row 1 target, ids in ``[0, n)``.
        x: ``float32 [n, F]`` features.
        y: ``int64 [n]`` labels in ``[0, C)``; ``-1`` marks an unlabeled vertex (allowed only outside the splits).
        masks: ``{"train", "val", "test"} -> bool [n]``; disjoint; train must be non-empty.
        num_classes: ``C``; inferred as ``max(y) + 1`` when not given.
        name: where the graph came from, used in error messages.
    """

    num_nodes: int
    edge_index: np.ndarray
    x: np.ndarray
    y: np.ndarray
    masks: dict[str, np.ndarray]
    num_classes: int = -1
    name: str = "graph"
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.edge_index = self._int64(self.edge_index, "vertex id")
        with np.errstate(over="ignore", invalid="ignore"):  # a value beyond float32 becomes inf: validate refuses it
            self.x = np.ascontiguousarray(self.x, dtype=np.float32)
        self.y = self._int64(self.y, "label")
        self.masks = {k: np.ascontiguousarray(v, dtype=bool) for k, v in self.masks.items()}
        if self.num_classes < 0:
            self.num_classes = int(self.y.max()) + 1 if self.y.size else 0

    def _int64(self, values: np.ndarray, what: str) -> np.ndarray:
        """``values`` as int64, refused, not wrapped or truncated: unsigned beyond int64 (2^64 - 1 would read as
        -1), floats that are not whole numbers (0.5 would read as 0), anything but numbers and booleans."""
        values = np.asarray(values)
        kind = values.dtype.kind
        if values.size and kind not in "biuf":
            raise GraphError(f"{self.name}: {what}s must be integers, got dtype {values.dtype}")
        if kind == "u" and values.size and int(values.max()) > np.iinfo(np.int64).max:
            raise GraphError(f"{self.name}: {what} {int(values.max())} is beyond the int64 range")
        if kind == "f" and values.size:
            bad = ~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) >= 2.0**63)
            if bad.any():
                raise GraphError(f"{self.name}: {what} {float(values.flat[int(np.argmax(bad))])!r} is not an integer")
        return np.ascontiguousarray(values, dtype=np.int64)

    @property
    def num_edges(self) -> int:
        """The number of directed edges (columns of ``edge_index``)."""
        return int(self.edge_index.shape[1])

    @property
    def num_features(self) -> int:
        """The number of features per vertex (columns of ``x``)."""
        return int(self.x.shape[1])

    def validate(self) -> Graph:
        """Check every invariant the trainer relies on; raise :class:`GraphError` naming ``self.name`` otherwise."""
        n, name = self.num_nodes, self.name
        if n <= 0:
            raise GraphError(f"{name}: the graph has no vertices")
        if self.edge_index.ndim != 2 or self.edge_index.shape[0] != 2:
            raise GraphError(f"{name}: edge_index must have shape [2, E], got {list(self.edge_index.shape)}")
        if self.edge_index.size:
            lo, hi = int(self.edge_index.min()), int(self.edge_index.max())
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                raise GraphError(f"{name}: edge endpoint {bad} is out of range for {n} vertices")
        if self.x.ndim != 2 or self.x.shape[0] != n:
            raise GraphError(f"{name}: the feature matrix has {self.x.shape[0] if self.x.ndim else 0} rows "
                             f"but the graph has {n} vertices")
        if self.x.shape[1] == 0:
            raise GraphError(f"{name}: the feature matrix has no column (F = 0)")
        if not np.isfinite(self.x).all():
            raise GraphError(f"{name}: the features contain NaN or inf")
        if self.y.shape != (n,):
            raise GraphError(f"{name}: {self.y.shape[0] if self.y.ndim else 0} labels for {n} vertices")
        if self.num_classes < 1:
            raise GraphError(f"{name}: no labelled vertex, so no classes")
        if self.num_classes > n:  # one stray label must not size the output layer
            raise GraphError(f"{name}: {self.num_classes} classes for {n} vertices (largest label "
                             f"{int(self.y.max()) if self.y.size else -1}): more classes than vertices is refused")
        for split in SPLITS:
            if split not in self.masks:
                raise GraphError(f"{name}: the '{split}' split is missing")
            mask = self.masks[split]
            if mask.shape != (n,):
                raise GraphError(f"{name}: the '{split}' mask has {mask.shape[0]} entries for {n} vertices")
            labels = self.y[mask]
            if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
                bad = int(labels.min()) if labels.min() < 0 else int(labels.max())
                raise GraphError(f"{name}: label {bad} of a '{split}' vertex is out of range [0, {self.num_classes})")
        labelled = self.y[self.y >= 0]
        if labelled.size and labelled.max() >= self.num_classes:
            raise GraphError(f"{name}: label {int(labelled.max())} is out of range [0, {self.num_classes})")
        if not self.masks["train"].any():
            raise GraphError(f"{name}: the training split is empty")
        for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
            both = self.masks[a] & self.masks[b]
            if both.any():
                raise GraphError(f"{name}: the '{a}' and '{b}' splits overlap (vertex {int(np.argmax(both))})")
        return self
