"""The accuracies a run ends with: those of the trained weights in eval mode, at any P, against a single-process
float64 GCN evaluated on the same weights."""

import pytest
import torch

import workers
from mggcn.config import TrainConfig
from mggcn.distributed.launch import run_workers
from mggcn.training.job import format_final
from reference import adj_hat, random_graph


def _reference_correct(graph, state, near=1e-4):
    """Correct counts per split of a float64 GCN with ``state``'s weights, and how many vertices of each split have
    their top two logits within ``near`` (where float32 sums in another order may pick the other class)."""
    a = adj_hat(graph.edge_index, graph.num_nodes)
    h = torch.as_tensor(graph.x, dtype=torch.float64)
    layers = len([k for k in state if k.endswith(".bias")])
    for i in range(layers):
        h = a @ (h @ state[f"convs.{i}.lin.weight"].double().T) + state[f"convs.{i}.bias"].double()
        if i < layers - 1:
            h = torch.relu(h)
    top2 = h.topk(2, dim=1).values
    tied = (top2[:, 0] - top2[:, 1]) < near
    correct = h.argmax(dim=1).numpy() == graph.y
    return ({s: int(correct[m].sum()) for s, m in graph.masks.items()},
            {s: int(tied.numpy()[m].sum()) for s, m in graph.masks.items()})


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_final_accuracies_are_the_trained_weights_in_eval_mode(nprocs):
    graph = random_graph(47, 220, features=12, classes=4, directed=True, seed=4)  # 47: not divisible by 2 or 3
    cfg = TrainConfig(hidden=(16,), epochs=15, dropout=0.5, input_dropout=0.5, seed=3, trace_epoch=0)
    if nprocs == 1:
        final, state = workers.final_accuracy_worker(graph, cfg)
    else:
        results = run_workers(workers.final_accuracy_worker, nprocs, (graph, cfg), timeout_s=300)
        final, state = results[0]
        assert all(r[0] == final for r in results)
    correct, tied = _reference_correct(graph, state)
    for split, mask in graph.masks.items():
        got = final[f"{split}_acc"] * mask.sum()
        assert abs(got - correct[split]) <= tied[split] + 1e-9, (split, got, correct[split], tied[split])


def test_final_line_names_the_weights_and_the_best_validation_epoch():
    history = [{"epoch": e, "val_acc": v, "test_acc": t} for e, v, t in [(1, 0.5, 0.4), (2, 0.7, 0.6), (3, 0.7, 0.9)]]
    final = {"train_acc": 1.0, "val_acc": 0.65, "test_acc": 0.625}
    assert format_final(history, final) == ("mggcn: trained model (after epoch 3, eval mode): train 1.0000 val 0.6500 "
                                            "test 0.6250 | best validation 0.7000 at epoch 2 (test 0.6000)")
    assert format_final(history, final, kept_epoch=2).startswith("mggcn: trained model (weights of epoch 2, eval")


def test_a_split_without_vertices_is_none_not_accuracy_0(tmp_path):
    """A dataset without validation vertices, and one without test vertices: nothing is measured there, so the
    records, the final accuracies and the metrics file hold None (null), and every line shows ``-``: the epoch lines,
    the last line (no best validation epoch without a validation split; its test part ``-`` without a test split)."""
    import json

    import numpy as np

    from cli_util import run_cli

    history = [{"epoch": e, "val_acc": 0.5 + e / 10, "test_acc": None} for e in (1, 2)]
    final = {"train_acc": 1.0, "val_acc": 0.75, "test_acc": None}
    assert format_final(history, final) == ("mggcn: trained model (after epoch 2, eval mode): train 1.0000 val 0.7500 "
                                            "test - | best validation 0.7000 at epoch 2 (test -)")
    rng = np.random.default_rng(0)
    n = 40
    np.savetxt(tmp_path / "edges.txt", rng.integers(0, n, (160, 2)), fmt="%d")
    np.save(tmp_path / "y.npy", np.arange(n) % 3)
    for empty, split in (("val", np.where(np.arange(n) < 30, 0, 2)), ("test", np.where(np.arange(n) < 30, 0, 1))):
        np.save(tmp_path / "split.npy", split)
        metrics = tmp_path / f"no-{empty}.jsonl"
        done = run_cli("train", str(tmp_path / "edges.txt"), "--format", "edgelist", "--split",
                       str(tmp_path / "split.npy"), "--labels", str(tmp_path / "y.npy"), "--epochs", "3",
                       "--metrics", str(metrics), "--log-every", "1")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        assert all(f" {empty} - " in line for line in lines if line.startswith("epoch ")), lines
        assert f" {empty} - " in lines[-1] + " " and "0.0000" not in lines[-1], lines[-1]
        assert ("best validation" in lines[-1]) == (empty == "test"), lines[-1]
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert len(records) == 3 and all(r[f"{empty}_acc"] is None for r in records)
        assert all(isinstance(r["train_acc"], float) for r in records)


@pytest.mark.parametrize("extra", [[], ["--nprocs", "2"]])
def test_quiet_with_no_epoch_to_train_still_says_the_final_line(extra):
    """--quiet leaves the last line: --epochs 0 measures the initial weights, and said nothing when quiet."""
    from cli_util import run_cli

    done = run_cli("train", "builtin:karate", "--epochs", "0", "--quiet", *extra)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [line for line in done.stdout.splitlines() if line.strip()]
    assert len(done.stdout.splitlines()) == 1 and "trained model (after epoch 0, eval mode)" in done.stdout
