"""Graphs from tensors in memory (torch or numpy, a PyG ``Data``), and the edge transforms (undirected, dedup)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from mggcn.data.csr import distinct_keys
from mggcn.data.graph import SPLITS, Graph, graph_from_arrays, graph_from_pyg, tensor_array

__all__ = ["from_tensors", "from_pyg", "transform"]


def from_tensors(edge_index: Any, x: Any, y: Any, train_mask: Any, val_mask: Any, test_mask: Any,
                 num_nodes: int | None = None, name: str = "tensors") -> Graph:
    """Build a validated :class:`Graph` from torch tensors or numpy arrays (``edge_index`` is ``[2, E]``), read as
    :func:`mggcn.data.graph.graph_from_arrays` reads them (the masks bool, or vertex ids)."""
    fields = {"edge_index": edge_index, "x": x, "y": y, "train_mask": train_mask, "val_mask": val_mask,
              "test_mask": test_mask}
    arrays = {k: tensor_array(v, k, name) for k, v in fields.items()}
    if num_nodes is None:
        num_nodes = int(arrays["x"].shape[0]) if arrays["x"].ndim else 0
    masks = {s: arrays[f"{s}_mask"] for s in SPLITS}
    return graph_from_arrays(int(num_nodes), arrays["edge_index"], arrays["x"], arrays["y"], masks, name, "tensors")


def from_pyg(data: Any, name: str = "pyg", split: int | None = None) -> Graph:
    """Build a :class:`Graph` from a PyG ``Data`` with ``edge_index``, ``x``, ``y`` and the three split masks, read
    as :func:`mggcn.data.graph.graph_from_pyg` reads them (``split``: the column of ``[n, k]`` masks)."""
    return graph_from_pyg(data, split, name)


def transform(graph: Graph, undirected: bool = False, dedup: bool = False) -> Graph:
    """Return a copy of ``graph`` made undirected (``undirected``: every edge in both directions, once each, as PyG's
    ``to_undirected`` makes it) and/or with duplicate edges dropped (``dedup``).

    ``undirected`` drops duplicates too: an edge the input holds in both directions, or twice, would otherwise count
    twice in Â. Deduplication sorts edges by (source, target); self-loops are kept.
    """
    ei = graph.edge_index
    if undirected:
        ei = undirected_edges(ei, graph.num_nodes)
    elif dedup:
        ei = distinct_edges(ei, graph.num_nodes)
    return dataclasses.replace(graph, edge_index=ei, masks=dict(graph.masks), meta=dict(graph.meta))


def distinct_edges(ei: np.ndarray, n: int) -> np.ndarray:
    """``[2, E]`` edges over ``n`` vertices once each, sorted by (source, target)."""
    if not ei.size:
        return ei
    key = distinct_keys(ei[0], ei[1], n)
    return np.stack([key // n, key % n])


def undirected_edges(ei: np.ndarray, n: int) -> np.ndarray:
    """Every edge of ``ei`` in both directions, once each, sorted: PyG's ``to_undirected``."""
    return distinct_edges(np.concatenate([ei, ei[::-1]], axis=1), n)
