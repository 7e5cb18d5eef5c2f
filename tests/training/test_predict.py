"""``mggcn predict`` and early stopping: outputs in the ORIGINAL vertex ids equal those of a single-process PyG model
with the same weights, on one process and on three (34 vertices: rank 2 holds padding rows)."""

import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

import mggcn
from mggcn.config import TrainConfig
from mggcn.data.generators import parse_spec
from mggcn.distributed.context import init_distributed
from mggcn.distributed.launch import run_workers
from mggcn.nn.models import model_type
from mggcn.tools.cli import main
from mggcn.training.job import TrainJob, run_train_job
from mggcn.training.outputs import load_model
from mggcn.training.predict import PredictJob, predict, predict_on_rank
from mggcn.utils.errors import ConfigError, GraphError

HIDDEN = (16, 8)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 3-layer model trained on the karate club, saved as --save-model does; and the same weights in PyG's
    GCNConv layers."""
    path = str(tmp_path_factory.mktemp("model") / "model.pt")
    cfg = TrainConfig(hidden=HIDDEN, epochs=15, lr=0.05, activation="leaky_relu", trace_epoch=0)
    run_train_job(TrainJob(dataset="builtin:karate", config=cfg, quiet=True, save_model=path))
    graph = parse_spec("builtin:karate")
    dims = [graph.num_features, *HIDDEN, graph.num_classes]
    pyg = torch.nn.Module()
    pyg.convs = torch.nn.ModuleList(GCNConv(dims[i], dims[i + 1]) for i in range(3))
    pyg.load_state_dict(torch.load(path))
    return path, graph, pyg


@torch.no_grad()
def _reference(pyg, graph):
    """Logits and the outputs of layers 1 and 2 (after the activation), in original vertex order."""
    h, ei = torch.from_numpy(graph.x), torch.from_numpy(graph.edge_index)
    hidden = []
    for conv in pyg.convs[:-1]:
        h = F.leaky_relu(conv(h, ei), 0.01)
        hidden.append(h)
    return pyg.convs[-1](h, ei), hidden


def _check(outputs, pyg, graph):
    classes, proba, layer1, layer2 = outputs
    logits, hidden = _reference(pyg, graph)
    np.testing.assert_array_equal(classes, logits.argmax(1).numpy())
    assert classes.dtype == np.int64 and classes.shape == (34,)
    # float32 with another summation order (partition, CSR vs scatter): a few ulps of values of order 1
    torch.testing.assert_close(torch.from_numpy(proba), logits.softmax(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)
    assert layer1.shape == (34, HIDDEN[0]) and layer2.shape == (34, HIDDEN[1])
    torch.testing.assert_close(torch.from_numpy(layer1), hidden[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.from_numpy(layer2), hidden[1], rtol=1e-5, atol=1e-5)


def _jobs(path):
    return [PredictJob(path, "builtin:karate"), PredictJob(path, "builtin:karate", output="proba"),
            PredictJob(path, "builtin:karate", output="embeddings", layer=1),
            PredictJob(path, "builtin:karate", output="embeddings", layer=2)]


def predict_many_worker(jobs):
    """Several predictions in one process group (spawned by name from this module)."""
    ctx = init_distributed("cpu", timeout_s=60)
    return [predict_on_rank(ctx, job) for job in jobs]


@pytest.mark.parametrize("options, message", [
    ({"out": 5}, "out must be a path \\(str\\), got 5"),
    ({"read_options": 5}, "read_options must be a dict of reading options, got 5"),
    ({"output": "embeddings", "layer": 1.5}, "layer must be an integer, got 1.5"),
    ({"output": "embeddings", "layer": "1"}, "layer must be an integer, got '1'"),
    ({"output": "embeddings", "layer": True}, "layer must be an integer, got True"),
    ({"undirected": "yes"}, "undirected must be True, False or None, got 'yes'"),
    ({"dedup": 2}, "dedup must be True, False or None, got 2"),
    ({"norm": ["sym"]}, "norm must be a name \\(str\\), got \\['sym'\\]"),
])
def test_predict_refuses_options_of_other_types_naming_them(trained, options, message):
    """What the command line's parser fixes, a caller of mggcn.predict may give otherwise: one line naming the
    setting, not an AttributeError from deep inside (an int for out) nor layer True taken as layer 1."""
    with pytest.raises(ConfigError, match=f"^{message}$") as caught:
        mggcn.predict(trained[0], "builtin:karate", **options)
    assert caught.value.option == message.split()[0]


def test_predict_takes_a_path_object_and_numpy_integers(trained, tmp_path):
    out = tmp_path / "p.npy"
    assert mggcn.predict(trained[0], "builtin:karate", out=out) is None
    np.testing.assert_array_equal(np.load(out), mggcn.predict(trained[0], "builtin:karate"))
    assert mggcn.predict(trained[0], "builtin:karate", output="embeddings", layer=np.int64(2)).shape == (34, 8)


def test_one_process_equals_pyg(trained):
    path, graph, pyg = trained
    _check([predict(job.model, job.dataset, output=job.output, layer=job.layer) for job in _jobs(path)], pyg, graph)


def test_three_workers_equal_pyg(trained):
    path, graph, pyg = trained
    results = run_workers(predict_many_worker, 3, (_jobs(path),), timeout_s=300)
    assert results[1] == [None] * 4 and results[2] == [None] * 4  # only rank 0 holds the gathered rows
    _check(results[0], pyg, graph)


def test_cli_writes_every_vertex_in_original_ids(trained, tmp_path):
    path, graph, pyg = trained
    logits, hidden = _reference(pyg, graph)
    assert main(["predict", path, "builtin:karate", "--out", str(tmp_path / "c.csv")]) == 0
    table = np.loadtxt(tmp_path / "c.csv", delimiter=",", skiprows=1, dtype=np.int64)
    np.testing.assert_array_equal(table, np.stack([np.arange(34), logits.argmax(1).numpy()], axis=1))
    assert main(["predict", path, "builtin:karate", "--out", str(tmp_path / "p.csv"), "--proba"]) == 0
    with open(tmp_path / "p.csv") as f:
        assert f.readline().strip() == "vertex,p0,p1"
    assert main(["predict", path, "builtin:karate", "--out", str(tmp_path / "h.npy"), "--embeddings", "2"]) == 0
    assert np.load(tmp_path / "h.npy").shape == (34, HIDDEN[1])


def test_sidecar_settles_norm_and_activation(trained, tmp_path, capsys):
    path, graph, pyg = trained
    card = json.loads(open(path + ".json").read())
    assert card["dims"] == [34, *HIDDEN, 2] and card["activation"] == "leaky_relu" and card["norm"] == "sym"
    assert card["dataset"]["name"] == "builtin:karate" and card["epochs"] == 15
    with pytest.raises(ConfigError, match="trained with activation leaky_relu"):
        load_model(path, activation="relu")
    # without the sidecar: the flags, or the defaults with a note
    bare = str(tmp_path / "bare.pt")
    torch.save(torch.load(path), bare)
    assert load_model(bare, norm="sym", activation="leaky_relu")[1]["activation"] == "leaky_relu"
    capsys.readouterr()
    assert load_model(bare)[1]["activation"] == "relu"
    assert "no bare.pt.json; assuming norm sym and activation relu" in capsys.readouterr().err
    for kind in ("sage", "gin", "gat"):  # their Â is their own: no norm to assume, and --norm changes nothing
        other = str(tmp_path / f"{kind}.pt")
        torch.save(model_type(kind)([34, 8, 2], seed=0).pyg_state_dict(), other)
        assert load_model(other)[1]["model"] == kind
        assert f"no {kind}.pt.json; assuming activation relu\n" in capsys.readouterr().err
        load_model(other, activation="relu")
        assert capsys.readouterr().err == ""
    assert main(["predict", path, "builtin:digits", "--out", str(tmp_path / "x.npy")]) == 2
    assert "takes 34 features per vertex; builtin:digits has 64" in capsys.readouterr().err
    assert main(["predict", path, "builtin:karate", "--out", str(tmp_path / "x.npy"), "--embeddings", "4"]) == 2
    assert "the model has layers 1..3" in capsys.readouterr().err


def _one_direction_edge_list(tmp_path):
    """The karate club's edges once each (u < v), with its vertex files: the graph is itself with --undirected."""
    graph = parse_spec("builtin:karate")
    s, d = graph.edge_index
    np.savetxt(tmp_path / "g.txt", graph.edge_index[:, s < d].T, fmt="%d")
    np.save(tmp_path / "x.npy", graph.x)
    np.save(tmp_path / "y.npy", graph.y)
    np.save(tmp_path / "split.npy", np.select([graph.masks[k] for k in ("train", "val", "test")], [0, 1, 2], -1))
    return [str(tmp_path / "g.txt"), "--format", "edgelist", f"--features={tmp_path / 'x.npy'}",
            f"--labels={tmp_path / 'y.npy'}", f"--split={tmp_path / 'split.npy'}"]


def test_predict_reads_the_graph_as_its_training_did(tmp_path, capsys):
    """A model trained with --undirected records it in its sidecar; predict reads the same file the same way
    (and says so) unless --no-undirected asks for the file as stored, on a prepared directory (made with the
    option) as it is, and in Python on a Graph too."""
    data = _one_direction_edge_list(tmp_path)
    model = str(tmp_path / "m.pt")
    assert main(["train", *data, "--undirected", "--hidden", "8", "--epochs", "5", "--quiet", "--save-model", model,
                 "--save-predictions", str(tmp_path / "trained.npy"), "--nprocs", "2"]) == 0  # its graph handed over
    assert json.loads(open(model + ".json").read())["dataset"]["read"] == {
        "undirected": True, "dedup": False, "normalize_features": False, "random_features": False}
    trained = np.load(tmp_path / "trained.npy")
    capsys.readouterr()
    assert main(["predict", model, *data, "--out", str(tmp_path / "same.npy")]) == 0
    said = capsys.readouterr().err
    assert "reading " + data[0] + " with --undirected, as the training of" in said and "another graph" not in said
    np.testing.assert_array_equal(np.load(tmp_path / "same.npy"), trained)
    assert main(["predict", model, *data, "--no-undirected", "--out", str(tmp_path / "stored.npy")]) == 0
    said = capsys.readouterr().err
    assert "with --undirected" not in said
    edges = json.loads(open(model + ".json").read())["dataset"]["num_edges"]
    assert (f"mggcn: note: {data[0]} reads as 34 vertices and {edges // 2:,} edges, where the training of {model} "
            f"read 34 and {edges:,} (m.pt.json): another graph than the model was trained on") in said
    one_way = np.load(tmp_path / "stored.npy")  # each vertex aggregates over half its neighbours: other classes
    assert (one_way != trained).any()
    assert main(["prepare", data[0], str(tmp_path / "prep"), *data[1:], "--undirected"]) == 0
    assert main(["predict", model, str(tmp_path / "prep"), "--out", str(tmp_path / "prep.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "prep.npy"), trained)
    # a model trained on that directory records what it was prepared with
    assert main(["train", str(tmp_path / "prep"), "--hidden", "8", "--epochs", "1", "--quiet", "--save-model",
                 str(tmp_path / "p.pt")]) == 0
    assert json.loads(open(tmp_path / "p.pt.json").read())["dataset"]["read"]["undirected"] is True
    from mggcn.data.formats import read_edgelist

    graph = read_edgelist(data[0], **{k: str(tmp_path / f"{f}.npy") for k, f in
                                      (("features", "x"), ("labels", "y"), ("split", "split"))})
    np.testing.assert_array_equal(predict(model, graph), trained)
    np.testing.assert_array_equal(predict(model, graph, undirected=False), one_way)


def test_predict_says_when_a_model_s_own_graph_reads_to_other_sizes(tmp_path, capsys):
    """A model whose description does not say how its training read the graph (one another mggcn wrote, before
    the reading was recorded) predicts on the same file read as stored: the sizes differ from those it recorded,
    and a note says that this is another graph than the model's; a graph of another name (a model trained on one
    graph, predicting on another) is nothing to say."""
    data = _one_direction_edge_list(tmp_path)
    model = str(tmp_path / "m.pt")
    assert main(["train", *data, "--undirected", "--hidden", "8", "--epochs", "2", "--quiet", "--save-model",
                 model]) == 0
    card = json.loads(open(model + ".json").read())
    del card["dataset"]["read"]
    with open(model + ".json", "w") as f:
        json.dump(card, f)
    capsys.readouterr()
    assert main(["predict", model, *data, "--out", str(tmp_path / "p.npy")]) == 0
    said = capsys.readouterr().err.splitlines()
    assert said == [f"mggcn: note: {data[0]} reads as 34 vertices and 78 edges, where the training of {model} read "
                    "34 and 156 (m.pt.json): another graph than the model was trained on (other reading options, or "
                    "another version of mggcn, read it otherwise)"], said
    assert main(["predict", model, *data, "--undirected", "--out", str(tmp_path / "p.npy")]) == 0
    assert "note" not in capsys.readouterr().err
    from mggcn.data.formats import read_edgelist

    graph = read_edgelist(data[0], features=str(tmp_path / "x.npy"))  # in memory, named as the file: its own graph
    predict(model, graph, undirected=False)
    assert "note" not in capsys.readouterr().err
    os.rename(tmp_path / "g.txt", tmp_path / "other.txt")
    data[0] = str(tmp_path / "other.txt")
    assert main(["predict", model, *data, "--out", str(tmp_path / "p.npy")]) == 0
    assert "note" not in capsys.readouterr().err


def test_predict_refuses_random_features_for_a_model_trained_on_given_ones(tmp_path, capsys):
    """An edge list read without its features file gets random features: predictions from them are noise for a
    model trained on the file's, so predict refuses, read directly or prepared; a model trained on random features
    (its card says so) predicts from them, at P = 1 and 2 (the graph handed over), and a card that does not say
    (PyG's weights) gets a note."""
    data = _one_direction_edge_list(tmp_path)
    given, rand = str(tmp_path / "given.pt"), str(tmp_path / "rand.pt")
    bare = data[:3] + data[4:]  # no --features
    for model, argv, nprocs in ((given, data, "2"), (rand, bare, "2")):
        assert main(["train", *argv, "--hidden", "8", "--epochs", "2", "--quiet", "--save-model", model,
                     "--nprocs", nprocs]) == 0
    assert json.loads(open(given + ".json").read())["dataset"]["read"]["random_features"] is False
    assert json.loads(open(rand + ".json").read())["dataset"]["read"]["random_features"] is True
    out = str(tmp_path / "p.npy")
    capsys.readouterr()
    assert main(["predict", given, *bare, "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "read without its features file (--features), it has random features, but " \
        f"{given} was trained on given ones" in err, err
    assert not os.path.exists(out)
    assert main(["prepare", *bare[:3], str(tmp_path / "prep"), *bare[3:], "--quiet"]) == 0
    assert main(["predict", given, str(tmp_path / "prep"), "--out", out]) == 2
    assert "prepared without a features file" in capsys.readouterr().err
    with pytest.raises(GraphError, match="read without its features file") as err:
        predict(given, data[0], fmt="edgelist")
    assert err.value.option == "features"
    assert main(["predict", given, *data, "--out", out]) == 0  # with the file: as trained
    assert main(["predict", rand, *bare, "--out", out]) == 0 and "random" not in capsys.readouterr().err
    assert main(["predict", rand, str(tmp_path / "prep"), "--out", out]) == 0
    card = json.loads(open(rand + ".json").read())
    del card["dataset"]["read"]["random_features"]  # as a card from before the entry was recorded
    open(rand + ".json", "w").write(json.dumps(card))
    assert main(["predict", rand, *bare, "--out", out]) == 0
    assert "has random features (no features file given: --features)" in capsys.readouterr().err


def test_predict_normalizes_planetoid_features_as_training_did(tmp_path):
    """--normalize-features, recorded by training, is applied to the same Planetoid files by predict; explicitly off
    (--no-normalize-features) it is not, and the features then differ (classes follow the raw counts)."""
    from planetoid_files import cora_like

    folder = str(cora_like(tmp_path / "data") / "ind.cora")
    model, read = str(tmp_path / "m.pt"), [folder, "--format", "planetoid"]
    assert main(["train", *read, "--normalize-features", "--hidden", "8", "--epochs", "5", "--quiet", "--save-model",
                 model, "--save-predictions", str(tmp_path / "trained.npy")]) == 0
    assert main(["predict", model, *read, "--out", str(tmp_path / "same.npy"), "--proba"]) == 0
    assert main(["predict", model, *read, "--normalize-features", "--out", str(tmp_path / "given.npy"),
                 "--proba"]) == 0
    assert main(["predict", model, *read, "--no-normalize-features", "--out", str(tmp_path / "raw.npy"),
                 "--proba"]) == 0
    same = np.load(tmp_path / "same.npy")
    np.testing.assert_array_equal(same, np.load(tmp_path / "given.npy"))
    np.testing.assert_array_equal(same.argmax(1), np.load(tmp_path / "trained.npy"))
    assert not np.allclose(same, np.load(tmp_path / "raw.npy"))


def _early_stopping_run(tmp_path):
    path = str(tmp_path / "best.pt")
    cfg = TrainConfig(hidden=(16,), epochs=200, lr=0.05, patience=5, trace_epoch=0)
    result = run_train_job(TrainJob(dataset="builtin:karate", config=cfg, quiet=True, save_model=path,
                                    save_predictions=str(tmp_path / "p.npy")))
    return result, path


def test_patience_stops_early_and_saves_the_kept_weights(tmp_path):
    result, path = _early_stopping_run(tmp_path)
    assert result.stopped == "early" and len(result.history) == result.best_epoch + 5 < 200
    vals = [r["val_acc"] for r in result.history]
    assert vals.index(max(vals)) == result.best_epoch - 1  # the first epoch with the best val accuracy
    np.testing.assert_array_equal(predict(path, "builtin:karate"), result.predictions)


def test_kept_weights_have_the_best_validation_accuracy(tmp_path):
    result, path = _early_stopping_run(tmp_path)
    graph = parse_spec("builtin:karate")
    pred, val = predict(path, "builtin:karate"), graph.masks["val"]
    assert (pred[val] == graph.y[val]).mean() == pytest.approx(result.history[result.best_epoch - 1]["val_acc"])


def test_early_stopping_watches_the_validation_split_alone():
    """The kept epoch is the first with the best validation accuracy, never chosen by the test split: here the test
    vertices' labels are shuffled among themselves, so the test accuracy peaks at another epoch than the
    validation's (karate's two splits peak together, and could not tell)."""
    graph = parse_spec("synthetic:n=2000")
    test = graph.masks["test"]
    graph.y[test] = np.random.default_rng(0).permutation(graph.y[test])
    result = mggcn.train(graph, hidden=(16,), epochs=200, lr=0.05, patience=5, quiet=True)
    vals, tests = [r["val_acc"] for r in result.history], [r["test_acc"] for r in result.history]
    assert result.stopped == "early" and len(result.history) == result.best_epoch + 5
    assert tests.index(max(tests)) != vals.index(max(vals))  # else this test could not tell the splits apart
    assert vals.index(max(vals)) == result.best_epoch - 1
    # the kept weights are those the best epoch measured: their eval-mode accuracies are that epoch's
    assert result.final["val_acc"] == pytest.approx(vals[result.best_epoch - 1], abs=1e-12)
    assert result.final["test_acc"] == pytest.approx(tests[result.best_epoch - 1], abs=1e-12)


@pytest.mark.parametrize("model,options", [("gcn", {"batch_norm": True}), ("gin", {"gin_mlp_batch_norm": True})])
def test_kept_batch_norm_weights_are_those_the_best_epoch_measured(tmp_path, model, options):
    """Early stopping keeps the weights as the best epoch measured them, running statistics included: the training
    forward of that epoch moves them after they were measured. The kept model equals, bitwise, a run of one epoch
    fewer without patience (whose weights the best epoch measured), and predicts the best epoch's accuracy."""
    kept, plain = str(tmp_path / "kept.pt"), str(tmp_path / "plain.pt")
    base = {"model": model, "hidden": (16,), "lr": 0.05, "trace_epoch": 0, **options}
    result = run_train_job(TrainJob(dataset="builtin:karate", quiet=True, save_model=kept,
                                    config=TrainConfig(epochs=200, patience=5, **base)))
    assert result.stopped == "early" and result.best_epoch > 1
    run_train_job(TrainJob(dataset="builtin:karate", quiet=True, save_model=plain,
                           config=TrainConfig(epochs=result.best_epoch - 1, **base)))
    kept_state, plain_state = torch.load(kept), torch.load(plain)
    assert any("running_mean" in k for k in kept_state)
    assert kept_state.keys() == plain_state.keys()
    for k in kept_state:
        torch.testing.assert_close(kept_state[k], plain_state[k], rtol=0, atol=0, msg=k)
    graph = parse_spec("builtin:karate")
    pred, val = predict(kept, "builtin:karate"), graph.masks["val"]
    assert (pred[val] == graph.y[val]).mean() == pytest.approx(result.history[result.best_epoch - 1]["val_acc"])


@pytest.mark.parametrize("kind,nprocs", [("sage", 3), ("gin", 2)])
def test_sage_and_gin_saved_models_load_into_pyg_and_predict_the_same(tmp_path, kind, nprocs):
    """The saved weights load strictly into PyG's GraphSAGE / GIN, which predicts what the training run and
    `mggcn predict` (model read from the file) predicted; the sidecar names the model and --model must agree."""
    from torch_geometric.nn.models import GIN, GraphSAGE

    path, preds = str(tmp_path / "model.pt"), str(tmp_path / "train-pred.npy")
    cfg = TrainConfig(model=kind, hidden=(16, 16), epochs=15, lr=0.05, trace_epoch=0, gin_train_eps=kind == "gin")
    run_train_job(TrainJob(dataset="builtin:karate", config=cfg, quiet=True, save_model=path,
                           save_predictions=preds))
    graph = parse_spec("builtin:karate")
    pyg = (GraphSAGE if kind == "sage" else GIN)(graph.num_features, 16, 3, graph.num_classes,
                                                 **({"train_eps": True} if kind == "gin" else {}))
    pyg.load_state_dict(torch.load(path), strict=True)
    with torch.no_grad():
        logits = pyg.eval()(torch.from_numpy(graph.x), torch.from_numpy(graph.edge_index))
    assert json.load(open(path + ".json"))["model"] == kind
    np.testing.assert_array_equal(np.load(preds), logits.argmax(1).numpy())
    np.testing.assert_array_equal(predict(path, "builtin:karate", nprocs=nprocs), logits.argmax(1).numpy())
    proba = predict(path, "builtin:karate", output="proba")
    torch.testing.assert_close(torch.from_numpy(proba), logits.softmax(1), rtol=1e-5, atol=1e-6)
    model, card = load_model(path, note=False)
    assert model.kind == kind and card["model"] == kind
    with pytest.raises(GraphError, match=f"holds a {kind} model"):
        load_model(path, kind="gcn", note=False)
    bare = str(tmp_path / "bare.pt")  # PyG's own weights, no sidecar: the model follows from the names
    torch.save(pyg.state_dict(), bare)
    assert load_model(bare, note=False)[0].kind == kind


def test_a_description_of_other_weights_is_refused(tmp_path):
    """The model file and its description are two files: weights replaced afterwards (or two runs saving to one
    path) paired one run's weights with another's activation and normalization without a word. The description
    names the weights it describes; another file of weights is refused, and without the description it is read."""
    import shutil

    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    for path, activation in ((first, "relu"), (second, "leaky_relu")):
        run_train_job(TrainJob(dataset="builtin:karate", quiet=True, save_model=str(path),
                               config=TrainConfig(hidden=(8,), epochs=2, activation=activation, trace_epoch=0)))
    np.testing.assert_array_equal(predict(str(first), "builtin:karate"), predict(str(first), "builtin:karate"))
    shutil.copy(second, first)  # b's weights under a's description (relu)
    with pytest.raises(GraphError, match=r"a.pt.json describes other weights than .*a.pt holds"):
        predict(str(first), "builtin:karate")
    os.remove(str(first) + ".json")
    predict(str(first), "builtin:karate", activation="leaky_relu")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_predict_gives_the_classes_training_measured_in_its_precision(tmp_path, precision):
    """A model trained in bf16 records it in its card, and predict computes as its training measured it (Â·X first,
    in bf16): on a noisy graph after 3 epochs, where many vertices are near ties, the classes agree exactly (in
    float32 predict would differ on a few vertices)."""
    spec, model = "synthetic:n=800,noise=50,classes=20", str(tmp_path / "m.pt")
    assert main(["train", spec, "--precision", precision, "--epochs", "3", "--hidden", "16", "--quiet",
                 "--save-model", model, "--save-predictions", str(tmp_path / "trained.npy")]) == 0
    assert json.loads(open(model + ".json").read())["precision"] == precision
    np.testing.assert_array_equal(predict(model, spec), np.load(tmp_path / "trained.npy"))
    assert predict(model, spec, output="proba").dtype == np.float32
