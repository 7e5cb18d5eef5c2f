import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import GCN as PygGCN

from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import local_adj
from mggcn.nn.functional import dropout
from mggcn.nn.model import GCN, GCNLayer, aggregate_first
from reference import random_graph


def _local(graph, norm="sym"):
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, norm)
    return local_adj(shard.adj[0], shard.adj_t[0])


@pytest.mark.parametrize("order", ["aggregate-first", "transform-first"])
@pytest.mark.parametrize("first", [True, False])
def test_layer_equals_pyg_gcnconv(order, first):
    graph = random_graph(23, 90, features=6, directed=True)
    layer = GCNLayer(6, 4, first=first, order=order)
    with torch.no_grad():
        layer.bias.normal_()
    conv = GCNConv(6, 4)
    conv.load_state_dict(layer.state_dict())  # same names: lin.weight, bias

    x1 = torch.from_numpy(graph.x).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    out = layer(x1, _local(graph))
    ref = conv(x2, torch.from_numpy(graph.edge_index))
    # float32, different summation order: a few ulps of values of order 1
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(out)
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.lin.weight.grad, conv.lin.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.bias.grad, conv.bias.grad, rtol=1e-5, atol=1e-5)


def test_order_policy():
    # hidden layers: the narrower side
    assert aggregate_first(128, 256, first=False)
    assert not aggregate_first(256, 128, first=False)
    # first layer: one SpMM at d_in against two at d_out
    assert aggregate_first(200, 128, first=True)
    assert not aggregate_first(602, 128, first=True)
    assert aggregate_first(602, 128, first=True, order="aggregate-first")
    assert not aggregate_first(16, 128, first=False, order="transform-first")


def test_model_orders_and_input_cache_give_the_same_numbers():
    graph = random_graph(31, 120, features=7, classes=3)
    adj = _local(graph)
    x = torch.from_numpy(graph.x)
    outs, grads = [], []
    for order, cached in (("aggregate-first", False), ("transform-first", False), ("auto", True)):
        model = GCN([7, 5, 9, 3], order=order, seed=3)
        out = model(x, adj, x_aggregated=adj(x) if cached else None)
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    for out, grad in zip(outs[1:], grads[1:]):
        torch.testing.assert_close(out, outs[0], rtol=1e-5, atol=1e-5)
        for a, b in zip(grad, grads[0]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dims", [[7, 5, 3], [7, 5, 9, 3], [7, 5, 9, 6, 3]])
def test_eval_mode_drops_nothing(dims):
    """In eval mode a model with dropout computes what the same weights without it do, call after call (two
    layers fuse GEMM-σ-GEMM, which drops nothing anyway; three and four reach every layer's own dropout)."""
    graph = random_graph(31, 120, features=7, classes=3)
    adj, x = _local(graph), torch.from_numpy(graph.x)
    with torch.no_grad():
        plain = GCN(dims, seed=3).eval()(x, adj)
        dropped = GCN(dims, dropout=0.5, input_dropout=0.3, seed=3).eval()
        torch.testing.assert_close(dropped(x, adj), plain, rtol=0, atol=0)
        torch.testing.assert_close(dropped(x, adj), plain, rtol=0, atol=0)
        assert not torch.equal(dropped.train()(x, adj), plain)  # else the test could not tell


def test_first_layer_skips_its_backward_spmm():
    graph = random_graph(19, 60, features=4)
    adj = _local(graph)
    calls = []
    original = adj.run

    def counting(b, transpose=False, out=None):
        calls.append(transpose)
        return original(b, transpose, out)

    adj.run = counting
    model = GCN([4, 8, 3], order="auto")  # layer 0: 4 <= 2*8, aggregate first
    model(torch.from_numpy(graph.x), adj).sum().backward()
    # forward: layer 0 and layer 1; backward: layer 1 only
    assert calls == [False, False, True]


def test_state_dict_loads_into_pyg():
    graph = random_graph(17, 50, features=5, classes=4)
    model = GCN([5, 8, 8, 4], seed=1)
    pyg = PygGCN(5, 8, num_layers=3, out_channels=4)
    pyg.load_state_dict(model.gcnconv_state_dict())
    x = torch.from_numpy(graph.x)
    ours = model(x, _local(graph))
    theirs = pyg(x, torch.from_numpy(graph.edge_index))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_same_seed_same_weights():
    a, b = GCN([5, 8, 3], seed=4), GCN([5, 8, 3], seed=4)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    w = a.convs[0].lin.weight
    bound = np.sqrt(6 / (5 + 8))
    assert w.abs().max() <= bound and w.abs().max() > bound / 2  # Glorot range


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_from_a_generator_equals_torch_dropout_seeded_alike(p):
    """The same masks and gradients as ``F.dropout`` after ``torch.manual_seed(s)``, without touching that RNG."""
    x = torch.randn(37, 11, generator=torch.Generator().manual_seed(0), requires_grad=True)
    g = torch.randn(37, 11, generator=torch.Generator().manual_seed(1))
    state = torch.get_rng_state()
    got = dropout(x, p, torch.Generator().manual_seed(7))
    got.backward(g)
    got_grad, x.grad = x.grad, None
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(7)
    want = torch.nn.functional.dropout(x, p, training=True)
    want.backward(g)
    assert torch.equal(got, want) and torch.equal(got_grad, x.grad)
    torch.set_rng_state(state)


def test_gcn_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    model = GCN([6, 5, 3], dropout=0.5, input_dropout=0.3, seed=3, reuse_buffers=False).train()
    model.seed_dropout(11)
    first = model(torch.ones(4, 6), lambda h, **_: h)
    model.seed_dropout(11)
    assert torch.equal(model(torch.ones(4, 6), lambda h, **_: h), first)  # the same seed, the same masks
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("activation", ["relu", "leaky_relu", "elu"])
@pytest.mark.parametrize("dims", [[7, 5, 9, 3], [6, 16, 11, 4], [5, 12, 3]])
def test_gradients_over_the_outputs_they_belong_to_equal_fresh_tensors(dims, activation, monkeypatch):
    """A hidden layer that multiplies first writes σ's gradient over σ's output, a few rows at a time (blocks of 2 to 3
    rows here: each block's GEMM, then σ's backward reading the block's signs before they are overwritten); the
    loss's gradient over the logits, the SpMM's over H·W: the gradients of a model that makes a new tensor of every
    gradient. The losses are the same bits (the forward passes are the same); the gradients agree to float32 rounding,
    not bit for bit: a GEMM of a few rows may sum its K products in another order than one GEMM of every row (MKL
    picks its kernel by the shape and the buffers' alignment), a relative 1e-7 per sum, far inside rtol 1e-5."""
    from mggcn.kernels import policy
    from mggcn.nn.loss import MaskedCrossEntropy

    monkeypatch.setattr(policy, "MASK_CHUNK", 24)
    graph = random_graph(31, 120, features=dims[0], classes=dims[-1])
    adj, x = _local(graph), torch.from_numpy(graph.x)
    y, train = torch.from_numpy(graph.y), torch.from_numpy(graph.masks["train"])
    grads, losses = [], []
    for reuse in (False, True):
        model = GCN(dims, activation=activation, seed=3, reuse_buffers=reuse)
        criterion = MaskedCrossEntropy(y, train, int(train.sum()), model.workspace, in_place=reuse)
        for _ in range(2):  # the second epoch reuses the first one's buffers
            model.zero_grad()
            loss, _ = criterion(model(x, adj, x_aggregated=adj(x), logits_in_workspace=True))
            loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
        if reuse:  # every gradient over what it is the gradient of, but an aggregate-first SpMM's (layer 1 of dims0)
            shared = {"grad a"} if any(conv.aggregate_first for conv in model.convs[1:]) else set()
            assert {"grad a", "grad b"} & set(model.workspace.sizes) == shared
    assert torch.equal(losses[0], losses[1])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("activation", ["relu", "leaky_relu", "elu"])
@pytest.mark.parametrize("dims, cached", [([6, 8, 3], True), ([5, 4, 16, 3], False), ([5, 4, 16, 3], True)])
def test_a_gemm_sigma_and_the_next_gemm_in_row_blocks_equal_the_layers_one_by_one(dims, cached, bias, activation,
                                                                                  monkeypatch):
    """A layer that ends with its GEMM, σ and a layer that multiplies first run as one step a few rows at a time
    (``_GemmActGemm``; [6, 8, 3] cached: layers 0-1, Â·X given; [5, 4, 16, 3]: layers 1-2, whose input Â·H needs a
    gradient): outputs and every gradient equal the same model without a workspace, which runs layer by layer with
    whole GEMMs, to float32 rounding (a GEMM of a few rows may sum in another order: rtol 1e-5); without autograd too.
    A forward hook on either layer turns the fusion off."""
    from mggcn.kernels import policy
    from mggcn.nn import functional as model_module

    monkeypatch.setattr(policy, "GEMM_CHUNK", 40)  # blocks of 2-10 rows and a shorter last one
    monkeypatch.setattr(policy, "MASK_CHUNK", 24)
    fused = []
    apply = model_module._GemmActGemm.apply
    monkeypatch.setattr(model_module._GemmActGemm, "apply", lambda *args: fused.append(args[-2]) or apply(*args))
    graph = random_graph(31, 120, features=dims[0], classes=dims[-1], directed=True, seed=4)
    adj, x = _local(graph), torch.from_numpy(graph.x)
    weights = torch.randn(31, dims[-1], generator=torch.Generator().manual_seed(1))
    outs, grads = [], []
    for reuse in (False, True):
        model = GCN(dims, activation=activation, bias=bias, seed=3, reuse_buffers=reuse)
        x_agg = adj(x) if cached else None
        out = model(x, adj, x_aggregated=x_agg)
        (out * weights).sum().backward()
        outs.append(out.detach().clone())
        grads.append([p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            torch.testing.assert_close(model(x, adj, x_aggregated=x_agg), outs[-1], rtol=1e-5, atol=1e-6)
    pair = "0" if cached and dims[1] == 8 else "1"
    assert fused == [pair, pair]  # the model with a workspace only, with and without autograd
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    # a forward hook on a layer sees its call: hooked layers run one by one, with the same outputs
    seen = []
    handle = model.convs[int(pair) + 1].register_forward_hook(lambda _m, _i, out: seen.append(out.detach().clone()))
    with torch.no_grad():
        torch.testing.assert_close(model(x, adj, x_aggregated=x_agg), outs[1], rtol=1e-5, atol=1e-6)
    handle.remove()
    assert len(seen) == 1 and len(fused) == 2


@pytest.mark.parametrize("rows", [3, 12, 40, 41, 47, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weight_gradient_split_among_threads_equals_the_gemm(rows, dtype, monkeypatch):
    """``static`` kernels: weight_grad sums its rows in 2 · threads parts by one bmm, plus the rows left over: the
    GEMM's result, summed in another order (float32: rtol 1e-5 over ≤ 64 products); fewer parts where the rows or the
    bytes of the partial products bound them; too few rows for two parts, or a strided operand, take the GEMM."""
    from mggcn.kernels import policy
    from mggcn.nn import functional as model_module

    monkeypatch.setenv(policy.CPU_KERNELS_ENV, "static")
    monkeypatch.setattr(policy, "SPLIT_ROWS", 5)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # 4 parts: 40 rows split, 41 and 47 leave rows over
    gen = torch.Generator().manual_seed(rows)
    grad, h = torch.randn(rows, 6, generator=gen, dtype=dtype), torch.randn(rows, 9, generator=gen, dtype=dtype)
    bmm = torch.bmm
    parts = []
    monkeypatch.setattr(torch, "bmm", lambda a, b: parts.append(a.shape[0]) or bmm(a, b))
    torch.testing.assert_close(model_module.weight_grad(grad, h), grad.t() @ h, rtol=1e-5, atol=1e-6)
    assert parts == ([min(4, rows // 5)] if rows >= 10 else [])
    strided = torch.randn(9, rows, generator=gen, dtype=dtype).t()
    torch.testing.assert_close(model_module.weight_grad(grad, strided), grad.t() @ strided, rtol=1e-5, atol=1e-6)
    assert len(parts) == (rows >= 10)
    # partial products of 6 × 9 elements: room for 2 of them
    monkeypatch.setattr(policy, "SPLIT_BYTES", 2 * 6 * 9 * grad.element_size() + 1)
    torch.testing.assert_close(model_module.weight_grad(grad, h), grad.t() @ h, rtol=1e-5, atol=1e-6)
    assert parts[len(parts) - 1:] == ([2] if rows >= 10 else [])


@pytest.mark.parametrize("rows", [9, 10, 41, 64])
def test_weight_gradient_items_are_the_same_sum_at_any_thread_count(rows, monkeypatch):
    """``shared`` kernels: weight_grad's parts are items the threads take (rows // SPLIT_ROWS of them, bounded by
    SPLIT_BYTES, the last one shorter), whatever the thread count: 1, 2 and 3 workers give the same bits, the GEMM's
    result to float rounding (float32 sums of ≤ 64 products: rtol 1e-5); too few rows for two parts take the GEMM."""
    from mggcn.kernels import policy
    from mggcn.nn import functional as model_module

    monkeypatch.delenv(policy.CPU_KERNELS_ENV, raising=False)
    monkeypatch.setattr(policy, "SPLIT_ROWS", 5)
    gen = torch.Generator().manual_seed(rows)
    grad, h = torch.randn(rows, 6, generator=gen), torch.randn(rows, 9, generator=gen)
    from mggcn.kernels.shared import run_items

    counts, results = [], []
    monkeypatch.setattr(model_module, "run_items", lambda count, item, threads: counts.append(count) or
                        run_items(count, item, threads))
    for threads in (1, 2, 3):
        monkeypatch.setattr(model_module, "shared_threads", lambda device, threads=threads: threads)
        results.append(model_module.weight_grad(grad, h))
        torch.testing.assert_close(results[-1], grad.t() @ h, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(r, results[0]) for r in results[1:])
    parts = rows // 5
    assert counts == ([-(-rows // -(-rows // parts))] * 3 if parts >= 2 else [])


@pytest.mark.parametrize("dtype, bound", [(torch.float64, 1e-15), (torch.float32, 2**-23), (torch.bfloat16, 2**-8)])
def test_sigmas_backward_from_its_output_is_as_exact_as_the_outputs_dtype(dtype, bound):
    """σ's backward reads σ's output (kept in place of its input): for ELU its derivative is the output plus 1, as
    exact as the output near -1 in absolute terms (bfloat16: the output's rounding, 2^-9, and the result's and the
    reference's, 2^-10 each; the derivative of an input below about -6 is read as 0); ReLU's and LeakyReLU's are
    exact in any dtype. Against float64's derivative of the same inputs, over the output as the models run it."""
    from mggcn.nn.functional import LEAKY_SLOPE, _activation_backward, sigma_

    x = torch.linspace(-12, 6, 20001, dtype=torch.float64)
    positive = x > 0
    for activation, derivative in (("elu", torch.where(positive, torch.ones_like(x), x.exp())),
                                   ("relu", positive.double()),
                                   ("leaky_relu", torch.where(positive, 1.0, torch.full_like(x, LEAKY_SLOPE)))):
        out = sigma_(x.to(dtype, copy=True), activation)
        got = _activation_backward(torch.ones_like(out), out, activation, out).double()  # over the output
        error = (got - derivative.to(dtype).double()).abs().max()
        assert error <= (bound if activation == "elu" else 0.0), (activation, float(error))
