"""The Python API: ``mggcn.training.trainer`` is the CLI's job, in this process or on P workers; the layers work
alone."""

import json

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn.models import GCN as PygGCN

import mggcn
from mggcn.config import TrainConfig
from mggcn.data.generators import parse_spec
from mggcn.tools.cli import main
from mggcn.training.job import TrainJob, run_train_job
from mggcn.training.outputs import load_model
from reference import adj_hat, random_graph

_TIMING = ("epoch_s", "spmm", "comm_wait", "gemm", "allreduce", "criterion", "optimizer", "other", "timeline", "setup")


def _numbers(history):
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in history]


def _pyg(graph):
    t = torch.from_numpy
    return Data(x=t(graph.x), edge_index=t(graph.edge_index), y=t(graph.y), train_mask=t(graph.masks["train"]),
                val_mask=t(graph.masks["val"]), test_mask=t(graph.masks["test"]))


def test_train_in_process_is_the_training_job(tmp_path):
    graph = random_graph(40, 160, features=6, classes=3, seed=11)
    result = mggcn.train(graph, hidden=(8,), epochs=6, seed=3, lr=0.05, quiet=True)
    job = run_train_job(TrainJob(dataset=graph, config=TrainConfig(hidden=(8,), epochs=6, seed=3, lr=0.05),
                                 quiet=True, save_predictions=str(tmp_path / "p.npy")))
    assert _numbers(result.history) == _numbers(job.history)
    for name, tensor in job.state_dict.items():
        assert torch.equal(result.state_dict[name], tensor), name
    np.testing.assert_array_equal(result.predictions, job.predictions)
    # the returned model is usable on its own, in the original vertex order
    logits = result.model(torch.from_numpy(graph.x), mggcn.adjacency_operator(graph.edge_index, graph.num_nodes))
    np.testing.assert_array_equal(logits.argmax(1).numpy(), result.predictions)
    assert result.stopped is None and result.config.hidden == (8,) and result.dataset["num_nodes"] == 40


@pytest.mark.slow
def test_train_on_two_workers_equals_the_cli(tmp_path):
    """The API on a PyG Data and the CLI on the same built-in graph: the same job, bit for bit."""
    metrics, model, preds = tmp_path / "m.jsonl", tmp_path / "model.pt", tmp_path / "p.npy"
    args = ["--nprocs", "2", "--hidden", "8", "--epochs", "8", "--lr", "0.05", "--seed", "4"]
    assert main(["train", "builtin:karate", *args, "--quiet", "--metrics", str(metrics), "--save-model", str(model),
                 "--save-predictions", str(preds)]) == 0
    graph = parse_spec("builtin:karate")
    result = mggcn.train(_pyg(graph), nprocs=2, hidden=8, epochs=8, lr=0.05, seed=4, quiet=True)
    cli_history = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert _numbers(result.history) == _numbers(cli_history)
    cli_state = torch.load(model)
    assert cli_state.keys() == result.state_dict.keys()
    for name, tensor in cli_state.items():
        assert torch.equal(result.state_dict[name], tensor), name
    np.testing.assert_array_equal(result.predictions, np.load(preds))
    # a saved API model is what --save-model writes, sidecar included
    result.save(str(tmp_path / "api.pt"))
    result.save(tmp_path / "path.pt")  # a pathlib.Path, as torch.save takes one: the sidecar too
    for path in (model, tmp_path / "api.pt", tmp_path / "path.pt"):
        loaded, card = load_model(str(path))
        assert card["dims"] == [34, 8, 2] and card["norm"] == "sym" and card["dataset"]["num_nodes"] == 34


@pytest.mark.parametrize("norm", ["sym", "mean"])
def test_layers_on_a_pyg_data_equal_the_reference(norm):
    """mggcn.GCN with mggcn.adjacency_operator on a PyG Data, against a dense float64 GCN; sym also against PyG."""
    data = _pyg(random_graph(30, 120, features=5, classes=3, directed=True, seed=12))
    model = mggcn.GCN([5, 7, 3], activation="relu", seed=1)
    with torch.no_grad():
        for conv in model.convs:
            conv.bias.normal_()
    x = data.x.clone().requires_grad_()
    out = model(x, mggcn.adjacency_operator(data.edge_index, data.num_nodes, norm=norm))

    a = adj_hat(data.edge_index.numpy(), data.num_nodes, norm)
    xd = data.x.double().requires_grad_()
    params = [(c.lin.weight.detach().double().requires_grad_(), c.bias.detach().double().requires_grad_())
              for c in model.convs]
    ref = a @ (torch.relu(a @ (xd @ params[0][0].t()) + params[0][1]) @ params[1][0].t()) + params[1][1]
    # float32 against float64 on values of order 1
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(ref)
    out.backward(g.float())
    ref.backward(g)
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.convs[0].lin.weight.grad.double(), params[0][0].grad, rtol=1e-5, atol=1e-5)
    if norm == "sym":
        pyg = PygGCN(5, 7, num_layers=2, out_channels=3)
        pyg.load_state_dict(model.gcnconv_state_dict())
        torch.testing.assert_close(out, pyg(data.x, data.edge_index), rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="unknown options \\['hiden'\\]"):
        mggcn.train("builtin:karate", hiden=(4,))
    for launchers in ("clock", "read_as"):  # the launcher's fields of a job, not a caller's
        with pytest.raises(TypeError, match=f"unknown options \\['{launchers}'\\]"):
            mggcn.train("builtin:karate", **{launchers: 5})
    with pytest.raises(TypeError, match="PyG Data"):
        mggcn.train(42)
    with pytest.raises(mggcn.GraphError, match="shape \\[2, E\\]"):
        mggcn.adjacency_operator(np.zeros((3, 4), dtype=np.int64), 5)
    with pytest.raises(mggcn.GraphError, match="\\[0, 5\\)"):
        mggcn.adjacency_operator(np.array([[0, 1], [1, 5]]), 5)
    with pytest.raises(mggcn.ConfigError, match="hidden sizes must be positive"):
        mggcn.train("builtin:karate", hidden=(0,))


# (the API's keyword arguments, the command line's arguments for the same bad setting); the setting is the first key
_BAD_SETTINGS = [
    ({"hidden": "abc"}, ["--hidden", "abc"]),
    ({"hidden": (8, 0)}, ["--hidden", "8,0"]),
    ({"hidden": (8.5,)}, ["--hidden", "8.5"]),
    ({"epochs": -1}, ["--epochs", "-1"]),
    ({"lr": float("nan")}, ["--lr", "nan"]),
    ({"lr": -1.0}, ["--lr", "-1"]),
    ({"weight_decay": float("inf")}, ["--weight-decay", "inf"]),
    ({"dropout": 1.5}, ["--dropout", "1.5"]),
    ({"input_dropout": -0.1}, ["--input-dropout", "-0.1"]),
    ({"timeout_s": 0.0}, ["--timeout", "0"]),
    ({"patience": -1}, ["--patience", "-1"]),
    ({"trace_epoch": -1}, ["--trace-epoch", "-1"]),
    ({"seed": -1}, ["--seed", "-1"]),
    ({"checkpoint_every": 2}, ["--checkpoint-every", "2"]),
    ({"log_every": 0}, ["--log-every", "0"]),
    ({"threads": 0}, ["--threads", "0"]),
    ({"tile_bytes": -1}, ["--tile-bytes", "-1"]),
    ({"model": "xyz"}, ["--model", "xyz"]),
    ({"norm": "xyz"}, ["--norm", "xyz"]),
    ({"activation": "xyz"}, ["--activation", "xyz"]),
    ({"partition": "xyz"}, ["--partition", "xyz"]),
    ({"comm": "xyz"}, ["--comm", "xyz"]),
    ({"shm": "xyz"}, ["--shm", "xyz"]),
    ({"order": "xyz"}, ["--order", "xyz"]),
    ({"train_columns": "xyz"}, ["--train-columns", "xyz"]),
    ({"device": "tpu"}, ["--device", "tpu"]),
    ({"nprocs": 0}, ["--nprocs", "0"]),
    ({"gin_train_eps": True}, ["--gin-train-eps"]),
]

# what only a Python caller can give (the parser fixes the type): refused the same way, naming the setting
_BAD_TYPES = [{"hidden": None}, {"epochs": True}, {"epochs": "5"}, {"lr": "0.1"}, {"timeout_s": "60"},
              {"threads": "2"}, {"threads": 2.5}, {"nprocs": "2"}, {"quiet": "yes"}, {"undirected": "no"},
              {"dedup": 2}, {"metrics": 5}, {"save_model": 5}, {"save_predictions": ""}, {"checkpoint_dir": 5},
              {"mmap_threshold": -5}, {"features": 5}, {"normalize_features": "yes"}, {"fmt": 3}, {"log_every": 1.5}]


def _api_error(kwargs) -> mggcn.ConfigError:
    kwargs = dict(kwargs)
    with pytest.raises(mggcn.ConfigError) as caught:
        mggcn.train("builtin:karate", **{"epochs": 1, "quiet": True, **kwargs})
    return caught.value


@pytest.mark.parametrize("kwargs, argv", _BAD_SETTINGS, ids=[" ".join(a) for _, a in _BAD_SETTINGS])
def test_the_api_refuses_a_bad_setting_as_the_command_line_does(kwargs, argv, capsys):
    from mggcn.tools.cli.common import flag_message

    setting = next(iter(kwargs))
    err = _api_error(kwargs)
    assert err.option == setting and "\n" not in str(err) and setting in str(err), err
    try:
        status = main(["train", "builtin:karate", "--epochs", "1", "--quiet", *argv])
    except SystemExit as exit_:  # the parser's own refusal
        status = exit_.code
    line = capsys.readouterr().err
    assert status == 2 and line.count("\n") == 1 and argv[0] in line, line
    if not line.startswith("mggcn train: error: argument"):  # past the parser: the one shared check said it
        assert line == f"mggcn train: error: {flag_message(err)}\n"


def test_the_api_names_settings_not_flags(tmp_path, monkeypatch):
    """What mggcn.train says names the setting by its Python name (``fmt=``, ``lr=``), never a flag."""
    from mggcn.training.trainer import NonFiniteLoss

    monkeypatch.chdir(tmp_path)
    (tmp_path / "edges.txt").write_text("0 1\n")
    with pytest.raises(mggcn.GraphError, match=r"^edges\.txt: a file: give its layout with fmt= \(") as err:
        mggcn.train("edges.txt", epochs=1, quiet=True)
    assert err.value.option == "fmt" and "--" not in str(err.value)
    with pytest.raises(mggcn.GraphError, match=r"which takes no fmt=; fmt=mtx is for a path$"):
        mggcn.train("builtin:karate", fmt="mtx", epochs=1, quiet=True)
    with pytest.raises(NonFiniteLoss, match=r"\(try a smaller lr=\)$") as err:
        mggcn.train("builtin:karate", lr=1e30, epochs=20, quiet=True)
    assert err.value.option == "lr" and "--" not in str(err.value)


def test_a_loss_not_finite_before_any_update_blames_the_features_not_the_learning_rate(tmp_path):
    """Features near float32's largest value (finite, so no reader refuses them) overflow the first layer's sums:
    at epoch 1 no update has happened, so the rate cannot be the cause, and the message says what is."""
    from mggcn.tools.cli import main
    from mggcn.training.trainer import NonFiniteLoss

    g = parse_spec("synthetic:n=60,features=4,classes=3")
    huge = mggcn.Graph(g.num_nodes, g.edge_index, np.full_like(g.x, 3e38), g.y, g.masks)
    said = (r"^epoch 1: the loss is nan; first non-finite output: layer 0 \(before any update, so not the learning "
            r"rate: the features (reach 3e\+38 in absolute value, too large for float32's sums|aggregated \(Â·X\) "
            r"overflow float32); scale the features, e.g. each row divided by its sum, as normalize_features=True "
            r"reads Planetoid files\)$")
    with pytest.raises(NonFiniteLoss, match=said):
        mggcn.train(huge, epochs=2, quiet=True)
    np.save(tmp_path / "x.npy", huge.x)
    np.savetxt(tmp_path / "g.txt", g.edge_index.T, fmt="%d")
    assert main(["train", str(tmp_path / "g.txt"), "--format", "edgelist", "--features", str(tmp_path / "x.npy"),
                 "--epochs", "2", "--quiet", "--nprocs", "2"]) == 1


@pytest.mark.parametrize("kwargs", _BAD_TYPES, ids=[repr(k) for k in _BAD_TYPES])
def test_the_api_refuses_a_wrong_type_naming_the_setting(kwargs):
    err = _api_error(kwargs)
    setting = next(iter(kwargs))
    assert err.option == setting and "\n" not in str(err) and str(err).startswith(setting), err
