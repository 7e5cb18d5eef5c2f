"""Outputs the command line cannot write, end to end (issue 31): one line naming the file or option, exit 1 for a
write that failed (a run whose outputs could not be written never exits 0), exit 2 for an output refused before
anything runs; a special file (/dev/null, /dev/full) written to, never replaced; a file that is not a model refused
by ``predict`` in one line."""

import os
import stat

import pytest
import torch

from cli_util import run_cli

TRAIN = ["train", "builtin:karate", "--epochs", "2", "--quiet", "--trace-epoch", "0"]


def _one_error_line(out, *words: str) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr and all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.mark.parametrize("option", ["--save-predictions", "--metrics", "--save-model"])
def test_a_full_device_fails_the_run_naming_it(option):
    out = run_cli(*TRAIN, option, "/dev/full")
    assert out.returncode == 1
    _one_error_line(out, "/dev/full", "No space left on device")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_full_device_at_two_ranks_fails_the_run_naming_it():
    out = run_cli(*TRAIN, "--nprocs", "2", "--save-predictions", "/dev/full")
    assert out.returncode == 1
    _one_error_line(out, "/dev/full", "No space left on device")


def test_dev_null_takes_the_outputs_and_stays_a_device(tmp_path):
    out = run_cli(*TRAIN, "--save-predictions", "/dev/null", "--save-model", "/dev/null", "--metrics", "/dev/null")
    assert out.returncode == 0, out.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not os.path.exists("/dev/null.json")  # a model streamed to a device has no description beside it


def test_a_fifo_nobody_reads_fails_at_once_instead_of_hanging(tmp_path):
    fifo = tmp_path / "pred.csv"
    os.mkfifo(fifo)
    out = run_cli(*TRAIN, "--save-predictions", str(fifo), timeout=120)
    assert out.returncode == 1
    _one_error_line(out, str(fifo), "a FIFO that no process is reading")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_model_whose_description_path_is_a_directory_is_refused_before_training(tmp_path):
    (tmp_path / "m.pt.json").mkdir()
    out = run_cli(*TRAIN, "--save-model", str(tmp_path / "m.pt"))
    assert out.returncode == 2 and out.stdout == ""
    _one_error_line(out, "--save-model", "m.pt.json is a directory")
    out = run_cli(*TRAIN, "--metrics", str(tmp_path / "m.pt.json"))
    assert out.returncode == 2
    _one_error_line(out, "--metrics", "is a directory")


@pytest.fixture
def metrics(tmp_path):
    path = tmp_path / "run.jsonl"
    assert run_cli(*TRAIN, "--metrics", str(path)).returncode == 0
    return path


@pytest.mark.parametrize("where", ["a file", "under /proc", "under a file", "no files"])
def test_report_out_that_cannot_be_a_directory_of_plots_is_one_line(tmp_path, metrics, where):
    pytest.importorskip("matplotlib")
    target = {"a file": str(metrics), "under /proc": "/proc/mggcn-plots", "under a file": f"{metrics}/plots",
              "no files": "/sys/kernel"}[where]
    out = run_cli("report", str(metrics), "--out", target)
    assert out.returncode == 2
    _one_error_line(out, "--out", target)
    assert metrics.read_text().count("\n") == 2  # the metrics file is left as it was


def test_bench_out_in_a_directory_that_takes_no_files_is_refused_before_measuring():
    out = run_cli("bench", "--small", "--no-pyg", "--out", "/sys/kernel/bench.json")
    assert out.returncode == 2 and out.stdout == ""
    _one_error_line(out, "--out /sys/kernel/bench.json", "cannot write in /sys/kernel")


@pytest.mark.parametrize("content", ["text", "npy", "list", "strings", "vector"])
def test_predict_on_a_file_that_is_not_a_model_is_one_line(tmp_path, content):
    path = tmp_path / "model.pt"
    if content == "text":
        path.write_text("hello\n")
    elif content == "npy":
        import numpy as np

        with open(path, "wb") as f:
            np.save(f, np.arange(3))
    else:
        value = {"list": [1, 2], "strings": {"convs.0.lin.weight": "w"},
                 "vector": {"convs.0.lin.weight": torch.zeros(3)}}[content]
        torch.save(value, path)
    out = run_cli("predict", str(path), "builtin:karate", "--out", str(tmp_path / "p.csv"))
    assert out.returncode == 2
    _one_error_line(out, str(path))
    assert not (tmp_path / "p.csv").exists()


def test_prepare_never_moves_a_special_file_aside(tmp_path):
    fifo = tmp_path / "ds"
    os.mkfifo(fifo)
    out = run_cli("prepare", "builtin:karate", str(fifo), "--overwrite")
    assert out.returncode == 2
    _one_error_line(out, str(fifo), "is a device, FIFO or socket, not a directory")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.listdir(tmp_path) == ["ds"]


def test_a_short_write_on_a_full_disk_is_said_as_no_space(tmp_path, monkeypatch):
    from mggcn.utils import files

    short = OSError("800000 requested and 16384 written")  # numpy's tofile: no errno
    assert files.write_failure(short, tmp_path) == "800000 requested and 16384 written"
    monkeypatch.setattr(files.os, "statvfs", lambda _: os.statvfs_result((4096,) * 3 + (0,) * 7))
    assert files.write_failure(short, tmp_path) == "No space left on device"
    assert files.write_failure(OSError(5, "Input/output error"), tmp_path) == "Input/output error"


@pytest.mark.parametrize(("model", "said"), [("/dev/null", "is a device, FIFO or socket, not a model file"),
                                             (".", "is a directory, not a model file"),
                                             ("missing.pt", "no such model file")])
def test_predict_on_a_path_that_is_not_a_file_is_one_line(tmp_path, model, said):
    out = run_cli("predict", model, "builtin:karate", "--out", str(tmp_path / "p.csv"), cwd=str(tmp_path))
    assert out.returncode == 2
    _one_error_line(out, f"{model}: {said}")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_predict_out_onto_a_full_device_fails_naming_it(tmp_path):
    model = tmp_path / "m.pt"
    assert run_cli(*TRAIN, "--save-model", str(model)).returncode == 0
    out = run_cli("predict", str(model), "builtin:karate", "--out", "/dev/full")
    assert out.returncode == 1
    _one_error_line(out, "/dev/full: cannot write: No space left on device")
    out = run_cli("predict", str(model), "builtin:karate", "--out", "/dev/null")
    assert out.returncode == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode)
