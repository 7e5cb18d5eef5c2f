"""Tests for mggcn.data.synthetic: the DC-SBM, R-MAT, the built-in datasets and the spec parser."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mggcn.data.graph import Graph, GraphError
from mggcn.data.synthetic import (
    RMAT_BLOCK,
    SPEC_PREFIXES,
    community_graph,
    digits_graph,
    karate_graph,
    parse_spec,
    rmat_edges,
    rmat_graph,
)

torch.set_num_threads(2)


def _degrees(g: Graph) -> np.ndarray:
    return np.bincount(g.edge_index[1], minlength=g.num_nodes)


def _assert_undirected_simple(g: Graph) -> None:
    src, dst = g.edge_index
    assert not (src == dst).any(), "self loop"
    fwd = np.unique(src * g.num_nodes + dst)
    assert fwd.size == g.num_edges, "duplicate edge"
    assert np.array_equal(fwd, np.unique(dst * g.num_nodes + src)), "an edge without its reverse"


def _same(g: Graph, h: Graph) -> bool:
    return (np.array_equal(g.edge_index, h.edge_index) and np.array_equal(g.x, h.x) and np.array_equal(g.y, h.y)
            and all(np.array_equal(g.masks[k], h.masks[k]) for k in g.masks))


# ---------------------------------------------------------------------------------------------------------------------
# community_graph


@pytest.fixture(scope="module")
def sbm() -> Graph:
    return community_graph(num_nodes=5000, num_classes=5, num_features=16, avg_degree=12, p_in=0.7, seed=1)


def test_community_deterministic():
    a, b = community_graph(num_nodes=2000, seed=4), community_graph(num_nodes=2000, seed=4)
    assert _same(a, b)
    c = community_graph(num_nodes=2000, seed=5)
    assert not np.array_equal(a.edge_index, c.edge_index)
    assert not np.array_equal(a.x, c.x)
    assert not np.array_equal(a.y, c.y)


def test_community_sizes_and_degree(sbm):
    g = sbm
    assert (g.num_nodes, g.num_features, g.num_classes) == (5000, 16, 5)
    assert g.x.dtype == np.float32 and g.y.dtype == np.int64 and g.edge_index.dtype == np.int64
    deg = _degrees(g)
    # The generator tops up dropped duplicates until the undirected edge count is met exactly.
    assert deg.mean() == pytest.approx(12, rel=0.01)
    assert np.bincount(g.y).min() == np.bincount(g.y).max() == 1000  # balanced communities
    _assert_undirected_simple(g)
    g.validate()


def test_community_degrees_are_skewed(sbm):
    deg = _degrees(sbm)
    # Power-law weights (gamma = 2.5): hubs with many times the mean degree, and a long upper tail.
    assert deg.max() > 10 * deg.mean()
    assert np.median(deg) < deg.mean()


def test_community_labels_follow_communities(sbm):
    src, dst = sbm.edge_index
    intra = (sbm.y[src] == sbm.y[dst]).mean()
    # p_in = 0.7; removed self loops are all intra-community, so the observed fraction sits slightly below.
    assert intra == pytest.approx(0.7, abs=0.03)
    g = community_graph(num_nodes=3000, p_in=0.95, seed=2)
    assert (g.y[g.edge_index[0]] == g.y[g.edge_index[1]]).mean() == pytest.approx(0.95, abs=0.02)


def test_community_splits(sbm):
    m = sbm.masks
    assert m["train"].sum() == 2500 and m["val"].sum() == 1250 and m["test"].sum() == 1250
    assert not (m["train"] & m["val"]).any() and not (m["val"] & m["test"]).any()


def test_community_bad_arguments():
    with pytest.raises(GraphError, match="p_in"):
        community_graph(num_nodes=100, p_in=1.5)
    with pytest.raises(GraphError, match="classes"):
        community_graph(num_nodes=5, num_classes=10)


def test_community_speed_one_million_edges():
    import time

    t = time.perf_counter()
    g = community_graph(num_nodes=50_000, avg_degree=20, num_features=8, seed=0)
    elapsed = time.perf_counter() - t
    assert g.num_edges == 1_000_000
    assert elapsed < 5.0, f"{elapsed:.2f}s for 10^6 edges"


def _train(g: Graph, model: torch.nn.Module, forward, epochs: int = 100, every: int = 10) -> float:
    """Full-batch Adam; returns test accuracy at the best validation accuracy, checked every ``every`` epochs.

    Checking every epoch made the GCN run ~10x slower on the shared 2-core test box, for the same accuracies.
    """
    y = torch.from_numpy(g.y)
    m = {k: torch.from_numpy(v) for k, v in g.masks.items()}
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best_val, test = -1.0, 0.0
    for epoch in range(epochs):
        model.train()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(forward()[m["train"]], y[m["train"]]).backward()
        opt.step()
        if (epoch + 1) % every:
            continue
        model.eval()
        with torch.no_grad():
            pred = forward().argmax(1)
        val = (pred[m["val"]] == y[m["val"]]).float().mean().item()
        if val > best_val:
            best_val, test = val, (pred[m["test"]] == y[m["test"]]).float().mean().item()
    return test


def test_gcn_beats_mlp():
    """The default noise hides the label from the features alone; the graph recovers it."""
    pyg = pytest.importorskip("torch_geometric.nn")
    g = community_graph(num_nodes=3000, seed=0)  # all other parameters at their defaults
    x, ei = torch.from_numpy(g.x), torch.from_numpy(g.edge_index)
    F, C, H = g.num_features, g.num_classes, 64

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(F, H), torch.nn.ReLU(), torch.nn.Linear(H, C))
    mlp_acc = _train(g, mlp, lambda: mlp(x))

    torch.manual_seed(0)
    # cached: the normalised adjacency is built once, not every epoch (the graph never changes here).
    c1, c2 = pyg.GCNConv(F, H, cached=True), pyg.GCNConv(H, C, cached=True)
    gcn = torch.nn.ModuleList([c1, c2])
    gcn_acc = _train(g, gcn, lambda: c2(torch.relu(c1(x, ei)), ei))

    print(f"community_graph(n=3000) test accuracy: MLP {mlp_acc:.3f}, GCN {gcn_acc:.3f}")
    # Measured (seeds 0-2): MLP 0.43-0.48, GCN 0.995-0.997. The margin leaves room for seed and platform noise.
    assert gcn_acc >= 0.85
    assert gcn_acc - mlp_acc >= 0.25


# ---------------------------------------------------------------------------------------------------------------------
# R-MAT


def _stream(scale: int, chunk: int, **kw) -> np.ndarray:
    chunks = list(rmat_edges(scale, chunk_size=chunk, **kw))
    assert all(c.shape[1] == chunk for c in chunks[:-1]) and 0 < chunks[-1].shape[1] <= chunk
    return np.concatenate(chunks, axis=1)


def test_rmat_independent_of_chunk_size():
    # 2^17 * 16 = 2^21 edges: two internal blocks, so chunk boundaries cross block boundaries.
    ref = _stream(17, RMAT_BLOCK, edge_factor=16, seed=3)
    assert ref.shape == (2, 16 << 17) and ref.dtype == np.int64
    for chunk in (1000, 777_777, 3 * RMAT_BLOCK):
        assert np.array_equal(_stream(17, chunk, edge_factor=16, seed=3), ref)
    other = _stream(17, RMAT_BLOCK, edge_factor=16, seed=4)
    assert not np.array_equal(other, ref)
    assert ref.min() >= 0 and ref.max() < 1 << 17


def test_rmat_degree_skew_and_scramble():
    e = _stream(14, RMAT_BLOCK, edge_factor=16, seed=0)
    deg = np.bincount(e[0], minlength=1 << 14)
    assert deg.max() > 20 * deg.mean()
    # Scrambled ids: the hubs are not concentrated at small ids.
    top = np.argsort(deg)[-20:]
    assert top.max() > (1 << 13)
    plain = _stream(14, RMAT_BLOCK, edge_factor=16, seed=0, scramble=False)
    assert np.argmax(np.bincount(plain[0])) == 0  # unscrambled R-MAT with a > d puts the top hub at vertex 0
    # Scrambling is a relabelling: the sorted degree sequence is unchanged.
    assert np.array_equal(np.sort(np.bincount(plain[0], minlength=1 << 14)), np.sort(deg))


def test_rmat_graph():
    g = rmat_graph(10, edge_factor=8, num_classes=4, num_features=8, seed=1)
    assert g.num_nodes == 1024 and g.num_features == 8 and g.num_classes == 4
    _assert_undirected_simple(g)
    assert np.bincount(g.y).tolist() == [256] * 4
    assert _same(g, rmat_graph(10, edge_factor=8, num_classes=4, num_features=8, seed=1))
    deg = _degrees(g)
    assert deg.max() > 10 * deg.mean()
    # Labels are degree buckets: mean degree increases with the label.
    means = [deg[g.y == c].mean() for c in range(4)]
    assert means == sorted(means)


# ---------------------------------------------------------------------------------------------------------------------
# built-in datasets


def test_karate():
    g = karate_graph()
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (34, 156, 34, 2)
    assert np.array_equal(g.x, np.eye(34, dtype=np.float32))
    _assert_undirected_simple(g)
    assert set(g.y[g.masks["train"]].tolist()) == {0, 1}
    assert g.y[0] == 0 and g.y[33] == 1  # Mr. Hi and the Officer lead the two clubs
    assert _same(g, karate_graph())


def test_digits():
    g = digits_graph(k=5)
    assert (g.num_nodes, g.num_features, g.num_classes) == (1797, 64, 10)
    assert g.x.min() >= 0 and g.x.max() <= 1
    _assert_undirected_simple(g)
    assert _degrees(g).min() >= 5  # everyone keeps its own k neighbours after symmetrisation
    assert set(g.y[g.masks["train"]].tolist()) == set(range(10))
    assert g.masks["train"].sum() == pytest.approx(1797 / 2, abs=10)
    # The k-NN graph is strongly homophilous, which is what makes it a useful real-data check.
    assert (g.y[g.edge_index[0]] == g.y[g.edge_index[1]]).mean() > 0.9


# ---------------------------------------------------------------------------------------------------------------------
# parse_spec


def test_parse_spec_synthetic():
    g = parse_spec("synthetic:n=3000,classes=8,features=32,degree=10,seed=3,p_in=0.7,noise=1.5")
    assert (g.num_nodes, g.num_classes, g.num_features) == (3000, 8, 32)
    assert _degrees(g).mean() == pytest.approx(10, rel=0.01)
    assert g.meta["p_in"] == 0.7 and g.meta["noise"] == 1.5 and g.meta["seed"] == 3
    assert g.name == "synthetic:n=3000,classes=8,features=32,degree=10,seed=3,p_in=0.7,noise=1.5"
    assert _same(g, community_graph(3000, 8, 32, 10, p_in=0.7, noise=1.5, seed=3))


def test_parse_spec_defaults():
    g = parse_spec("synthetic")
    assert (g.num_nodes, g.num_classes, g.num_features) == (20000, 10, 64)
    assert _degrees(g).mean() == pytest.approx(20, rel=0.01)


def test_parse_spec_rmat_and_builtin():
    g = parse_spec("rmat:scale=9,edge_factor=4,seed=1,classes=3,features=5")
    assert (g.num_nodes, g.num_classes, g.num_features) == (512, 3, 5)
    assert _same(g, rmat_graph(9, 4, num_classes=3, num_features=5, seed=1))
    assert parse_spec("builtin:karate").num_nodes == 34
    assert parse_spec("builtin:digits").num_edges > parse_spec("builtin:digits:k=5").num_edges


@pytest.mark.parametrize("spec, needle", [
    ("synthetic:n=abc", "synthetic:n=abc: n must be a positive integer"),
    ("synthetic:n=-5", "n must be a positive integer"),
    ("synthetic:p_in=1.5", "p_in must be a number in [0.0, 1.0]"),
    ("synthetic:degree=0", "degree must be a number"),
    ("synthetic:noise=nan", "noise must be a number"),
    ("synthetic:seed=1.5", "seed must be a non-negative integer"),
    ("synthetic:colour=red", "unknown key 'colour'"),
    ("synthetic:n", "n needs a value"),
    ("synthetic:n=10,classes=20", "classes must not exceed n"),
    ("rmat:scale=x", "rmat:scale=x: scale must be a positive integer"),
    ("rmat:scale=30", "scale must be at most 24"),
    ("rmat:a=0.9,b=0.1,c=0.1", "a + b + c must be at most 1"),
    ("rmat:k=3", "unknown key 'k'"),
    ("builtin:digits:k=0", "builtin:digits:k=0: k must be a positive integer"),
    ("builtin:digits:n=5", "unknown key 'n'"),
    ("builtin:cora", "unknown dataset spec"),
    ("cora", "unknown dataset spec"),
])
def test_parse_spec_errors(spec, needle):
    with pytest.raises(GraphError) as info:
        parse_spec(spec)
    msg = str(info.value)
    assert needle in msg
    assert msg.startswith(spec) and "\n" not in msg


def test_parse_spec_unknown_lists_known():
    with pytest.raises(GraphError) as info:
        parse_spec("ogbn-arxiv")
    for prefix in SPEC_PREFIXES:
        assert prefix in str(info.value)
