"""Âᵀ's training columns (mggcn.distributed.spmm.training_columns): the last layer's backward SpMM multiplies only
the columns of training vertices, since the loss's gradient is zero elsewhere.

Against the unsharded Âᵀ: a backward marked ``grad_on_train_rows`` given a gradient G that is NOT zero outside the
training rows returns ``Âᵀ·(G ⊙ train)`` — so it really skipped the other columns — and an unmarked backward on the
same operator still returns ``Âᵀ·G``; with every transport (gloo and shared-memory broadcast, sparse and auto
exchange), at P = 1..4 with n not divisible by P, on a directed graph (Âᵀ's pattern differs from Â's), with whole
and column-tiled blocks. The sparse exchange also receives only the training rows the restricted blocks reference.
"""

import numpy as np
import pytest
import torch
from test_exchange import _assemble, _rows_needed

import workers
from mggcn.config import TrainConfig
from mggcn.distributed.context import DistContext
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import TRAINING_COLUMNS_MAX, keeps_training_columns
from mggcn.kernels.tiled import TiledCSR
from mggcn.nn.models import operator_for
from mggcn.training.trainer import train_shard
from mggcn.utils.errors import ConfigError
from reference import adj_hat, random_graph

N, D = 37, 5
OPS = ("broadcast", "shm", "sparse", "auto")


@pytest.mark.parametrize("tile_cols", [None, 4, 9])
def test_keep_columns_drops_exactly_the_other_columns(tile_cols):
    import scipy.sparse as sp

    rng = np.random.default_rng(tile_cols or 0)
    a = sp.random(23, 23, density=0.3, format="csr", random_state=1, dtype=np.float32)
    a = sp.csr_matrix(a.multiply(np.arange(23)[:, None] >= 3))  # rows 0-2 empty: leading row pointers stay 0
    a.eliminate_zeros()
    keep = torch.from_numpy(rng.random(23) < 0.4)
    block = TiledCSR.from_scipy(a, tile_cols).keep_columns(keep)
    expected = sp.csr_matrix(a.multiply(keep.numpy()[None, :].astype(np.float32)))
    expected.eliminate_zeros()
    assert block.shape == (23, 23) and block.nnz == expected.nnz and len(block.tiles) == (1 if tile_cols is None
                                                                                          else -(-23 // tile_cols))
    assert (block.to_scipy() != expected).nnz == 0
    none = TiledCSR.from_scipy(a, tile_cols).keep_columns(torch.zeros(23, dtype=torch.bool))
    assert none.nnz == 0 and none.shape == (23, 23)


def test_the_rule_keeps_them_when_the_training_split_is_at_most_half():
    assert TRAINING_COLUMNS_MAX == 0.5
    assert keeps_training_columns(50, 100, 2) and keeps_training_columns(1, 100, 3)
    assert not keeps_training_columns(51, 100, 2)  # the copy would cost more memory than the SpMM it saves
    assert not keeps_training_columns(10, 100, 1)  # one layer: its SpMM is the first layer's, with no backward
    assert not keeps_training_columns(0, 100, 2)
    # --train-columns on / off override the fraction, not the rest
    assert keeps_training_columns(90, 100, 2, "on") and not keeps_training_columns(90, 100, 1, "on")
    assert not keeps_training_columns(0, 100, 2, "on") and not keeps_training_columns(10, 100, 2, "off")
    with pytest.raises(ConfigError, match="^train_columns must be one of auto, on, off, got 'always'$") as err:
        keeps_training_columns(10, 100, 2, "always")
    assert err.value.option == "train_columns"


@pytest.mark.parametrize("mode, kept", [("auto", False), ("on", True), ("off", False)])
def test_the_trainer_follows_the_setting(mode, kept):
    """In one process: 70% of the vertices train, so auto keeps no copy; on keeps one; the losses are the same."""
    graph = random_graph(40, 160, features=6, classes=3, seed=4)
    train = np.zeros(40, dtype=bool)
    train[:28] = True
    graph.masks = {"train": train, "val": ~train, "test": np.zeros(40, dtype=bool)}
    cfg = TrainConfig(hidden=(8,), epochs=4, train_columns=mode)
    shard = build_shard(graph, make_partition(40, 1, cfg.seed, cfg.partition), 0, operator_for(cfg.model, cfg.norm))
    result = train_shard(DistContext(), shard, cfg)
    assert result.adj.has_training_columns is kept
    reference = train_shard(DistContext(), build_shard(graph, make_partition(40, 1, 0), 0, "sym"),
                            TrainConfig(hidden=(8,), epochs=4, train_columns="off"))
    torch.testing.assert_close(torch.tensor([r["loss"] for r in result.history]),
                               torch.tensor([r["loss"] for r in reference.history]), rtol=1e-6, atol=0)


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_marked_backward_multiplies_only_training_columns(nprocs):
    rng = np.random.default_rng(nprocs)
    directed = random_graph(N, 150, directed=True, seed=nprocs)
    cases = []
    for norm, tiles, seed in (("sym", None, 7), ("mean", None, 8), ("sym", 3, 9)):
        train = torch.from_numpy(rng.random(N) < 0.4)
        cases.append((directed, norm, make_partition(N, nprocs, seed), tiles, train, torch.randn(N, D),
                      torch.randn(N, D)))
    if nprocs == 1:
        results = [workers.training_columns_worker(cases)]
    else:
        results = run_workers(workers.training_columns_worker, nprocs, (cases,), timeout_s=180)
    results = [r[1] for r in sorted(results, key=lambda r: r[0])]
    for k, (graph, norm, part, _, train, _, g) in enumerate(cases):
        a = adj_hat(graph.edge_index, N, norm).float()
        assert not torch.equal(a, a.t())
        masked = g * train[:, None]
        assert not torch.allclose(a.t() @ masked, a.t() @ g)  # the two results tell the paths apart
        restricted = a.t() * train[None, :].float()  # Âᵀ's training columns
        needed = _rows_needed(restricted, part, nprocs)
        for name in OPS:
            marked, unmarked = (_assemble([r[k][name][i] for r in results], part, N) for i in range(2))
            # float32 sums of <= ~15 terms in another order than the reference: a few ulps
            msg = f"P={nprocs} case {k} {name}"
            torch.testing.assert_close(marked, a.t() @ masked, rtol=1e-5, atol=1e-6, msg=msg)
            torch.testing.assert_close(unmarked, a.t() @ g, rtol=1e-5, atol=1e-6, msg=msg)
        for i, r in enumerate(results):
            # forward and the marked backward, one SpMM each at width D; the broadcasts move whole blocks
            m = part.rows_per_part
            assert r[k]["broadcast"][2] == r[k]["shm"][2] == 4 * (nprocs - 1) * m * 2 * D
            full_t = _rows_needed(a.t().contiguous(), part, nprocs)
            fwd = _rows_needed(a, part, nprocs)
            assert r[k]["sparse"][2] == 4 * D * (fwd[i].sum() + needed[i].sum()), f"{msg} rank {i}"
            assert r[k]["sparse"][3] == 4 * D * (fwd[i].sum() + full_t[i].sum())  # unmarked: all of Âᵀ's rows
