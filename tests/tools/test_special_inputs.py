"""The files ``mggcn report`` and ``mggcn predict`` read, given as something that is no regular file: a FIFO with no
writer (opening it would wait for one forever), a directory, a device (``/dev/zero`` never ends). Each is refused in
one line naming the file, exit status 2 (report reads a pipe, as ``cat m.jsonl | mggcn report /dev/stdin`` gives
it, and a FIFO no writer holds as an empty file). Each command runs in a process of its own, under a timeout, so
that one that waits fails the test instead of hanging it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cli_util import run_cli
from mggcn.tools.cli import main

TIMEOUT_S = 60


def _refused(done, path: str, what: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{path}: is {what}" in done.stderr, done.stderr


@pytest.mark.parametrize("kind, what", [("fifo", "no epoch records"), ("dir", "is a directory"),
                                        ("device", "is a device")])
def test_report_refuses_a_metrics_file_that_is_not_a_regular_file(kind, what, tmp_path):
    pytest.importorskip("matplotlib")
    if kind == "device":
        path = "/dev/zero"
    else:
        path = str(tmp_path / kind)
        os.mkfifo(path) if kind == "fifo" else os.mkdir(path)
    done = run_cli("report", path, "--out", str(tmp_path / "plots"), timeout=TIMEOUT_S)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{path}: {what}" in done.stderr, done.stderr
    assert not (tmp_path / "plots").exists()


def test_report_reads_metrics_through_a_pipe(tmp_path):
    """``cat m.jsonl | mggcn report /dev/stdin``: the pipe is read to its end, as a file is."""
    pytest.importorskip("matplotlib")
    metrics = tmp_path / "m.jsonl"
    metrics.write_text("".join(f'{{"epoch": {e}, "loss": 1.0, "train_acc": 0.5, "val_acc": 0.5, "test_acc": 0.5}}\n'
                               for e in (1, 2, 3)))
    done = subprocess.run(f"cat {metrics} | {sys.executable} -m mggcn report /dev/stdin --out {tmp_path / 'plots'}",
                          shell=True, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "plots" / "curves.png").is_file()


def test_report_still_reads_a_metrics_file_given_as_a_link(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    metrics = tmp_path / "m.jsonl"
    metrics.write_text('{"epoch": 1, "loss": 1.0, "train_acc": 0.5, "val_acc": 0.5, "test_acc": 0.5}\n')
    os.symlink(metrics, tmp_path / "link.jsonl")
    assert main(["report", str(tmp_path / "link.jsonl"), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "curves.png").is_file()


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("model") / "m.pt"
    assert main(["train", "builtin:karate", "--epochs", "1", "--quiet", "--save-model", str(path)]) == 0
    return str(path)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_predict_refuses_a_model_that_is_not_a_regular_file(kind, tmp_path):
    path = "/dev/zero" if kind == "device" else str(tmp_path / "m.pt")
    if kind == "fifo":
        os.mkfifo(path)
    done = run_cli("predict", path, "builtin:karate", "--out", str(tmp_path / "p.csv"), timeout=TIMEOUT_S)
    _refused(done, path, "a device, FIFO or socket, not a model file")
    assert not (tmp_path / "p.csv").exists()


def test_predict_refuses_a_model_description_that_is_a_fifo(model, tmp_path):
    copy = tmp_path / "m.pt"
    copy.write_bytes(open(model, "rb").read())
    os.mkfifo(f"{copy}.json")
    done = run_cli("predict", str(copy), "builtin:karate", "--out", str(tmp_path / "p.csv"), timeout=TIMEOUT_S)
    _refused(done, f"{copy}.json", "a device, FIFO or socket, not a model description")


def test_predict_from_python_refuses_a_model_or_description_that_is_a_fifo(model, tmp_path):
    """``mggcn.predict`` (the library, not the command) checks the same, in the process that calls it."""
    import threading

    import mggcn
    from mggcn.utils.errors import GraphError

    fifo = str(tmp_path / "fifo.pt")
    os.mkfifo(fifo)
    copy = tmp_path / "m.pt"
    copy.write_bytes(open(model, "rb").read())
    os.mkfifo(f"{copy}.json")
    for path, what in ((fifo, "a model file"), (str(copy), "a model description")):
        caught = []

        def call(path=path, caught=caught):
            try:
                mggcn.predict(path, "builtin:karate")
            except GraphError as err:
                caught.append(str(err))

        worker = threading.Thread(target=call, daemon=True)  # a wait in the open fails the test, not hangs it
        worker.start()
        worker.join(TIMEOUT_S)
        assert not worker.is_alive(), f"mggcn.predict waited on {path}"
        assert len(caught) == 1 and f"is a device, FIFO or socket, not {what}" in caught[0], caught
