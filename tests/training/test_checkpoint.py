"""Checkpoint files (mggcn.training.checkpoint): written whole, the newest kept, a damaged one skipped with a
report, resuming refused against another dataset or model, and a crafted file refused with one line, running nothing."""

import hashlib
import io
import os
import pickle

import pytest
import torch

from cli_util import run_cli
from mggcn.training.checkpoint import Checkpointer, CheckpointError, check_compatible, load


def _state(epoch: int) -> dict:
    return {"epoch": epoch, "model": {"w": torch.full((2, 2), float(epoch))}, "dims": [4, 2],
            "dataset": {"name": "g", "num_nodes": 10}, "optimizer": {"state": {}, "param_groups": []},
            "history": []}


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


def test_two_runs_in_one_directory_never_delete_each_other_s_checkpoints(tmp_path, capsys):
    """Two runs given one directory: B keeps A's file aside and writes its own under the name; A's rotation then
    deleted B's file (it remembered the name, not the file) and B's own rotation failed on the name with a
    traceback. A run now deletes only the files it wrote, as they are."""
    a, b = (Checkpointer(str(tmp_path / "ck"), every=1, keep=2) for _ in range(2))
    for ckpt, epoch in ((a, 1), (b, 1), (a, 2), (a, 3), (b, 2), (b, 3), (a, 4), (b, 4)):
        state = _state(epoch)
        state["model"]["w"] += 100 if ckpt is b else 0
        ckpt.save(state)
    kept = {name: load(str(tmp_path / "ck" / name))["model"]["w"][0, 0].item()
            for name in os.listdir(tmp_path / "ck")}
    # B wrote epochs 1..4, A's 1 was kept aside by B; A's 3 and 4 were kept aside by B's 3 and 4 later on
    assert kept["ckpt-000004.pt"] == 104 and kept["ckpt-000003.pt"] == 103, kept
    assert kept["ckpt-000001.pt.kept"] == 1 and kept["ckpt-000004.pt.kept"] == 4, kept
    assert "ckpt-000002.pt" not in kept  # B's own, rotated away by B


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
    with pytest.raises(CheckpointError, match="another dataset \\(num_nodes 10, this one has 11\\); the same "
                                              "name read otherwise \\(other reading options, or another version"):
        check_compatible(state, "ck", {"name": "g", "num_nodes": 11}, [4, 2])
    with pytest.raises(CheckpointError, match="another dataset \\(name 'g', this one has 'h'\\)$"):
        check_compatible(state, "ck", {"name": "h", "num_nodes": 10}, [4, 2])
    content = dict(state, dataset={"name": "g", "num_nodes": 10, "fingerprint": "aaa"})
    with pytest.raises(CheckpointError, match="\\(fingerprint 'aaa', this one has 'bbb'\\); its contents differ: the "
                                              "file changed since, or reads otherwise"):
        check_compatible(content, "ck", {"name": "g", "num_nodes": 10, "fingerprint": "bbb"}, [4, 2])
    with pytest.raises(CheckpointError, match="layer sizes \\[4, 2\\], this run \\[4, 3, 2\\]"):
        check_compatible(state, "ck", {"name": "g", "num_nodes": 10}, [4, 3, 2])
    # a GAT's output heads are said as the model has them, never as the None that stands for "as many as heads"
    gat = dict(state, model_kind="gat", config={"heads": 2, "output_heads": None})
    check_compatible(gat, "ck", {"name": "g"}, [4, 2], "gat", {"heads": 2, "output_heads": 2})
    for theirs, ours, said in ((None, 1, "output_heads 2, this run 1"), (1, None, "output_heads 1, this run 2")):
        gat["config"]["output_heads"] = theirs
        with pytest.raises(CheckpointError, match=f"the checkpoint's gat has {said} \\(check output_heads=\\)"):
            check_compatible(gat, "ck", {"name": "g"}, [4, 2], "gat", {"heads": 2, "output_heads": ours})


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
