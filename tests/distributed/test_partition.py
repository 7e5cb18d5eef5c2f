"""The row partition (mggcn.distributed.partition) and the one shard builder (mggcn.distributed.sharding), against
the unsharded Â of mggcn.nn.norm and of PyG (tests/reference.py)."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import workers
from mggcn.config import TrainConfig
from mggcn.data.datasets import InMemoryDataset
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard, partition_dataset
from mggcn.nn.model import GCN
from mggcn.nn.norm import adjacency, normalize
from mggcn.utils.errors import ConfigError
from reference import adj_hat, gcn_losses, random_graph


@pytest.mark.parametrize("ordering", ["random", "none", "random-local"])
@pytest.mark.parametrize("n, parts", [(10, 3), (12, 4), (7, 1), (5, 5)])
def test_partition_is_a_padded_permutation(ordering, n, parts):
    part = make_partition(n, parts, seed=3, ordering=ordering)
    m = -(-n // parts)
    assert part.rows_per_part == m and part.padded_nodes == m * parts
    real = part.order[part.order >= 0]
    assert sorted(real) == list(range(n))  # every vertex once, the rest padding
    assert np.array_equal(part.order[part.position], np.arange(n))
    if ordering == "none":
        assert np.array_equal(real, np.arange(n))


def test_partition_refuses_bad_settings_naming_them():
    with pytest.raises(ConfigError, match="nprocs 4 is larger than the graph's 3 vertices") as err:
        make_partition(3, 4)
    assert err.value.option == "nprocs"
    with pytest.raises(ConfigError, match="nprocs must be at least 1"):
        make_partition(3, 0)
    with pytest.raises(ConfigError, match="partition must be one of") as err:
        make_partition(3, 1, ordering="sideways")
    assert err.value.option == "partition"


def _whole(blocks_per_rank, part) -> np.ndarray:
    """The [n_pad, n_pad] matrix whose row block i, column block j is rank i's block j."""
    m = part.rows_per_part
    out = np.zeros((part.padded_nodes, part.padded_nodes), dtype=np.float32)
    for i, blocks in enumerate(blocks_per_rank):
        for j, block in enumerate(blocks):
            out[i * m:(i + 1) * m, j * m:(j + 1) * m] = block.to_scipy().toarray()
    return out


def _in_new_order(mat: np.ndarray, part) -> np.ndarray:
    out = np.zeros((part.padded_nodes, part.padded_nodes), dtype=mat.dtype)
    real = np.flatnonzero(part.order >= 0)
    out[np.ix_(real, real)] = mat[np.ix_(part.order[real], part.order[real])]
    return out


@pytest.mark.parametrize("norm", ["sym", "mean"])
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_shards_together_are_the_unsharded_normalized_adjacency(norm, parts):
    """Directed, with self loops and parallel edges, n = 23 not divisible by P: the blocks of all ranks, put
    together, are mggcn.nn.norm's Â bit for bit (the same float64 formula per entry) and PyG's Â to float32
    rounding; Âᵀ's blocks are its transpose; each rank holds its rows of features, labels and splits."""
    graph = random_graph(23, 90, features=5, classes=3, directed=True, seed=parts)
    graph.edge_index = np.concatenate([graph.edge_index, [[0, 4, 4], [0, 7, 7]]], axis=1)  # a self loop, a twin
    part = make_partition(graph.num_nodes, parts, seed=1)
    shards = [build_shard(graph, part, rank, norm, tile_cols=4) for rank in range(parts)]
    a = _whole([s.adj for s in shards], part)
    exact = normalize(adjacency(graph.edge_index, graph.num_nodes), norm).toarray()
    np.testing.assert_array_equal(a, _in_new_order(exact, part))
    # float32 entries against PyG's float64 Â: relative rounding of one float32 operation
    pyg = adj_hat(graph.edge_index, graph.num_nodes, norm).numpy()
    np.testing.assert_allclose(a, _in_new_order(pyg, part), rtol=1e-6, atol=0)
    np.testing.assert_array_equal(_whole([s.adj_t for s in shards], part), a.T)
    for rank, shard in enumerate(shards):
        orig = part.order[part.rows(rank)]
        real = orig >= 0
        assert torch.equal(shard.x[real], torch.from_numpy(graph.x[orig[real]]))
        assert torch.equal(shard.x[~real], torch.zeros_like(shard.x[~real]))
        assert torch.equal(shard.y[real], torch.from_numpy(graph.y[orig[real]]))
        assert (shard.y[~real] == -1).all()
        for split, mask in graph.masks.items():
            assert torch.equal(shard.masks[split][real], torch.from_numpy(mask[orig[real]]))
            assert shard.split_sizes[split] == int(mask.sum())


def test_symmetric_sym_norm_shares_the_backward_blocks():
    graph = random_graph(20, 60, directed=False, seed=4)
    part = make_partition(graph.num_nodes, 2, seed=0)
    shard = build_shard(graph, part, 1, "sym")
    assert shard.adj_t is shard.adj  # Â = Âᵀ: one set of blocks
    directed = build_shard(random_graph(20, 60, directed=True, seed=4), part, 1, "sym")
    assert directed.adj_t is not directed.adj


def test_shard_reads_only_its_rows():
    graph = random_graph(40, 200, directed=True, seed=5)
    part = make_partition(graph.num_nodes, 4, seed=2)
    reads = {}
    build_shard(graph, part, 2, "sym", reads=reads)
    ids = part.order[part.rows(2)]
    ids = ids[ids >= 0]
    in_deg = np.bincount(graph.edge_index[1], minlength=40)
    out_deg = np.bincount(graph.edge_index[0], minlength=40)
    assert reads["rows"] == ids.size
    assert reads["edges"] == int(in_deg[ids].sum() + out_deg[ids].sum())  # its rows of A and of Aᵀ, no more


def test_build_shard_refuses_an_unknown_norm_and_a_foreign_partition():
    graph = random_graph(10, 30, seed=1)
    with pytest.raises(ConfigError, match="norm must be one of sym, mean, in-mean, sum, gat, got .max."):
        build_shard(graph, make_partition(10, 1), 0, "max")
    with pytest.raises(ValueError, match="a partition of 11 vertices for 10"):
        build_shard(graph, make_partition(11, 1), 0, "sym")


def test_partition_dataset_is_make_partition_unless_metis():
    graph = random_graph(30, 100, seed=2)
    for ordering in ("random", "none", "random-local"):
        got = partition_dataset(InMemoryDataset(graph), 3, 5, ordering)
        assert np.array_equal(got.order, make_partition(30, 3, 5, ordering).order)


def test_in_memory_arrays_are_the_csr_of_both_directions():
    graph = random_graph(15, 50, directed=True, seed=3)
    arrays = InMemoryDataset(graph).arrays
    a = sp.csr_matrix((np.ones(50), (graph.edge_index[1], graph.edge_index[0])), shape=(15, 15))
    rebuilt = sp.csr_matrix((np.ones(50), arrays["in_indices"], arrays["in_indptr"]), shape=(15, 15))
    assert (rebuilt != a).nnz == 0
    rebuilt_t = sp.csr_matrix((np.ones(50), arrays["out_indices"], arrays["out_indptr"]), shape=(15, 15))
    assert (rebuilt_t != a.T.tocsr()).nnz == 0
    loops = graph.edge_index[0] == graph.edge_index[1]
    assert np.array_equal(arrays["degree"], np.bincount(graph.edge_index[1][~loops], minlength=15) + 1)


def test_random_local_keeps_the_parts_of_random_in_original_order():
    random, local = make_partition(103, 4, 7, "random"), make_partition(103, 4, 7, "random-local")
    for part in range(4):
        rows = local.order[local.rows(part)]
        assert set(rows) == set(random.order[random.rows(part)])
        real = rows[rows >= 0]
        assert np.all(np.diff(real) > 0)
    assert np.array_equal(make_partition(50, 1, 3, "random-local").order, np.arange(50))


def test_random_local_ordering_is_exact_at_two_ranks():
    graph = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)
    cfg = TrainConfig(hidden=(16, 8), epochs=6, seed=5, partition="random-local")
    model = GCN(cfg.dims(graph.num_features, graph.num_classes), seed=cfg.seed)
    expected = gcn_losses(graph, [(c.lin.weight, c.bias) for c in model.convs], cfg.epochs, cfg.lr,
                          cfg.weight_decay)
    results = run_workers(workers.train_many_worker, 2, ([(graph, cfg)],), timeout_s=120)
    for rank_results in results:
        losses = rank_results[0][0]
        # float32 against float64 over a few Adam steps (as in test_train)
        torch.testing.assert_close(torch.tensor(losses, dtype=torch.float64),
                                   torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=0)


