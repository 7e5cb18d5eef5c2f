"""The shared-memory outboxes of the CPU broadcast (mggcn.distributed.shm); the SpMM through them is checked against the
unsharded Â·B in tests/distributed/test_spmm.py, training through them in tests/training/test_trainer.py."""

import os

import pytest
import torch

import workers
from mggcn.distributed.context import DistContext
from mggcn.distributed.launch import run_workers
from mggcn.distributed.shm import host_outboxes


@pytest.mark.parametrize("nprocs", [2, 3])
def test_every_rank_reads_what_each_root_published_and_no_file_is_left(nprocs, tmp_path):
    rows, width = 300, 70  # 84 KB per outbox: several pages
    results = sorted(run_workers(workers.shm_worker, nprocs, (rows, width, str(tmp_path)), timeout_s=120),
                     key=lambda r: r["rank"])
    assert os.listdir(tmp_path) == []  # unlinked once mapped: nothing survives the job
    for r in results:
        assert r["left"] == [] and r["nbytes"] == 2 * rows * width * 4
        for (call, stage), seen in r["seen"].items():
            torch.testing.assert_close(seen, torch.full((rows, width), float((stage + 1) * (call + 1))),
                                       rtol=0, atol=0)
        # it read both outboxes of each peer: their pages are in its RSS, and counted as the peers'
        peer = (nprocs - 1) * 2 * rows * width * 4
        assert peer <= r["peer_resident"] <= peer + (nprocs - 1) * 2 * 4096


def test_creation_failure_names_the_rank_and_leaves_nothing(tmp_path):
    missing = str(tmp_path / "no-such-dir")
    results = run_workers(workers.shm_worker, 2, (10, 4, missing), timeout_s=120)
    for r in results:
        assert r["error"].startswith("rank 0: cannot create") and "no-such-dir" in r["error"]
        assert "No such file or directory" in r["error"]


def test_modes(monkeypatch, tmp_path):
    assert run_workers(workers.host_outboxes_worker, 2, ("auto",), timeout_s=120) == [
        ("SharedOutboxes", "shared memory")] * 2
    assert run_workers(workers.host_outboxes_worker, 2, ("off",), timeout_s=120) == [(None, "gloo")] * 2
    # auto falls back to gloo, saying why; on fails (the CLI test checks the job's one-line error)
    monkeypatch.setenv("MGGCN_SHM_DIR", str(tmp_path / "missing"))
    for boxes, transport in run_workers(workers.host_outboxes_worker, 2, ("auto",), timeout_s=120):
        assert boxes is None and transport.startswith("gloo, no shared memory: rank 0: cannot create")
    assert host_outboxes(DistContext(), "on", 8, 4, torch.float32) == (None, "one rank")  # nothing to broadcast
    with pytest.raises(ValueError, match="shm must be one of auto, on, off, got 'yes'"):
        host_outboxes(DistContext(), "yes", 8, 4, torch.float32)
