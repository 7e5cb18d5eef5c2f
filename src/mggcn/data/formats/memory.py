"""Graphs from tensors in memory (torch or numpy, a PyG ``Data``), and the edge transforms (undirected, dedup)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from mggcn.data.graph import SPLITS, Graph, graph_from_pyg, split_mask

__all__ = ["from_tensors", "from_pyg", "transform"]


def _to_numpy(t: Any) -> np.ndarray:
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.asarray(t)


def from_tensors(edge_index: Any, x: Any, y: Any, train_mask: Any, val_mask: Any, test_mask: Any,
                 num_nodes: int | None = None, name: str = "tensors") -> Graph:
    """Build a validated :class:`Graph` from torch tensors or numpy arrays (``edge_index`` is ``[2, E]``; the masks
    bool, or vertex ids, as :func:`mggcn.data.graph.split_mask` reads them)."""
    x_np = _to_numpy(x)
    y_np = _to_numpy(y)
    if y_np.ndim == 2 and y_np.shape[1] == 1:
        y_np = y_np[:, 0]  # OGB-style [n, 1] labels
    if num_nodes is None:
        num_nodes = int(x_np.shape[0]) if x_np.ndim else 0
    masks = {k: split_mask(_to_numpy(m), int(num_nodes), None, f"{k}_mask", name)
             for k, m in zip(SPLITS, (train_mask, val_mask, test_mask))}
    ei = _to_numpy(edge_index)
    if ei.size == 0:
        ei = ei.reshape(2, 0)
    return Graph(int(num_nodes), ei, x_np, y_np, masks, name=name, meta={"format": "tensors"}).validate()


def from_pyg(data: Any, name: str = "pyg", split: int | None = None) -> Graph:
    """Build a :class:`Graph` from a PyG ``Data`` with ``edge_index``, ``x``, ``y`` and the three split masks, read
    as :func:`mggcn.data.graph.graph_from_pyg` reads them (``split``: the column of ``[n, k]`` masks)."""
    return graph_from_pyg(data, split, name)


def transform(graph: Graph, undirected: bool = False, dedup: bool = False) -> Graph:
    """Return a copy of ``graph`` with reverse edges added (``undirected``) and/or duplicate edges dropped.

    With both, duplicates are dropped after adding the reverse edges, so an edge stored in both directions appears
    once per direction. Deduplication sorts edges by (source, target); self-loops are kept.
    """
    ei = graph.edge_index
    if undirected:
        ei = np.concatenate([ei, ei[::-1]], axis=1)
    if dedup and ei.size:
        key = np.unique(ei[0] * np.int64(graph.num_nodes) + ei[1])
        ei = np.stack([key // graph.num_nodes, key % graph.num_nodes])
    return dataclasses.replace(graph, edge_index=ei, masks=dict(graph.masks), meta=dict(graph.meta))
