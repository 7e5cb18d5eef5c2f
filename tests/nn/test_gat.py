"""GAT in one process (mggcn/nn/gat.py, mggcn/distributed/attention.py, mggcn/kernels/attention.py, the ``gat``
operator of mggcn/nn/norm.py) against PyG's GATConv and GAT given the same weights; the attention-dropout hash."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv
from torch_geometric.nn.models import GAT as PygGAT

from gat_graph import gat_graph
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import local_adj
from mggcn.kernels import attention as kernels
from mggcn.kernels.attention import dropout_keep, edge_keys, gather_heads, splitmix64
from mggcn.nn.gat import GAT, GATLayer
from mggcn.nn.norm import adds_self_loops, adjacency, normalize, normalized_adjacency
from mggcn.utils.errors import ConfigError

# float64 on both sides: only the summation order differs (online softmax, embedding_bag's sums vs PyG's scatter)
TOL64 = dict(rtol=1e-9, atol=1e-10)


def _local(graph, tile_cols=None):
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, "gat", tile_cols=tile_cols)
    return local_adj(shard.adj[0], shard.adj_t[0])


def _grads(module):
    return {n: p.grad for n, p in module.named_parameters()}


def _assert_grads(got, want, label=""):
    assert set(got) == set(want)
    for name, g in want.items():
        torch.testing.assert_close(got[name], g, **TOL64, msg=lambda m, n=name: f"{label} {n}: {m}")


def _compare(graph, ours, theirs, x, tile_cols=None):
    """``ours`` on the ``gat`` operator and PyG's ``theirs`` on the edges: output, input gradient and every parameter
    gradient equal; returns our output."""
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref = theirs(xa, torch.from_numpy(graph.edge_index))
    out = ours(xb, _local(graph, tile_cols))
    torch.testing.assert_close(out, ref, **TOL64)
    g = torch.randn_like(ref)
    ref.backward(g)
    out.backward(g)
    torch.testing.assert_close(xb.grad, xa.grad, **TOL64)
    _assert_grads(_grads(ours), _grads(theirs))
    return out


def test_gat_operator():
    """``gat``: the input's self loops (a doubled one too) replaced by one unit loop, parallel edges as their count,
    isolated vertices a lone diagonal entry; the same bits from the chunked builder and from a shard."""
    graph = gat_graph()
    a = normalize(adjacency(graph.edge_index, graph.num_nodes), "gat")
    dense = a.toarray()
    assert np.array_equal(np.diag(dense), np.ones(graph.num_nodes))
    assert dense[2, 1] >= 3  # the triple edge 1 -> 2 (row: target)
    expected = np.zeros_like(dense)
    src, dst = graph.edge_index
    off = src != dst
    np.add.at(expected, (dst[off], src[off]), 1.0)
    expected += np.eye(graph.num_nodes)
    assert np.array_equal(dense, expected)
    assert adds_self_loops("gat") and adds_self_loops("sym") and not adds_self_loops("sum")
    again = normalized_adjacency(graph.edge_index, graph.num_nodes, "gat")
    assert (again != a).nnz == 0 and again.dtype == np.float32
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, "gat")
    assert (shard.adj[0].to_scipy() != a).nnz == 0
    assert (shard.adj_t[0].to_scipy() != sp.csr_matrix(a.T)).nnz == 0


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("tile_cols,edge_chunk", [(None, None), (4, None), (None, 7), (4, 3)])
def test_layer_equals_gatconv(concat, tile_cols, edge_chunk, monkeypatch):
    """Output and every gradient (W, att_src, att_dst, bias, input) of one layer equal PyG's GATConv's, with whole
    or tiled blocks, processed whole or a few rows at a time."""
    if edge_chunk is not None:
        monkeypatch.setattr(kernels, "EDGE_CHUNK", edge_chunk)
    graph = gat_graph()
    torch.manual_seed(0)
    conv = GATConv(5, 4, heads=3, concat=concat).double()
    with torch.no_grad():
        conv.bias.normal_()
    layer = GATLayer(5, 4, heads=3, concat=concat).double()
    layer.load_state_dict(conv.state_dict(), strict=True)
    out = _compare(graph, layer, conv, torch.randn(graph.num_nodes, 5, dtype=torch.float64), tile_cols)
    assert out.shape == (graph.num_nodes, 12 if concat else 4)


@pytest.mark.parametrize("activation", ["leaky_relu", "elu"])
@pytest.mark.parametrize("bias", [True, False])
def test_model_loads_into_pyg_gat_and_matches(bias, activation):
    """A 3-layer GAT's state dict loads strictly into PyG's GAT(in, hidden, 3, out, heads=H, act=σ); logits and
    every gradient match, in eval mode (no dropout) and with the default initialization. Without biases σ runs on a
    copy of the attention's output, which its backward keeps."""
    graph = gat_graph()
    model = GAT([5, 8, 8, 3], heads=2, seed=4, activation=activation, bias=bias).double()
    pyg = PygGAT(5, 8, 3, 3, heads=2, act=activation, bias=bias)
    pyg.load_state_dict(model.pyg_state_dict(), strict=True)
    pyg = pyg.double()
    biases = 0 if bias else 8 + 8 + 3
    assert sum(p.numel() for p in pyg.parameters()) == GAT.num_parameters([5, 8, 8, 3], heads=2) - biases
    assert [tuple(p.shape) for p in model.parameters()] == [tuple(p.shape) for p in pyg.parameters()]
    _compare(graph, model, pyg, torch.as_tensor(graph.x, dtype=torch.float64))


def test_training_losses_equal_pyg():
    """Ten epochs of Adam from the same weights give PyG's GAT's losses (float64, no dropout)."""
    graph = gat_graph()
    model = GAT([5, 6, 3], heads=3, seed=1).double()
    pyg = PygGAT(5, 6, 2, 3, heads=3)
    pyg.load_state_dict(model.pyg_state_dict(), strict=True)
    pyg = pyg.double()
    x = torch.as_tensor(graph.x, dtype=torch.float64)
    y, train = torch.as_tensor(graph.y), torch.as_tensor(graph.masks["train"])
    ei, adj = torch.from_numpy(graph.edge_index), _local(graph)
    curves = []
    for net, run in ((model, lambda: model(x, adj)), (pyg, lambda: pyg(x, ei))):
        opt = torch.optim.Adam(net.parameters(), lr=0.05, weight_decay=5e-4)
        losses = []
        for _ in range(10):
            opt.zero_grad()
            loss = F.cross_entropy(run()[train], y[train])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves.append(losses)
    assert curves[0][-1] < curves[0][0]  # it learns
    np.testing.assert_allclose(curves[0], curves[1], rtol=1e-9)


def test_attention_dropout_masks(monkeypatch):
    """Training mode drops attention weights by the hash of (seed, layer, head, ids): the same seed gives the same
    logits (also a few rows at a time), another seed others, eval mode none; the kept fraction is about 1 - p and
    differs by head, layer and seed."""
    graph = gat_graph()
    adj = _local(graph)
    model = GAT([5, 6, 3], heads=3, attention_dropout=0.5, seed=2).double()
    x = torch.as_tensor(graph.x, dtype=torch.float64)
    first = model(x, adj)
    model.seed_attention(2)  # the init seed: the same masks
    torch.testing.assert_close(model(x, adj), first, rtol=0, atol=0)
    monkeypatch.setattr(kernels, "EDGE_CHUNK", 5)
    torch.testing.assert_close(model(x, adj), first, **TOL64)  # the same masks, other summation order
    monkeypatch.undo()
    model.seed_attention(5)
    assert not torch.allclose(model(x, adj), first)
    model.eval()
    pyg = PygGAT(5, 6, 2, 3, heads=3).double().eval()
    pyg.load_state_dict(model.pyg_state_dict(), strict=True)
    torch.testing.assert_close(model(x, adj), pyg(x, torch.from_numpy(graph.edge_index)), **TOL64)

    src = torch.arange(200_000) % 1000
    dst = torch.arange(200_000) // 1000
    keep = dropout_keep(3, 1, src, dst, 4, 0.3)
    assert keep.shape == (200_000, 4)
    assert abs(keep.float().mean().item() - 0.7) < 0.01
    assert not torch.equal(keep[:, 0], keep[:, 1])
    assert not torch.equal(keep, dropout_keep(3, 2, src, dst, 4, 0.3))
    assert not torch.equal(keep, dropout_keep(4, 1, src, dst, 4, 0.3))
    assert torch.equal(keep[5000:6000], dropout_keep(3, 1, src[5000:6000], dst[5000:6000], 4, 0.3))  # any subset
    assert dropout_keep(3, 1, src, dst, 4, 0.0).all()


def test_attention_dropout_is_differentiated_with_its_forwards_masks():
    """Training mode with attention dropout: backward drops the edges forward dropped, so the gradients are those
    of the function the forward computed (central differences in float64, masks fixed by the seed); and the kept
    weights are scaled by 1 / (1 - p), so the mean over many masks is the eval-mode output."""
    graph = gat_graph()
    adj = _local(graph)
    model = GAT([5, 6, 3], heads=3, attention_dropout=0.5, seed=2).double()
    x = torch.as_tensor(graph.x, dtype=torch.float64).requires_grad_()
    g = torch.randn(graph.num_nodes, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def loss() -> torch.Tensor:
        model.seed_attention(2)
        return (model(x, adj) * g).sum()

    loss().backward()
    att = model.convs[0].att_src
    for tensor, grad in ((x, x.grad.clone()), (att, att.grad.clone())):
        numeric = torch.empty_like(tensor)
        with torch.no_grad():
            flat = tensor.view(-1)
            for i in range(tensor.numel()):
                flat[i] += 1e-6
                up = loss()
                flat[i] -= 2e-6
                numeric.view(-1)[i] = (up - loss()) / 2e-6
                flat[i] += 1e-6
        # central differences in float64, step 1e-6: truncation ~1e-12 times the third derivative, rounding ~1e-10
        torch.testing.assert_close(grad, numeric, rtol=1e-6, atol=1e-7)
    with torch.no_grad():
        mean = torch.zeros(graph.num_nodes, 3, dtype=torch.float64)
        for seed in range(400):
            model.seed_attention(seed)
            mean += model(x, adj) / 400
        expected = model.eval()(x, adj)
    assert 0.95 < (mean.abs().mean() / expected.abs().mean()).item() < 1.05


def test_splitmix64_matches_the_reference_bits():
    """The int64 mix wraps like the 64-bit unsigned reference (SplitMix64 of state 0 and 1, first outputs)."""
    got = splitmix64(torch.tensor([0, 0x9E3779B97F4A7C15 - (1 << 64)], dtype=torch.int64))
    # SplitMix64 seeded with 0: its first two outputs (the state advances by the golden ratio before each mix)
    want = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]
    assert [v & ((1 << 64) - 1) for v in got.tolist()] == want
    keys = edge_keys(1, 0, torch.tensor([7]), torch.tensor([9]), 2)
    assert keys.shape == (1, 2) and keys[0, 0] != keys[0, 1]


def test_gather_heads_is_a_per_head_weighted_sum():
    """The embedding_bag kernel equals the gather-multiply-add it stands for (float32 and float64, empty rows)."""
    dense = sp.random(7, 9, density=0.3, random_state=0).toarray()
    dense[3] = 0  # a row without entries
    csr = sp.csr_matrix(dense)
    for dtype in (torch.float32, torch.float64):
        crow, col = torch.from_numpy(csr.indptr).long(), torch.from_numpy(csr.indices).long()
        row = torch.repeat_interleave(torch.arange(7), crow.diff())
        weights = torch.rand(col.numel(), 3, dtype=dtype)
        table = torch.randn(9, 3, 4, dtype=dtype)
        want = torch.zeros(7, 3, 4, dtype=dtype).index_add_(0, row, weights[:, :, None] * table[col])
        torch.testing.assert_close(gather_heads(crow, col, weights, table), want)


def test_bad_heads_name_the_option():
    with pytest.raises(ConfigError, match="hidden 10 with 4 heads") as info:
        GAT([5, 10, 3], heads=4)
    assert info.value.option == "heads"
    with pytest.raises(ConfigError) as info:
        GAT([5, 8, 3], heads=0)
    assert info.value.option == "heads"
    with pytest.raises(ConfigError) as info:
        GAT([5, 8, 3], heads=2, attention_dropout=1.0)
    assert info.value.option == "attention_dropout"
    assert GAT.operator("sym") == "gat" and not GAT([5, 8, 3]).caches_input_aggregation
    assert torch.equal(GAT([5, 8, 3], seed=3).convs[0].lin.weight, GAT([5, 8, 3], seed=3).convs[0].lin.weight)


@pytest.mark.parametrize("comm", ["broadcast", "sparse"])
def test_layout_operator_carries_original_ids(comm):
    """``ParallelLayout.spmm_operator`` gives its operator the original id of each row (the renumbering's), which
    ``all_vertex_ids`` returns at P = 1; the dropout masks hash them, so a renumbered run draws the same masks."""
    from mggcn.distributed.context import DistContext
    from mggcn.distributed.parallel_layout import ParallelLayout

    graph = gat_graph()
    layout = ParallelLayout(1, comm=comm, ordering="random", seed=5)
    part = layout.partition(graph)
    assert not np.array_equal(part.order, np.arange(graph.num_nodes))
    shard = layout.shard(graph, DistContext(), "gat", 8, partition=part)
    op, _ = layout.spmm_operator(DistContext(), shard, 8)
    assert torch.equal(op.all_vertex_ids(), torch.from_numpy(part.order))
    model = GAT([5, 6, 3], heads=3, attention_dropout=0.5, seed=2).double()
    x = torch.as_tensor(graph.x, dtype=torch.float64)
    renumbered = model(x[torch.from_numpy(part.order)], op)[torch.from_numpy(part.position)]
    torch.testing.assert_close(renumbered, model(x, _local(graph)), **TOL64)


def test_bfloat16_runs_at_its_precision():
    """A bfloat16 GAT (the per-edge dot products multiplied in float32: the SDDMM has no 16-bit kernel) gives the
    float32 model's logits and input gradient to bfloat16's precision: 8 bits of mantissa (2^-8 ≈ 0.4%) lost in
    every rounding, and the softmax's lse is exchanged in bfloat16, so α carries ~|lse|·2^-8 of relative error: a few
    percent of the largest value."""
    graph = gat_graph()
    adj = _local(graph)
    model = GAT([5, 6, 3], heads=3, seed=1)
    x = torch.as_tensor(graph.x).requires_grad_()
    ref = model(x, adj)
    ref.sum().backward()
    low = GAT([5, 6, 3], heads=3, seed=1).to(torch.bfloat16)
    xb = torch.as_tensor(graph.x).bfloat16().requires_grad_()
    out = low(xb, adj)
    out.float().sum().backward()
    assert out.dtype == xb.grad.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max() < 0.03 * ref.abs().max()
    assert (xb.grad.float() - x.grad).abs().max() < 0.15 * x.grad.abs().max()
