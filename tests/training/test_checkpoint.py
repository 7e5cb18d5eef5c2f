"""Checkpoint files are data, never code: a crafted one is refused with one line and runs nothing."""

import hashlib
import io
import os
import pickle

import pytest
import torch

from cli_util import run_cli
from mggcn.training.checkpoint import Checkpointer, CheckpointError, load


class _Payload:
    """Unpickling this calls ``open(marker, "w")``: the marker file appears if the unpickler runs code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(directory, marker, epoch=999999, use_torch_save=True):
    """A checkpoint as an attacker writes it: a code payload under a valid mggcn header."""
    os.makedirs(directory, exist_ok=True)
    state = {"epoch": epoch, "model": {}, "history": [], "payload": _Payload(str(marker))}
    buffer = io.BytesIO()
    if use_torch_save:
        torch.save(state, buffer)
    else:
        pickle.dump(state, buffer)
    payload = buffer.getvalue()
    path = os.path.join(directory, f"ckpt-{epoch:06d}.pt")
    with open(path, "wb") as f:
        f.write(b"mggcn-checkpoint " + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    return path


@pytest.mark.parametrize("use_torch_save", [True, False])
def test_a_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path, use_torch_save):
    marker = tmp_path / "marker"
    path = _plant(tmp_path / "ck", marker, use_torch_save=use_torch_save)
    with pytest.raises(CheckpointError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: refused: not plain tensors and data (")
    assert "weights_only" not in message  # torch's advice to load it unsafely is not repeated
    reports = []
    assert Checkpointer(str(tmp_path / "ck")).latest(reports.append) is None
    assert reports == [f"skipping {message}"]
    assert not marker.exists()


def test_resume_skips_a_planted_checkpoint_without_running_it(tmp_path):
    marker = tmp_path / "marker"
    ck = tmp_path / "ck"
    common = ["train", "synthetic:n=400,features=8", "--hidden", "8", "--checkpoint-dir", str(ck), "--quiet",
              "--trace-epoch", "0"]
    assert run_cli(*common, "--epochs", "2", "--checkpoint-every", "2").returncode == 0
    _plant(ck, marker)  # newer than the real one, so resume tries it first
    out = run_cli(*common, "--epochs", "3", "--resume")
    assert out.returncode == 0, out.stderr
    refused = [line for line in out.stderr.splitlines() if "ckpt-999999.pt" in line]
    assert len(refused) == 1 and "refused: not plain tensors and data" in refused[0]
    assert "Traceback" not in out.stderr
    assert not marker.exists()
    # the genuine checkpoint still loads, safely
    state, real = Checkpointer(str(ck)).latest() or (None, None)
    assert real is None or state["epoch"] in (2, 3)
