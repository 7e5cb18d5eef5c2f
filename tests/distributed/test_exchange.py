"""The sparsity-aware SpMM (mggcn.distributed.exchange) against the unsharded Â·B and Âᵀ·G and against the broadcast
SpMM.

One spawn per P runs every case: a directed graph (Âᵀ's pattern differs from Â's) in both norms, a graph without
edges (every off-diagonal block empty), and a directed path in the original order (each rank needs rows of its
predecessor only: rank 0 needs nothing forward, the last rank nothing backward).
"""

import numpy as np
import pytest
import torch

import workers
from mggcn.data.graph import Graph
from mggcn.distributed.context import DistContext
from mggcn.distributed.exchange import DENSE_FRACTION, SparseExchangeSpMM
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from reference import adj_hat, random_graph

N, D = 37, 5
OPS = ("broadcast", "sparse", "auto", "auto-dense", "sparse-no-overlap")


def _path_graph(n: int) -> Graph:
    base = random_graph(n, 0, seed=4)
    base.edge_index = np.stack([np.arange(n - 1), np.arange(1, n)])
    return base


def _boundary_graph(n: int) -> Graph:
    """Vertex 0 aggregates from 10 to 17: in the original order at P = 4 (m = 10), rank 0's block of rank 1 needs
    exactly DENSE_FRACTION · m of its rows, which auto takes as a dense pair."""
    base = random_graph(n, 0, seed=5)
    base.edge_index = np.stack([np.arange(10, 18), np.zeros(8, dtype=np.int64)])
    return base


def _assemble(blocks, part, n):
    full = torch.cat(blocks)
    out = torch.empty((n,) + tuple(full.shape[1:]), dtype=full.dtype)
    real = part.order >= 0
    out[torch.from_numpy(part.order[real])] = full[torch.from_numpy(real)]
    return out


def _rows_needed(a: torch.Tensor, part, nprocs: int) -> np.ndarray:
    """k[i, j]: distinct rows of rank j that rank i's block of ``a`` (original ids) references, i != j."""
    new = torch.zeros(part.padded_nodes, part.padded_nodes, dtype=a.dtype)
    real = torch.from_numpy(part.order >= 0)
    idx = torch.from_numpy(part.order[part.order >= 0])
    new[real.nonzero().squeeze(1)[:, None], real.nonzero().squeeze(1)[None, :]] = a[idx][:, idx]
    m = part.rows_per_part
    k = np.zeros((nprocs, nprocs), dtype=np.int64)
    for i in range(nprocs):
        for j in range(nprocs):
            if i != j:
                k[i, j] = int((new[i * m:(i + 1) * m, j * m:(j + 1) * m] != 0).any(dim=0).sum())
    return k


@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_sparse_and_auto_equal_broadcast_and_unsharded(nprocs):
    directed = random_graph(N, 150, directed=True, seed=nprocs)
    cases = [(directed, "sym", make_partition(N, nprocs, 7), None),
             (directed, "mean", make_partition(N, nprocs, 8), None),
             (random_graph(N, 0, seed=3), "sym", make_partition(N, nprocs, 9), None),
             (_path_graph(N), "mean", make_partition(N, nprocs, 0, "none"), None),
             (directed, "sym", make_partition(N, nprocs, 7), 3),  # column tiles: compacted tile by tile
             (_boundary_graph(N), "sym", make_partition(N, nprocs, 0, "none"), None)]
    cases = [(g, norm, part, tiles, torch.randn(N, D), torch.randn(N, D)) for g, norm, part, tiles in cases]
    results = run_workers(workers.exchange_worker, nprocs, (cases,), timeout_s=180)
    results = [r[1] for r in sorted(results, key=lambda r: r[0])]
    for k, (graph, norm, part, _, b, g) in enumerate(cases):
        a = adj_hat(graph.edge_index, N, norm).float()
        m = part.rows_per_part
        needed, needed_t = _rows_needed(a, part, nprocs), _rows_needed(a.t().contiguous(), part, nprocs)
        for name in OPS:
            c, grad, c2 = (_assemble([r[k][name][i] for r in results], part, N) for i in range(3))
            # float32 sums of <= ~15 terms in another order than the reference: a few ulps
            msg = f"P={nprocs} case {k} {name}"
            torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-6, msg=msg)
            torch.testing.assert_close(grad, a.t() @ g, rtol=1e-5, atol=1e-6, msg=msg)
            torch.testing.assert_close(c2, a @ b[:, :1], rtol=1e-5, atol=1e-6, msg=msg)
        # bytes: forward + backward at width D, then forward at width 1; float32
        for i, r in enumerate(results):
            sent, recv = {n: r[k][n][3] for n in OPS}, {n: r[k][n][4] for n in OPS}
            assert recv["broadcast"] == 4 * (nprocs - 1) * m * (2 * D + 1)
            assert sent["broadcast"] == recv["broadcast"]  # every rank is a root once per SpMM
            rows = needed[i].sum() * (D + 1) + needed_t[i].sum() * D
            assert recv["sparse"] == recv["sparse-no-overlap"] == 4 * rows, f"P={nprocs} case {k} rank {i}"
            sent_rows = needed[:, i].sum() * (D + 1) + needed_t[:, i].sum() * D
            assert sent["sparse"] == 4 * sent_rows
            dense = ((needed[i] > 0).sum() * (D + 1) + (needed_t[i] > 0).sum() * D) * m
            assert recv["auto-dense"] == 4 * dense
            # auto: all m rows from a rank whose rows this one needs at least DENSE_FRACTION of, else those rows
            auto = [np.where(rows >= DENSE_FRACTION * m, m, rows).sum() for rows in (needed[i], needed_t[i])]
            assert recv["auto"] == 4 * (auto[0] * (D + 1) + auto[1] * D), f"P={nprocs} case {k} rank {i}"
            assert recv["sparse"] <= recv["auto"] <= recv["broadcast"]
        if k == 2:  # no edges: nothing moves
            assert all(r[k]["sparse"][4] == 0 for r in results)
        if k == 5 and nprocs == 4:  # the boundary is dense: m rows rather than the 8 needed
            assert needed[0, 1] == DENSE_FRACTION * m == 8 and results[0][k]["auto"][4] == 4 * m * (D + 1)
        if k == 3:  # the path: rank 0 receives nothing forward, the last rank sends nothing forward
            assert needed[0].sum() == 0 and needed[:, nprocs - 1].sum() == 0
            assert results[0][k]["sparse"][4] == 4 * needed_t[0].sum() * D


def test_single_process_is_local():
    graph = random_graph(N, 100, seed=1)
    shard = build_shard(graph, make_partition(N, 1, 0, "none"), 0, "sym")
    op = SparseExchangeSpMM(DistContext(), shard.adj, shard.adj_t)
    b = torch.randn(N, 3)
    torch.testing.assert_close(op(b), adj_hat(graph.edge_index, N).float() @ b, rtol=1e-5, atol=1e-6)
    assert op.sent_bytes == op.recv_bytes == 0


def test_mode_is_checked():
    shard = build_shard(random_graph(N, 10), make_partition(N, 1, 0), 0, "sym")
    with pytest.raises(ValueError, match="StagedSpMM"):
        SparseExchangeSpMM(DistContext(), shard.adj, shard.adj_t, mode="broadcast")
