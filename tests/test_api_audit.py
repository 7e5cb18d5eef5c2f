"""The Python API as user code drives it in one process: the layers under torch's modes and dtypes, and
``mggcn.train`` called again and again from the same script."""

import contextlib
import math
import pickle
import random
import signal

import numpy as np
import pytest
import torch

import mggcn

N, F, C = 40, 5, 3
_MODELS = {"gcn": mggcn.GCN, "sage": mggcn.GraphSAGE, "gin": mggcn.GIN, "gat": mggcn.GAT}


def _graph(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, F, generator=g), torch.randint(0, N, (2, 160), generator=g)


def _model(kind: str, **kw) -> mggcn.GCN:
    """The same weights at every call (seed 0)."""
    return _MODELS[kind](kw.pop("dims", [F, 8, C]), **({"heads": 2} if kind == "gat" else {}), **{"seed": 0, **kw})


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert text and "\n" not in text, text
    return text


@pytest.mark.parametrize("kind", list(_MODELS))
def test_a_forward_under_inference_mode_leaves_the_model_trainable(kind):
    """``torch.inference_mode`` around an evaluation: the workspace a forward keeps must not become inference
    tensors (the next training forward could not write them), and the kernels' threads must be able to write what
    the forward makes."""
    x, edge_index = _graph()
    model = _model(kind)
    adj = mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym"))
    with torch.inference_mode():
        evaluated = model(x, adj)
    with torch.no_grad():
        expected = _model(kind)(x, adj)
    # the same ops in the same order on the same weights (both without autograd): equal bit for bit
    torch.testing.assert_close(evaluated, expected, rtol=0, atol=0)
    out = model(x, adj)  # then training goes on
    torch.nn.functional.cross_entropy(out, torch.arange(N) % C).backward()
    assert all(p.grad is not None for p in model.parameters())
    with torch.inference_mode():  # and evaluation again, after the workspace exists
        torch.testing.assert_close(model(x, adj), expected, rtol=0, atol=0)


@pytest.mark.parametrize("kind", list(_MODELS))
def test_a_layer_on_its_own_under_inference_mode_and_autocast_computes_what_it_does_without(kind):
    """A layer called by itself (``model.convs[i]``, as a user's own model calls PyG's ``GCNConv``) as the model:
    under ``torch.inference_mode`` its kernels' pool threads write ordinary tensors (on a graph large enough to
    split the rows among them), and under ``torch.autocast`` it computes in its weights' dtype."""
    n, g = 20_000, torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, n, (2, 10 * n), generator=g)
    model = _model(kind, dims=[F, 8, C])
    adj = mggcn.adjacency_operator(edge_index, n, norm=model.operator("sym"))
    for i, conv in enumerate(model.convs):
        h = torch.randn(n, model.dims[i], generator=g)
        with torch.no_grad():
            expected = conv(h, adj)
        with torch.inference_mode():  # the same ops in the same order: equal bit for bit
            torch.testing.assert_close(conv(h, adj), expected, rtol=0, atol=0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = conv(h, adj)
        torch.testing.assert_close(out.detach(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin"])
def test_a_float64_model_runs_on_a_float64_operator(kind):
    """``model.double()`` as with PyG's models: the operator built in float64 gives the float32 model's values to
    float32 rounding, and gradients that ``gradcheck`` confirms."""
    x, edge_index = _graph()
    model = _model(kind)
    norm = model.operator("sym")
    single = model(x, mggcn.adjacency_operator(edge_index, N, norm=norm))
    adj64 = mggcn.adjacency_operator(edge_index, N, norm=norm, dtype=torch.float64)
    double = model.double()(x.double(), adj64)
    assert double.dtype == torch.float64
    # float32 against float64 of values of order 1 through two layers: a few float32 ulps
    torch.testing.assert_close(double, single.double(), rtol=1e-5, atol=1e-5)
    small = _MODELS[kind]([F, 3, 2], reuse_buffers=False).double()  # gradcheck runs many forwards per backward
    assert torch.autograd.gradcheck(lambda h: small(h, adj64), (x.double().requires_grad_(),))


@pytest.mark.parametrize("norm", ["sym", "mean"])
def test_a_float64_operator_is_normalized_in_float64(norm):
    """Â of a float64 operator in float64 throughout: ``D^-1/2 (A + I) D^-1/2`` (``sym``) or ``D^-1 (A + I)``
    (``mean``) built densely here in float64 (edge counts summed, self loops replaced by one), to float64 rounding
    (rtol 1e-13: a float32 step anywhere would leave ~1e-8)."""
    _, edge_index = _graph(3)
    a = np.zeros((N, N))
    np.add.at(a, (edge_index[1].numpy(), edge_index[0].numpy()), 1.0)
    np.fill_diagonal(a, 1.0)
    deg = a.sum(axis=1)
    want = a / np.sqrt(deg)[:, None] / np.sqrt(deg)[None, :] if norm == "sym" else a / deg[:, None]
    adj64 = mggcn.adjacency_operator(edge_index, N, norm=norm, dtype=torch.float64)
    got = adj64(torch.eye(N, dtype=torch.float64))
    torch.testing.assert_close(got, torch.from_numpy(want), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin"])
def test_a_model_and_an_operator_of_other_dtypes_are_one_line(kind):
    """A float64 model given the default float32 operator failed deep in the SpMM ("expected scalar type Double but
    found Float"); it is said in one line naming the fix."""
    x, edge_index = _graph()
    model = _model(kind).double()
    adj = mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym"))
    with pytest.raises(ValueError, match=r"float32 .* x is float64.*dtype=torch.float64") as err:
        model(x.double(), adj)
    _one_line(err)
    with pytest.raises(ValueError, match=r"x is float16: mggcn's sparse products do not run in float16: give the "
                                         r"model and x in float32, or in float64 or bfloat16") as err:
        model.half()(x.half(), adj)  # no adj of float16 to build: the fix names the dtypes there are
    _one_line(err)


@pytest.mark.parametrize("kind", list(_MODELS))
def test_under_a_float64_default_dtype_the_operator_and_the_model_agree(kind):
    """``torch.set_default_dtype(torch.float64)``: the model's parameters are made in float64 (as nn.Linear's), and
    so is the operator by default (the float32 one was refused with the model): the float64 operator's values."""
    x, edge_index = _graph()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = _model(kind)
        out = model(x.double(), mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym")))
    finally:
        torch.set_default_dtype(previous)
    adj64 = mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym"), dtype=torch.float64)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, model(x.double(), adj64), rtol=0, atol=0)


def test_a_gat_of_any_float_dtype_takes_the_float32_operator():
    """GAT reads the operator's pattern and edge counts only (its coefficients are its own): the float32 operator
    serves it in float64 as before."""
    x, edge_index = _graph()
    model = _model("gat")
    adj = mggcn.adjacency_operator(edge_index, N, norm="gat")
    single = model(x, adj)
    # float32 against float64 of values of order 1: a few float32 ulps
    torch.testing.assert_close(model.double()(x.double(), adj), single.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, message", [(torch.int64, "floating"), ("float64", "torch.dtype"),
                                            (torch.float16, "float16")])
def test_adjacency_operator_refuses_a_dtype_it_cannot_multiply_in(dtype, message):
    _, edge_index = _graph()
    with pytest.raises(mggcn.ConfigError, match=message) as err:
        mggcn.adjacency_operator(edge_index, N, dtype=dtype)
    assert err.value.option == "dtype" and _one_line(err)


@pytest.mark.parametrize("device, message", [(2**63, "got 9223372036854775808 \\(Overflow"),
                                             ("meta", "got 'meta' \\(a meta tensor holds no values"),
                                             (-1, "got -1 \\(Device index must not be negative")])
def test_adjacency_operator_refuses_a_device_that_holds_no_operator(device, message):
    """A device torch cannot name (an index beyond its int64, a negative one) and the meta device, whose tensors
    hold no values, are refused naming device, not with torch's ValueError or a forward that cannot copy."""
    _, edge_index = _graph()
    with pytest.raises(mggcn.ConfigError, match=f"^device must be a torch device such as 'cpu' or 'cuda', {message}"
                       ) as err:
        mggcn.adjacency_operator(edge_index, N, device=device)
    assert err.value.option == "device" and _one_line(err)


def _caller_state() -> dict:
    return {"rng": torch.get_rng_state(), "numpy": np.random.get_state()[1].copy(), "random": random.getstate(),
            "grad": torch.is_grad_enabled(), "dtype": torch.get_default_dtype(), "threads": torch.get_num_threads(),
            "sigint": signal.getsignal(signal.SIGINT), "sigterm": signal.getsignal(signal.SIGTERM),
            "deterministic": torch.are_deterministic_algorithms_enabled()}


def test_train_again_and_again_in_one_process_is_as_fresh():
    """A notebook's cells: each call gives what the first gave for the same seed (whatever ran in between), and
    the caller's RNGs, grad mode, default dtype, threads and signal handlers are as they were."""
    torch.manual_seed(7)
    before = _caller_state()

    def run(spec, seed=1):
        return mggcn.train(spec, hidden=(6,), epochs=3, seed=seed, lr=0.05, quiet=True)

    first = run("builtin:karate")
    run("synthetic:n=120", seed=2)
    again = run("builtin:karate")
    assert [r["loss"] for r in again.history] == [r["loss"] for r in first.history]
    np.testing.assert_array_equal(again.predictions, first.predictions)
    for name, tensor in first.state_dict.items():
        assert torch.equal(again.state_dict[name], tensor), name
    after = _caller_state()
    for key, value in before.items():
        same = torch.equal(value, after[key]) if isinstance(value, torch.Tensor) else (
            np.array_equal(value, after[key]) if isinstance(value, np.ndarray) else value == after[key])
        assert same, key


def test_a_gcn_layer_given_an_edge_index_is_one_line():
    """``mggcn.GCNLayer`` alone, called as PyG's ``GCNConv(x, edge_index)``: said as the models say it (it was
    "'Tensor' object is not callable" from inside the layer)."""
    x, edge_index = _graph()
    layer = mggcn.GCNLayer(F, 4)
    with pytest.raises(TypeError, match="adjacency_operator.*an edge_index is not one") as err:
        layer(x, edge_index)
    _one_line(err)
    assert layer(x, mggcn.adjacency_operator(edge_index, N)).shape == (N, 4)


@pytest.mark.parametrize("order", ["aggregate-first", "transform-first"])
def test_a_gcn_layer_given_features_of_another_width_says_its_in_dim(order):
    """As the models say it, not as the GEMM inside ("mat1 and mat2 shapes cannot be multiplied"), whichever of
    the SpMM and the GEMM comes first."""
    x, edge_index = _graph()
    adj = mggcn.adjacency_operator(edge_index, N)
    layer = mggcn.GCNLayer(F + 1, 4, order=order)
    message = rf"h must be a \[m, {F + 1}\] tensor \(the layer's in_dim\), got \[{N}, {F}\]"
    with pytest.raises(ValueError, match=message) as err:
        layer(x, adj)
    _one_line(err)
    with pytest.raises(ValueError, match=r"got \[5\]"):
        layer(torch.ones(5), adj)


@pytest.mark.parametrize("cls", [mggcn.GCN, mggcn.GraphSAGE, mggcn.GIN, mggcn.GAT])
def test_layers_without_a_seed_follow_torch_manual_seed_as_torch_nn_does(cls):
    """A seed sweep or an ensemble written the PyTorch way (torch.manual_seed, then the model) gets other weights
    per seed and the same weights for the same seed; seed= gives its weights whatever torch's generator holds."""
    dims = [5, 8, 3]

    def weights(model):
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    torch.manual_seed(1)
    first = weights(cls(dims))
    torch.manual_seed(1)
    again = weights(cls(dims))
    torch.manual_seed(2)
    other = weights(cls(dims))
    assert torch.equal(first, again) and not torch.equal(first, other)
    torch.manual_seed(3)
    seeded = weights(cls(dims, seed=7))
    torch.manual_seed(4)
    assert torch.equal(seeded, weights(cls(dims, seed=7)))


class _Holder(torch.nn.Module):
    """User code that keeps the operator beside the model, as PyG users keep ``edge_index``."""

    def __init__(self, model: torch.nn.Module, adj) -> None:
        super().__init__()
        self.model, self.adj = model, adj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x, self.adj)


@pytest.mark.parametrize("kind", list(_MODELS))
def test_deepcopy_of_a_module_holding_the_operator_trains_on_its_own(kind):
    """``copy.deepcopy`` (how user code keeps its best model) of a module holding the operator: the copy gives the
    same logits, its weights are its own (a step of the original leaves them), and both backpropagate."""
    import copy

    x, edge_index = _graph()
    model = _model(kind)
    holder = _Holder(model, mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym")))
    twin = copy.deepcopy(holder)
    torch.testing.assert_close(twin(x), holder(x), rtol=0, atol=0)  # the same operations on the same values
    before = [p.detach().clone() for p in twin.parameters()]
    holder(x).sum().backward()
    with torch.no_grad():
        for p in holder.parameters():
            p.sub_(0.1 * p.grad)
    assert all(torch.equal(a, b) for a, b in zip(before, twin.parameters(), strict=True))
    twin(x).sum().backward()
    assert all(p.grad is not None for p in twin.parameters())


@pytest.mark.parametrize("kind", list(_MODELS))
def test_a_model_refuses_the_operator_of_another_norm(kind):
    """A model given an operator built for another model (the README's GCN operator handed to a GraphSAGE) ran on
    the wrong Â; it is refused in one line naming the norm to build. The GCN takes both of its norms."""
    x, edge_index = _graph()
    model = _model(kind)
    own = [model.operator(norm) for norm in ("sym", "mean")]
    for norm in ("sym", "mean", "in-mean", "sum", "gat"):
        adj = mggcn.adjacency_operator(edge_index, N, norm=norm)
        if norm in own:
            assert model(x, adj).shape == (N, C)
            continue
        with pytest.raises(ValueError, match=rf"aggregates with the operator of norm='{own[0]}', not '{norm}': "
                                             rf"give mggcn.adjacency_operator\(edge_index, num_nodes, "
                                             rf"norm='{own[0]}'\)") as err:
            model(x, adj)
        _one_line(err)
    with pytest.raises(ValueError, match="norm must be one of sym, mean, in-mean, sum, gat, got 'gatt'"):
        mggcn.adjacency_operator(edge_index, N, norm="gatt")


def test_undirected_and_dedup_apply_to_a_graph_in_memory_and_reader_options_are_refused():
    """``undirected``/``dedup`` were ignored for a Graph or a PyG Data (the same losses as without); they now make
    the graph a file would make, and the options that read files are refused instead of ignored."""
    from mggcn.data.formats import transform
    from reference import random_graph

    graph = random_graph(60, 240, features=5, classes=3, directed=True, seed=3)
    graph.edge_index = np.concatenate([graph.edge_index, graph.edge_index[:, :20]], axis=1)  # duplicate edges
    options = dict(hidden=(8,), epochs=3, seed=1, quiet=True)
    for flags in ({"undirected": True}, {"dedup": True}, {"undirected": True, "dedup": True}):
        given = mggcn.train(graph, **flags, **options).history
        made = mggcn.train(transform(graph, **flags), **options).history
        assert [r["loss"] for r in given] == [r["loss"] for r in made], flags
        assert [r["loss"] for r in given] != [r["loss"] for r in mggcn.train(graph, **options).history], flags
    for bad in ({"fmt": "edgelist"}, {"normalize_features": True}, {"labels": "y.npy"}):
        with pytest.raises(mggcn.ConfigError, match=f"{next(iter(bad))}.*a graph in memory is read from no file") \
                as err:
            mggcn.train(graph, **bad, **options)
        _one_line(err)


@pytest.mark.parametrize("kind", list(_MODELS))
def test_a_second_derivative_is_refused_not_silently_wrong(kind):
    """Under create_graph=True a GCN's or GAT's input gradient came back detached from the weights (a gradient
    penalty's weight gradient a third of PyG's, without a word); every model now refuses in one line, and a plain
    backward is as before."""
    from mggcn.utils.autograd import SECOND_ORDER

    x, edge_index = _graph()
    model = _model(kind, reuse_buffers=False)
    adj = mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym"))
    x = x.requires_grad_()
    with pytest.raises(RuntimeError) as err:
        torch.autograd.grad(model(x, adj).square().sum(), x, create_graph=True)
    assert str(err.value) == SECOND_ORDER
    (grad,) = torch.autograd.grad(model(x, adj).square().sum(), x)
    assert grad.shape == x.shape and not grad.requires_grad


@pytest.mark.parametrize("kind, options", [(k, {}) for k in _MODELS] + [(k, {"batch_norm": True})
                                                                        for k in ("gcn", "sage", "gin")])
@pytest.mark.parametrize("grad", [False, True])
def test_what_a_forward_hook_keeps_stays_as_the_layer_gave_it(kind, options, grad):
    """A hook that keeps a layer's output (the usual way to take embeddings) kept a tensor that σ then changed in
    place and that the next forward overwrote; it now keeps the layer's own output, as in torch and PyG, while the
    model's outputs and gradients are those of the model without the hook."""
    x, edge_index = _graph()
    model, plain = _model(kind, dims=[F, 8, 8, C], **options), _model(kind, dims=[F, 8, 8, C], **options)
    adj = mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym"))
    kept = []
    for conv in model.convs[:2]:
        conv.register_forward_hook(lambda _m, _i, out: kept.append((out, out.detach().clone())))
    with torch.set_grad_enabled(grad):
        for _ in range(2):
            out, ref = model(x, adj), plain(x, adj)
            torch.testing.assert_close(out, ref, rtol=0, atol=0)
            if grad:
                out.square().sum().backward()
                ref.square().sum().backward()
    assert len(kept) == 4
    for tensor, copy in kept:
        torch.testing.assert_close(tensor.detach(), copy, rtol=0, atol=0)
    assert bool((kept[0][1] < 0).any())  # the output before σ
    if grad:
        for p, q in zip(model.parameters(), plain.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)


@pytest.mark.parametrize("kind", list(_MODELS))
def test_a_second_backward_of_one_forward_says_what_to_do(kind):
    """``retain_graph=True`` then a second backward of the same forward failed with torch's "modified by an
    inplace operation" (the backward writes over the forward's buffers); it is said in one line naming
    reuse_buffers=False, with which both backward passes give PyTorch's sums."""
    from mggcn.nn.workspace import BACKPROPAGATED_ONCE

    x, edge_index = _graph()
    adj = mggcn.adjacency_operator(edge_index, N, norm=_model(kind).operator("sym"))
    model = _model(kind)
    out = model(x, adj)
    out.sum().backward(retain_graph=True)
    if kind != "gat":  # GAT's layers keep their own tensors: a second backward works as in torch
        with pytest.raises(RuntimeError) as err:
            out.square().sum().backward()
        assert str(err.value) == BACKPROPAGATED_ONCE
    plain = _model(kind, reuse_buffers=False)
    out = plain(x, adj)
    out.sum().backward(retain_graph=True)
    out.square().sum().backward()
    once = _model(kind, reuse_buffers=False)
    (once(x, adj).sum() + once(x, adj).square().sum()).backward()
    for p, q in zip(plain.parameters(), once.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spec", ["synthetic:n=100", "builtin:karate"])
def test_reader_options_on_a_built_in_dataset_are_refused_not_ignored(spec, tmp_path):
    """The command line refuses --features/--labels/--split for a built-in or generated dataset; the API ignored
    them and trained on the dataset's own data. False (an option left off) is not an option given."""
    options = dict(epochs=1, quiet=True, threads=1)
    for bad in ({"features": "x.npy"}, {"labels": "y.npy"}, {"split": "s.npy"}, {"normalize_features": True}):
        with pytest.raises(mggcn.ConfigError, match=f"{spec}: a built-in or generated dataset takes no "
                                                    f"{next(iter(bad))}") as err:
            mggcn.train(spec, **bad, **options)
        _one_line(err)
    assert mggcn.train(spec, normalize_features=False, **options).history
    model = tmp_path / "m.pt"
    mggcn.train(spec, **options).save(str(model))
    with pytest.raises(mggcn.ConfigError, match="takes no features"):
        mggcn.predict(str(model), spec, read_options={"features": "x.npy"})


def test_hidden_takes_numpy_ints_and_refuses_what_has_no_order():
    import numpy as np

    assert mggcn.train("builtin:karate", hidden=np.int64(8), epochs=1, quiet=True).config.hidden == (8,)
    for bad in ({8: 1}, {8}):
        with pytest.raises(mggcn.ConfigError, match="hidden must be a sequence of positive integers"):
            mggcn.train("builtin:karate", hidden=bad, epochs=1, quiet=True)


@pytest.mark.parametrize("kind", ["sage", "gin", "gat"])
def test_norm_of_a_model_that_aggregates_its_own_way_is_refused(kind):
    """--norm picks the GCN's Â; the others have their own, and a norm given to them was silently ignored."""
    with pytest.raises(mggcn.ConfigError, match=f"norm is for model gcn, not {kind}") as err:
        mggcn.train("builtin:karate", model=kind, norm="mean", epochs=1, quiet=True)
    _one_line(err)
    assert mggcn.train("builtin:karate", model=kind, norm="sym", epochs=1, quiet=True).history  # the default


@pytest.mark.parametrize("build, error, message", [
    (lambda: mggcn.GCN([F, 8, C], dropout=2.0), mggcn.ConfigError, r"dropout must be in \[0, 1\), got 2.0"),
    (lambda: mggcn.GCN([F, 8, C], input_dropout=float("nan")), mggcn.ConfigError, "input_dropout must be in"),
    (lambda: mggcn.GraphSAGE([F, 8, C], dropout=-1.0), mggcn.ConfigError, r"dropout must be in \[0, 1\), got -1"),
    (lambda: mggcn.GCNLayer(4, -3), ValueError, "a layer's out_dim must be a positive int, got -3"),
    (lambda: mggcn.GCNLayer(0, 3), ValueError, "a layer's in_dim must be a positive int, got 0"),
    (lambda: mggcn.GCN(5), ValueError, "dims must be a sequence of layer sizes"),
    (lambda: mggcn.GCN({F, C}), ValueError, "dims must be a sequence of layer sizes"),  # no order
    (lambda: mggcn.GraphSAGE(torch.tensor(F)), ValueError, "dims must be a sequence of layer sizes"),
    (lambda: mggcn.GCN([F, 8, C], seed="abc"), ValueError,
     r"seed must be an integer in \[-2\*\*63, 2\*\*64\), got 'abc'"),
    (lambda: mggcn.GIN([F, 8, C], seed=1.5), ValueError, "seed must be an integer in .*, got 1.5"),
    (lambda: mggcn.GAT([F, 8, C], seed=2**64), ValueError, "seed must be an integer in .*, got 18446744073709551616"),
    (lambda: mggcn.GAT([F, 8, C], attention_dropout="abc"), mggcn.ConfigError,
     r"attention_dropout must be in \[0, 1\), got 'abc'"),
])
def test_model_arguments_no_model_can_have_are_refused_when_built(build, error, message):
    """As torch's modules refuse nn.Dropout(p=2) when built: a probability out of range failed only in a training
    forward, inside torch, naming another p; a negative width inside torch's Linear; an int for dims in len()."""
    with pytest.raises(error, match=message) as err:
        build()
    _one_line(err)


@pytest.mark.parametrize("kind", list(_MODELS))
def test_full_backward_hooks_see_every_layer_as_in_pyg(kind):
    """A full backward hook on each layer: the GCN's fused layers skipped theirs, and GraphSAGE/GIN/GAT failed in
    backward (the hook makes the output a view that σ changed in place). Every hook now fires, once per layer,
    with the gradient of the layer's output that a model without hooks gives, and the weights' gradients are
    unchanged."""
    x, edge_index = _graph()
    x.requires_grad_()  # the first layer's hook has an input gradient to report (torch warns otherwise)
    model, plain = _model(kind, dims=[F, 8, 8, C]), _model(kind, dims=[F, 8, 8, C], reuse_buffers=False)
    adj = mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym"))
    seen, outputs = {}, {}
    for i, conv in enumerate(model.convs):
        conv.register_full_backward_hook(lambda _m, _gi, go, i=i: seen.__setitem__(i, go[0].detach().clone()))
    for i, conv in enumerate(plain.convs):
        conv.register_forward_hook(lambda _m, _i, out, i=i: out.retain_grad() or outputs.__setitem__(i, out))
    model(x, adj).square().sum().backward()
    plain(x, adj).square().sum().backward()
    assert sorted(seen) == [0, 1, 2]
    for i in range(3):
        torch.testing.assert_close(seen[i], outputs[i].grad, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", list(_MODELS))
def test_under_autocast_the_layers_compute_in_their_weights_dtype(kind):
    """torch's AMP recipe (the forward under torch.autocast, backward outside): GIN's and GAT's backward failed on
    tensors autocast had left of two dtypes. As PyTorch's custom operators with custom_fwd(cast_inputs=...), every
    model now runs outside autocast: the outputs and gradients of the model without it, bit for bit."""
    x, edge_index = _graph()
    model, plain = _model(kind), _model(kind)
    adj = mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x, adj)
        assert torch.is_autocast_enabled("cpu")  # left as it was for the caller's other operations
    ref = plain(x, adj)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    out.square().sum().backward()
    ref.square().sum().backward()
    for p, q in zip(model.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)


@pytest.mark.parametrize("kind", list(_MODELS))
@pytest.mark.parametrize("how", ["model", "modules"])
def test_reset_parameters_draws_new_weights_from_torch_s_rng(kind, how):
    """``model.reset_parameters()`` (PyG's models have it) and the loop over ``model.modules()`` calling each one's
    ``reset_parameters`` drew nothing: the inner linears' reset was a no-op. Both now draw every weight anew with
    PyG's glorot from torch's global RNG (the same after the same torch.manual_seed) and zero the biases."""
    def reset(model):
        if how == "model":
            model.reset_parameters()
        else:
            for module in model.modules():
                if hasattr(module, "reset_parameters"):
                    module.reset_parameters()

    model = _model(kind, dims=[F, 8, 8, C], **({"train_eps": True} if kind == "gin" else {}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # as after training: biases and ε away from their initial values
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(3)
    reset(model)
    first = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(3)
    reset(model)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, first[k], rtol=0, atol=0, msg=k)
        if k.endswith("bias") or k.endswith("eps"):
            assert not v.any(), k
        elif v.is_floating_point():
            assert not torch.equal(v, before[k]), f"{k} was not drawn again"
            bound = math.sqrt(6.0 / (v.shape[-2] + v.shape[-1]))
            assert v.abs().max() <= bound, k


@pytest.mark.parametrize("kind", list(_MODELS))
@pytest.mark.parametrize("dims", [[F, 8, C], [34, 16, 2]])
def test_torch_compile_of_a_model_gives_its_outputs_and_gradients(kind, dims):
    """torch.compile of a model: dynamo failed deep in its tracer on the GAT's sparse CSR tiles, and on the GCN's
    workspace at some sizes (34 features, as karate's); every model's forward runs eagerly inside the compiled
    frame. Outputs and gradients are those of the model itself."""
    edge_index = _graph()[1]
    x = torch.randn(N, dims[0], generator=torch.Generator().manual_seed(1))
    model, plain = _model(kind, dims=dims), _model(kind, dims=dims)
    adj = mggcn.adjacency_operator(edge_index, N, norm=model.operator("sym"))
    out, ref = torch.compile(model)(x, adj), plain(x, adj)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    out.square().sum().backward()
    ref.square().sum().backward()
    for p, q in zip(model.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "float64_default", "autocast"])
def test_train_in_this_process_ignores_the_callers_grad_mode_and_default_dtype(mode):
    """``mggcn.train(nprocs=1)`` called inside ``torch.no_grad()`` / ``torch.inference_mode()`` /
    ``torch.autocast("cpu", dtype=torch.bfloat16)`` (``precision`` decides a job's dtypes), or after
    ``torch.set_default_dtype(torch.float64)``: it trains as it does outside them (the same losses, bitwise: the
    same arithmetic), returns a float32 model, and leaves the caller's mode and default dtype as they were."""
    spec, options = "synthetic:n=300,features=8,classes=3", dict(hidden=(8,), epochs=3, quiet=True, seed=1)
    plain = mggcn.train(spec, **options)
    previous = torch.get_default_dtype()
    try:
        if mode == "float64_default":
            torch.set_default_dtype(torch.float64)
            run = mggcn.train(spec, **options)
            assert torch.get_default_dtype() == torch.float64
        elif mode == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                run = mggcn.train(spec, **options)
                assert torch.is_autocast_enabled("cpu")
        else:
            with getattr(torch, mode)():
                run = mggcn.train(spec, **options)
                assert not torch.is_grad_enabled()
    finally:
        torch.set_default_dtype(previous)
    assert [r["loss"] for r in run.history] == [r["loss"] for r in plain.history]
    assert {p.dtype for p in run.model.parameters()} == {torch.float32}


@pytest.mark.parametrize("how", ["set_default_device", "with torch.device"])
def test_train_and_predict_ignore_the_callers_default_device(how, tmp_path):
    """A caller that made another device torch's default (``torch.set_default_device("cuda")`` in a GPU script, or a
    ``with torch.device(...)`` block): mggcn places its tensors itself, and what it makes without a device belongs on
    the host. "meta" stands in for the caller's device: a tensor mggcn made there would hold no data and fail. Train
    and predict give what they give without it, in this process and in workers; the model comes back on the CPU and
    the caller's default stays."""
    spec, options = "synthetic:n=300,features=8,classes=3", dict(hidden=(8,), epochs=3, quiet=True, seed=1)
    plain = mggcn.train(spec, **options)
    plain.save(tmp_path / "model.pt")
    expected = mggcn.predict(tmp_path / "model.pt", spec, output="proba")
    runs, outputs = [], []
    with contextlib.ExitStack() as stack:
        if how == "set_default_device":
            torch.set_default_device("meta")
            stack.callback(torch.set_default_device, None)
        else:
            stack.enter_context(torch.device("meta"))
        for nprocs in (1, 2):
            runs.append(mggcn.train(spec, nprocs=nprocs, **options))
            outputs.append(mggcn.predict(tmp_path / "model.pt", spec, nprocs=nprocs, output="proba"))
        assert torch.empty(0).device.type == "meta"
    for run in runs:  # P = 2: the same epochs up to the sums' order across ranks
        np.testing.assert_allclose([r["loss"] for r in run.history], [r["loss"] for r in plain.history], rtol=1e-5)
        assert {p.device.type for p in run.model.parameters()} == {"cpu"}
    for out in outputs:
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_a_process_group_the_caller_made_is_left_to_the_caller(tmp_path):
    """A user's own process group (world of one, as a script run without torchrun makes it) is theirs: train and
    predict in this process use none and leave it initialized, its collectives working."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        run = mggcn.train("builtin:karate", hidden=(4,), epochs=2, quiet=True)
        run.save(tmp_path / "model.pt")
        mggcn.predict(tmp_path / "model.pt", "builtin:karate")
        assert dist.is_initialized()
        ones = torch.ones(2)
        dist.all_reduce(ones)
        assert ones.tolist() == [1.0, 1.0]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize("nprocs", [1, 2])
def test_a_loss_that_stops_being_finite_is_a_floating_point_error_at_any_nprocs(nprocs):
    """One ``except FloatingPointError`` catches a diverged run whether it ran in this process (NonFiniteLoss) or in
    workers (WorkerNonFiniteLoss, a WorkerError too); the message names the learning rate."""
    from mggcn.distributed.launch import WorkerBadInput, WorkerError

    with pytest.raises(FloatingPointError, match="lr") as info:
        mggcn.train("synthetic:n=300,features=8,classes=3", nprocs=nprocs, hidden=(8,), epochs=20, lr=1e30,
                    quiet=True)
    assert isinstance(info.value, WorkerError) is (nprocs > 1)
    bad = WorkerError.of_kind(1, "failed: GraphError: labels.npy: a label out of range", kind="bad_input")
    assert isinstance(bad, WorkerBadInput) and isinstance(bad, ValueError) and bad.rank == 1
    again = pickle.loads(pickle.dumps(bad))  # as a ProcessPoolExecutor's task hands it back
    assert type(again) is WorkerBadInput and str(again) == str(bad) and again.kind == "bad_input"
    # an output rank 0 could not write: an OSError at any nprocs, as train's OutputError is in this process
    unwritten = WorkerError.of_kind(0, "failed: OutputError: m.pt: cannot write: File too large", kind="output",
                                    reason="m.pt: cannot write: File too large")
    assert isinstance(unwritten, OSError) and isinstance(unwritten, WorkerError)
    assert type(pickle.loads(pickle.dumps(unwritten))) is type(unwritten)


def test_a_trained_model_prints_in_one_short_line():
    """A notebook shows what a cell returns: the result's repr is one line (model, dataset, how training ended,
    final accuracies), not every epoch's record and every vertex's prediction."""
    run = mggcn.train("synthetic:n=300,features=8,classes=3", hidden=(8,), epochs=40, quiet=True)
    text = repr(run)
    assert "\n" not in text and len(text) < 300, text
    assert text.startswith("TrainedModel(model=GCN[8, 8, 3], dataset='synthetic:n=300,features=8,classes=3', "
                           "epochs=40, stopped=None, best_epoch=None, final={'train_acc': "), text
    assert text.endswith(", predictions=int64[300])"), text


@pytest.mark.parametrize("kind", list(_MODELS))
def test_layer_sizes_and_seeds_of_numpy_and_torch_build_the_model_lists_and_ints_do(kind):
    """As torch's modules take a tensor's or numpy's integers for sizes: a 1-D array or tensor of layer sizes and a
    numpy seed build the weights a list and an int do."""
    cls = _MODELS[kind]
    plain = cls([F, 8, C], seed=3)
    for dims in (np.array([F, 8, C]), torch.tensor([F, 8, C])):
        model = cls(dims, seed=np.int64(3))
        assert model.dims == [F, 8, C] and model.seed == 3 and type(model.seed) is int
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), plain.state_dict().values()))
