"""GAT's attention kernels (mggcn/kernels/attention.py) against plain gather-scatter references, and the attention
(mggcn/distributed/attention.py) run as work items on several workers: the same bits as one thread."""

import threading

import pytest
import scipy.sparse as sp
import torch

from gat_graph import gat_graph
from mggcn.distributed import attention as distributed
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import local_adj
from mggcn.kernels import attention as kernels
from mggcn.kernels.attention import AttentionSpec
from mggcn.kernels.policy import shared_threads


def _csr(rows=7, cols=9, seed=0):
    dense = sp.random(rows, cols, density=0.3, random_state=seed).toarray()
    dense[3] = 0  # a row without entries
    return sp.csr_matrix(dense)


@pytest.mark.parametrize("index", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_edge_dots_and_segments_equal_the_gathered_reference(index, dtype):
    """The heads' stacked SDDMM gives each edge's per-head dot product; the segment max and sum give the per-row
    scatter's (-inf and 0 on the empty row). float64 exact up to the order of a C-term sum, float32 likewise."""
    csr = _csr()
    crow, col = torch.from_numpy(csr.indptr).long(), torch.from_numpy(csr.indices).to(index)
    row = torch.repeat_interleave(torch.arange(7), crow.diff())
    left, right = torch.randn(7, 3, 4, dtype=dtype), torch.randn(9, 3, 4, dtype=dtype)
    want = (left[row] * right[col.long()]).sum(-1)
    torch.testing.assert_close(kernels.edge_dots(crow, col, left, right), want)
    values = torch.randn(col.numel(), 3, dtype=dtype)
    top = torch.full((7, 3), float("-inf"), dtype=dtype).scatter_reduce_(0, row[:, None].expand(-1, 3), values, "amax")
    assert torch.equal(kernels.segment_max(crow, values), top)
    sums = torch.zeros(7, 3, dtype=dtype).index_add_(0, row, values)
    torch.testing.assert_close(kernels.segment_sum(crow, values), sums)


def test_tile_chunks_cover_the_tile_in_whole_rows():
    """Every edge once, in CSR order, whole rows per chunk, int32 row ids; fewer than max_edges before a chunk's
    last row (a chunk ends at the row holding the next multiple of max_edges)."""
    csr = _csr(40, 30, seed=1)
    tile = torch.sparse_csr_tensor(torch.from_numpy(csr.indptr), torch.from_numpy(csr.indices),
                                   torch.from_numpy(csr.data))
    chunks = kernels.tile_chunks(tile, 10)
    assert len(chunks) > 3
    rows = torch.cat([c.row.long() + c.r0 for c in chunks])
    assert torch.equal(rows, torch.repeat_interleave(torch.arange(40), torch.from_numpy(csr.indptr).diff()))
    assert torch.equal(torch.cat([c.col for c in chunks]), tile.col_indices())
    for c in chunks:
        assert c.row.dtype == torch.int32 and c.crow[-1] == c.col.numel()
        assert c.crow[-2] < 10


def _run(graph, threads, dropout, item_edges, monkeypatch):
    """Output and gradients (z, e_src, e_dst) of the attention with ``threads`` workers, items of ``item_edges``."""
    monkeypatch.setattr(kernels, "ITEM_EDGES", item_edges)
    monkeypatch.setenv("MGGCN_CPU_KERNELS", "shared")
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, "gat")
    op = local_adj(shard.adj[0], shard.adj_t[0])
    gen = torch.Generator().manual_seed(0)
    z, e_src, e_dst = (torch.randn(graph.num_nodes, *shape, generator=gen, requires_grad=True)
                       for shape in ((3, 4), (3,), (3,)))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert shared_threads("cpu") == threads
        out = distributed.attention(z, e_src, e_dst, op, AttentionSpec(dropout=dropout, seed=3))
        out.backward(torch.randn(out.shape, generator=gen))
    finally:
        torch.set_num_threads(before)
    return [out.detach(), z.grad, e_src.grad, e_dst.grad]


@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_items_on_several_workers_give_the_bits_of_one_thread(dropout, monkeypatch):
    """Chunks of a few edges taken by 2 workers in whatever order: every result bitwise equal to one thread's (the
    rows' sums do not depend on the chunking and the destinations' gradients are added in chunk order), run after
    run."""
    graph = gat_graph(200)
    one = _run(graph, 1, dropout, 8, monkeypatch)
    for _ in range(3):
        for got, want in zip(_run(graph, 2, dropout, 8, monkeypatch), one, strict=True):
            assert torch.equal(got, want)


def test_row_steps_on_several_workers_give_the_bits_of_one_thread(monkeypatch):
    """The row-wise steps (the online softmax's start and end, the tiles' copies, the backward's rows sent) cut
    between 2 workers at a few rows each: every result bitwise equal to one thread's, which runs them whole."""
    graph = gat_graph(200)
    one = _run(graph, 1, 0.0, 8, monkeypatch)
    monkeypatch.setattr(distributed, "_MIN_ROWS", 16)
    cuts = []
    original = distributed._by_rows

    def counting(m, step, device):
        cuts.append(min(shared_threads(device), m // distributed._MIN_ROWS))
        original(m, step, device)

    monkeypatch.setattr(distributed, "_by_rows", counting)
    got = _run(graph, 2, 0.0, 8, monkeypatch)
    assert cuts and all(cut == 2 for cut in cuts)  # every row-wise step ran on both workers
    for g, want in zip(got, one, strict=True):
        assert torch.equal(g, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_leaky_relu_grad_is_the_derivative_times_the_gradient(dtype):
    """``grad`` times LeakyReLU's derivative at ``pre``, zero counted as negative (torch's and PyG's choice),
    the same bits as autograd's backward of F.leaky_relu."""
    pre = torch.tensor([[-2.0, 0.0, 3.0], [0.5, -0.0, -1e-3]], dtype=dtype, requires_grad=True)
    grad = torch.tensor([[1.5, 2.0, -3.0], [4.0, -5.0, 6.0]], dtype=dtype)
    torch.nn.functional.leaky_relu(pre, 0.2).backward(grad)
    got = kernels.leaky_relu_grad(grad, pre.detach(), 0.2)
    assert torch.equal(got, pre.grad)
    assert torch.equal(got[0], torch.stack([grad[0, 0] * 0.2, grad[0, 1] * 0.2, grad[0, 2]]))


def test_attention_rows_is_the_attention_of_its_columns():
    """``attention_rows`` on ``[Z | e_src | e_dst]`` gives ``attention``'s output and, column block by column
    block, its gradients (float64; the same kernels: equal up to nothing but the layout)."""
    graph = gat_graph(60)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, "gat")
    op = local_adj(shard.adj[0], shard.adj_t[0])
    gen = torch.Generator().manual_seed(1)
    n, heads, channels = graph.num_nodes, 3, 4
    z, e_src, e_dst = (torch.randn(n, *shape, generator=gen, dtype=torch.float64, requires_grad=True)
                       for shape in ((heads, channels), (heads,), (heads,)))
    rows = torch.cat([z.detach().reshape(n, -1), e_src.detach(), e_dst.detach()], dim=1).requires_grad_()
    grad = torch.randn(n, heads, channels, generator=gen, dtype=torch.float64)
    out = distributed.attention(z, e_src, e_dst, op)
    out.backward(grad)
    got = distributed.attention_rows(rows, heads, op)
    got.backward(grad)
    assert torch.equal(got, out)
    assert torch.equal(rows.grad, torch.cat([z.grad.reshape(n, -1), e_src.grad, e_dst.grad], dim=1))
    with pytest.raises(ValueError, match="rows"):
        distributed.attention_rows(rows[:, :-1], heads, op)


def test_a_failed_item_releases_the_items_waiting_for_it(monkeypatch):
    """An error in one chunk's backward reaches the caller; the workers waiting to add after it stop (no hang)."""
    calls = []
    original = kernels.leaky_relu_grad

    def failing(grad, pre, slope):
        calls.append(threading.get_ident())
        if len(calls) == 2:
            raise RuntimeError("chunk failed")
        return original(grad, pre, slope)

    monkeypatch.setattr(kernels, "leaky_relu_grad", failing)
    with pytest.raises(RuntimeError, match="chunk failed"):
        _run(gat_graph(200), 2, 0.0, 8, monkeypatch)
