"""GraphSAGE and GIN (mggcn/nn/sage.py, mggcn/nn/gin.py, mggcn/nn/models.py) against PyG's SAGEConv / GINConv and
its GraphSAGE / GIN models given the same weights, in one process and through the staged SpMM at P = 1..4."""

import copy
import itertools

import pytest
import torch
from torch_geometric.nn import GINConv, SAGEConv
from torch_geometric.nn.models import GIN as PygGIN
from torch_geometric.nn.models import MLP
from torch_geometric.nn.models import GraphSAGE as PygGraphSAGE

import mggcn
import workers
from mggcn.config import MODELS
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import local_adj
from mggcn.nn.gin import GIN, GINLayer
from mggcn.nn.models import make_model, operator_for
from mggcn.nn.norm import adjacency, normalize
from mggcn.nn.sage import GraphSAGE, SAGELayer
from mggcn.utils.errors import ConfigError
from reference import random_graph

# float32, another summation order than PyG's scatter: a few ulps of values of order 1-10
TOL = dict(rtol=1e-5, atol=1e-5)


def _local(graph, kind):
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, operator_for(kind))
    return local_adj(shard.adj[0], shard.adj_t[0])


def _pyg_conv(kind, d_in, d_out, train_eps=False, batch_norm=False):
    if kind == "sage":
        return SAGEConv(d_in, d_out)
    return GINConv(MLP([d_in, d_out, d_out], norm="batch_norm" if batch_norm else None), train_eps=train_eps)


def _layer(kind, d_in, d_out, first, order, train_eps=False, batch_norm=False):
    if kind == "sage":
        return SAGELayer(d_in, d_out, first=first, order=order)
    return GINLayer(d_in, d_out, first=first, order=order, train_eps=train_eps, mlp_batch_norm=batch_norm)


def _perturbed_state(layer, seed):
    """The layer's parameters with random biases and, for GIN, a nonzero ε and a batch norm's scale other than 1:
    every term shows in the output."""
    gen = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in layer.state_dict().items()}
    for k, v in state.items():
        if k.endswith("bias") or k == "eps":
            state[k] = torch.randn(v.shape, generator=gen) * 0.5
        elif k.endswith("module.weight"):
            state[k] = 1 + torch.randn(v.shape, generator=gen) * 0.5
    return state


def test_operators():
    """in-mean: each row of a vertex with in-edges sums to 1 and keeps the edges as given (self loops, parallel
    edges counted); sum: the edge counts; an isolated vertex has an empty row."""
    import numpy as np

    ei = np.array([[1, 2, 2, 3, 0], [0, 0, 0, 3, 1]])  # 2 -> 0 twice, a self loop on 3, vertex 2 gets nothing
    a = adjacency(ei, 4)
    mean = normalize(a, "in-mean").toarray()
    np.testing.assert_allclose(mean, [[0, 1 / 3, 2 / 3, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]], rtol=1e-7)
    np.testing.assert_array_equal(normalize(a, "sum").toarray(), [[0, 1, 2, 0], [1, 0, 0, 0], [0, 0, 0, 0],
                                                                   [0, 0, 0, 1]])
    assert [operator_for(m) for m in MODELS] == ["sym", "in-mean", "sum", "gat"]
    with pytest.raises(ValueError, match="^model must be one of"):  # the library's name; the CLI's is --model
        operator_for("gcnn")


@pytest.mark.parametrize("kind,order,first,train_eps", [
    (k, o, f, e) for k, o, f, e in itertools.product(("sage", "gin"), ("aggregate-first", "transform-first"),
                                                     (True, False), (False, True)) if not (k == "sage" and e)])
def test_layer_equals_pyg_conv(kind, order, first, train_eps):
    graph = random_graph(23, 90, features=6, directed=True)  # self loops and parallel edges included
    layer = _layer(kind, 6, 4, first, order, train_eps)
    layer.load_state_dict(_perturbed_state(layer, 1))
    conv = _pyg_conv(kind, 6, 4, train_eps)
    conv.load_state_dict(layer.state_dict())  # the same names: lin_l/lin_r, or eps and nn.lins.{0,1}

    x1 = torch.from_numpy(graph.x).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    out = layer(x1, _local(graph, kind))
    ref = conv(x2, torch.from_numpy(graph.edge_index))
    torch.testing.assert_close(out, ref, **TOL)
    g = torch.randn_like(out)
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(x1.grad, x2.grad, **TOL)
    theirs = dict(conv.named_parameters())
    for name, p in layer.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, rtol=1e-5, atol=1e-4, msg=name)  # sums of ~100 terms


@pytest.mark.parametrize("order,first,reuse", list(itertools.product(("aggregate-first", "transform-first"),
                                                                     (True, False), (True, False))))
def test_batch_norm_layer_equals_pyg_conv(order, first, reuse):
    """GIN's MLP with its batch norm against PyG's ``GINConv(MLP(..., norm="batch_norm"))`` on the whole graph, on a
    workspace or new tensors: in training mode (the batch's statistics) the output, the gradients and the running
    statistics it leaves; in eval mode (the running statistics) the output and the gradients."""
    from mggcn.nn.workspace import Workspace

    graph = random_graph(23, 90, features=6, directed=True)
    layer = _layer("gin", 6, 4, first, order, batch_norm=True)
    layer.load_state_dict(_perturbed_state(layer, 2))
    conv = _pyg_conv("gin", 6, 4, batch_norm=True)
    conv.load_state_dict(layer.state_dict())
    adj, ei = _local(graph, "gin"), torch.from_numpy(graph.edge_index)
    for mode in ("train", "eval"):
        layer.train(mode == "train")
        conv.train(mode == "train")
        layer.zero_grad()
        conv.zero_grad()
        x1 = torch.from_numpy(graph.x).requires_grad_()
        x2 = x1.detach().clone().requires_grad_()
        kw = dict(workspace=Workspace(), key="0", output_in_workspace=True) if reuse else {}
        out = layer(x1, adj, **kw)
        ref = conv(x2, ei)
        torch.testing.assert_close(out, ref, **TOL, msg=lambda m, mode=mode: f"{mode}: {m}")
        g = torch.randn_like(out)
        out.backward(g)
        ref.backward(g)
        torch.testing.assert_close(x1.grad, x2.grad, **TOL, msg=lambda m, mode=mode: f"{mode}: {m}")
        theirs = dict(conv.named_parameters())
        for name, p in layer.named_parameters():
            torch.testing.assert_close(p.grad, theirs[name].grad, rtol=1e-5, atol=1e-4, msg=f"{mode} {name}")
        theirs = dict(conv.named_buffers())
        for name, b in layer.named_buffers():
            torch.testing.assert_close(b, theirs[name], rtol=1e-5, atol=1e-6, msg=f"{mode} {name}")
    assert int(layer.nn.norms[0].module.num_batches_tracked) == 1  # eval mode moved no statistic


@pytest.mark.parametrize("kind,train_eps", [("sage", False), ("gin", True), ("gin", False)])
def test_cached_input_aggregation_gives_the_same_numbers(kind, train_eps):
    """The first layer fed ``Â·X`` computed once equals the layer aggregating itself (both orders), with and
    without a workspace; a GIN with a fixed ε (here 0.3) also fed its whole input ``(Â + 1.3 I)·X`` without X."""
    graph = random_graph(31, 120, features=7, classes=3)
    adj = _local(graph, kind)
    x = torch.from_numpy(graph.x)
    outs, grads = [], []
    runs = [("aggregate-first", False, True), ("transform-first", False, False), ("auto", True, True),
            ("auto", True, False)]
    whole = kind == "gin" and not train_eps
    for order, cached, reuse in runs + [("auto", "whole", True), ("auto", "whole", False)] * whole:
        model = make_model(kind, [7, 5, 9, 3], order=order, seed=3, train_eps=train_eps, reuse_buffers=reuse)
        if whole:
            for conv in model.convs:
                conv.eps.fill_(0.3)
        if cached == "whole":
            out = model(None, adj, x_aggregated=model.whole_input_aggregation(adj.run(x), x))
        else:
            out = model(x, adj, x_aggregated=adj.run(x) if cached else None)
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    for out, grad in zip(outs[1:], grads[1:], strict=True):
        torch.testing.assert_close(out, outs[0], **TOL)
        for a, b in zip(grad, grads[0], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert model.whole_input_aggregation(adj.run(x), x) is None or whole  # GraphSAGE and a learnable ε read X
    with pytest.raises(TypeError, match="adj must be an SpMMOperator, got function"):  # its layers run Â's products
        make_model(kind, [7, 5, 3])(x, lambda h, **_: h)
    if kind == "gin":
        with pytest.raises(ValueError, match="reads h unless given its whole aggregated input"):
            make_model("gin", [7, 5, 3], train_eps=True)(None, adj, x_aggregated=adj.run(x))


@pytest.mark.parametrize("kind,train_eps,dropout,batch_norm", [
    ("sage", False, 0.0, ""), ("sage", False, 0.4, ""), ("gin", False, 0.0, ""), ("gin", False, 0.4, ""),
    ("gin", True, 0.0, ""), ("gin", False, 0.0, "mlp"), ("gin", True, 0.4, "mlp"), ("gcn", False, 0.0, "between"),
    ("sage", False, 0.4, "between"), ("gin", False, 0.0, "mlp+between")])
def test_buffers_on_the_workspace_give_the_numbers_of_new_tensors(kind, train_eps, dropout, batch_norm):
    """Layers of both orders in one stack (9 -> 5 multiplies first, 5 -> 8 -> 12 aggregate first: the gradients
    reaching 9 -> 5 and 5 -> 8 come on gradient buffers, not over their outputs), with and without dropout: two
    epochs with every intermediate and gradient on the workspace give the outputs and gradients of the same model
    on new tensors, which share no buffer."""
    graph = random_graph(31, 120, features=7, classes=3, directed=True)
    adj = _local(graph, kind)
    x = torch.from_numpy(graph.x)
    runs = []
    for reuse in (True, False):
        model = make_model(kind, [7, 9, 5, 8, 12, 3], seed=3, train_eps=train_eps, dropout=dropout,
                           reuse_buffers=reuse, **({"mlp_batch_norm": True} if "mlp" in batch_norm else {}),
                           **({"batch_norm": True} if "between" in batch_norm else {}))
        assert [c.aggregate_first for c in model.convs[1:]] == [False, True, True, False]
        steps = []
        for epoch in range(2):
            model.seed_dropout(epoch)
            model.zero_grad()
            out = model(x, adj, x_aggregated=adj.run(x))
            out.square().sum().backward()
            steps.append((out.detach().clone(), [p.grad.clone() for p in model.parameters()]))
        runs.append(steps)
    # on the workspace, the gradient over σ's output is computed a block of rows at a time (whole GEMMs on new
    # tensors): float32 rounding apart, the same numbers
    for (out, grads), (ref, ref_grads) in zip(*runs, strict=True):
        torch.testing.assert_close(out, ref, **TOL)
        for a, b in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)  # sums of ~100 terms of order 10


@pytest.mark.parametrize("kind,pyg,train_eps", [("sage", PygGraphSAGE, False), ("gin", PygGIN, False),
                                                ("gin", PygGIN, True)])
def test_state_dict_loads_strictly_into_pyg_models(kind, pyg, train_eps):
    graph = random_graph(17, 50, features=5, classes=4)
    model = make_model(kind, [5, 8, 8, 4], seed=1, train_eps=train_eps)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    theirs = pyg(5, 8, num_layers=3, out_channels=4, **({"train_eps": True} if train_eps else {}))
    theirs.load_state_dict(model.pyg_state_dict(), strict=True)
    x = torch.from_numpy(graph.x)
    torch.testing.assert_close(model(x, _local(graph, kind)), theirs(x, torch.from_numpy(graph.edge_index)), **TOL)


def test_models_and_their_parameters():
    sage, gin = GraphSAGE([5, 8, 3], seed=2), GIN([5, 8, 3], seed=2, train_eps=True)
    assert sage.kind == "sage" and gin.kind == "gin"
    assert [n for n, _ in sage.named_parameters()][:3] == ["convs.0.lin_l.weight", "convs.0.lin_l.bias",
                                                         "convs.0.lin_r.weight"]
    assert "convs.1.eps" in dict(gin.named_parameters())
    assert "convs.1.eps" in GIN([5, 8, 3]).state_dict() and not dict(GIN([5, 8, 3]).named_parameters()).get(
        "convs.1.eps")  # a fixed ε is a buffer: saved, not trained
    again = GraphSAGE([5, 8, 3], seed=2)
    for p, q in zip(sage.parameters(), again.parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(ConfigError, match="^model must be one of"):
        make_model("gcnn", [5, 3])
    for layers in (GIN, GraphSAGE):
        with pytest.raises(ConfigError, match="^order must be one of") as info:
            layers([5, 8, 3], order="sideways")
        assert info.value.option == "order"


def _layer_cases():
    directed = random_graph(22, 110, features=6, directed=True, seed=4)  # 22 rows: not divisible by 3 or 4
    cases, expected = [], []
    gen = torch.Generator().manual_seed(0)
    for k, (kind, order, first, train_eps, batch_norm) in enumerate(itertools.product(
            ("sage", "gin"), ("aggregate-first", "transform-first"), (True, False), (False, True), (False, True))):
        if kind == "sage" and (train_eps or batch_norm):
            continue
        d_out = 9 if order == "aggregate-first" else 3  # what auto would pick, and the other way round
        layer = _layer(kind, 6, d_out, first, order, train_eps, batch_norm)
        state = _perturbed_state(layer, k)
        x = torch.randn(22, 6, generator=gen)
        g = torch.randn(22, d_out, generator=gen)
        conv = _pyg_conv(kind, 6, d_out, train_eps, batch_norm)
        conv.load_state_dict(state)
        xr = x.clone().requires_grad_()
        ref = conv(xr, torch.from_numpy(directed.edge_index))
        ref.backward(g)
        expected.append((ref.detach(), xr.grad, {n: p.grad for n, p in conv.named_parameters()},
                         dict(conv.named_buffers())))
        options = dict(first=first, order=order) | (dict(train_eps=train_eps, mlp_batch_norm=batch_norm)
                                                    if kind == "gin" else {})
        cases.append((directed, kind, options, state, x, g))
    return cases, expected


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_layers_across_ranks_equal_pyg(nprocs):
    """Each rank's rows of the output and of the input gradient, and the sum over ranks of the parameter
    gradients, equal PyG's conv on the whole (directed) graph; with GIN's batch norm (its statistics over every
    rank's vertices, the padding rows of P = 3, 4 left out) so do every rank's running statistics."""
    cases, expected = _layer_cases()
    seed = 3
    per_rank = ([workers.layer_worker(cases, seed)] if nprocs == 1
                else run_workers(workers.layer_worker, nprocs, (cases, seed), timeout_s=300))
    part = make_partition(22, nprocs, seed)
    position = torch.from_numpy(part.position)
    for k, (case, (ref, ref_grad_x, ref_grads, ref_buffers)) in enumerate(zip(cases, expected, strict=True)):
        rows = [dict(per_rank)[r][k] for r in range(nprocs)]
        out = torch.cat([r[0] for r in rows])[position]  # partition order -> original ids, padding dropped
        torch.testing.assert_close(out, ref, **TOL, msg=lambda m, k=k: f"P={nprocs} case {k}: {m}")
        if not case[2]["first"]:
            grad_x = torch.cat([r[1] for r in rows])[position]
            torch.testing.assert_close(grad_x, ref_grad_x, **TOL, msg=lambda m, k=k: f"P={nprocs} case {k}: {m}")
        else:
            assert all(r[1] is None for r in rows)
        for name, want in ref_grads.items():
            got = sum(r[2][name] for r in rows)  # the trainer all-reduces these partial sums
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4, msg=lambda m, k=k, n=name: f"{k} {n}: {m}")
        for r in rows:
            assert set(r[3]) == set(ref_buffers)
            for name, want in ref_buffers.items():
                torch.testing.assert_close(r[3][name], want, rtol=1e-5, atol=1e-6, msg=f"case {k} {name}")


@pytest.mark.parametrize("kind,options,pyg", [
    ("gin", {"mlp_batch_norm": True}, None), ("gin", {"batch_norm": True, "mlp_batch_norm": True}, PygGIN),
    ("gcn", {"batch_norm": True}, "GCN"), ("sage", {"batch_norm": True}, PygGraphSAGE)])
def test_a_saved_batch_norm_model_is_rebuilt_from_its_state_dict(kind, options, pyg):
    """``predict`` rebuilds a model from its parameter names alone: batch norms show in its state dict (PyG's
    ``norms.{l}.module.*`` after the layers, ``convs.{l}.nn.norms.0.module.*`` in GIN's MLPs), and the rebuilt model
    in eval mode gives the saved one's outputs; the state dict loads strictly into PyG's model with
    ``norm="batch_norm"`` (whose GIN has both), which in eval mode gives the same outputs."""
    from torch_geometric.nn.models import GCN as PygGCN

    graph = random_graph(17, 50, features=5, classes=4)
    adj, x = _local(graph, kind), torch.from_numpy(graph.x)
    model = make_model(kind, [5, 8, 8, 4], seed=1, **options)
    model(x, adj)  # training mode: the running statistics move
    state = model.state_dict()
    kind_cls = type(model)
    assert kind_cls.state_options(state) == options
    assert kind_cls.state_options(make_model(kind, [5, 8, 4]).state_dict()) == {}
    rebuilt = make_model(kind, kind_cls.state_dims(state), **kind_cls.state_options(state))
    rebuilt.load_state_dict(state, strict=True)
    with pytest.raises(TypeError, match="adj must be an SpMMOperator, got function"):  # the norms sum over ranks
        rebuilt(x, lambda h, **_: h)
    with torch.no_grad():
        out = model.eval()(x, adj)
        torch.testing.assert_close(rebuilt.eval()(x, adj), out, rtol=0, atol=0)
        if pyg is not None:
            theirs = (PygGCN if pyg == "GCN" else pyg)(5, 8, 3, 4, norm="batch_norm")
            theirs.load_state_dict(model.pyg_state_dict(), strict=True)
            torch.testing.assert_close(theirs.eval()(x, torch.from_numpy(graph.edge_index)), out, **TOL)


@pytest.mark.parametrize("kind,options", [("gcn", {"batch_norm": True}), ("gin", {"mlp_batch_norm": True})])
def test_a_float64_model_normalizes_in_float64(kind, options):
    """A model cast with ``.double()`` computes its batch statistics in float64: with hidden features far from 0
    (an offset of 1000, as an unnormalized input makes them), float32 sums would be off by about 1e-4 in the
    outputs (PyG's float32 model against its float64 one) and the running means by about 1e-5; in float64 the
    outputs, gradients and running statistics equal PyG's float64 model's up to summation order (1e-9 relative)."""
    from torch_geometric.nn.models import GCN as PygGCN

    graph = random_graph(37, 150, features=5, classes=3)
    adj = mggcn.adjacency_operator(graph.edge_index, graph.num_nodes, operator_for(kind), dtype=torch.float64)
    ei = torch.from_numpy(graph.edge_index)
    model = make_model(kind, [5, 8, 3], seed=1, **options).double()
    pyg = (PygGCN(5, 8, 2, 3, norm="batch_norm") if kind == "gcn" else
           PygGIN(5, 8, 2, 3, norm=None, train_eps=False)).double()
    with torch.no_grad():
        model.convs[0].bias.add_(1000.0) if kind == "gcn" else model.convs[0].nn.lins[0].bias.add_(1000.0)
    if kind == "gin":  # PyG's GIN has no batch norm in its MLPs unless asked: the layers' own MLPs carry it
        pyg.convs[0] = GINConv(MLP([5, 8, 8], norm="batch_norm")).double()
        pyg.convs[1] = GINConv(MLP([8, 3, 3], norm="batch_norm")).double()
    pyg.load_state_dict(model.pyg_state_dict(), strict=True)
    x = torch.from_numpy(graph.x).double().requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    out, ref = model.train()(x, adj), pyg.train()(x_ref, ei)
    tol = dict(rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(out, ref, **tol)
    grad = torch.randn_like(out)
    out.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad, **tol)
    for (name, p), q in zip(model.named_parameters(), pyg.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)
    for name, buf in model.named_buffers():
        if "running" in name:
            torch.testing.assert_close(buf, dict(pyg.named_buffers())[name], **tol, msg=name)


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin", "gat"])
def test_a_layer_built_alone_draws_glorot_from_the_global_rng_as_its_reset_does(kind):
    """A layer built without a model's generator draws its weights as its own ``reset_parameters`` does
    (docs/api.md): PyG's ``glorot`` (uniform in ±sqrt(6 / (d_in + d_out))) from torch's global RNG, not
    ``torch.nn.Linear``'s bound 1/sqrt(d_in), which for 1000 inputs and 10 outputs is 2.4× smaller; the biases zero.
    (PyG's ``GCNConv`` and ``GATConv`` draw glorot too; its ``SAGEConv`` and ``GIN``'s MLP draw torch's default.)"""
    import math

    from mggcn.nn.gat import GATLayer

    build = {"gcn": lambda: mggcn.GCNLayer(1000, 10), "sage": lambda: SAGELayer(1000, 10),
             "gin": lambda: GINLayer(1000, 10), "gat": lambda: GATLayer(1000, 10)}[kind]
    torch.manual_seed(0)
    layer = build()
    first = next(m for m in layer.modules() if isinstance(m, torch.nn.Linear)).weight
    torch.manual_seed(0)
    glorot = math.sqrt(6.0 / 1010)
    assert torch.equal(first, torch.empty(10, 1000).uniform_(-glorot, glorot))
    for reset in (False, True):
        if reset:
            layer.reset_parameters()
        for m in layer.modules():
            if isinstance(m, torch.nn.Linear):
                w = m.weight.detach()
                assert w.abs().max() <= math.sqrt(6.0 / sum(w.shape)) and w.abs().max() > 1.5 / math.sqrt(w.shape[1])
        biases = [p for name, p in layer.named_parameters() if name.endswith("bias")]
        assert biases and all(not b.any() for b in biases)


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin", "gat"])
def test_a_model_builds_under_a_default_device_as_pyg_models_do(kind):
    """Built without a seed under ``with torch.device("meta")`` (how large models are sized before they are
    materialized), a model draws its seed from the CPU generator ``torch.manual_seed`` seeds, and its parameters
    are on that device; the same seed as a model built on the CPU."""
    from mggcn.nn.models import model_type

    torch.manual_seed(3)
    on_cpu = model_type(kind)([4, 8, 3])
    torch.manual_seed(3)
    with torch.device("meta"):
        on_meta = model_type(kind)([4, 8, 3])
    assert on_meta.seed == on_cpu.seed
    assert {p.device.type for p in on_meta.parameters()} == {"meta"}


def _one_rank_adj(graph, kind):
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, operator_for(kind))
    return local_adj(shard.adj[0], shard.adj_t[0])


@pytest.mark.parametrize("kind, options", [("gcn", {"batch_norm": True}), ("gin", {"mlp_batch_norm": True})])
def test_batch_norm_in_eval_mode_without_recording_keeps_no_xhat_and_gives_the_same_outputs(kind, options,
                                                                                          monkeypatch):
    """An evaluation under no_grad (or of a frozen model) normalizes in place, y = u·γ/σ + (β − μ·γ/σ), without
    the x̂ that only a backward reads (autograd's needs_input_grad holds under no_grad too); its outputs are those of
    the forward that records, with γ ≠ 1, β ≠ 0 and moved running statistics."""
    from mggcn.nn import batch_norm, gin

    graph = random_graph(17, 50, features=5, classes=4)
    adj, x = _one_rank_adj(graph, kind), torch.from_numpy(graph.x)
    model = make_model(kind, [5, 8, 8, 4], seed=1, **options)
    model(x, adj)  # training mode: the running statistics move
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + torch.randn(p.shape, generator=gen))
    model.eval()
    kept, original = [], batch_norm.normalize_

    def normalize_(u, bn, adj, keep, *args):
        kept.append(keep)
        return original(u, bn, adj, keep, *args)

    monkeypatch.setattr(gin if kind == "gin" else batch_norm, "normalize_", normalize_)
    recorded = model(x, adj).detach()
    norms = len(kept)  # GCN's hidden layers, every GIN layer's MLP
    assert norms >= 2 and all(kept)
    with torch.no_grad():
        got = model(x, adj)
    frozen = copy.deepcopy(model).requires_grad_(False)
    assert frozen(x, adj).grad_fn is None and kept[norms:] == [False] * 2 * norms
    torch.testing.assert_close(got, recorded, rtol=1e-5, atol=1e-5)  # another order of the same float32 operations
    torch.testing.assert_close(frozen(x, adj), recorded, rtol=1e-5, atol=1e-5)


def test_a_batch_norm_over_one_vertex_is_refused_by_name():
    graph = random_graph(1, 1, features=5, classes=1)
    model = make_model("gcn", [5, 8, 4], seed=1, batch_norm=True)
    with pytest.raises(ValueError, match="^batch norm needs more than one vertex, got 1$"):
        model(torch.from_numpy(graph.x), _one_rank_adj(graph, "gcn"))
