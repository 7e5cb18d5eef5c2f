"""``--partition metis`` (mggcn.distributed.metis): equal row blocks from unequal parts, balance and cut, the same order
on every rank, and training with the sparse exchange equal to the plain single-process GCN."""

from __future__ import annotations

import numpy as np
import pytest

import workers
from mggcn.config import TrainConfig
from mggcn.data.datasets import InMemoryDataset
from mggcn.data.generators import parse_spec
from mggcn.distributed.launch import run_workers
from mggcn.distributed.metis import metis_partition, partition_from_parts
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import partition_dataset
from mggcn.nn.model import GCN
from mggcn.utils.errors import ConfigError
from reference import gcn_losses, random_graph

pytest.importorskip("pymetis")

COMMUNITY = "synthetic:n=600,degree=8"


def test_overflow_moves_to_underfull_parts_and_blocks_are_equal():
    parts = np.array([0, 0, 0, 0, 1, 0, 2, 2, 0])  # sizes 6, 1, 2 for m = 3
    weights = np.array([5, 1, 4, 2, 1, 9, 1, 1, 3])
    part = partition_from_parts(parts, 3, weights)
    assert part.rows_per_part == 3 and part.padded_nodes == 9
    blocks = [part.order[part.rows(p)] for p in range(3)]
    assert sorted(blocks[0].tolist()) == [0, 2, 5]  # the three heaviest of part 0 stay
    assert set(blocks[1].tolist()) == {4, 1, 3}  # the emptiest part takes the lightest overflow first
    assert set(blocks[2].tolist()) == {6, 7, 8}
    assert np.array_equal(part.position[part.order], np.arange(9))


def test_padding_lands_inside_blocks():
    part = partition_from_parts(np.array([0, 0, 1, 2, 2, 2, 2]), 3, np.ones(7, dtype=np.int64))
    m = part.rows_per_part
    assert m == 3 and part.padded_nodes == 9 and (part.order < 0).sum() == 2
    real = part.order >= 0
    assert np.array_equal(np.sort(part.order[real]), np.arange(7))
    assert np.array_equal(part.position[part.order[real]], np.flatnonzero(real))


def test_balanced_lower_cut_and_deterministic():
    graph = parse_spec(COMMUNITY)
    src, dst = graph.edge_index
    dataset = InMemoryDataset(graph)
    metis = partition_dataset(dataset, 4, 0, "metis")
    assert np.array_equal(metis.order, partition_dataset(dataset, 4, 0, "metis").order)  # same input, same seed

    def cut_and_nnz(part):
        rank = part.position // part.rows_per_part
        nnz = np.bincount(rank[dst], minlength=4) + np.bincount(rank, minlength=4)  # rows of A + I
        return int((rank[src] != rank[dst]).sum()), nnz

    cut_m, nnz_m = cut_and_nnz(metis)
    cut_r, _ = cut_and_nnz(make_partition(graph.num_nodes, 4, 0))
    assert cut_m < 0.5 * cut_r
    assert nnz_m.max() / nnz_m.mean() < 1.1


def test_a_pymetis_without_csr_adjacency_cuts_the_same(monkeypatch):
    """pymetis before 2025.2 (which the metis extra allows) has no CSRAdjacency: the graph then goes as xadj and
    adjncy, and METIS cuts it the same."""
    import pymetis

    dataset = InMemoryDataset(parse_spec(COMMUNITY))
    newer = partition_dataset(dataset, 3, 0, "metis")
    monkeypatch.delattr(pymetis, "CSRAdjacency", raising=False)
    assert np.array_equal(partition_dataset(dataset, 3, 0, "metis").order, newer.order)


def test_make_partition_refuses_metis_without_the_graph():
    with pytest.raises(ConfigError, match="needs the graph"):
        make_partition(10, 2, 0, "metis")
    with pytest.raises(ConfigError, match="larger than"):
        metis_partition(np.array([0]), np.array([1]), 2, 3)


def test_prepared_dataset_gives_the_same_metis_order(tmp_path):
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.data.prepared.writer import prepare

    graph = random_graph(50, 200, seed=2)
    prepared = PreparedDataset(prepare(graph, tmp_path / "p", progress=False))
    assert np.array_equal(partition_dataset(prepared, 3, 1, "metis").order,
                          partition_dataset(InMemoryDataset(graph), 3, 1, "metis").order)


def test_training_with_metis_and_sparse_exchange_equals_reference():
    graph = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)
    community = parse_spec("synthetic:n=90,degree=6,features=12,classes=4")
    cases = [(graph, TrainConfig(hidden=(16, 8), epochs=10, seed=5, partition="metis", comm="sparse")),
             (community, TrainConfig(hidden=(16, 8), epochs=10, seed=6, partition="metis", comm="auto",
                                     norm="mean")),
             (community, TrainConfig(hidden=(16, 8), epochs=10, seed=6, partition="random", comm="broadcast",
                                     norm="mean"))]
    results = [r[1] for r in sorted(run_workers(workers.dataset_train_worker, 3, (cases,), timeout_s=180))]
    for k, (g, cfg) in enumerate(cases):
        orders = [r[k][0] for r in results]
        want = partition_dataset(InMemoryDataset(g), 3, cfg.seed, cfg.partition).order
        assert all(np.array_equal(o, want) for o in orders)
        model = GCN(cfg.dims(g.num_features, g.num_classes), seed=cfg.seed)
        ref = gcn_losses(g, [(c.lin.weight, c.bias) for c in model.convs], cfg.epochs, cfg.lr, cfg.weight_decay,
                         cfg.norm, cfg.activation)
        losses = [rec["loss"] for rec in results[0][k][1]]
        # float32 distributed against float64 unsharded, 10 Adam steps: agreement to ~1e-5 relative
        np.testing.assert_allclose(losses, ref, rtol=2e-5, atol=1e-6, err_msg=f"case {k}")
        first = results[0][k][1][0]
        assert first["recv_bytes"] > 0 and first["total_bytes"] >= first["recv_bytes"]
        assert first["nnz_imbalance"] >= 1.0 and first["cut_nnz"] > 0
    # auto under METIS moves less than broadcast under random on the community graph (same model, same widths)
    assert results[0][1][1][0]["total_bytes"] < results[0][2][1][0]["total_bytes"]
    # the curves of a METIS/auto and a random/broadcast run agree too (same seed, same graph)
    np.testing.assert_allclose([r["loss"] for r in results[0][1][1]], [r["loss"] for r in results[0][2][1]],
                               rtol=2e-5)


def _community():
    from mggcn.data.generators import parse_spec

    g = parse_spec("synthetic:n=600,degree=8")
    return g.edge_index[1], g.edge_index[0]  # rows = targets


def test_self_loops_do_not_change_the_metis_order():
    """METIS cuts the pattern without self loops, weighting a vertex by its row of A + I: a graph and the same graph
    with self loops on a third of its vertices (and a loop twice) get the same order."""
    pytest.importorskip("pymetis")
    from mggcn.distributed.metis import metis_partition, symmetric_pattern

    rows, cols = _community()
    loops = np.random.default_rng(0).choice(600, 200, replace=False)
    looped_rows, looped_cols = np.concatenate([rows, loops, loops[:5]]), np.concatenate([cols, loops, loops[:5]])
    assert symmetric_pattern(looped_rows, looped_cols, 600).diagonal().sum() == 0
    assert np.array_equal(metis_partition(looped_rows, looped_cols, 600, 4, seed=0).order,
                          metis_partition(rows, cols, 600, 4, seed=0).order)


def test_as_many_parts_as_vertices_is_one_vertex_a_rank():
    pytest.importorskip("pymetis")
    from mggcn.distributed.metis import metis_partition

    part = metis_partition(np.array([0, 1, 2]), np.array([1, 2, 0]), 3, 3)
    assert part.rows_per_part == 1 and sorted(part.order.tolist()) == [0, 1, 2]


def test_the_seed_reaches_metis():
    """--seed is METIS' seed (options.seed): the same seed gives the same order, another seed another one."""
    pytest.importorskip("pymetis")
    from mggcn.distributed.metis import metis_partition

    rows, cols = _community()
    orders = {seed: metis_partition(rows, cols, 600, 4, seed=seed).order for seed in (0, 7)}
    assert np.array_equal(orders[0], metis_partition(rows, cols, 600, 4, seed=0).order)
    assert not np.array_equal(orders[0], orders[7])
