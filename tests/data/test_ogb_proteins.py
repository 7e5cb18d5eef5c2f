"""ogbn-proteins as OGB lays it out: multi-label (112 columns of 0/1 in ``node-label.csv.gz``), split by species,
edges stored once (OGB's loader adds the reverse), and no vertex features but eight per edge
(``edge-feat.csv.gz``): a vertex's features are the mean of its edges', as OGB's example for the dataset computes
them (``adj_t.mean(dim=1)`` once the reverse edges are in)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_formats import gz_lines, raises_naming, write_ogb_csv
from torch_geometric.utils import scatter

from mggcn.data.formats import read_ogb
from mggcn.data.graph import Graph
from mggcn.data.prepared.reader import PreparedDataset
from mggcn.data.prepared.writer import prepare
from reference import random_graph


def write_ogb_proteins(root: Path, g: Graph, labels: np.ndarray, edge_feat: np.ndarray) -> Path:
    """``g``'s edges and split in OGB's CSV layout (split ``species``), ``labels`` [n, C] of 0/1 as its node
    labels, ``edge_feat`` [E, F] as its edge features, and no ``node-feat.csv.gz``."""
    write_ogb_csv(root, g, "species")
    (root / "raw" / "node-feat.csv.gz").unlink()
    gz_lines(root / "raw" / "node-label.csv.gz", [",".join(str(int(v)) for v in row) for row in labels])
    gz_lines(root / "raw" / "edge-feat.csv.gz", [",".join(f"{v:.9g}" for v in row) for row in edge_feat])
    return root


def proteins_like(n: int = 37, e: int = 160, labels: int = 6, features: int = 8, seed: int = 0):
    """A graph with a vertex of no edge (its features: 0), multi-label labels and edge features."""
    g = random_graph(n, e, features=3, classes=3, seed=seed)
    keep = (g.edge_index != n - 1).all(axis=0)  # vertex n - 1 has no edge
    g = Graph(n, g.edge_index[:, keep], g.x, g.y, g.masks, name="proteins-like").validate()
    rng = np.random.default_rng(seed)
    y = (rng.random((n, labels)) < 0.3).astype(np.uint8)
    y[0, :2] = 1  # two labels on one vertex: multi-label, not one-hot
    return g, y, rng.standard_normal((g.num_edges, features)).astype(np.float32)


def test_vertex_features_are_the_mean_of_their_edges_as_ogbs_example(tmp_path):
    """The features equal OGB's example's: the reverse of every edge added (with its features), then each vertex's
    mean over its in-edges (PyG's scatter mean, float32; mggcn sums in float64: a few ulps)."""
    g, y, attr = proteins_like()
    data = read_ogb(write_ogb_proteins(tmp_path / "ogbn_proteins", g, y, attr))
    ei = torch.from_numpy(g.edge_index)
    both = torch.cat([ei, ei.flip(0)], dim=1)
    want = scatter(torch.from_numpy(np.concatenate([attr, attr])), both[1], dim=0, dim_size=g.num_nodes,
                   reduce="mean")
    torch.testing.assert_close(torch.from_numpy(data.x), want, rtol=1e-5, atol=1e-6)
    assert not data.x[-1].any()  # no edge: zeros
    assert data.multilabel and data.num_classes == y.shape[1]
    np.testing.assert_array_equal(data.y, y)
    np.testing.assert_array_equal(data.edge_index, g.edge_index)  # kept as stored
    ds = PreparedDataset(prepare(tmp_path / "ogbn_proteins", tmp_path / "p", fmt="ogb", undirected=True,
                                 progress=False))
    pairs = {tuple(e) for e in g.edge_index.T.tolist()}  # undirected as PyG's to_undirected: each pair once a way
    assert ds.num_features == attr.shape[1] and ds.multilabel
    assert ds.num_edges == len(pairs | {(b, a) for a, b in pairs})


def test_node_features_win_over_edge_features(tmp_path):
    g, y, attr = proteins_like()
    root = write_ogb_proteins(tmp_path / "o", g, y, attr)
    gz_lines(root / "raw" / "node-feat.csv.gz", [",".join(f"{v:.9g}" for v in row) for row in g.x])
    np.testing.assert_array_equal(read_ogb(root).x, g.x)


@pytest.mark.parametrize("damage, words", [
    (lambda attr: attr[:-1], "edge features of shape"),
    (lambda attr: np.where(np.arange(attr.size).reshape(attr.shape) == 9, np.nan, attr), "NaN or inf"),
])
def test_bad_edge_features_are_one_line_naming_the_file(tmp_path, damage, words):
    g, y, attr = proteins_like()
    root = write_ogb_proteins(tmp_path / "o", g, y, damage(attr))
    with raises_naming(root / "raw" / "edge-feat.csv.gz", words):
        read_ogb(root)


def test_without_vertex_or_edge_features_the_vertex_file_is_named(tmp_path):
    g, y, attr = proteins_like()
    root = write_ogb_proteins(tmp_path / "o", g, y, attr)
    (root / "raw" / "edge-feat.csv.gz").unlink()
    with raises_naming(root / "raw" / "node-feat.csv.gz"):
        read_ogb(root)


def test_a_vertex_count_beyond_memory_is_one_line_before_any_array(tmp_path):
    """The mean of the edge features makes arrays of n rows: a crafted count is refused, naming its file, before
    they are allocated (numpy's MemoryError, or the kernel's out-of-memory kill for a count near the memory)."""
    g, y, attr = proteins_like()
    root = write_ogb_proteins(tmp_path / "o", g, y, attr)
    gz_lines(root / "raw" / "num-node-list.csv.gz", ["100000000000000"])
    with raises_naming(root / "raw" / "num-node-list.csv.gz", "100,000,000,000,000 vertices"):
        read_ogb(root)
