"""The ``mggcn train`` command end to end: outputs, and bad input refused before any worker starts."""

import json

import numpy as np
import pytest
import torch
from torch_geometric.nn.models import GCN as PygGCN

from cli_util import run_cli
from mggcn.data.formats import read_edgelist
from mggcn.data.synthetic import parse_spec


def test_train_two_workers_writes_metrics_model_and_predictions(tmp_path):
    metrics, model, preds = tmp_path / "m.jsonl", tmp_path / "model.pt", tmp_path / "pred.csv"
    out = run_cli("train", "builtin:karate", "--nprocs", "2", "--epochs", "5", "--hidden", "16,16",
                  "--metrics", str(metrics), "--save-model", str(model), "--save-predictions", str(preds))
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("epoch")]
    assert len(lines) == 5 and "loss" in lines[0] and "val" in lines[0]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2, 3, 4, 5]
    for key in ("loss", "train_acc", "val_acc", "test_acc", "epoch_s", "spmm", "comm_wait", "gemm", "allreduce",
                "other"):
        assert all(isinstance(r[key], float) for r in records), key
    assert len(records[1]["timeline"]) == 2  # epoch 2 traced on both ranks
    assert {e[0] for e in records[1]["timeline"][0]} >= {"broadcast", "comm_wait", "gemm"}

    # the saved weights load into PyG's GCN; its predictions, in the ORIGINAL vertex order, are the ones written
    graph = parse_spec("builtin:karate")
    pyg = PygGCN(graph.num_features, 16, num_layers=3, out_channels=graph.num_classes)
    pyg.load_state_dict(torch.load(model))
    pyg.eval()
    expected = pyg(torch.from_numpy(graph.x), torch.from_numpy(graph.edge_index)).argmax(1).numpy()
    table = np.loadtxt(preds, delimiter=",", skiprows=1, dtype=np.int64)
    assert table.shape == (graph.num_nodes, 2)
    np.testing.assert_array_equal(table[:, 0], np.arange(graph.num_nodes))
    np.testing.assert_array_equal(table[:, 1], expected)


def test_predictions_do_not_depend_on_the_number_of_workers(tmp_path):
    paths = []
    for p in (1, 3):
        path = tmp_path / f"pred{p}.npy"
        out = run_cli("train", "synthetic:n=1500,features=16", "--nprocs", str(p), "--epochs", "10", "--quiet",
                      "--hidden", "32", "--save-predictions", str(path))
        assert out.returncode == 0, out.stderr
        paths.append(np.load(path))
    assert paths[0].shape == (1500,)
    # float32 sums in another order may flip an argmax between near-tied classes: allow a handful
    assert (paths[0] != paths[1]).sum() <= 5


def _edgelist(tmp_path, n=20, labels=None, features=None, split=None):
    rng = np.random.default_rng(0)
    edges = tmp_path / "g.txt"
    np.savetxt(edges, rng.integers(0, n, (60, 2)), fmt="%d")
    args = ["train", str(edges), "--format", "edgelist", "--epochs", "1"]
    for name, arr in (("labels", labels), ("features", features), ("split", split)):
        if arr is not None:
            np.save(tmp_path / f"{name}.npy", arr)
            args += [f"--{name}", str(tmp_path / f"{name}.npy")]
    return args


@pytest.mark.parametrize("case, message", [
    ("too_many_workers", "--nprocs 40 is larger than the graph's 34 vertices"),
    ("label_out_of_range", "label -5"),
    ("feature_rows", "rows"),
    ("empty_train", "empty"),
    ("hidden", "expected comma-separated integers"),
    ("missing_file", "no such file"),
])
def test_bad_input_is_one_line_before_any_worker(tmp_path, case, message):
    n = 20
    if case == "too_many_workers":
        args = ["train", "builtin:karate", "--nprocs", "40"]
    elif case == "label_out_of_range":
        labels = np.zeros(n, dtype=np.int64)
        labels[3] = -5
        args = _edgelist(tmp_path, labels=labels) + ["--nprocs", "2"]
    elif case == "feature_rows":
        args = _edgelist(tmp_path, features=np.zeros((n - 3, 4), dtype=np.float32)) + ["--nprocs", "2"]
    elif case == "empty_train":
        args = _edgelist(tmp_path, split=np.full(n, 1, dtype=np.int64)) + ["--nprocs", "2"]
    elif case == "hidden":
        args = ["train", "--hidden", "12,x"]
    else:
        args = ["train", str(tmp_path / "nope.txt"), "--format", "edgelist"]
    out = run_cli(*args, timeout=120)
    assert out.returncode == 2, (out.stdout, out.stderr)
    err = out.stderr.strip().splitlines()
    assert len(err) <= 2 and message in err[-1], out.stderr  # argparse prints usage + one line
    assert "Traceback" not in out.stderr
    assert "epoch" not in out.stdout  # nothing trained, no worker started


def test_edgelist_with_vertex_data_trains(tmp_path):
    n = 20
    rng = np.random.default_rng(1)
    args = _edgelist(tmp_path, labels=rng.integers(0, 3, n), features=rng.standard_normal((n, 4)).astype(np.float32))
    out = run_cli(*args, "--nprocs", "2", "--undirected")
    assert out.returncode == 0, out.stderr
    graph = read_edgelist(tmp_path / "g.txt", features=tmp_path / "features.npy", labels=tmp_path / "labels.npy")
    assert f"{graph.num_nodes} vertices" in out.stdout and "3 classes" in out.stdout


def test_gcn_beats_mlp_on_the_builtin_graph():
    """The default dataset is one where the graph matters: the same trainer without edges is an MLP."""
    from mggcn.config import TrainConfig
    from mggcn.data.datasets import InMemoryDataset
    from mggcn.data.graph import Graph
    from mggcn.distributed.context import DistContext
    from mggcn.training.trainer import train_shard

    graph = parse_spec("synthetic:n=4000")
    no_edges = Graph(graph.num_nodes, np.zeros((2, 0), dtype=np.int64), graph.x, graph.y, graph.masks,
                     graph.num_classes, name="mlp")
    cfg = TrainConfig(hidden=(64,), epochs=60, trace_epoch=0)
    acc = {}
    for name, g in (("gcn", graph), ("mlp", no_edges)):
        ds = InMemoryDataset(g)
        shard = ds.shard(ds.partition(1, 0, "random"), 0, "sym")
        acc[name] = train_shard(DistContext(), shard, cfg).history[-1]["test_acc"]
    print(f"test accuracy: GCN {acc['gcn']:.3f}, MLP {acc['mlp']:.3f}")
    assert acc["gcn"] > 0.9
    assert acc["gcn"] - acc["mlp"] > 0.3


def test_torchrun_runs_the_same_job(tmp_path):
    import subprocess
    import sys

    ours, theirs = tmp_path / "ours.jsonl", tmp_path / "torchrun.jsonl"
    common = ["train", "builtin:karate", "--epochs", "4", "--quiet", "--hidden", "8"]
    assert run_cli(*common, "--nprocs", "2", "--metrics", str(ours)).returncode == 0
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "mggcn", *common, "--metrics", str(theirs)], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    losses = [[json.loads(line)["loss"] for line in open(p)] for p in (ours, theirs)]
    assert losses[0] == losses[1]


def test_shared_memory_broadcast_on_or_auto(tmp_path, monkeypatch):
    """--shm on where /dev/shm cannot be used fails with one line and writes nothing; auto falls back to gloo."""
    monkeypatch.setenv("MGGCN_SHM_DIR", str(tmp_path / "missing"))
    metrics = tmp_path / "m.jsonl"
    common = ["train", "builtin:karate", "--epochs", "2", "--hidden", "8", "--nprocs", "2"]
    out = run_cli(*common, "--shm", "on", "--metrics", str(metrics), timeout=120)
    assert out.returncode == 1, (out.stdout, out.stderr)
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and "cannot create" in err[0] and "missing" in err[0] and "--shm off" in err[0], out.stderr
    assert not metrics.exists()
    out = run_cli(*common, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "comm broadcast (gloo, no shared memory: rank 0: cannot create" in out.stdout
    monkeypatch.delenv("MGGCN_SHM_DIR")
    out = run_cli(*common, timeout=120)
    assert out.returncode == 0 and "comm broadcast (shared memory)" in out.stdout, out.stderr
