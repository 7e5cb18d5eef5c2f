"""The distributed SpMM against the unsharded Â·B and Âᵀ·G, at P = 1..4 with n not divisible by P."""

import pytest
import torch

import workers
from mggcn.dist import DistContext
from mggcn.launch import run_workers
from mggcn.partition import build_shard, make_partition
from mggcn.spmm import BroadcastBuffers, StagedSpMM
from reference import adj_hat, random_graph

N = 37  # not divisible by 2, 3 or 4


def _assemble(results, graph, nprocs, seed, index):
    """Stitch the ranks' row blocks (partition order) back into original vertex order."""
    part = make_partition(graph.num_nodes, nprocs, seed)
    blocks = sorted(results, key=lambda r: r[0])
    full = torch.cat([r[index] for r in blocks])
    out = torch.empty((graph.num_nodes,) + tuple(full.shape[1:]), dtype=full.dtype)
    real = part.order >= 0
    out[torch.from_numpy(part.order[real])] = full[torch.from_numpy(real)]
    return out


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
@pytest.mark.parametrize("directed", [True, False])
def test_spmm_forward_backward_equal_unsharded(nprocs, directed):
    graph = random_graph(N, 150, directed=directed, seed=nprocs)
    b = torch.randn(N, 5)
    g = torch.randn(N, 5)
    for norm in ("sym", "mean"):
        a = adj_hat(graph.edge_index, N, norm).float()
        if directed:
            assert not torch.equal(a, a.t())  # the backward really needs Âᵀ
        for overlap in (True, False):
            args = (graph, norm, overlap, b, g, 7)
            if nprocs == 1:
                results = [workers.spmm_worker(*args)]
            else:
                results = run_workers(workers.spmm_worker, nprocs, args, timeout_s=120)
            c = _assemble(results, graph, nprocs, 7, 1)
            grad = _assemble(results, graph, nprocs, 7, 2)
            c2 = _assemble(results, graph, nprocs, 7, 3)
            # float32 sums of <= ~10 terms in another order than the reference: a few ulps
            torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(grad, a.t() @ g, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(c2, a @ b[:, :1], rtol=1e-5, atol=1e-6)


def test_empty_blocks_are_skipped_but_exact():
    # no edges at all: every off-diagonal block is empty, Â = I
    graph = random_graph(N, 0, seed=3)
    part = make_partition(N, 1, 0)
    shard = build_shard(graph, part, 0, "sym")
    op = StagedSpMM(DistContext(), shard.adj, shard.adj_t)
    b = torch.randn(N, 4)
    torch.testing.assert_close(op(b), b)


def test_broadcast_buffers_are_views_of_two_allocations():
    bufs = BroadcastBuffers(rows=10, width=8, dtype=torch.float32, device=torch.device("cpu"))
    a, b, c = bufs.view(0, 8), bufs.view(1, 3), bufs.view(2, 5)
    assert a.data_ptr() == c.data_ptr() != b.data_ptr()
    assert c.shape == (10, 5) and c.is_contiguous()
    assert bufs.nbytes == 2 * 10 * 8 * 4
