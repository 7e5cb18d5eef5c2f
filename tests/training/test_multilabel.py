"""Multi-label node classification (labels ``y`` [n, C] of 0/1, as PyG trains PPI, Yelp, ogbn-proteins): the binary
cross-entropy loss against torch's, micro-F1 against scikit-learn's, training at P = 1..4 against PyG's GCN with
``BCEWithLogitsLoss``, ``mggcn.train`` and ``mggcn train``, predictions and probabilities from a saved model, and
resuming a checkpoint of the other kind refused."""

import json
import os
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mggcn
import workers
from cli_util import run_cli
from mggcn.config import TrainConfig
from mggcn.data.graph import SPLITS, Graph
from mggcn.distributed.context import DistContext
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.nn.loss import MaskedBinaryCrossEntropy, f1_counts
from mggcn.nn.models import operator_for
from mggcn.nn.workspace import Workspace
from mggcn.tools.plan import activation_peak, plan_memory
from mggcn.training import trainer
from mggcn.training.checkpoint import CheckpointError
from mggcn.training.job import format_final
from mggcn.training.trainer import build_model, train_shard
from reference import pyg_model_losses

EPOCHS = 10


def multilabel_graph(n=29, e=120, features=6, labels=5, seed=0, few_train=False) -> Graph:
    """Directed random edges (self loops and repeats included), labels of density 0.4 (some rows without any), and
    splits that leave some vertices out; ``few_train``: three training vertices, so most ranks own none."""
    rng = np.random.default_rng(seed)
    edges = np.stack([rng.integers(0, n, e), rng.integers(0, n, e)])
    y = (rng.random((n, labels)) < 0.4).astype(np.uint8)
    y[1] = 0
    role = rng.integers(0, 4, n)  # 3: in no split
    role[0] = 0
    if few_train:
        role[role == 0] = 1
        role[[0, 5, 9]] = 0
    masks = {"train": role == 0, "val": role == 1, "test": role == 2}
    return Graph(n, edges, rng.standard_normal((n, features)).astype(np.float32), y, masks, name="multilabel")


def micro_f1(predicted: np.ndarray, y: np.ndarray) -> float:
    """scikit-learn's micro-averaged F1 where it is installed, else its formula: 2·TP / (2·TP + FP + FN)."""
    try:
        from sklearn.metrics import f1_score
    except ImportError:
        tp = int((predicted & y).sum())
        den = int(predicted.sum() + y.sum())
        return 2 * tp / den if den else 0.0
    return float(f1_score(y, predicted, average="micro", zero_division=0))


def _logits(model, graph: Graph, norm: str = "sym") -> torch.Tensor:
    """The model's logits in eval mode on one process (``norm``: the Â its layers read)."""
    adj = mggcn.adjacency_operator(graph.edge_index, graph.num_nodes, norm)
    with torch.no_grad():
        return model.eval()(torch.from_numpy(graph.x), adj)


def _split_f1(logits: torch.Tensor, graph: Graph) -> dict[str, float]:
    predicted = (logits > 0).numpy().astype(np.uint8)
    return {f"{s}_acc": micro_f1(predicted[m], graph.y[m]) for s, m in graph.masks.items()}


# --------------------------------------------------------------------------------------------- the loss and the F1


def _loss_case(m=57, labels=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, labels, generator=gen) * 3
    logits[0, 0], logits[1, 1] = 40.0, -40.0  # confident rows: the softplus form neither overflows nor loses them
    y = (torch.rand(m, labels, generator=gen) < 0.4).to(torch.uint8)
    train = torch.rand(m, generator=gen) < 0.4
    train[:2] = True
    return logits, y, train


@pytest.mark.parametrize("in_place", [False, True])
def test_loss_and_gradient_equal_bce_with_logits_over_the_global_training_rows(in_place):
    logits, y, train = _loss_case()
    num_train = int(train.sum()) + 11  # other ranks hold 11 more training rows: the mean is over all of them
    ws = Workspace()
    loss_fn = MaskedBinaryCrossEntropy(y, train, num_train, ws, in_place=in_place)
    for _ in range(2):  # the second call reuses the buffers of the first
        ours = logits.clone().requires_grad_()
        loss, counts = loss_fn(ours * 1.0)  # in place: the logits are a buffer nothing else reads, not the leaf
        (2.5 * loss).backward()  # an upstream gradient other than 1 scales the gradient
        ref = logits.clone().requires_grad_()
        expected = F.binary_cross_entropy_with_logits(ref[train], y[train].float(), reduction="sum")
        expected = expected / (num_train * y.shape[1])
        (2.5 * expected).backward()
        # float32 terms (logaddexp against torch's own stable form) summed over ~23 × 6 elements in another order:
        # a few ulps of the loss; the gradient comes from the loss term (σ(q) = -expm1(-ℓ)) rather than σ(z) - y,
        # within an ulp of each element (about 1e-9 here, the elements being about 1e-3)
        torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-5, atol=1e-8)
        assert torch.all(ours.grad[~train] == 0)
        assert torch.equal(counts, f1_counts(logits, y))
    assert set(ws.sizes) == {"predicted labels", "label counts"} | (set() if in_place else {"grad a"})


def test_loss_over_every_training_row_is_torchs_mean_and_a_nan_outside_is_not_read():
    logits, y, train = _loss_case(seed=1)
    logits[~train] = torch.nan  # rows outside the training set: their gradient is 0 whatever their logits
    z = logits.clone().requires_grad_()
    loss, _ = MaskedBinaryCrossEntropy(y, train, int(train.sum()))(z)
    loss.backward()
    ref = logits.clone().requires_grad_()
    expected = torch.nn.BCEWithLogitsLoss(reduction="mean")(ref[train], y[train].float())
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(z.grad, ref.grad.nan_to_num(0.0), rtol=1e-5, atol=1e-8)
    assert torch.all(z.grad[~train] == 0)


def test_f1_counts_give_scikit_learns_micro_f1():
    logits, y, _ = _loss_case(m=200, labels=7, seed=2)
    logits[3] = torch.nan  # predicts nothing
    counts = f1_counts(logits, y)
    predicted = (logits > 0).numpy().astype(np.uint8)
    for rows in (slice(None), slice(0, 50), slice(50, 51), slice(120, 200)):
        ours = float(counts[0, rows].sum()) / max(float(counts[1, rows].sum()), 1.0)
        assert ours == pytest.approx(micro_f1(predicted[rows], y.numpy()[rows]), abs=1e-12)
    # no prediction and no label in a split: 0, as scikit-learn's zero_division=0
    assert trainer._f1(torch.zeros(6, dtype=torch.float64)) == [0.0, 0.0, 0.0]


def test_counts_beyond_float32s_integers_are_summed_exactly_over_ranks():
    """The gradients' all-reduce sums float32: a multi-label count (up to 2 · n · C) passes 2^24, and each is sent
    in two parts that float32 sums exactly."""
    rng = np.random.default_rng(0)
    ranks = [torch.tensor(rng.integers(2**24, 2**30, 6), dtype=torch.float64) for _ in range(7)]
    summed = sum(trainer._pack(c).to(torch.float32) for c in ranks)  # what the float32 all-reduce adds up
    assert torch.equal(trainer._unpack(summed.to(torch.float64)), sum(ranks))


def test_a_split_beyond_float32s_integers_is_measured_exactly():
    """A single-label split of more than 2^24 vertices (rmat:scale=25's training split): its correct count, summed
    with the float32 gradients, gives the exact accuracy, as the float64 one of the trained model does."""
    from mggcn.distributed.context import DistContext

    weight = torch.zeros(3, requires_grad=True)
    weight.grad = torch.zeros(3)
    correct = torch.tensor([2**24 + 1, 5, 2**25 + 3], dtype=torch.float64)
    sizes = torch.tensor([2**24 + 3, 10, 2**25 + 7], dtype=torch.float64)
    stats = trainer._epoch_stats(torch.tensor(0.5), False, correct, torch.device("cpu"))
    summed = trainer._reduce_gradients(DistContext(), [weight], stats)
    assert trainer._accuracies(summed, sizes) == (correct / sizes).tolist()


# -------------------------------------------------------------------------------------------- training across P


def _cases():
    graph = multilabel_graph()
    return [
        (graph, TrainConfig(hidden=(16,), epochs=EPOCHS, seed=3)),
        (graph, TrainConfig(hidden=(16, 16), epochs=EPOCHS, seed=4, order="transform-first", lr=0.05)),
        (multilabel_graph(seed=1, few_train=True), TrainConfig(hidden=(16,), epochs=EPOCHS, seed=5)),
        (graph, TrainConfig(model="sage", hidden=(16,), epochs=EPOCHS, seed=6)),
    ]


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_losses_equal_pygs_gcn_with_bce_at_any_p(nprocs):
    """29 vertices (no P here divides them), directed edges: the 10-epoch loss curve equals PyG's GCN (GraphSAGE)
    with torch's Adam and BCEWithLogitsLoss in float64 on one process from the same weights; every rank ends with
    the same weights; epoch 1's accuracies are the micro-F1 of the initial model, computed here on one process."""
    cases = _cases()
    results = [workers.train_many_worker(cases)] if nprocs == 1 else run_workers(
        workers.train_many_worker, nprocs, (cases,), timeout_s=300)
    for k, (graph, cfg) in enumerate(cases):
        model = build_model(cfg, graph.num_features, graph.num_classes)
        expected = pyg_model_losses(graph, cfg.model, model.pyg_state_dict(), cfg.hidden[0], len(cfg.hidden) + 1,
                                    cfg.epochs, cfg.lr, cfg.weight_decay)
        losses, history, state = results[0][k]
        # float32 against float64 over 10 Adam steps: relative differences around 1e-7
        torch.testing.assert_close(torch.tensor(losses, dtype=torch.float64),
                                   torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=0,
                                   msg=lambda m, k=k: f"P={nprocs} case {k}: {m}")
        for other in results[1:]:
            assert other[k][0] == losses
            assert all(torch.equal(t, other[k][2][name]) for name, t in state.items())
        first = _split_f1(_logits(model, graph, operator_for(cfg.model, cfg.norm)), graph)
        for key, value in first.items():
            assert history[0][key] == pytest.approx(value, abs=1e-12), (k, key)


@pytest.mark.parametrize("options", [{"dropout": 0.5}, {"batch_norm": True}])
def test_with_dropout_or_a_batch_norm_the_accuracies_come_from_eval_mode(options):
    """A model that computes other logits in training mode: an epoch's micro-F1 comes from an eval-mode pass (the
    loss's buffers, before the training pass), for epoch 1 that of the initial model in eval mode."""
    graph = multilabel_graph(n=60, e=300, seed=7)
    cfg = TrainConfig(hidden=(16,), epochs=2, seed=1, **options)
    history = workers.train_worker(graph, cfg)[1]
    model = build_model(cfg, graph.num_features, graph.num_classes)
    assert model.evaluates_differently
    for key, value in _split_f1(_logits(model, graph), graph).items():
        assert history[0][key] == pytest.approx(value, abs=1e-12), key


def test_the_records_say_they_hold_micro_f1_and_the_plot_says_so(tmp_path):
    """A multi-label run's epoch records carry ``metric: micro-F1`` (a single-label run's none), which ``mggcn
    report`` puts on its accuracy plot."""
    pytest.importorskip("matplotlib")
    from mggcn.tools.report import plot_curves
    from reference import random_graph

    cfg = TrainConfig(hidden=(8,), epochs=2, seed=1)
    multi = workers.train_worker(multilabel_graph(n=40, e=160, seed=3), cfg)[1]
    single = workers.train_worker(random_graph(40, 160, seed=3), cfg)[1]
    assert all(r["metric"] == "micro-F1" for r in multi) and not any("metric" in r for r in single)
    for records, label in ((multi, "micro-F1"), (single, "accuracy")):
        fig, _ = plot_curves(records)
        assert fig.axes[1].get_ylabel() == label


def test_the_workspace_holds_what_the_plan_walks():
    graph = multilabel_graph(n=300, e=1500, features=24, labels=9, seed=2)
    cfg = TrainConfig(hidden=(16,), epochs=3, trace_epoch=0)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, 0), 0, "sym")
    m = shard.y.shape[0]
    result = train_shard(DistContext(), shard, cfg)
    peak, alive = activation_peak(m, [24, 16, 9], multilabel=True)
    assert result.model.workspace.sizes == {k[3:]: v for k, v in alive.items() if k.startswith("ws:")}
    labels = plan_memory(300, 1500, 24, 9, (16,), train=0.25, multilabel=True).parts["labels, splits"]
    assert labels == 300 * (9 + 15) + 8 * 75  # y [m, C] of bytes, 3 masks, a count and a factor per row; the rows


# ------------------------------------------------------------------------------------- the API and the commands


def test_train_returns_micro_f1_and_label_matrices(tmp_path):
    graph = multilabel_graph(n=60, e=300, seed=3)
    result = mggcn.train(graph, hidden=(16,), epochs=30, lr=0.05, patience=5, quiet=True,
                         save_predictions=str(tmp_path / "pred.npy"))
    assert result.multilabel and result.dataset["multilabel"] is True
    logits = _logits(result.model, graph)
    f1 = {k: v for k, v in result.final.items() if k.endswith("_acc")}
    assert f1 == pytest.approx(_split_f1(logits, graph), abs=1e-12)
    assert set(result.final) == set(f1) | {f"{s}_rocauc" for s in SPLITS}  # each split's ROC-AUC besides
    assert result.predictions.dtype == np.uint8 and result.predictions.shape == (60, 5)
    assert np.array_equal(result.predictions, (logits > 0).numpy())
    assert np.array_equal(np.load(tmp_path / "pred.npy"), result.predictions)
    # early stopping watched the validation micro-F1: the weights kept are those of its best epoch (the first of
    # equals), whose record measured them
    best = max(result.history, key=lambda r: r["val_acc"])
    assert result.best_epoch == best["epoch"]
    assert result.final["val_acc"] == pytest.approx(best["val_acc"], abs=1e-12)


def test_a_single_label_run_records_nothing_new(tmp_path):
    graph = multilabel_graph()
    single = Graph(graph.num_nodes, graph.edge_index, graph.x, graph.y.argmax(1), graph.masks, name="single")
    result = mggcn.train(single, hidden=(8,), epochs=2, quiet=True)
    assert not result.multilabel and "multilabel" not in result.dataset
    result.save(str(tmp_path / "m.pt"))
    single = json.loads((tmp_path / "m.pt.json").read_text())
    assert "multilabel" not in single and single["version"] == 1  # as before: any mggcn reads it
    assert result.predictions.dtype == np.int64 and result.predictions.shape == (graph.num_nodes,)


def _write_edgelist(graph: Graph, directory) -> list[str]:
    """The graph as the files of ``--format edgelist``: the reader options that read it back."""
    np.savetxt(directory / "graph.txt", graph.edge_index.T, fmt="%d")
    np.save(directory / "x.npy", graph.x)
    np.save(directory / "y.npy", graph.y)
    np.save(directory / "split.npy", np.select([graph.masks["train"], graph.masks["val"], graph.masks["test"]],
                                               [0, 1, 2], -1))
    return ["--format", "edgelist", "--features", "x.npy"]


def test_the_command_line_trains_and_predicts_multi_label(tmp_path):
    graph = multilabel_graph(n=40, e=200, seed=4)
    read = _write_edgelist(graph, tmp_path)
    out = run_cli("train", "graph.txt", *read, "--labels", "y.npy", "--split", "split.npy", "--nprocs", "2",
                  "--epochs", "3", "--hidden", "8", "--save-model", "m.pt", "--save-predictions", "pred.csv",
                  cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first.endswith("6 features, multi-label (5 labels; accuracies are micro-F1); 2 worker(s) on cpu"), first
    table = np.loadtxt(tmp_path / "pred.csv", delimiter=",", skiprows=1, dtype=np.int64)
    assert (tmp_path / "pred.csv").read_text().splitlines()[0] == "vertex,label0,label1,label2,label3,label4"
    assert np.array_equal(table[:, 0], np.arange(40)) and set(np.unique(table[:, 1:])) <= {0, 1}
    card = json.loads((tmp_path / "m.pt.json").read_text())
    assert card["multilabel"] is True and card["version"] == 2  # an mggcn reading version 1 alone refuses it
    for flags, header in (([], "label"), (["--proba"], "p")):
        out = run_cli("predict", "m.pt", "graph.txt", *read, "--out", f"out{header}.csv", *flags, cwd=str(tmp_path))
        assert out.returncode == 0, out.stderr
        what = "label probabilities" if flags else "predicted labels"
        assert out.stdout.strip() == f"mggcn: wrote the {what} of each of 40 vertices to out{header}.csv"
        lines = (tmp_path / f"out{header}.csv").read_text().splitlines()
        assert lines[0] == "vertex," + ",".join(f"{header}{c}" for c in range(5))
    predicted = np.loadtxt(tmp_path / "outlabel.csv", delimiter=",", skiprows=1, dtype=np.int64)
    assert np.array_equal(predicted, table)  # the model read back predicts what training wrote


def test_predict_from_a_saved_model_reads_each_label(tmp_path):
    graph = multilabel_graph(n=50, e=250, seed=5)
    result = mggcn.train(graph, hidden=(16,), epochs=5, quiet=True)
    path = str(tmp_path / "m.pt")
    result.save(path)
    logits = _logits(result.model, graph)
    classes = mggcn.predict(path, graph, nprocs=2)
    assert classes.dtype == np.uint8 and np.array_equal(classes, (logits > 0).numpy())
    proba = mggcn.predict(path, graph, output="proba")
    torch.testing.assert_close(torch.from_numpy(proba), logits.sigmoid(), rtol=1e-5, atol=1e-6)
    # the record is in the sidecar: without it the weights are read as a single-label model's
    card = json.loads(open(path + ".json").read())
    os.remove(path + ".json")
    assert np.array_equal(mggcn.predict(path, graph), logits.argmax(1).numpy())
    with open(path + ".json", "w") as f:
        json.dump({**card, "multilabel": "yes"}, f)
    with pytest.raises(mggcn.GraphError, match=r"m.pt.json: multilabel 'yes' is not true or false"):
        mggcn.predict(path, graph)
    with open(path + ".json", "w") as f:  # a precision no run has: not read as fp32 without a word
        json.dump({**card, "precision": "fp64"}, f)
    with pytest.raises(mggcn.GraphError, match=r"m.pt.json: precision 'fp64' is not one of fp32, tf32, bf16"):
        mggcn.predict(path, graph)


@pytest.mark.parametrize("first", ["single", "multi"])
def test_resuming_a_checkpoint_of_the_other_kind_is_refused(tmp_path, first):
    graph = multilabel_graph(n=40, e=200, seed=6)
    single = Graph(graph.num_nodes, graph.edge_index, graph.x, graph.y.argmax(1), graph.masks,
                   num_classes=graph.num_classes, name=graph.name)
    before, after = (single, graph) if first == "single" else (graph, single)
    options = dict(hidden=(8,), quiet=True, checkpoint_dir=str(tmp_path))
    mggcn.train(before, epochs=2, checkpoint_every=1, **options)
    kinds = ("single-label (cross-entropy)", "multi-label") if first == "single" else (
        "multi-label (binary cross-entropy)", "single-label")
    with pytest.raises(CheckpointError, match=rf"ckpt-000002.pt: the checkpoint is of a {re.escape(kinds[0])} "
                                              rf"model, this dataset is {kinds[1]}; give another checkpoint_dir"):
        mggcn.train(after, epochs=4, resume=True, **options)
    assert len(mggcn.train(before, epochs=4, resume=True, **options).history) == 4  # its own kind resumes



def test_roc_auc_is_ogbs_mean_over_labels_with_both_classes():
    """The mean of scikit-learn's roc_auc_score over the labels that have a positive and a negative row, as OGB's
    evaluator computes ogbn-proteins' metric; tied scores count one half, as scikit-learn's."""
    from sklearn.metrics import roc_auc_score

    from mggcn.nn.loss import roc_auc

    g = torch.Generator().manual_seed(3)
    scores = torch.randn(80, 6, generator=g)
    scores[:, 2] = torch.randint(0, 3, (80,), generator=g).float()  # many ties
    y = (torch.rand(80, 6, generator=g) < 0.3).to(torch.uint8)
    y[:, 4] = 1  # no negative: left out
    y[:, 5] = 0  # no positive: left out
    want = np.mean([roc_auc_score(y[:, c].numpy(), scores[:, c].numpy()) for c in range(4)])
    assert abs(roc_auc(scores, y) - want) < 1e-12
    assert roc_auc(scores[:, 4:], y[:, 4:]) is None


@pytest.mark.parametrize("nprocs", [1, 3])
def test_the_trained_model_reports_each_splits_roc_auc(nprocs):
    """run.final holds each split's ROC-AUC over every rank's rows, equal to scikit-learn's on the trained model's
    logits in one process (float32 logits from another summation order: 1e-6), and the last line says it."""
    from sklearn.metrics import roc_auc_score

    graph = multilabel_graph(n=61, labels=4, seed=2)
    run = mggcn.train(graph, nprocs=nprocs, hidden=(8,), epochs=5, seed=1, quiet=True)
    logits = _logits(run.model, graph).detach().numpy()
    for s in SPLITS:
        rows = graph.masks[s]
        cols = [c for c in range(graph.y.shape[1]) if 0 < graph.y[rows, c].sum() < rows.sum()]
        want = np.mean([roc_auc_score(graph.y[rows, c], logits[rows, c]) for c in cols])
        assert abs(run.final[f"{s}_rocauc"] - want) < 1e-6, s
    line = format_final(run.history, run.final)
    assert line.endswith(f"| ROC-AUC train {run.final['train_rocauc']:.4f} val {run.final['val_rocauc']:.4f} "
                         f"test {run.final['test_rocauc']:.4f}")
