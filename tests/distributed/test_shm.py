"""The shared-memory outboxes of the CPU broadcast (mggcn.distributed.shm); the SpMM through them is checked against the
unsharded Â·B in tests/distributed/test_spmm.py, training through them in tests/training/test_trainer.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch

import workers
from mggcn.config import TrainConfig
from mggcn.distributed.context import DistContext
from mggcn.distributed.launch import run_workers
from mggcn.distributed.shm import Transport, host_outboxes
from mggcn.nn.model import GCN
from reference import gcn_losses, random_graph


@pytest.mark.parametrize("nprocs", [2, 3])
def test_every_rank_reads_what_each_root_published_and_no_file_is_left(nprocs, tmp_path):
    rows, width = 300, 70  # 84 KB per outbox: several pages
    shm = tmp_path / ("shm dir" if nprocs == 2 else "shm")  # a space in the path: smaps' last field keeps it
    shm.mkdir()
    results = sorted(run_workers(workers.shm_worker, nprocs, (rows, width, str(shm)), timeout_s=120),
                     key=lambda r: r["rank"])
    assert os.listdir(shm) == []  # unlinked once mapped: nothing survives the job
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
    # nothing to broadcast
    assert host_outboxes(DistContext(), "on", 8, 4, torch.float32) == (None, Transport("one rank"))
    with pytest.raises(ValueError, match="shm must be one of auto, on, off, got 'yes'"):
        host_outboxes(DistContext(), "yes", 8, 4, torch.float32)


def _private_dirs(tmp_path, nprocs):
    dirs = [tmp_path / f"shm-{r}" for r in range(nprocs)]
    for d in dirs:
        d.mkdir()
    return [str(d) for d in dirs]


@pytest.mark.parametrize("nprocs", [2, 3])
def test_ranks_that_do_not_share_their_shm_directory_fall_back_to_gloo_with_the_right_losses(nprocs, tmp_path):
    # n = 45 is not a multiple of 2 or 3; the graph is directed
    graph = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)
    cfg = TrainConfig(hidden=(16, 8), epochs=5, seed=5, shm="auto")
    dirs = _private_dirs(tmp_path, nprocs)
    results = run_workers(workers.private_shm_train_worker, nprocs, (graph, cfg, dirs), timeout_s=300)
    model = GCN(cfg.dims(graph.num_features, graph.num_classes), seed=cfg.seed)
    expected = gcn_losses(graph, [(c.lin.weight, c.bias) for c in model.convs], cfg.epochs, cfg.lr,
                          cfg.weight_decay, cfg.norm, cfg.activation)
    for r in results:
        assert r["broadcast"] == "gloo" and r["fallback"].startswith("rank 0: cannot open rank 1's outbox"), r
        assert "\n" not in r["fallback"]
        # float32 against the float64 reference over 5 Adam steps (as in tests/training/test_trainer.py)
        torch.testing.assert_close(torch.tensor(r["losses"], dtype=torch.float64),
                                   torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=0)
    assert all(os.listdir(d) == [] for d in dirs)


def test_ranks_that_do_not_share_their_shm_directory_stop_under_shm_on(tmp_path):
    graph = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)
    dirs = _private_dirs(tmp_path, 2)
    results = run_workers(workers.private_shm_train_worker, 2,
                          (graph, TrainConfig(hidden=(8,), epochs=2, shm="on"), dirs), timeout_s=300)
    for r in results:  # the same one-line error on every rank, naming the missing file
        assert r["error"].startswith(f"rank 0: cannot open rank 1's outbox {dirs[0]}/mggcn-outbox-")
        assert "the ranks do not share" in r["error"] and "\n" not in r["error"]
    assert all(os.listdir(d) == [] for d in dirs)


def test_a_peer_file_of_another_job_is_refused_by_its_header(tmp_path):
    from mggcn.distributed.shm import HEADER_BYTES, ShmUnavailable, _header, _map_outbox

    path = tmp_path / "box"
    path.write_bytes(_header(b"x" * 16, 1, HEADER_BYTES + 64) + bytes(HEADER_BYTES + 64 - len(_header(b"", 0, 0))))
    with pytest.raises(ShmUnavailable, match="is not rank 1's outbox of this job"):
        _map_outbox(str(path), b"y" * 16, 1, HEADER_BYTES + 64, 16, torch.float32)  # another nonce
    with pytest.raises(ShmUnavailable, match="is not rank 0's outbox of this job"):
        _map_outbox(str(path), b"x" * 16, 0, HEADER_BYTES + 64, 16, torch.float32)  # another rank
    box = _map_outbox(str(path), b"x" * 16, 1, HEADER_BYTES + 64, 16, torch.float32)
    assert box.shape == (16,) and box.abs().sum() == 0
    with pytest.raises(ShmUnavailable, match="cannot open rank 1's outbox"):
        _map_outbox(str(tmp_path / "missing"), b"x" * 16, 1, HEADER_BYTES + 64, 16, torch.float32)
    assert not (tmp_path / "missing").exists()  # a reader never creates a peer's outbox


def test_shm_on_across_hosts_is_one_line_on_every_rank():
    for r in run_workers(workers.other_host_outboxes_worker, 2, ("on",), timeout_s=120):
        assert r["error"] == "shm on needs every rank on one host and on the CPU"  # the CLI names the flag
    for r in run_workers(workers.other_host_outboxes_worker, 2, ("auto",), timeout_s=120):
        assert r == {"boxes": None, "transport": "gloo"}


# ---------------------------------------------------------------- outboxes of killed ranks: the launcher and a sweep


def test_the_sweep_removes_only_outboxes_whose_owner_is_provably_gone(tmp_path):
    from mggcn.distributed.shm import _owner_tag, _proc_start, sweep_outboxes

    boot, namespace, pid, start = _owner_tag().split(".")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert _proc_start(dead.pid) is None
    names = {
        "alive": f"mggcn-outbox-{boot}.{namespace}.{pid}.{start}-aaaa-0",  # this process, in its handshake
        "dead": f"mggcn-outbox-{boot}.{namespace}.{dead.pid}.{start}-bbbb-1",
        "reused pid": f"mggcn-outbox-{boot}.{namespace}.{pid}.{int(start) + 1}-cccc-0",  # another process's start
        "other kernel": f"mggcn-outbox-{'0' * 32}.{namespace}.{dead.pid}.1-dddd-0",  # another host or boot
        "other namespace": f"mggcn-outbox-{boot}.{int(namespace) + 1}.{dead.pid}.1-eeee-0",  # another container
        "old format": "mggcn-outbox-0123456789ab-0",
        "not ours": "other-file",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"x")
    removed = sweep_outboxes(str(tmp_path))
    assert sorted(removed) == sorted(str(tmp_path / names[k]) for k in ("dead", "reused pid"))
    assert sorted(os.listdir(tmp_path)) == sorted(n for k, n in names.items() if k not in ("dead", "reused pid"))
    assert sweep_outboxes(str(tmp_path / "missing")) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_the_sweep_leaves_another_users_outbox(tmp_path):
    from mggcn.distributed.shm import _owner_tag, sweep_outboxes

    boot, namespace, _, start = _owner_tag().split(".")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    theirs = tmp_path / f"mggcn-outbox-{boot}.{namespace}.{dead.pid}.{start}-ffff-0"
    theirs.write_bytes(b"x")
    os.chown(theirs, os.getuid() + 4242, -1)
    assert sweep_outboxes(str(tmp_path)) == [] and theirs.exists()


def _train_in_handshake(tmp_path):
    """``mggcn train --nprocs 2 --shm on`` held in the shared-memory handshake (both outboxes created, none mapped
    yet); the launcher, and the outbox of each rank by rank."""
    from test_launch import _env

    env, tmp = _env(tmp_path)
    shm = tmp_path / "shm"
    shm.mkdir()
    env.update(MGGCN_SHM_DIR=str(shm), MGGCN_TEST_SHM_PAUSE_S="600")
    proc = subprocess.Popen([sys.executable, "-m", "mggcn", "train", "synthetic:n=300,features=4", "--nprocs", "2",
                             "--shm", "on", "--epochs", "2", "--quiet"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 240
    while len(os.listdir(shm)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    boxes = {int(name.rsplit("-", 1)[1]): shm / name for name in os.listdir(shm)}
    return proc, boxes, shm, tmp


def _owner_pid(box) -> int:
    return int(box.name[len("mggcn-outbox-"):].split("-")[0].split(".")[2])


def test_a_worker_killed_in_the_handshake_leaves_no_shared_memory(tmp_path):
    proc, boxes, shm, tmp = _train_in_handshake(tmp_path)
    try:
        os.kill(_owner_pid(boxes[1]), signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert err.splitlines() == ["mggcn: rank 1 was killed by signal SIGKILL (usually the out-of-memory killer's, or "
                                "a scheduler's: `mggcn plan` sizes a job's memory, and on Linux the kernel's log, "
                                "`dmesg`, names what it killed)"], err
    assert os.listdir(shm) == [] and os.listdir(tmp) == []


def test_a_launcher_killed_in_the_handshake_leaves_no_worker_and_the_next_job_sweeps(tmp_path):
    proc, boxes, shm, tmp = _train_in_handshake(tmp_path)
    family = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.wait(30)
    _, alive = psutil.wait_procs(family, timeout=30)  # the workers die with their launcher, not at their pause's end
    assert alive == []
    deadline = time.monotonic() + 30
    while os.listdir(tmp) and time.monotonic() < deadline:  # the launcher's watcher removes its directories
        time.sleep(0.1)
    assert os.listdir(tmp) == []
    assert sorted(os.listdir(shm)) == sorted(b.name for b in boxes.values())  # the kill left them
    results = run_workers(workers.shm_worker, 2, (10, 4, str(shm)), timeout_s=120)  # the next job
    assert all(r["left"] == [] for r in results) and os.listdir(shm) == []


def test_the_sweep_removes_an_outbox_whose_pid_a_later_process_reuses(tmp_path):
    """An outbox of a dead rank whose pid now runs a process that started later is stale: removed. (_proc_start must
    be the process's real start time, /proc/PID/stat's 22nd field; with another field every process "started" at
    the same time and a reused pid keeps the dead rank's outbox in /dev/shm for good.)"""
    import psutil

    from mggcn.distributed.shm import _owner_tag, _proc_start, sweep_outboxes

    boot, namespace, _, start = _owner_tag().split(".")
    time.sleep(0.1)  # several clock ticks: the child starts at another tick than this process
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        for pid in (os.getpid(), later.pid):  # the start time psutil computes from the same field
            assert abs(int(_proc_start(pid)) / ticks + psutil.boot_time() - psutil.Process(pid).create_time()) < 1
        stale = tmp_path / f"mggcn-outbox-{boot}.{namespace}.{later.pid}.{start}-abcd-0"
        stale.write_bytes(b"x")
        assert sweep_outboxes(str(tmp_path)) == [str(stale)] and os.listdir(tmp_path) == []
    finally:
        later.kill()
        later.wait()
