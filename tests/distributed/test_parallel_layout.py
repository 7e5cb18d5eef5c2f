"""The parallel layout (mggcn.distributed.parallel_layout): the settings it takes from a job, the blocks a rank
holds, the tile width it asks the kernel policy for, the SpMM operator it builds for each exchange (against the
dense Â of reference.adj_hat) and the gather back into the original vertex order."""

import numpy as np
import pytest
import torch

from mggcn.config import TrainConfig
from mggcn.distributed.context import DistContext
from mggcn.distributed.exchange import SparseExchangeSpMM
from mggcn.distributed.parallel_layout import ParallelLayout
from mggcn.distributed.spmm import StagedSpMM
from mggcn.kernels.policy import tile_columns
from mggcn.utils.errors import ConfigError
from reference import adj_hat, random_graph

N = 37


def test_a_jobs_layout_takes_its_settings():
    cfg = TrainConfig(comm="sparse", overlap=False, shm="off", partition="none", seed=7, tile_bytes=1 << 16)
    layout = ParallelLayout.of(cfg, 3)
    assert layout == ParallelLayout(3, comm="sparse", overlap=False, shm="off", ordering="none", seed=7,
                                    tile_bytes=1 << 16)
    assert ParallelLayout.of(TrainConfig(), 1) == ParallelLayout(1)


def test_an_unknown_exchange_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match="^comm must be one of broadcast, sparse, auto, got 'allgather'") as err:
        ParallelLayout(2, comm="allgather")
    assert err.value.option == "comm"


@pytest.mark.parametrize("world", [1, 2, 5])
def test_a_rank_holds_its_row_block_in_every_column_block(world):
    layout = ParallelLayout(world)
    for rank in range(world):
        assert layout.blocks(rank) == [(rank, j) for j in range(world)]


def test_the_partition_has_one_row_range_per_rank():
    graph = random_graph(N, 150, seed=1)
    part = ParallelLayout(4, ordering="random", seed=3).partition(graph)
    assert part.num_parts == 4 and part.num_nodes == N
    assert [part.rows(r) for r in range(4)] == [slice(r * 10, (r + 1) * 10) for r in range(4)]
    assert np.array_equal(part.order, ParallelLayout(4, ordering="random", seed=3).partition(graph).order)


@pytest.mark.parametrize("tile_bytes", [None, 0, 4096])
def test_tile_width_is_the_kernel_policys_for_a_mean_block(tile_bytes):
    layout = ParallelLayout(3, tile_bytes=tile_bytes)
    for width, nodes, edges in ((16, 90_000, 2_000_000), (256, 30_000, 100_000), (4, 10, 20)):
        want = tile_columns(width, -(-nodes // 3), (edges + nodes) // 9, "cpu", 2, tile_bytes)
        assert layout.tile_columns(nodes, edges, width, "cpu", 2) == want
    assert layout.tile_columns(90_000, 2_000_000, 16, "cuda") is None  # cuSPARSE: whole blocks


@pytest.mark.parametrize("comm, kind", [("broadcast", StagedSpMM), ("sparse", SparseExchangeSpMM),
                                        ("auto", SparseExchangeSpMM)])
def test_the_operator_of_each_exchange_multiplies_by_a_hat(comm, kind):
    graph = random_graph(N, 200, seed=2)
    layout, ctx = ParallelLayout(1, comm=comm, ordering="none"), DistContext()
    shard = layout.shard(graph, ctx, "sym", width=5)
    op, transport = layout.spmm_operator(ctx, shard, 5)
    assert isinstance(op, kind) and transport is None  # one rank: no broadcast between ranks
    b = torch.randn(N, 5)
    want = adj_hat(graph.edge_index, N, "sym") @ b.double()
    torch.testing.assert_close(op(b).double(), want, rtol=1e-5, atol=1e-6)  # float32 sums against float64


def test_the_gather_puts_rows_back_in_original_order():
    graph = random_graph(N, 100, seed=4)
    part = ParallelLayout(1, ordering="random", seed=9).partition(graph)
    rows = torch.from_numpy(part.order.copy())  # the row at new position p holds the original id of p
    back = ParallelLayout.gather_original(DistContext(), part, rows)
    assert np.array_equal(back, np.arange(N))


def test_the_gather_drops_padding_rows_inside_the_blocks():
    """METIS' partitions pad each rank's block (partition_from_parts): padding rows lie between real ones."""
    from mggcn.distributed.metis import partition_from_parts

    part = partition_from_parts(np.array([0] * 5 + [1] * 8 + [2] * 9), 3, np.ones(22, dtype=np.int64))
    assert (part.order[:-1] < 0).any()  # padding before the last row
    back = ParallelLayout.gather_original(DistContext(), part, torch.from_numpy(part.order.copy()))
    assert np.array_equal(back, np.arange(22))


def test_the_sparse_exchange_takes_the_layouts_overlap():
    graph = random_graph(37, 200, seed=2)
    for comm in ("sparse", "auto", "broadcast"):
        for overlap in (False, True):
            layout, ctx = ParallelLayout(1, comm=comm, overlap=overlap, ordering="none"), DistContext()
            op, _ = layout.spmm_operator(ctx, layout.shard(graph, ctx, "sym", width=5), 5)
            assert op.overlap is overlap, (comm, overlap)


def test_tile_width_is_asked_for_the_rows_of_a_block_when_p_does_not_divide_n():
    """A block has ceil(n / P) rows (the last rank's padded): 4097 vertices on 2 ranks are blocks of 2049 rows, which
    a 2048-column tile does not cover."""
    layout = ParallelLayout(2, tile_bytes=2048 * 64)
    assert layout.tile_columns(4097, 10**6, 16, "cpu") == tile_columns(16, 2049, (10**6 + 4097) // 4, "cpu", 1,
                                                                       2048 * 64) == 2048
