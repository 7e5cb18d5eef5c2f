"""Every option of `train`, `predict` and `bench` reaches what runs: the job (or the bench's options) the command
builds holds each value given, not its default. An option parsed and then dropped on its way would run the
default silently; most options change no number a small run could tell (an order, a transport, an overlap)."""

import pytest

from mggcn.config import TrainConfig
from mggcn.distributed import launch as launch_module
from mggcn.tools.cli import main


class _Built(Exception):
    """Raised in place of the launch: the command built its job, which the test reads."""


def _capture(monkeypatch, module=launch_module) -> dict:
    seen = {}

    def launch(fn, job, check, nprocs, *args, **kwargs):
        seen["job"], seen["nprocs"] = job, nprocs
        raise _Built

    monkeypatch.setattr(module, "launch", launch)
    return seen


@pytest.fixture
def built(monkeypatch):
    return _capture(monkeypatch)


def _job(built, *argv):
    with pytest.raises(_Built):
        main(list(argv))
    return built["job"]


TRAIN = {  # flag and value -> the TrainConfig field and the value it must hold
    ("--norm", "mean"): ("norm", "mean"), ("--activation", "elu"): ("activation", "elu"),
    ("--order", "transform-first"): ("order", "transform-first"), ("--partition", "random"): ("partition", "random"),
    ("--comm", "sparse"): ("comm", "sparse"), ("--no-overlap",): ("overlap", False), ("--seed", "7"): ("seed", 7),
    ("--patience", "3"): ("patience", 3), ("--weight-decay", "0.001"): ("weight_decay", 0.001),
    ("--lr", "0.02"): ("lr", 0.02), ("--input-dropout", "0.1"): ("input_dropout", 0.1),
    ("--dropout", "0.2"): ("dropout", 0.2), ("--batch-norm",): ("batch_norm", True),
    ("--epochs", "5"): ("epochs", 5), ("--hidden", "16,8"): ("hidden", (16, 8)),
    ("--train-columns", "off"): ("train_columns", "off"), ("--trace-epoch", "3"): ("trace_epoch", 3),
    ("--shm", "off"): ("shm", "off"), ("--tile-bytes", "1M"): ("tile_bytes", 1 << 20),
}


def test_every_train_option_reaches_the_job(built, tmp_path):
    argv = [word for flag in TRAIN for word in flag]
    job = _job(built, "train", "builtin:karate", *argv, "--undirected", "--dedup", "--threads", "1", "--log-every", "2",
               "--nprocs", "3", "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "2", "--metrics",
               str(tmp_path / "m.jsonl"), "--save-model", str(tmp_path / "m.pt"), "--save-predictions",
               str(tmp_path / "p.npy"))
    assert built["nprocs"] == 3
    for flag, (field, value) in TRAIN.items():
        assert getattr(TrainConfig(), field) != value, flag  # else a dropped option would go unseen
        got = getattr(job.config, field)
        assert (tuple(got) if field == "hidden" else got) == value, flag
    assert (job.undirected, job.dedup, job.threads, job.log_every, job.checkpoint_every) == (True, True, 1, 2, 2)
    assert (job.checkpoint_dir, job.metrics, job.save_model, job.save_predictions) == \
        tuple(str(tmp_path / name) for name in ("ck", "m.jsonl", "m.pt", "p.npy"))


@pytest.mark.parametrize("argv, fields", [
    (["--model", "gat", "--heads", "4", "--output-heads", "2", "--attention-dropout", "0.3", "--hidden", "8",
      "--precision", "bf16"],
     {"model": "gat", "heads": 4, "output_heads": 2, "attention_dropout": 0.3, "precision": "bf16"}),
    (["--model", "gin", "--gin-train-eps", "--gin-mlp-batch-norm"],
     {"model": "gin", "gin_train_eps": True, "gin_mlp_batch_norm": True}),
])
def test_each_models_options_reach_the_job(built, argv, fields):
    job = _job(built, "train", "builtin:karate", *argv)
    assert {field: getattr(job.config, field) for field in fields} == fields


def test_every_predict_option_reaches_the_job(monkeypatch, tmp_path):
    model = tmp_path / "m.pt"
    assert main(["train", "builtin:karate", "--epochs", "1", "--quiet", "--save-model", str(model)]) == 0
    built = _capture(monkeypatch)
    out = str(tmp_path / "p.csv")
    job = _job(built, "predict", str(model), "builtin:karate", "--out", out, "--norm", "mean", "--activation", "elu",
               "--threads", "1", "--proba", "--nprocs", "2")
    assert (job.out, job.output, job.norm, job.activation, job.threads) == (out, "proba", "mean", "elu", 1)
    assert built["nprocs"] == 2
    job = _job(built, "predict", str(model), "builtin:karate", "--out", out, "--embeddings", "1")
    assert (job.output, job.layer) == ("embeddings", 1)


@pytest.mark.parametrize("flag, value", [("--dedup", True), ("--no-dedup", False), ("--undirected", True),
                                         ("--no-undirected", False)])
def test_predicts_reading_switches_reach_the_job(built, tmp_path, flag, value):
    job = _job(built, "predict", str(tmp_path / "m.pt"), "builtin:karate", "--out", str(tmp_path / "p.npy"), flag)
    assert getattr(job, flag.removeprefix("--no-").removeprefix("--")) is value


def test_the_apis_predict_hands_its_process_count_to_the_launcher(monkeypatch, tmp_path):
    import mggcn
    from mggcn.training import predict as predict_module

    seen = _capture(monkeypatch, predict_module)
    with pytest.raises(_Built):
        mggcn.predict(str(tmp_path / "m.pt"), "builtin:karate", nprocs=3, output="embeddings", layer=2)
    assert seen["nprocs"] == 3 and (seen["job"].output, seen["job"].layer) == ("embeddings", 2)


BENCH = [  # runs of the bench's options that go together -> the BenchOptions fields they must set
    (["--nodes", "5000", "--degree", "6", "--features", "20", "--classes", "5", "--model", "sage", "--hidden", "24",
      "--epochs", "4", "--warmup", "3", "--repeats", "2", "--repeat-pyg", "--threads", "1", "--nprocs", "1,3",
      "--partition", "random", "--ids", "random", "--no-pyg", "--pyg-adj", "edge_index", "--seed", "5",
      "--graph-cache", "cache", "--timeout", "60", "--mmap-threshold", "2M", "--tile-bytes", "1M", "--compare-tiles",
      "0", "--shm", "off", "--compare-shm", "--host-memory", "8G", "--precision", "bf16", "--compare-precision",
      "fp32"],
     {"nodes": 5000, "degree": 6.0, "features": 20, "classes": 5, "model": "sage", "hidden": (24,), "epochs": 4,
      "warmup": 3, "repeats": 2, "repeat_pyg": True, "threads": 1, "nprocs": (1, 3), "partitions": ("random",),
      "ids": "random", "pyg": False, "pyg_adj": "edge_index", "seed": 5, "graph_cache": "cache", "timeout_s": 60.0,
      "mmap_threshold": 2 << 20, "tile_bytes": 1 << 20, "compare_tiles": (0,), "shm": "off", "compare_shm": True,
      "host_memory": 8 << 30, "precision": "bf16", "compare_precision": ("fp32",)}),
    (["--model", "gat", "--heads", "2"], {"heads": 2}),
    (["--model", "gin", "--gin-mlp-batch-norm"], {"gin_mlp_batch_norm": True}),
    (["--device", "cuda", "--gpu-memory", "1G"], {"device": "cuda", "gpu_memory": 1 << 30}),
    (["--saint-graph"], {"saint_graph": True}),
]


def test_every_bench_option_reaches_its_options(monkeypatch):
    from dataclasses import fields

    from mggcn.tools import bench

    seen = {}

    def run_bench(opts, *args, **kwargs):
        seen["opts"] = opts
        raise _Built

    monkeypatch.setattr(bench, "run_bench", run_bench)
    checked = set()
    for argv, expected in BENCH:
        with pytest.raises(_Built):
            main(["bench", *argv])
        for field, value in expected.items():
            assert getattr(bench.BenchOptions(), field) != value, field  # else a dropped option would go unseen
            assert getattr(seen["opts"], field) == value, field
        checked |= set(expected)
    # every option the command has (the probes' sizes are the bench's own, --small's smaller)
    assert checked == {f.name for f in fields(bench.BenchOptions)} - {"probe_gemm", "probe_copy"}


def test_trains_run_and_reading_options_reach_the_job(built):
    job = _job(built, "train", "g.txt", "--format", "edgelist", "--features", "f.npy", "--labels", "l.npy", "--split",
               "s.npy", "--device", "cuda", "--timeout", "30", "--mmap-threshold", "2M", "--quiet", "--resume-or-start",
               "--checkpoint-dir", "ck")
    assert (job.fmt, job.read_options, job.device, job.timeout_s, job.mmap_threshold, job.quiet, job.resume) == (
        "edgelist", {"features": "f.npy", "labels": "l.npy", "split": "s.npy"}, "cuda", 30.0, 2 << 20, True, "auto")
    job = _job(built, "train", "cora", "--normalize-features", "--resume", "--checkpoint-dir", "ck")
    assert (job.read_options, job.resume) == ({"normalize_features": True}, True)


def test_predicts_run_and_reading_options_reach_the_job(built):
    job = _job(built, "predict", "m.pt", "g.txt", "--out", "o.npy", "--format", "edgelist", "--features", "f.npy",
               "--labels", "l.npy", "--model", "gat", "--timeout", "30", "--device", "cuda")
    assert (job.fmt, job.read_options, job.kind, job.timeout_s, job.device) == (
        "edgelist", {"features": "f.npy", "labels": "l.npy"}, "gat", 30.0, "cuda")
    job = _job(built, "predict", "m.pt", "cora", "--out", "o.npy", "--no-normalize-features")
    assert job.read_options == {"normalize_features": False}
