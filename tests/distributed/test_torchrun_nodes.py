"""torchrun's nodes each read their own files: a refusal on one node ends every node at once with its reason,
the ranks refuse to train on different data, and a resumed run continues from rank 0's checkpoint on every rank,
whatever the other nodes' checkpoint directories hold (two torchrun "nodes" on this host, each in a working
directory of its own)."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from test_launch import _env, _node_results, _torchrun_nodes

from mggcn.data.generators import parse_spec

GRAPH = "synthetic:n=400,features=8,classes=3"
COMMON = ("--hidden", "8", "--threads", "1", "--quiet")  # one thread per rank, as --nprocs 2 gives on 2 cores


def _prepare(path, env, spec=GRAPH):
    subprocess.run([sys.executable, "-m", "mggcn", "prepare", spec, str(path)], check=True, env=env,
                   capture_output=True, timeout=300)


def _nodes(tmp_path):
    dirs = [tmp_path / "node0", tmp_path / "node1"]
    for d in dirs:
        d.mkdir()
    return dirs


def _ours(log: str) -> list[str]:
    """The workers' own lines of a node's log (a traceback would come as "[rankN]: ..." lines)."""
    return [line for line in log.splitlines() if line.startswith(("mggcn train", "mggcn:", "[rank"))]


def test_a_dataset_missing_on_one_node_ends_every_node_with_that_reason(tmp_path):
    """Node 1 lacks the dataset: it refuses at once, and node 0, which would have waited out --timeout to join it
    and then blamed a lost peer, ends as soon as both have checked, with node 1's reason."""
    env, _ = _env(tmp_path)
    dirs = _nodes(tmp_path)
    _prepare(dirs[0] / "g", env)
    nodes = _torchrun_nodes(tmp_path, env, "g", "--epochs", "2", "--timeout", "900", *COMMON, cwds=dirs)
    codes, logs = _node_results(tmp_path, nodes, timeout=200)  # well inside --timeout: no node waited it out
    assert codes == [1, 1], logs  # torchrun's status when a worker fails
    for i, log in enumerate(logs):
        assert "exitcode  : 2" in log, log  # bad input, on both nodes
        ours = _ours(log)
        assert ours[-1].startswith("mggcn train: error: g: "), log
        assert len(ours) == (2 if i == 0 else 1), log
    assert _ours(logs[0])[0].startswith("mggcn: rank 1 (on "), logs[0]


@pytest.mark.parametrize("refusing", [pytest.param(0, marks=pytest.mark.slow), 1])  # 0: the store's rank refuses
def test_a_node_whose_threads_or_switches_are_refused_ends_every_node_with_that_reason(tmp_path, refusing):
    """A rank that refuses what its own host is asked (more --threads than its cores; a switch of its environment
    that is neither 0 nor 1) never makes the process group: it tells the others through the store's roll call,
    and every node ends at once with its reason, whichever rank refused (the one serving the store too)."""
    env, _ = _env(tmp_path)
    dirs = _nodes(tmp_path)
    node_args, node_env = [(), ()], [{}, {}]
    node_args[refusing] = ("--threads", "4096")
    node_env[1 - refusing] = {"MGGCN_DETERMINISTIC": "yes"}  # refused too, on the other node: each says its own
    nodes = _torchrun_nodes(tmp_path, env, GRAPH, "--epochs", "2", "--timeout", "900", "--hidden", "8", "--quiet",
                            cwds=dirs, node_args=node_args, node_env=node_env)
    codes, logs = _node_results(tmp_path, nodes, timeout=200)  # well inside --timeout: no node waited it out
    assert codes == [1, 1], logs
    for i, log in enumerate(logs):
        assert "exitcode  : 2" in log, log
        said = "--threads 4096: must be between 1 and the" if i == refusing else "MGGCN_DETERMINISTIC=yes: must be 1"
        assert _ours(log) == [next(line for line in log.splitlines() if line.startswith("mggcn train: error: "))], log
        assert said in _ours(log)[-1], log
    only_threads = [(), ()]
    only_threads[refusing] = ("--threads", "4096")
    nodes = _torchrun_nodes(tmp_path, env, GRAPH, "--epochs", "2", "--timeout", "900", "--hidden", "8", "--quiet",
                            cwds=dirs, node_args=only_threads)
    codes, logs = _node_results(tmp_path, nodes, timeout=200)
    assert codes == [1, 1], logs
    other = _ours(logs[1 - refusing])
    assert other[0].startswith(f"mggcn: rank {refusing} (on ") and other[0].endswith(") refused the job; its reason:")
    assert other[-1].startswith("mggcn train: error: --threads 4096: must be between 1 and the"), logs


def test_rank_0s_log_alone_says_what_the_job_trains(tmp_path):
    """The line naming the dataset, its sizes and the ranks is said once, by rank 0 (every rank printing it would
    repeat it in every node's log; none did, and no log said what the job trained)."""
    env, _ = _env(tmp_path)
    nodes = _torchrun_nodes(tmp_path, env, GRAPH, "--epochs", "1", "--hidden", "8", "--threads", "1",
                            "--log-every", "1")
    codes, logs = _node_results(tmp_path, nodes, timeout=200)
    assert codes == [0, 0], logs
    said = [[line for line in log.splitlines() if "vertices" in line and "under torchrun" in line] for log in logs]
    assert said[1] == [] and len(said[0]) == 1, logs
    assert said[0][0] == ("mggcn: synthetic:n=400,features=8,classes=3: 400 vertices, 8000 edges, 8 features, "
                          "3 classes; 2 rank(s) under torchrun on cpu"), said


def test_nodes_with_different_data_refuse_to_train(tmp_path):
    """The nodes' copies differ (same sizes, other edges and labels): every rank refuses, naming both."""
    env, _ = _env(tmp_path)
    dirs = _nodes(tmp_path)
    _prepare(dirs[0] / "g", env)
    _prepare(dirs[1] / "g", env, GRAPH + ",seed=5")
    nodes = _torchrun_nodes(tmp_path, env, "g", "--epochs", "2", *COMMON, cwds=dirs)
    codes, logs = _node_results(tmp_path, nodes, timeout=200)
    assert codes == [1, 1], logs
    for log in logs:
        ours = _ours(log)
        assert len(ours) == 1 and "the ranks opened different datasets (rank 0: 400 vertices" in ours[0], log
        assert "rank 1: 400 vertices" in ours[0] and "exitcode  : 2" in log, log


@pytest.mark.parametrize("source", ["generated", "edgelist"])
def test_nodes_reading_different_graphs_of_the_same_sizes_refuse_to_train(tmp_path, source):
    """Not prepared: each node generates its graph (another seed) or reads its own edge list and vertex files (the
    same sizes, other edges, features and labels). Both trained a mixture and exited 0; every rank now hashes what
    it read, and refuses, naming both fingerprints."""
    env, _ = _env(tmp_path)
    dirs = _nodes(tmp_path)
    specs = (GRAPH, GRAPH + ",seed=5")
    if source == "generated":
        node_args = tuple((spec,) for spec in specs)
    else:
        for d, spec in zip(dirs, specs):
            graph = parse_spec(spec)
            np.savetxt(d / "g.txt", graph.edge_index.T, fmt="%d")
            np.save(d / "x.npy", graph.x)
            np.save(d / "y.npy", graph.y)
        node_args = (("g.txt", "--format", "edgelist", "--features", "x.npy", "--labels", "y.npy"),) * 2
    nodes = _torchrun_nodes(tmp_path, env, "--epochs", "2", *COMMON, cwds=dirs, node_args=node_args)
    codes, logs = _node_results(tmp_path, nodes, timeout=200)
    assert codes == [1, 1], logs
    for log in logs:
        ours = _ours(log)
        assert len(ours) == 1 and "the ranks opened different datasets (rank 0: 400 vertices" in ours[0], log
        assert ours[0].count("fingerprint") == 2 and "exitcode  : 2" in log, log


def test_an_output_asked_of_another_node_than_rank_0s_is_refused(tmp_path):
    """Rank 0 writes the outputs: --save-model and --resume on node 1 alone were dropped with exit 0."""
    env, _ = _env(tmp_path)
    nodes = _torchrun_nodes(tmp_path, env, GRAPH, "--epochs", "2", *COMMON,
                            node_args=((), ("--save-model", str(tmp_path / "m.pt"), "--checkpoint-dir",
                                            str(tmp_path / "ck"), "--resume-or-start")))
    codes, logs = _node_results(tmp_path, nodes, timeout=200)
    assert codes == [1, 1], logs
    for log in logs:
        ours = _ours(log)
        assert len(ours) == 1 and "the ranks were given different settings (save_model: rank 0 'not given', rank 1 " \
            "'given'; checkpoint_dir: rank 0 'not given', rank 1 'given'; resume: rank 0 False, rank 1 'auto')" \
            in ours[0], log
    assert not (tmp_path / "m.pt").exists()


def test_nodes_given_different_settings_refuse_to_train(tmp_path):
    """Each node's command line sets its ranks' options: other seeds trained a mixture (accuracies above 1), other
    epoch counts waited out --timeout at a collective one node never reached. Every rank refuses, naming both."""
    env, _ = _env(tmp_path)
    nodes = _torchrun_nodes(tmp_path, env, GRAPH, "--timeout", "900", *COMMON,
                            node_args=(("--seed", "1", "--epochs", "3"), ("--seed", "2", "--epochs", "6")))
    codes, logs = _node_results(tmp_path, nodes, timeout=200)  # well inside --timeout
    assert codes == [1, 1], logs
    for log in logs:
        ours = _ours(log)
        assert len(ours) == 1 and "the ranks were given different settings (epochs: rank 0 3, rank 1 6; seed: rank " \
            "0 1, rank 1 2)" in ours[0], log
        assert "exitcode  : 2" in log, log


def test_a_run_resumes_from_rank_0s_checkpoint_on_every_node(tmp_path):
    """Only node 0 holds the checkpoints (no shared file system), node 1 holds another run's: the resumed run
    equals the uninterrupted one at P = 2, epoch by epoch, and node 1's files are left as they were."""
    env, _ = _env(tmp_path)
    dirs = _nodes(tmp_path)
    for d in dirs:
        _prepare(d / "g", env)

    def run(cwd, *args):
        subprocess.run([sys.executable, "-m", "mggcn", "train", "g", "--nprocs", "2", *COMMON, *args], cwd=cwd,
                       env=env, check=True, capture_output=True, timeout=300)

    run(dirs[0], "--epochs", "5", "--metrics", str(tmp_path / "whole.jsonl"))
    run(dirs[0], "--epochs", "3", "--checkpoint-dir", "ck", "--checkpoint-every", "1")
    run(dirs[1], "--epochs", "2", "--checkpoint-dir", "ck", "--checkpoint-every", "1", "--seed", "7")
    theirs = sorted(p.name for p in (dirs[1] / "ck").iterdir())
    nodes = _torchrun_nodes(tmp_path, env, "g", "--epochs", "5", "--checkpoint-dir", "ck", "--checkpoint-every", "1",
                            "--resume", "--metrics", str(tmp_path / "resumed.jsonl"), *COMMON, cwds=dirs)
    codes, logs = _node_results(tmp_path, nodes, timeout=200)
    assert codes == [0, 0], logs
    whole = [json.loads(line) for line in (tmp_path / "whole.jsonl").read_text().splitlines()]
    resumed = [json.loads(line) for line in (tmp_path / "resumed.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in resumed] == [1, 2, 3, 4, 5]
    # the same arithmetic at the same P and threads: bitwise the same losses and accuracies
    for a, b in zip(whole, resumed, strict=True):
        assert [a[k] for k in ("loss", "train_acc", "val_acc", "test_acc")] == \
               [b[k] for k in ("loss", "train_acc", "val_acc", "test_acc")], (a, b)
    assert sorted(p.name for p in (dirs[1] / "ck").iterdir()) == theirs
    shutil.rmtree(dirs[1] / "ck")


@pytest.mark.parametrize("node0_epochs", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_newer_checkpoint_on_another_node_than_rank_0s_is_refused_not_dropped(tmp_path, node0_epochs):
    """c10d may put a restarted job's rank 0 on another node than the run that wrote the checkpoints: where node 1
    holds a newer checkpoint than node 0's newest (or node 0 none), --resume-or-start would start over (or go back)
    without a word. Every node refuses, naming both ranks and the file, and no node's files change."""
    env, _ = _env(tmp_path)
    dirs = _nodes(tmp_path)
    for d in dirs:
        _prepare(d / "g", env)
    for d, epochs in ((dirs[0], node0_epochs), (dirs[1], 3)):
        if epochs:
            subprocess.run([sys.executable, "-m", "mggcn", "train", "g", "--epochs", str(epochs), "--checkpoint-dir",
                            "ck", "--checkpoint-every", "1", *COMMON], cwd=d, env=env, check=True,
                           capture_output=True, timeout=300)
    before = [sorted(p.name for p in (d / "ck").iterdir()) if (d / "ck").exists() else [] for d in dirs]
    nodes = _torchrun_nodes(tmp_path, env, "g", "--epochs", "5", "--checkpoint-dir", "ck", "--checkpoint-every", "1",
                            "--resume-or-start", *COMMON, cwds=dirs)
    codes, logs = _node_results(tmp_path, nodes, timeout=200)
    assert codes == [1, 1], logs
    start = f"resumes from epoch {node0_epochs}" if node0_epochs else "found nothing to resume from"
    for log in logs:
        assert "exitcode  : 2" in log, log
        line = _ours(log)[-1]
        assert line.startswith("mggcn train: error: --resume-or-start: rank 0 (on "), log
        assert f") {start} in its ck, but rank 1 (on " in line and "holds ckpt-000003.pt, newer, in its own" in line
    assert [sorted(p.name for p in (d / "ck").iterdir()) if (d / "ck").exists() else [] for d in dirs] == before


def test_a_rank_that_gave_up_waiting_to_join_says_so(monkeypatch):
    """A rank whose peers never joined (one died while it started) ends on the store's wait timeout: it says that
    it gave up waiting, not that it failed, nor gloo's words alone."""
    import torch.distributed as dist

    from mggcn.tools.cli import _rank_failure

    monkeypatch.setenv("RANK", "0")
    err = dist.DistStoreError("wait timeout after 60000ms, keys: /default_pg/0//cpu//0/1")
    assert not dist.is_initialized()
    line = _rank_failure(err)
    assert line.startswith("rank 0 gave up waiting for the other ranks to join the job: one of them failed or was "
                           "stopped before it joined"), line
    assert line.endswith("DistStoreError: wait timeout after 60000ms, keys: /default_pg/0//cpu//0/1"), line
    assert _rank_failure(RuntimeError("boom")) == "rank 0 failed: RuntimeError: boom"
    located = dist.DistStoreError("[/__w/pytorch/torch/csrc/distributed/c10d/TCPStore.cpp:123] wait timeout")
    assert _rank_failure(located).endswith("DistStoreError: wait timeout")  # torch's source location left out
    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")
    assert _rank_failure(gloo).endswith("): RuntimeError: Connection closed by peer")  # a peer lost, said as such


def test_a_rank_whose_rendezvous_cannot_be_reached_says_so_in_one_line(tmp_path):
    """A rank told RANK=1 of a job whose rank 0 never started (a stray RANK/WORLD_SIZE in the shell, node 1 started
    alone): one line naming the address and the timeout, not torch's C++ log of every failed try with its stack."""
    from test_launch import _free_port

    env, _ = _env(tmp_path)
    port = _free_port()
    env.update(RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    out = subprocess.run([sys.executable, "-m", "mggcn", "train", GRAPH, "--epochs", "1", "--timeout", "2",
                          *COMMON], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines() == [out.stderr.strip()], out.stderr  # one line, no "frame #"
    assert out.stderr.startswith(f"mggcn train: error: rank 1 could not connect to the job's rendezvous at "
                                 f"127.0.0.1:{port} within 2 s: rank 0 (on node 0), which serves it, was not "
                                 f"started"), out.stderr


def test_native_log_held_gives_back_all_on_success_and_drops_c10_logs_on_failure(capfd):
    """What native code writes to descriptor 2 in the block comes back after it: all of it when the block
    succeeds; without c10's log lines and C++ stacks when it raises (the raised error says it in one line)."""
    import os

    import pytest

    from mggcn.utils.system import native_log_held

    lines = (b"[E1206 16:50:04.763984978 socket.cpp:1028] [c10d] The client socket has timed out\n"
             b"Exception raised from throwTimeoutError at socket.cpp:1030 (most recent call first):\n"
             b"frame #0: c10::Error::Error() + 0x9d (0x7f in libc10.so)\n<omitting python frames>\n\n"
             b"a warning of the user's own\n")
    with native_log_held():
        os.write(2, lines)
        assert capfd.readouterr().err == ""  # held while the block runs
    assert capfd.readouterr().err == lines.decode()
    with pytest.raises(RuntimeError), native_log_held():
        os.write(2, lines)
        raise RuntimeError("DistNetworkError")
    assert capfd.readouterr().err == "a warning of the user's own\n"


def test_each_host_may_name_its_own_gpu(monkeypatch):
    """cuda:K is for one rank per host, and which GPU is each host's choice: ranks of cuda:0 and cuda:1 (or cuda) run
    one job; a rank on the CPU beside them is refused, naming the device."""
    from mggcn.config import TrainConfig
    from mggcn.training import job as jobs
    from mggcn.utils.errors import ConfigError

    monkeypatch.setattr(jobs, "job_device", lambda kind: kind)  # no GPU here: the device as given
    job = jobs.TrainJob(dataset="synthetic", config=TrainConfig(), device="cuda:0")
    for other in ("cuda:1", "cuda"):
        seen = jobs.replace(job, device=other)
        monkeypatch.setattr(jobs, "all_gather_objects", lambda ctx, mine, seen=seen: [
            mine, {**mine, "device": jobs.torch.device(seen.device).type}])
        jobs._check_same_settings(None, job)
    monkeypatch.setattr(jobs, "all_gather_objects", lambda ctx, mine: [mine, {**mine, "device": "cpu"}])
    with pytest.raises(ConfigError, match=r"^the ranks were given different settings \(device: rank 0 'cuda', "
                                          r"rank 1 'cpu'\)"):
        jobs._check_same_settings(None, job)
