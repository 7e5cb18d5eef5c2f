"""Checkpoint files (mggcn.training.checkpoint): written whole, the newest kept, a damaged one skipped with a
report, and resuming refused against another dataset or model."""

import os

import pytest
import torch

from mggcn.training.checkpoint import Checkpointer, CheckpointError, check_compatible, load


def _state(epoch: int) -> dict:
    return {"epoch": epoch, "model": {"w": torch.full((2, 2), float(epoch))}, "dims": [4, 2],
            "dataset": {"name": "g", "num_nodes": 10}}


def test_save_and_read_back_the_newest_keeping_two(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "ck"), every=2, keep=2)
    assert [e for e in range(1, 7) if ckpt.due(e)] == [2, 4, 6]
    for epoch in (2, 4, 6):
        ckpt.save(_state(epoch))
    assert [os.path.basename(f) for f in ckpt.files()] == ["ckpt-000006.pt", "ckpt-000004.pt"]
    assert sorted(os.listdir(tmp_path / "ck")) == ["ckpt-000004.pt", "ckpt-000006.pt"]  # no temporary left
    state, path = ckpt.latest()
    assert state["epoch"] == 6 and torch.equal(state["model"]["w"], torch.full((2, 2), 6.0))
    assert path.endswith("ckpt-000006.pt")


def test_a_damaged_newest_checkpoint_is_reported_and_the_previous_one_used(tmp_path):
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(_state(1))
    newest = ckpt.save(_state(2))
    with open(newest, "r+b") as f:  # flip a byte of the payload
        f.seek(-3, os.SEEK_END)
        byte = f.read(1)
        f.seek(-3, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))
    reports = []
    state, path = ckpt.latest(reports.append)
    assert state["epoch"] == 1
    assert len(reports) == 1 and "checksum mismatch" in reports[0] and "ckpt-000002.pt" in reports[0]
    with pytest.raises(CheckpointError, match="not an mggcn checkpoint"):
        (tmp_path / "other.pt").write_bytes(b"hello\n")
        load(str(tmp_path / "other.pt"))
    assert Checkpointer(str(tmp_path / "none")).latest() is None


def test_resuming_is_refused_for_another_dataset_or_model():
    state = _state(3)
    check_compatible(state, "ck", {"name": "g", "num_nodes": 10}, [4, 2])
    with pytest.raises(CheckpointError, match="another dataset \\(num_nodes 10, this one has 11\\)"):
        check_compatible(state, "ck", {"name": "g", "num_nodes": 11}, [4, 2])
    with pytest.raises(CheckpointError, match="layer sizes \\[4, 2\\], this run \\[4, 3, 2\\]"):
        check_compatible(state, "ck", {"name": "g", "num_nodes": 10}, [4, 3, 2])
