"""The distributed SpMM against the unsharded Â·B and Âᵀ·G, at P = 1..4 with n not divisible by P, with whole and
column-tiled blocks."""

import pytest
import torch

import workers
from mggcn.distributed.context import DistContext
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import BlockAccumulator, BroadcastBuffers, StagedSpMM
from reference import adj_hat, random_graph

N = 37  # not divisible by 2, 3 or 4


def _assemble(blocks, graph, part):
    """Stitch the ranks' row blocks (partition order) back into original vertex order."""
    full = torch.cat(blocks)
    out = torch.empty((graph.num_nodes,) + tuple(full.shape[1:]), dtype=full.dtype)
    real = part.order >= 0
    out[torch.from_numpy(part.order[real])] = full[torch.from_numpy(real)]
    return out


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_spmm_forward_backward_equal_unsharded(nprocs):
    seed = 7
    cases, directed_cases = [], []
    for directed in (True, False):
        graph = random_graph(N, 150, directed=directed, seed=nprocs)
        for norm in ("sym", "mean"):
            for overlap in (True, False):
                for tile_cols in (None, 3):  # 3: every block of m = 10..37 columns is cut into 4..13 tiles
                    # shared memory: outboxes as wide as B (5), or narrower (3: B falls back to gloo, B[:, :1] not)
                    for shm_width in ((None, 5, 3) if norm == "sym" else (None,)):
                        directed_cases.append(directed)
                        cases.append((graph, norm, overlap, tile_cols, shm_width, torch.randn(N, 5),
                                      torch.randn(N, 5)))
    if nprocs == 1:
        results = [workers.spmm_worker(cases, seed)]
    else:
        results = run_workers(workers.spmm_worker, nprocs, (cases, seed), timeout_s=180)
    results = [r[1] for r in sorted(results, key=lambda r: r[0])]
    part = make_partition(N, nprocs, seed)
    for k, (graph, norm, overlap, tile_cols, shm_width, b, g) in enumerate(cases):
        a = adj_hat(graph.edge_index, N, norm).float()
        if directed_cases[k]:  # the backward really needs Âᵀ
            assert not torch.equal(a, a.t())
        c, grad, c2 = (_assemble([r[k][i] for r in results], graph, part) for i in range(3))
        # float32 sums of <= ~15 terms in another order than the reference (tile by tile too): a few ulps
        msg = f"P={nprocs} case {k}: norm={norm} overlap={overlap} tile_cols={tile_cols} shm={shm_width}"
        torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-6, msg=msg)
        torch.testing.assert_close(grad, a.t() @ g, rtol=1e-5, atol=1e-6, msg=msg)
        torch.testing.assert_close(c2, a @ b[:, :1], rtol=1e-5, atol=1e-6, msg=msg)


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tile_cols", [None, 3])
def test_outputs_filled_with_nan_are_overwritten(device, tile_cols):
    # every first product is written with beta = 0 into an output that is not zeroed first (a workspace buffer,
    # torch.empty): a NaN left in it would survive a beta = 0 that reads it (0 · NaN = NaN); on CUDA too (cuSPARSE)
    graph = random_graph(N, 150, directed=True, seed=2)
    a = adj_hat(graph.edge_index, N, "sym").float()
    shard = build_shard(graph, make_partition(N, 1, 0, "none"), 0, "sym", tile_cols=tile_cols)
    op = StagedSpMM(DistContext(device=torch.device(device)), [shard.adj[0].to(device)], [shard.adj_t[0].to(device)])
    b, g = torch.randn(N, 4), torch.randn(N, 4)
    c = op.run(b.to(device), out=torch.full((N, 4), float("nan"), device=device))
    grad = op.run(g.to(device), transpose=True, out=torch.full((N, 4), float("nan"), device=device))
    # float32 sums of <= ~10 products in another order than the dense reference: a few ulps
    torch.testing.assert_close(c.cpu(), a @ b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad.cpu(), a.t() @ g, rtol=1e-5, atol=1e-6)
    # the sum over column blocks (what every rank of the broadcast and the exchange SpMMs does): the first writes
    halves = [build_shard(graph, make_partition(N, 2, 0, "none"), rank, "sym", tile_cols=tile_cols)
              for rank in range(2)]
    top = BlockAccumulator(torch.full((halves[0].adj[0].rows, 4), float("nan"), device=device), op.timer)
    m = halves[0].adj[0].rows
    padded = torch.cat([b, torch.zeros(2 * m - N, 4)])
    for j, block in enumerate(halves[0].adj):
        top.add(block.to(device), padded[j * m:(j + 1) * m].to(device))
    torch.testing.assert_close(top.result().cpu(), (a @ b)[:m], rtol=1e-5, atol=1e-6)
    # no block at all: zeros, not the NaN the buffer held
    assert torch.equal(BlockAccumulator(torch.full((m, 4), float("nan"), device=device), op.timer).result().cpu(),
                       torch.zeros(m, 4))


def test_empty_blocks_are_skipped_but_exact():
    # no edges at all: every off-diagonal block is empty, Â = I
    graph = random_graph(N, 0, seed=3)
    part = make_partition(N, 1, 0)
    shard = build_shard(graph, part, 0, "sym")
    op = StagedSpMM(DistContext(), shard.adj, shard.adj_t)
    b = torch.randn(N, 4)
    torch.testing.assert_close(op(b), b)


def test_an_operand_of_other_rows_is_refused_in_one_line():
    """More rows than the operator's would be left out of the product, fewer read past: both said, as is a vector."""
    graph = random_graph(N, 60, seed=3)
    shard = build_shard(graph, make_partition(N, 1, 0), 0, "sym")
    op = StagedSpMM(DistContext(), shard.adj, shard.adj_t)
    for shape in ((N + 1, 4), (N - 1, 4), (N,)):
        with pytest.raises(ValueError) as err:
            op(torch.randn(*shape))
        assert str(err.value) == f"Â·b: b must be [{N}, d], a row per vertex of this rank's rows, got {list(shape)}"


def test_broadcast_buffers_are_views_of_two_allocations():
    bufs = BroadcastBuffers(rows=10, width=8, dtype=torch.float32, device=torch.device("cpu"))
    a, b, c = bufs.view(0, 8), bufs.view(1, 3), bufs.view(2, 5)
    assert a.data_ptr() == c.data_ptr() != b.data_ptr()
    assert c.shape == (10, 5) and c.is_contiguous()
    assert bufs.nbytes == 2 * 10 * 8 * 4


def test_symmetric_adjacency_shares_its_blocks_with_the_transpose():
    undirected = random_graph(N, 100, directed=False, seed=5)
    shard = build_shard(undirected, make_partition(N, 3, 0), 1, "sym")
    assert all(a is t for a, t in zip(shard.adj, shard.adj_t))
    for norm, graph in (("mean", undirected), ("sym", random_graph(N, 100, directed=True, seed=5))):
        shard = build_shard(graph, make_partition(N, 3, 0), 1, norm)  # Â ≠ Âᵀ: blocks of their own
        assert not any(a is t for a, t in zip(shard.adj, shard.adj_t))
