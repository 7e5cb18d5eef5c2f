"""DGL's Reddit files: ``reddit_data.npz`` (feature, label, node_types) and ``reddit_graph.npz`` (scipy COO)."""

from __future__ import annotations

from pathlib import Path

from mggcn.data.formats.checks import (
    PathLike,
    check_features,
    check_splits,
    file_error,
    load_npz,
)
from mggcn.data.formats.labels import check_labels
from mggcn.data.formats.sparse import load_sparse
from mggcn.data.graph import SPLITS, Graph

__all__ = ["read_dgl_reddit"]


def read_dgl_reddit(root: PathLike) -> Graph:
    """Read DGL's Reddit files: ``reddit_data.npz`` (feature, label, node_types) and ``reddit_graph.npz`` (COO), or
    ``reddit_self_loop_graph.npz`` (the same graph with a self loop on every vertex) where DGL's
    ``reddit_self_loop.zip`` was extracted."""
    root = Path(root)
    data_path = root / "reddit_data.npz"
    data = load_npz(data_path, ["feature", "label", "node_types"])
    n = int(data["feature"].shape[0]) if data["feature"].ndim else 0
    x = check_features(data["feature"], data_path, n, "rows of 'feature'")
    y = check_labels(data["label"], data_path, n, "rows of 'feature'", nan_is_unlabelled=False)
    types = data["node_types"].reshape(-1)
    if types.shape[0] != n:
        raise file_error(data_path, f"node_types has {types.shape[0]} entries for {n} vertices")
    graph_path = root / "reddit_graph.npz"
    if not graph_path.exists() and (root / "reddit_self_loop_graph.npz").is_file():
        graph_path = root / "reddit_self_loop_graph.npz"  # DGL's RedditDataset(self_loop=True): its zip's graph
    n_adj, edges = load_sparse(graph_path)
    if n_adj != n:
        raise file_error(graph_path, f"the adjacency matrix is {n_adj} x {n_adj} but {data_path.name} has {n} "
                                     "vertices")
    masks = {split: types == code for split, code in zip(SPLITS, (1, 2, 3))}
    check_splits(masks, y, dict.fromkeys(SPLITS, f"{data_path} (node_types)"), str(data_path))
    return Graph(n, edges, x, y, masks, name=str(root),
                 meta={"format": "dgl-reddit", "source": str(root)}).validate()
