"""The Python API as a PyG user drives it: PyG ``Data`` in the shapes PyG datasets give, state dicts to and from
PyG's own models, and the layers given what PyG's layers take."""

import re
import warnings

import numpy as np
import pytest
import torch
import torch_geometric.nn.models as pyg_models
from torch_geometric.data import Data, HeteroData

import mggcn
from mggcn.training.predict import predict

N, F, C = 24, 5, 3
_TIMING = ("epoch_s", "spmm", "comm_wait", "gemm", "allreduce", "criterion", "optimizer", "other", "timeline", "setup")
# float32 against float32 computed in another order (PyG's scatter against mggcn's CSR SpMM): a few ulps of values
# of order 1, far below the differences of two distinct models
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _data(seed: int = 0, **fields) -> Data:
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(N, generator=g)
    masks = [torch.zeros(N, dtype=torch.bool) for _ in range(3)]
    for mask, ids in zip(masks, (order[:8], order[8:16], order[16:])):
        mask[ids] = True
    base = {"x": torch.randn(N, F, generator=g), "edge_index": torch.randint(0, N, (2, 90), generator=g),
            "y": torch.randint(0, C, (N,), generator=g), "train_mask": masks[0], "val_mask": masks[1],
            "test_mask": masks[2]}
    return Data(**{**base, **fields})


def _train(data, **options):
    return mggcn.train(data, hidden=(6,), epochs=3, seed=1, lr=0.05, quiet=True, **options)


def _numbers(result):
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in result.history]


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and text, text
    return text


def test_index_masks_are_read_as_vertex_ids():
    """PyG's ``train_idx`` style (a LongTensor of ids) is the mask of those vertices, as ``out[idx]`` reads it."""
    data = _data()
    ids = _data(**{f"{s}_mask": data[f"{s}_mask"].nonzero().view(-1) for s in ("train", "val", "test")})
    assert _numbers(_train(ids)) == _numbers(_train(data))
    repeated = _data(train_mask=torch.tensor([0, 1, 1]))
    with pytest.raises(mggcn.GraphError, match="repeats a vertex id") as err:
        _train(repeated)
    assert err.value.option == "train_mask"


def test_multi_split_masks_need_a_column():
    """WikiCS / geom-gcn masks ``[n, k]``: refused without ``split=``, one column with it (a 1-D mask is shared)."""
    data = _data()
    columns = [_data(seed=s) for s in range(4)]
    wide = _data(train_mask=torch.stack([d.train_mask for d in columns], 1),
                 val_mask=torch.stack([d.val_mask for d in columns], 1),
                 test_mask=torch.stack([d.test_mask for d in columns], 1))
    with pytest.raises(mggcn.ConfigError, match=r"split=0\.\.3") as err:
        _train(wide)
    assert err.value.option == "split" and _one_line(err)
    picked = _data(train_mask=columns[2].train_mask, val_mask=columns[2].val_mask, test_mask=columns[2].test_mask)
    assert _numbers(_train(wide, split=2)) == _numbers(_train(picked))
    assert _numbers(_train(wide, split=2)) != _numbers(_train(data))
    with pytest.raises(mggcn.ConfigError, match="4 columns") as err:
        _train(wide, split=4)
    with pytest.raises(mggcn.ConfigError, match="one column; leave split out") as err:
        _train(data, split=1)


def test_a_data_with_a_train_mask_alone_has_empty_validation_and_test_splits():
    """KarateClub's Data holds a train_mask alone: it trains as with all-False val/test masks (an empty split, as a
    split file may give), its accuracies there None; a Data without train_mask is one line naming it."""
    data = _data()
    alone = Data(x=data.x, edge_index=data.edge_index, y=data.y, train_mask=data.train_mask)
    empty = _data(val_mask=torch.zeros(N, dtype=torch.bool), test_mask=torch.zeros(N, dtype=torch.bool))
    assert _numbers(_train(alone)) == _numbers(_train(empty))
    assert _train(alone).final["val_acc"] is None and _train(alone).final["test_acc"] is None
    graph = mggcn.Graph(num_nodes=N, edge_index=data.edge_index.numpy(), x=data.x.numpy(), y=data.y.numpy(),
                        masks={"train": data.train_mask.numpy()})  # the same graph as mggcn's own: the same
    assert _numbers(_train(graph)) == _numbers(_train(empty))
    for masks in ({"test_mask": data.test_mask}, {}):
        partial = Data(x=data.x, edge_index=data.edge_index, y=data.y, **masks)
        with pytest.raises(mggcn.GraphError, match="has no train_mask; set data.train_mask .*RandomNodeSplit") as err:
            _train(partial)
        assert err.value.option == "train_mask" and _one_line(err)


def test_edge_weights_are_refused_unless_all_one():
    """Â weighs every edge 1: training on weights other than 1 would silently ignore them."""
    with pytest.raises(mggcn.GraphError, match="edge_weight is not all 1") as err:
        _train(_data(edge_weight=torch.rand(90) + 0.5))
    assert err.value.option == "edge_weight" and _one_line(err)
    assert _numbers(_train(_data(edge_weight=torch.ones(90)))) == _numbers(_train(_data()))
    for wrong in (torch.ones(89), torch.ones(90, 1), torch.ones(91)):  # ones, but not one per edge
        with pytest.raises(mggcn.GraphError, match=r"edge_weight has shape .* but edge_index has 90 edges") as err:
            _train(_data(edge_weight=wrong))
        assert err.value.option == "edge_weight" and _one_line(err)


_BAD_DATA = {
    "hetero": (lambda d: HeteroData(), "to_homogeneous"),
    "meta x": (lambda d: _data(x=torch.empty(N, F, device="meta")), "'meta' device"),
    "sparse x": (lambda d: _data(x=d.x.to_sparse()), "sparse tensor"),
    "x a row short": (lambda d: _data(x=d.x[:-1]), r"out of range for data.num_nodes = 23 \(PyG counts the rows of x"),
    "y [n, 2, 3]": (lambda d: _data(y=torch.zeros(N, 2, 3)), r"y must be .* shape \[24, 2, 3\]"),
    "y of 2": (lambda d: _data(y=2 * torch.nn.functional.one_hot(d.y)), "vertex 0 has 2 for label"),
    "1-D x": (lambda d: _data(x=d.x[:, 0]), r"x must be \[n, F\], got shape \[24\]"),
    "[n, 2] mask": (lambda d: _data(test_mask=torch.ones(N, 2, 2, dtype=torch.bool)), r"test_mask must be"),
    "no x": (lambda d: Data(edge_index=d.edge_index, y=d.y, num_nodes=N), "has no x, train_mask"),
}


@pytest.mark.parametrize("case", list(_BAD_DATA))
def test_unusable_pyg_data_is_one_line(case):
    make, message = _BAD_DATA[case]
    with pytest.raises(mggcn.GraphError, match=message) as err:
        _train(make(_data()))
    _one_line(err)


def test_pyg_data_as_pyg_datasets_store_it():
    """``y`` [n, 1] (OGB), float64 features that require grad, uint8 masks, a non-contiguous ``edge_index`` and
    labels -1 outside the splits train as the plain Data does."""
    data = _data()
    y = data.y.clone()
    y[~(data.train_mask | data.val_mask | data.test_mask)] = -1  # (every vertex is in a split here: unchanged)
    odd = _data(y=y[:, None], x=data.x.double().requires_grad_(), train_mask=data.train_mask.to(torch.uint8),
                edge_index=data.edge_index.t().contiguous().t())
    assert not odd.edge_index.is_contiguous()
    assert _numbers(_train(odd)) == _numbers(_train(data))
    # y one-hot [n, C] (float or bool): the class of each row, as F.cross_entropy reads a one-hot target
    for one_hot in (torch.nn.functional.one_hot(data.y).float(), torch.nn.functional.one_hot(data.y).bool()):
        assert _numbers(_train(_data(y=one_hot))) == _numbers(_train(data))


def test_state_dict_is_called_as_torch_spells_it(tmp_path):
    result = _train(_data())
    called = result.state_dict()
    assert called.keys() == result.state_dict.keys() and len(called) == 2 * len(result.model.convs)
    torch.save(result.state_dict, tmp_path / "w.pt")  # a plain state dict: readable with weights_only anywhere
    loaded = torch.load(tmp_path / "w.pt", weights_only=True)
    for name, tensor in called.items():
        assert torch.equal(loaded[name], tensor), name


_PYG = {"gcn": lambda **kw: pyg_models.GCN(F, 6, 2, C, **kw),
        "sage": lambda **kw: pyg_models.GraphSAGE(F, 6, 2, C, **kw),
        "gin": lambda **kw: pyg_models.GIN(F, 6, 2, C, **kw),
        "gat": lambda **kw: pyg_models.GAT(F, 6, 2, C, heads=2, **kw)}


@pytest.mark.parametrize("kind", list(_PYG))
def test_saved_models_load_into_pyg_with_its_outputs(kind, tmp_path):
    data = _data()
    result = _train(data, model=kind, **({"heads": 2} if kind == "gat" else {}))
    result.save(str(tmp_path / "m.pt"))
    pyg = _PYG[kind]().eval()
    pyg.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    with torch.no_grad():
        expected = pyg(data.x, data.edge_index).softmax(1)
    torch.testing.assert_close(torch.from_numpy(predict(str(tmp_path / "m.pt"), data, output="proba")), expected,
                               **TOL)
    np.testing.assert_array_equal(result.predictions, expected.argmax(1).numpy())


@pytest.mark.parametrize("kind", ["gcn", "gcn-nobias", "sage", "sage-nobias", "gin", "gat", "gat-nobias", "gcn-elu",
                                  "sage-elu", "gin-elu", "gat-elu"])
def test_pyg_trained_weights_predict_as_pyg(kind, tmp_path):
    """PyG's weights (a few steps of PyG training) through ``predict`` on a Data with no labels or masks; models
    made with ``bias=False`` too, and with ``act="elu"``."""
    torch.manual_seed(0)
    name, _, variant = kind.partition("-")
    model = _PYG[name](**{"nobias": {"bias": False}, "elu": {"act": "elu"}, "": {}}[variant])
    assert variant != "nobias" or not any(key.endswith("bias") for key in model.state_dict())
    data = _data()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(data.x, data.edge_index)[data.train_mask],
                                          data.y[data.train_mask]).backward()
        optimizer.step()
    torch.save(model.state_dict(), tmp_path / "pyg.pt")
    with torch.no_grad():
        expected = model.eval()(data.x, data.edge_index).softmax(1)
    bare = Data(x=data.x, edge_index=data.edge_index)
    got = predict(str(tmp_path / "pyg.pt"), bare, output="proba", norm="sym",
                  activation="elu" if variant == "elu" else "relu")
    torch.testing.assert_close(torch.from_numpy(got), expected, **TOL)


def test_predict_on_two_workers_without_labels(tmp_path):
    torch.manual_seed(0)
    model = pyg_models.GCN(F, 6, 2, C).eval()
    torch.save(model.state_dict(), tmp_path / "pyg.pt")
    data = _data()
    with torch.no_grad():
        expected = model(data.x, data.edge_index).argmax(1).numpy()
    got = predict(str(tmp_path / "pyg.pt"), Data(x=data.x, edge_index=data.edge_index), nprocs=2, norm="sym",
                  activation="relu")
    np.testing.assert_array_equal(got, expected)


_EI = torch.tensor([[0, 1, 2], [1, 2, 0]])
_BAD_OPERATOR = [
    ((_EI, 3.0), mggcn.ConfigError, "num_nodes must be a non-negative int"),
    ((_EI, None), mggcn.ConfigError, "num_nodes"),
    ((_EI, -1), mggcn.ConfigError, "num_nodes"),
    ((_EI, True), mggcn.ConfigError, "num_nodes"),
    ((_EI.float() + 0.5, 3), mggcn.GraphError, "0.5 is not an integer"),
    ((_EI.bool(), 3), mggcn.GraphError, "integer vertex ids, got dtype bool"),
    (([[0, 1], [1]], 3), mggcn.GraphError, r"not a \[2, E\] array"),
    ((None, 3), mggcn.GraphError, "integer vertex ids"),
    ((_EI.to("meta"), 3), mggcn.GraphError, "meta"),
    ((torch.sparse_coo_tensor(_EI, torch.ones(3), (3, 3)), 3), mggcn.GraphError, "dense"),
    ((np.array([[0, 2**64 - 1], [1, 0]], dtype=np.uint64), 3), mggcn.GraphError, "beyond the int64 range"),
    ((_EI, 10**15), mggcn.GraphError, "num_nodes=1,000,000,000,000,000: .* more than this machine's"),
]


@pytest.mark.parametrize("args, error, message", _BAD_OPERATOR, ids=[m for *_, m in _BAD_OPERATOR])
def test_adjacency_operator_refuses_bad_arguments(args, error, message):
    with pytest.raises(error, match=message) as err:
        mggcn.adjacency_operator(*args)
    _one_line(err)


def test_adjacency_operator_names_a_bad_device():
    with pytest.raises(mggcn.ConfigError, match="device must be a torch device") as err:
        mggcn.adjacency_operator(_EI, 3, device="tpu")
    assert err.value.option == "device" and _one_line(err)
    assert mggcn.adjacency_operator(_EI, torch.tensor(3))(torch.ones(3, 2)).shape == (3, 2)  # a 0-d tensor is an n


@pytest.mark.parametrize("cls", [mggcn.GCN, mggcn.GraphSAGE, mggcn.GIN])
def test_layers_refuse_what_pyg_layers_take(cls):
    model, adj = cls([4, 2]), mggcn.adjacency_operator(_EI, 3)
    with pytest.raises(TypeError, match="adjacency_operator.*an edge_index is not one"):
        model(torch.ones(3, 4), _EI)  # PyG's model(x, edge_index)
    with pytest.raises(ValueError, match=r"x must be a \[n, 4\] tensor .* got \[3, 5\]"):
        model(torch.ones(3, 5), adj)
    with pytest.raises(ValueError, match="x has 4 rows but adj is over 3 vertices"):
        model(torch.ones(4, 4), adj)  # the operator would read the first 3 rows and drop the rest
    with pytest.raises(ValueError, match=r"x must be float32 .* got float64; give x.to\(torch.float32\)"):
        model(torch.ones(3, 4, dtype=torch.float64), adj)
    with pytest.raises(ValueError, match=r"dims must be positive ints"):
        cls([4, 0])


def test_a_gat_saved_by_pyg_2_4_predicts_as_pyg(tmp_path):
    """PyG 2.4's GATConv held one linear map under two names (``lin_src``, ``lin_dst``, the same module): its state
    dict predicts as the model it came from; two different maps (a layer for bipartite graphs) are refused."""
    torch.manual_seed(0)
    model, data = _PYG["gat"]().eval(), _data()
    old = {}
    for key, tensor in model.state_dict().items():  # the keys PyG 2.4 wrote, in its order
        if key.endswith("lin.weight"):
            old[key.replace("lin.", "lin_src.")] = tensor
            old[key.replace("lin.", "lin_dst.")] = tensor.clone()
        else:
            old[key] = tensor
    torch.save(old, tmp_path / "pyg24.pt")
    with torch.no_grad():
        expected = model(data.x, data.edge_index).softmax(1)
    bare = Data(x=data.x, edge_index=data.edge_index)
    got = predict(str(tmp_path / "pyg24.pt"), bare, output="proba", activation="relu")
    torch.testing.assert_close(torch.from_numpy(got), expected, **TOL)
    old["convs.1.lin_dst.weight"] = old["convs.1.lin_dst.weight"] + 1
    torch.save(old, tmp_path / "bipartite.pt")
    with pytest.raises(mggcn.GraphError, match="convs.1.lin_src and convs.1.lin_dst differ: a GATConv for bipartite"):
        predict(str(tmp_path / "bipartite.pt"), bare)


def _refusal(tmp_path, model) -> str:
    """The one line predict refuses ``model``'s saved state dict with."""
    torch.save(model.state_dict(), tmp_path / "m.pt")
    with pytest.raises(mggcn.GraphError) as err:
        predict(str(tmp_path / "m.pt"), Data(x=torch.randn(N, F), edge_index=torch.zeros(2, 0, dtype=torch.long)))
    return _one_line(err)


def test_a_gat_layer_that_concatenates_its_heads_last_is_refused_in_one_line(tmp_path):
    """One GATConv(concat=True) as the model: its bias is H·C wide where mggcn's last layer averages the heads (C);
    torch's size mismatch came out instead."""
    from torch_geometric.nn import GATConv

    assert _refusal(tmp_path, GATConv(F, 4, heads=2)).endswith(
        "convs.0.bias has 2·4 entries: that layer concatenates its 2 heads (PyG's GATConv(concat=True)); mggcn's last "
        "GAT layer averages them, as PyG's GAT model's does (concat=False)")


def test_a_gat_whose_hidden_layer_averages_its_heads_is_refused_naming_that(tmp_path):
    """A hidden GATConv(concat=False) hands the next layer one head's channels: the widths do not chain, and the
    line says why rather than only that they do not."""
    from torch_geometric.nn import GATConv

    model = torch.nn.Module()
    model.conv1, model.conv2 = GATConv(F, 6, heads=4, concat=False), GATConv(6, C, heads=1)
    assert _refusal(tmp_path, model).endswith(
        "layer 0 averages its 4 heads (PyG's GATConv(concat=False)): layer 1 takes their 6 channels; mggcn's GAT "
        "concatenates the heads of its hidden layers, as PyG's GAT model does")


def test_a_gin_of_sequential_mlps_is_named_as_such(tmp_path):
    """GINConv(Sequential(Linear, ReLU, Linear)), the tutorials' GIN: said to be that, not "no model mggcn trains"."""
    from torch.nn import Linear, ReLU, Sequential
    from torch_geometric.nn import GINConv

    model = torch.nn.Module()
    model.conv1 = GINConv(Sequential(Linear(F, 6), ReLU(), Linear(6, 6)))
    assert _refusal(tmp_path, model).endswith(
        "m.pt: conv1.nn.0.weight is a GIN layer's MLP as a torch.nn.Sequential; mggcn reads GIN layers in the "
        "layout of PyG's GIN model (nn.lins.0.weight, nn.lins.1.weight: torch_geometric.nn.MLP), whose weights these "
        "can be copied into")


def test_a_gatv2_state_dict_is_named_as_such(tmp_path):
    """PyG's GATv2 layers carry a GraphSAGE layer's names (lin_l, lin_r) and more: said to be a GATv2, not a SAGE
    with unexpected entries."""
    torch.save(pyg_models.GAT(F, 6, 2, C, v2=True).state_dict(), tmp_path / "v2.pt")
    with pytest.raises(mggcn.GraphError) as err:
        predict(str(tmp_path / "v2.pt"), Data(x=torch.randn(N, F), edge_index=torch.zeros(2, 0, dtype=torch.long)))
    assert _one_line(err).startswith(f"{tmp_path / 'v2.pt'}: the state dict of a GATv2 (PyG's GATv2Conv")


class _Net(torch.nn.Module):
    """A model as PyG's examples write one: graph convolutions as attributes, σ between them."""

    def __init__(self, conv, names, dims, extra=None, **kw):
        super().__init__()
        self.names = names
        for name, (d_in, d_out) in zip(names, zip(dims[:-1], dims[1:])):
            setattr(self, name, conv(d_in, d_out, **kw))
        if extra is not None:
            setattr(self, extra, torch.nn.Linear(dims[-1], dims[-1]))

    def forward(self, x, edge_index):
        order = sorted(self.names, key=lambda n: int(n.removeprefix("conv")))
        for k, name in enumerate(order):
            x = getattr(self, name)(x, edge_index)
            x = x.relu() if k + 1 < len(order) else x
        return x


def _user_model(case):
    from torch_geometric.nn import GCNConv, SAGEConv
    if case == "conv1-conv2":
        return _Net(GCNConv, ["conv1", "conv2"], [F, 6, C])
    if case == "sage":
        return _Net(SAGEConv, ["conv1", "conv2", "conv3"], [F, 6, 6, C])
    if case == "one-layer":
        return GCNConv(F, C)
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["conv1-conv2", "sage", "one-layer", "module-prefix", "layers-list",
                                  "module-prefix-batch-norm", "compiled-module-batch-norm"])
def test_weights_of_a_users_own_pyg_model_predict_as_it(case, tmp_path):
    """PyG's examples name their layers conv1, conv2 (or keep them in a ModuleList; DDP prefixes module.,
    torch.compile _orig_mod., to every key, the norms' too): the layers are read in their numbers' order, and the
    weights predict what the model computes."""
    from torch_geometric.nn import GCNConv
    torch.manual_seed(0)
    if case == "module-prefix":  # DistributedDataParallel's state dict of PyG's GCN
        model = pyg_models.GCN(F, 6, 2, C)
        state = {f"module.{k}": v for k, v in model.state_dict().items()}
    elif case.endswith("batch-norm"):  # and of one with batch norms, in a compiled DDP model too
        model = pyg_models.GCN(F, 6, 3, C, norm="batch_norm")
        for norm in model.norms[:-1]:  # PyG's last is an Identity
            norm.module.running_mean.uniform_(-1, 1)
            norm.module.running_var.uniform_(0.5, 2)
        prefix = "module." if case.startswith("module") else "_orig_mod.module."
        state = {prefix + k: v for k, v in model.state_dict().items()}
    elif case == "layers-list":
        model = _Net(GCNConv, ["conv1", "conv2", "conv3"], [F, 6, 5, C])
        state = {re.sub(r"^conv(\d+)\.", lambda m: f"layers.{int(m.group(1)) - 1}.", k): v
                 for k, v in model.state_dict().items()}  # a ModuleList's names
        assert sorted({k.split(".")[1] for k in state}) == ["0", "1", "2"]
    else:
        model = _user_model(case)
        state = model.state_dict()
    torch.save(state, tmp_path / "user.pt")
    data = _data()
    with torch.no_grad():
        expected = model.eval()(data.x, data.edge_index).softmax(1)
    got = predict(str(tmp_path / "user.pt"), Data(x=data.x, edge_index=data.edge_index), output="proba", norm="sym",
                  activation="relu")
    torch.testing.assert_close(torch.from_numpy(got), expected, **TOL)


def test_layers_made_in_another_order_than_their_numbers_are_read_by_number(tmp_path):
    from torch_geometric.nn import GCNConv
    torch.manual_seed(0)
    model = _Net(GCNConv, ["conv2", "conv1"], [6, F, C])  # conv2: F -> 6 would be wrong; conv1 takes F
    model.conv1, model.conv2 = GCNConv(F, 6), GCNConv(6, C)
    assert list(model.state_dict())[0].startswith("conv2.")
    torch.save(model.state_dict(), tmp_path / "user.pt")
    data = _data()
    with torch.no_grad():
        expected = model.eval()(data.x, data.edge_index).softmax(1)
    got = predict(str(tmp_path / "user.pt"), data, output="proba", norm="sym", activation="relu")
    torch.testing.assert_close(torch.from_numpy(got), expected, **TOL)


def test_layers_numbered_past_nine_are_read_in_their_numbers_order():
    """conv1 ... conv11: layer 10 follows layer 9 (by number, not as text, where "conv10" sorts before "conv2")."""
    from mggcn.training.outputs import layers_as_convs

    state = {f"conv{k}.{name}": torch.full((4, 4) if name == "lin.weight" else (4,), float(k))
             for k in (3, 11, 1, 10, 2, 9, 4, 5, 6, 7, 8) for name in ("lin.weight", "bias")}
    renamed = layers_as_convs(state)
    assert sorted(renamed) == sorted(f"convs.{k}.{name}" for k in range(11) for name in ("lin.weight", "bias"))
    assert all(renamed[f"convs.{k}.lin.weight"].eq(k + 1).all() for k in range(11))


@pytest.mark.parametrize("extra", ["classifier", "lin"])
def test_a_users_model_with_more_than_convolutions_is_one_line(extra, tmp_path):
    """A Linear after the convolutions is no part of a model mggcn runs: said, not dropped (nor, named ``lin``,
    taken for a layer)."""
    from torch_geometric.nn import GCNConv
    torch.save(_Net(GCNConv, ["conv1", "conv2"], [F, 6, C], extra=extra).state_dict(), tmp_path / "user.pt")
    with pytest.raises(mggcn.GraphError) as err:
        predict(str(tmp_path / "user.pt"), _data(), norm="sym", activation="relu")
    assert f"{extra}.weight" in _one_line(err) and "conv1, conv2" in str(err.value)


class _ExampleGAT(torch.nn.Module):
    """PyG's GAT example: 8 heads concatenated, then 1 head for the output (``heads`` of each layer given)."""

    def __init__(self, heads):
        from torch_geometric.nn import GATConv

        super().__init__()
        widths = [F, *(4 * h for h in heads[:-1]), C]
        self.convs = [GATConv(a, b // h if i + 1 < len(heads) else b, heads=h, concat=i + 1 < len(heads))
                      for i, (a, b, h) in enumerate(zip(widths[:-1], widths[1:], heads))]
        for i, conv in enumerate(self.convs):
            setattr(self, f"conv{i + 1}", conv)

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            x = torch.nn.functional.elu(x) if i + 1 < len(self.convs) else x
        return x


def test_a_gat_of_pygs_example_with_one_output_head_predicts_as_it(tmp_path):
    """PyG's GAT example: 8 heads, then 1 head for the output (mggcn's output_heads), ELU between them; the weights
    predict what the model computes."""
    torch.manual_seed(0)
    model = _ExampleGAT([8, 1])
    torch.save(model.state_dict(), tmp_path / "gat.pt")
    data = _data()
    with torch.no_grad():
        expected = model.eval()(data.x, data.edge_index).softmax(1)
    got = predict(str(tmp_path / "gat.pt"), data, output="proba", activation="elu")
    torch.testing.assert_close(torch.from_numpy(got), expected, **TOL)


def test_a_gat_whose_hidden_layers_have_other_heads_is_one_line_saying_so(tmp_path):
    """Hidden layers of 8 and then 4 heads: mggcn's GAT has one head count for its hidden layers."""
    torch.save(_ExampleGAT([8, 4, 1]).state_dict(), tmp_path / "gat.pt")
    with pytest.raises(mggcn.GraphError, match=r"layer 1 has 4 attention head\(s\) and layer 0 8: mggcn's GAT") as err:
        predict(str(tmp_path / "gat.pt"), _data(), activation="relu")
    _one_line(err)


@pytest.mark.parametrize("mlps, message", [
    ([[F, 16, 16, 16], [16, 16, 16, C]], "layer 0's MLP has more than two linears; mggcn's GIN takes MLPs of two"),
    ([[F, 32, 16], [16, 32, C]], r"layer 0's MLP is \[5, 32, 16\] \(its linears \[32, 5\] and \[16, 32\]\); mggcn's "
                                 r"GIN takes MLPs whose hidden width is their output width"),
])
def test_a_gin_of_other_mlps_is_refused_naming_its_mlp(mlps, message, tmp_path):
    """PyG's GINConv takes any MLP; mggcn's GIN is PyG's GIN(in, hidden, L, out), MLPs [a, b, b]. Weights of other
    MLPs are refused in one line saying which layer's MLP and how, not by a mismatch between two layers' widths."""
    from torch_geometric.nn import MLP, GINConv

    from mggcn.utils.errors import GraphError

    torch.manual_seed(0)
    convs = torch.nn.ModuleList(GINConv(MLP(dims)) for dims in mlps)
    torch.save(torch.nn.Module.state_dict(torch.nn.ModuleDict({"convs": convs})), tmp_path / "gin.pt")
    data = _data()
    with pytest.raises(GraphError, match=message):
        predict(str(tmp_path / "gin.pt"), Data(x=data.x, edge_index=data.edge_index))


def test_ids_that_list_every_vertex_of_a_tiny_graph_are_ids():
    """On 1 or 2 vertices an integer [n] of 0/1 can list every vertex once ([0, 1], [0]): torch indexing reads it as
    ids, and so does the split; 0/1 that repeat a vertex ([1, 1], [0, 0]) stay a mask."""
    x, y = torch.eye(2), torch.tensor([0, 1])
    none = torch.tensor([], dtype=torch.long)

    def loss(train, n=2):
        data = Data(x=x[:n], edge_index=torch.tensor([[0], [1]]) if n == 2 else torch.zeros(2, 0, dtype=torch.long),
                    y=y[:n], train_mask=train, val_mask=none, test_mask=none)
        return mggcn.train(data, hidden=(4,), epochs=1, seed=0, quiet=True).history[0]["loss"]

    both = loss(torch.tensor([True, True]))
    assert loss(torch.tensor([0, 1])) == loss(torch.tensor([1, 0])) == loss(torch.tensor([1, 1])) == both
    assert loss(torch.tensor([0, 1])) != loss(torch.tensor([False, True]))
    assert loss(torch.tensor([0]), n=1) == loss(torch.tensor([True]), n=1)  # vertex 0 trains (it would be empty)
    with pytest.raises(mggcn.GraphError, match="training split is empty"):
        loss(torch.tensor([0, 0]))


def test_what_is_not_one_pyg_data_is_one_line_saying_what_to_give():
    from torch_geometric.data import InMemoryDataset

    class Two(InMemoryDataset):
        def __init__(self, graphs):
            super().__init__(None)
            self.data, self.slices = self.collate(graphs)

    for given, count in ((Two([_data()]), "1 graph "), (Two([_data(), _data(1)]), "2 graphs")):
        for call in (_train, lambda d: predict("unused.pt", d)):
            with pytest.raises(mggcn.GraphError, match=f"a PyG dataset of {count}.*give its graph: dataset\\[0\\]") \
                    as err:
                call(given)
            _one_line(err)
    sparse = _data()
    sparse.adj_t, sparse.edge_index = torch.zeros(2), None
    with pytest.raises(mggcn.GraphError, match=r"holds adj_t \(ToSparseTensor\), not edge_index") as err:
        _train(sparse)
    assert err.value.option == "edge_index" and _one_line(err)


def test_a_graph_checks_its_vertex_count_labels_and_splits():
    """``mggcn.Graph`` as built by hand: num_nodes an int (a 0-d integer tensor is one), labels [n, 1] one class
    per vertex as in a PyG Data, and no split but train, val and test."""
    d = _data()
    masks = {s: d[f"{s}_mask"].numpy() for s in ("train", "val", "test")}
    args = (d.edge_index.numpy(), d.x.numpy(), d.y.numpy(), masks)
    assert mggcn.Graph(torch.tensor(N), *args).num_nodes == N and type(mggcn.Graph(np.int32(N), *args).num_nodes) is int
    for bad in (float(N), str(N), True, -1, None):
        with pytest.raises(mggcn.GraphError, match=f"num_nodes must be a non-negative int, got {re.escape(repr(bad))}"):
            mggcn.Graph(bad, *args)
    column = mggcn.Graph(N, *args[:2], d.y.numpy()[:, None], masks)
    assert not column.multilabel and column.num_classes == C and np.array_equal(column.y, d.y.numpy())
    with pytest.raises(mggcn.GraphError, match="masks has 'valid'; its splits are train, val, test") as err:
        mggcn.Graph(N, *args[:3], {**masks, "valid": masks["val"]})
    assert err.value.option == "masks" and _one_line(err)


def test_predict_refuses_what_it_would_misread(tmp_path):
    """A model object or state dict instead of its file, ``layer`` without embeddings (it would be ignored), an
    unknown option: each one line; a ``pathlib.Path`` is a path."""
    path = str(tmp_path / "m.pt")
    mggcn.train(_data(), hidden=(6,), epochs=1, quiet=True, save_model=path)
    model = pyg_models.GCN(F, 6, 2, C)
    for given, what in ((model.state_dict(), "got a state dict"), (model, "got a GCN")):
        with pytest.raises(mggcn.ConfigError, match=f"model must be the path of a saved model .*{what}") as err:
            predict(given, _data())
        assert err.value.option == "model" and _one_line(err)
    with pytest.raises(mggcn.ConfigError, match="layer=1 is for output='embeddings'") as err:
        predict(path, _data(), layer=1)
    assert err.value.option == "layer"
    with pytest.raises(TypeError, match=r"mggcn.predict\(\) got unknown options \['epochs'\]"):
        predict(path, _data(), epochs=3)
    import pathlib

    assert np.array_equal(predict(pathlib.Path(path), _data()), predict(path, _data()))


@pytest.mark.skipif(torch.cuda.is_available(), reason="names a device this machine has not")
def test_adjacency_operator_refuses_a_device_this_machine_has_not_before_building():
    with pytest.raises(mggcn.ConfigError, match="device 'cuda' cannot be used here") as err:
        mggcn.adjacency_operator(_EI, 3, device="cuda")
    assert err.value.option == "device" and _one_line(err)


def test_numpy_scalars_and_a_torch_device_are_the_values_they_hold(tmp_path):
    """A seed from np.arange, counts from a sweep's grid, torch.device("cpu"): the run that Python's ints and "cpu"
    make (they were refused as not integers, or failed inside the model with "an integer is required")."""
    data = _data()
    want = _numbers(mggcn.train(data, hidden=(8,), epochs=3, seed=3, lr=0.05, quiet=True, model="gat", heads=2,
                                save_model=str(tmp_path / "m.pt")))
    got = mggcn.train(data, hidden=(np.int64(8),), epochs=np.int32(3), seed=np.int64(3), lr=np.float32(0.05),
                      quiet=True, model="gat", heads=np.int64(2), nprocs=np.int64(1), device=torch.device("cpu"))
    assert _numbers(got) == want
    tensors = mggcn.train(data, hidden=torch.tensor([8]), epochs=torch.tensor(3), seed=3, lr=0.05, quiet=True,
                          model="gat", heads=2)
    assert _numbers(tensors) == want
    assert mggcn.GCN([F, 8, C], seed=np.int64(3)).seed == 3
    classes = predict(str(tmp_path / "m.pt"), data, nprocs=np.int64(1), device=torch.device("cpu"))
    assert classes.shape == (N,)
    with pytest.raises(mggcn.ConfigError, match=r"^output embeddings needs the layer whose output to give: "
                                                r"layer= 1\.\.2$"):
        predict(str(tmp_path / "m.pt"), data, output="embeddings")


def test_a_data_with_edge_features_warns_that_they_are_not_read(tmp_path):
    """GINEConv's weights carry a GIN's names: predicting with them on a Data with edge_attr computes a GIN, so the
    edge features left out are said, by train and predict alike, at the caller's line."""
    data = _data(edge_attr=torch.randn(90, 3))
    with pytest.warns(UserWarning, match=r"^pyg: data\.edge_attr is not read: mggcn's models use no edge features") \
            as seen:
        result = _train(data)
    assert {w.filename for w in seen} == {__file__}
    result.save(str(tmp_path / "m.pt"))
    with pytest.warns(UserWarning, match="edge_attr is not read") as seen:
        predict(str(tmp_path / "m.pt"), data)
    assert {w.filename for w in seen} == {__file__}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # without edge features: no warning
        predict(str(tmp_path / "m.pt"), _data())


def test_a_whole_pickled_model_is_refused_saying_to_save_its_state_dict(tmp_path):
    torch.save(pyg_models.GCN(F, 6, 2, C), tmp_path / "whole.pt")
    with pytest.raises(mggcn.GraphError) as err:
        predict(str(tmp_path / "whole.pt"), _data())
    assert _one_line(err) == (f"{tmp_path / 'whole.pt'}: a pickled object, not a state dict (it calls "
                              "torch_geometric.nn.models.basic_gnn.GCN); mggcn reads a model's weights alone: save "
                              "them with torch.save(model.state_dict(), path)")


def test_edge_weights_are_refused_in_words_for_predict_as_for_train(tmp_path):
    _train(_data()).save(str(tmp_path / "m.pt"))
    with pytest.raises(mggcn.GraphError) as err:
        predict(str(tmp_path / "m.pt"), _data(edge_weight=torch.full((90,), 0.5)))
    assert _one_line(err).endswith("edge_weight is not all 1, but mggcn's Â weighs every edge 1; delete "
                                   "data.edge_weight to use the unweighted graph")


@pytest.mark.parametrize("kind", ["gcn", "gat"])
def test_a_pyg_model_with_jumping_knowledge_is_refused_naming_its_final_linear(kind, tmp_path):
    """PyG's models with jk= end in a Linear (and, for jk="lstm", an LSTM): tensors of no graph convolution. A GAT's
    was refused as a last layer that concatenates its heads, the real cause unsaid."""
    model = _PYG[kind](jk="cat")
    assert _refusal(tmp_path, model) == (
        f"{tmp_path / 'm.pt'}: lin.weight, lin.bias belong to none of the layers convs.0 to convs.1 (PyG's models end "
        "in a Linear with jk=); mggcn's models are their graph convolutions, with PyG's batch norms between them "
        "(norms.0, norms.1, ...) and nothing else")


def test_layers_built_with_other_options_are_refused_naming_the_tensors_and_the_layout(tmp_path):
    """SAGEConv(root_weight=False) lacks the root weight; PyG's GAT(norm="batch_norm") has norms mggcn's GAT has not."""
    from torch_geometric.nn import SAGEConv

    model = torch.nn.Module()
    model.conv1, model.conv2 = SAGEConv(F, 6, root_weight=False), SAGEConv(6, C, root_weight=False)
    assert _refusal(tmp_path, model).endswith(
        f": no convs.0.lin_r.weight, convs.1.lin_r.weight for a sage of layers [{F}, 6, {C}]: mggcn reads the tensors "
        "of PyG's GraphSAGE model as its default options build it")
    assert _refusal(tmp_path, _PYG["gat"](norm="batch_norm")).endswith(
        ": unexpected norms.0.module.weight, norms.0.module.bias, norms.0.module.running_mean, "
        f"norms.0.module.running_var, ... for a gat of layers [{F}, 6, {C}]: mggcn reads the tensors of PyG's GAT "
        "model as its default options build it")
