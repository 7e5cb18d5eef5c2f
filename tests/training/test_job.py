"""A training job before and after its workers (mggcn.training.job): settings refused before any worker starts,
by their library names, and the outputs rank 0 writes."""

import json
import os
import sys

import numpy as np
import pytest

from mggcn.config import TrainConfig
from mggcn.training.job import TrainJob, check_job, dataset_identity, format_epoch, run_train_job
from mggcn.utils.errors import ConfigError

KARATE = "builtin:karate"


@pytest.mark.parametrize("job, option, message", [
    (TrainJob(KARATE, TrainConfig(epochs=-1)), "epochs", "epochs must be at least 0, got -1"),
    (TrainJob(KARATE, TrainConfig(hidden=(4, 0))), "hidden", "hidden sizes must be positive, got 4,0"),
    (TrainJob(KARATE, TrainConfig(dropout=1.0)), "dropout", "dropout must be in \\[0, 1\\), got 1.0"),
    (TrainJob(KARATE, TrainConfig(input_dropout=-0.1)), "input_dropout", "input_dropout must be in"),
    (TrainJob(KARATE, resume=True), "resume", "resume needs a checkpoint directory"),
    (TrainJob(KARATE, checkpoint_dir="ck", checkpoint_every=-2), "checkpoint_every", "at least 0, got -2"),
    (TrainJob(KARATE, metrics="/no/such/dir/m.jsonl"), "metrics", "the directory /no/such/dir does not exist"),
    (TrainJob(KARATE, save_model=os.path.join(sys.executable, "m.pt")), "save_model",
     "the directory .* is a file, not a directory"),  # it said "does not exist"
    (TrainJob(KARATE, config=TrainConfig(partition="diagonal")), "partition", "partition must be one of"),
    (TrainJob(KARATE, config=TrainConfig(train_columns="yes")), "train_columns",
     "train_columns must be one of auto, on, off, got 'yes'"),
])
def test_check_job_refuses_bad_settings_by_name(job, option, message):
    with pytest.raises(ConfigError, match=message) as err:
        check_job(job, 1)
    assert err.value.option == option
    assert "--" not in str(err.value)  # the command line adds its flags, the library does not


def test_check_job_refuses_more_ranks_than_vertices_and_returns_the_dataset():
    with pytest.raises(ConfigError, match="nprocs 40 is larger than the graph's 34 vertices"):
        check_job(TrainJob(KARATE), 40)
    dataset = check_job(TrainJob(KARATE), 2)
    identity = dataset_identity(dataset)
    assert identity["num_nodes"] == 34 and identity["name"] == KARATE


def test_a_job_writes_its_metrics_model_and_predictions(tmp_path, capsys):
    job = TrainJob(KARATE, TrainConfig(hidden=(4,), epochs=3), metrics=str(tmp_path / "m.jsonl"),
                   save_model=str(tmp_path / "model.pt"), save_predictions=str(tmp_path / "pred.csv"), quiet=True)
    result = run_train_job(job)
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2, 3] and records[-1]["loss"] == result.history[-1]["loss"]
    card = json.loads((tmp_path / "model.pt.json").read_text())
    assert card["dims"][1:] == [4, 2] and card["activation"] == "relu"
    table = np.loadtxt(tmp_path / "pred.csv", delimiter=",", skiprows=1, dtype=np.int64)
    assert np.array_equal(table[:, 0], np.arange(34)) and np.array_equal(table[:, 1], result.predictions)
    assert capsys.readouterr().out == ""  # quiet
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl", "model.pt", "model.pt.json", "pred.csv"]


def test_format_epoch():
    record = {"epoch": 7, "loss": 0.5, "train_acc": 0.75, "val_acc": 0.5, "test_acc": 0.25, "epoch_s": 0.0125,
              "spmm": 0.001, "comm_wait": 0.002, "gemm": 0.003}
    assert format_epoch(record) == ("epoch    7 | loss 0.5000 | train 0.7500 val 0.5000 test 0.2500 | 0.013 s "
                                    "(spmm 0.001, wait 0.002, gemm 0.003)")


def test_local_workers_read_the_dataset_the_launcher_generated(tmp_path):
    """P > 1 on a generated dataset: the launcher writes what it generated once into the job's directory
    (share_dataset) and every worker reads its rows from there; the losses are those of one process, and the setup
    line names the hand-over."""
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.distributed.launch import launch
    from mggcn.training.job import share_dataset
    from mggcn.utils.timing import SetupClock

    spec = "synthetic:n=600,degree=8,features=6,classes=3"
    job = TrainJob(spec, TrainConfig(hidden=(8,), epochs=4, trace_epoch=0), quiet=True, clock=SetupClock())
    dataset = check_job(job, 2)
    shared = share_dataset(job, dataset, str(tmp_path))
    prepared = PreparedDataset(shared.dataset, verify=True)
    again = check_job(TrainJob(spec), 1)
    for name, array in prepared.arrays.items():
        np.testing.assert_array_equal(array, again.arrays[name], err_msg=name)
    assert "hand-over" in job.clock.phases and shared.fmt is None
    one = run_train_job(TrainJob(spec, job.config, quiet=True))
    two = launch(run_train_job, TrainJob(spec, job.config, quiet=True, clock=SetupClock()), check_job, 2,
                 share=share_dataset)
    # the same shard arithmetic whatever P is not promised bit for bit; a float32 ulp-level margin is
    assert [r["loss"] for r in two.history] == pytest.approx([r["loss"] for r in one.history], rel=1e-5)
    assert set(two.history[0]["setup"]["phases"]) >= {"hand-over", "launch", "dataset", "shard"}
