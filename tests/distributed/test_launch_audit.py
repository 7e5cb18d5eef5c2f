"""How a job starts from its environment and ends when its whole process group is stopped: the rank variables
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) that do not fit together are one line naming the variable, never
a traceback, a hang or a silent run, under torchrun too; SIGTERM to the launcher's process group (a batch system,
a service manager) stops the workers at an epoch's end, as SIGTERM to the launcher does."""

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from test_launch import _env, _signal_group

from cli_util import declared_command, run_cli
from mggcn.utils.errors import ConfigError

_RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
                   "MGGCN_INIT_METHOD", "MASTER_PORT")

# (the environment, the one line of the refusal)
_BROKEN = [
    ({"RANK": "1"}, "RANK=1 is set but WORLD_SIZE is not: a rank of a torchrun-style job needs both (unset RANK "
                    "to run a job of its own)"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set but RANK is not: a rank of a torchrun-style job needs both (unset "
                          "WORLD_SIZE to run a job of its own)"),
    ({"RANK": "1", "WORLD_SIZE": "1"}, "RANK=1: must be less than WORLD_SIZE=1 (torchrun sets these for each rank)"),
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc': must be a whole number (torchrun sets it for each rank)"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0: must be at least 1 (torchrun sets these for each rank)"),
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "1"},
     "LOCAL_RANK=3: must be less than LOCAL_WORLD_SIZE=1 (torchrun sets these for each rank)"),
    ({"LOCAL_WORLD_SIZE": "x"}, "LOCAL_WORLD_SIZE='x': must be a whole number (torchrun sets it for each rank)"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "abc"},
     "MASTER_PORT='abc': must be a port number from 1 to 65535 (rank 0 serves the job's rendezvous there)"),
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "70000"},
     "MASTER_PORT='70000': must be a port number from 1 to 65535 (rank 0 serves the job's rendezvous there)"),
]


def _rank_variables(monkeypatch, values: dict) -> None:
    for name in _RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("values, line", _BROKEN)
def test_rank_variables_that_do_not_fit_together_are_refused_naming_the_variable(monkeypatch, values, line):
    from mggcn.distributed.context import rank_environment

    _rank_variables(monkeypatch, values)
    with pytest.raises(ConfigError) as info:
        rank_environment()
    assert str(info.value) == line
    assert info.value.option in values


@pytest.mark.parametrize("nprocs", [1, 2])
@pytest.mark.parametrize("values, line", [_BROKEN[i] for i in (0, 2, 3, 5)])
def test_the_command_refuses_them_in_one_line_before_any_work(monkeypatch, nprocs, values, line):
    """Before, ``RANK=1 mggcn train`` ended in a shape error deep in the SpMM (a one-process job as rank 1 of 1),
    ``RANK=abc`` in int()'s words after the whole run, and ``RANK=1 mggcn train --nprocs 2`` trained and exited 0
    without the one line a quiet run prints (the launcher took itself for rank 1)."""
    _rank_variables(monkeypatch, values)
    out = run_cli("train", "synthetic:n=200,features=8", "--epochs", "1", "--quiet", "--nprocs", str(nprocs),
                  timeout=120)
    assert (out.returncode, out.stderr, out.stdout) == (2, f"mggcn train: error: {line}\n", "")


def test_a_rank_outside_its_world_is_refused_instead_of_waiting_for_its_peers(monkeypatch):
    """RANK 5 of 2 went on to the rendezvous: a wait for the store's other ranks, or torch's traceback of a store
    that does not answer, instead of a line naming RANK."""
    _rank_variables(monkeypatch, {"RANK": "5", "WORLD_SIZE": "2"})
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "9")  # nothing listens: a rank that tried would wait there
    out = run_cli("train", "synthetic:n=200,features=8", "--epochs", "1", "--quiet", "--timeout", "20",
                  timeout=60)
    assert (out.returncode, out.stderr) == (2, "mggcn train: error: RANK=5: must be less than WORLD_SIZE=2 (torchrun "
                                               "sets these for each rank)\n")


def test_under_torchrun_more_ranks_than_vertices_names_the_world_size_not_nprocs(monkeypatch):
    """A torchrun rank is given no --nprocs: the refusal names what it was given (the check runs before the
    rendezvous, so the environment of one rank shows it)."""
    _rank_variables(monkeypatch, {"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3",
                                  "TORCHELASTIC_RUN_ID": "audit"})
    out = run_cli("train", "synthetic:n=2,classes=2,features=4", "--epochs", "1", "--quiet", timeout=120)
    assert (out.returncode, out.stderr) == (2, "mggcn train: error: torchrun's world size 3 (WORLD_SIZE) is larger "
                                               "than the graph's 2 vertices\n")


@pytest.mark.parametrize("nprocs", [2, 3])
def test_sigterm_to_the_process_group_stops_at_an_epochs_end_and_checkpoints(tmp_path, nprocs):
    """``kill -TERM -PGID`` (Slurm, systemd, a script stopping a job) reaches the fork server as well. It used to end
    the server and with it every worker at once: "rank 1 exited with status 255", exit status 1, no checkpoint."""
    env, tmp = _env(tmp_path)
    metrics, ckpt = tmp_path / "m.jsonl", tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, "-m", "mggcn", "train", "synthetic:n=2000,features=8", "--nprocs",
                             str(nprocs), "--epochs", "100000", "--quiet", "--trace-epoch", "0", "--metrics",
                             str(metrics), "--checkpoint-dir", str(ckpt)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)

    def training() -> None:
        deadline = time.monotonic() + 180
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)

    out, err, family = _signal_group(proc, signal.SIGTERM, training, timeout=120)
    assert proc.returncode == 130, err
    saved = [p.name for p in ckpt.iterdir() if p.suffix == ".pt"]
    assert saved, "no checkpoint saved"
    # --quiet: the accuracies on stdout, and on stderr only that the run was stopped (no traceback, no other line)
    assert out.startswith("mggcn: trained model (after epoch "), (out, err)
    assert re.fullmatch(rf"mggcn: stopped by a signal after epoch \d+; checkpoint \S+/{max(saved)}\n", err), err
    gone, alive = psutil.wait_procs(family, timeout=30)
    assert alive == [], [p.cmdline() for p in alive]
    assert os.listdir(tmp) == []


def test_shared_memory_that_cannot_be_created_says_its_size_in_a_unit_that_shows_it(tmp_path):
    """A small job's outboxes were "0 MiB" in the refusal (the size rounded to whole MiB)."""
    import torch

    from mggcn.distributed.context import DistContext
    from mggcn.distributed.shm import SharedOutboxes, ShmUnavailable

    with pytest.raises(ShmUnavailable) as info:  # 4096 bytes of header and 2 × 10 × 4 floats
        SharedOutboxes.create(DistContext(), 10, 4, torch.float32, directory=str(tmp_path / "missing"))
    assert str(info.value).startswith("rank 0: cannot create 4.31 KiB of shared memory in "), str(info.value)


@pytest.mark.parametrize("torchrun", [False, True])
def test_the_mggcn_script_ends_a_torchrun_rank_as_python_m_mggcn_does(torchrun):
    """The installed ``mggcn`` script is ``mggcn.__main__:entry``: under torchrun (``--no-python mggcn``) a rank
    leaves by ``os._exit`` with the command's status, skipping the interpreter's teardown (where gloo's state
    occasionally aborts), as ``-m mggcn`` does; elsewhere it exits normally."""
    assert declared_command() == "mggcn.__main__:entry"
    code = ("import atexit, sys; atexit.register(lambda: print('teardown ran', flush=True)); "
            "sys.argv = ['mggcn', 'datasets']; from mggcn.__main__ import entry; entry()")
    env = {k: v for k, v in os.environ.items() if k not in _RANK_VARIABLES}
    if torchrun:
        env["TORCHELASTIC_RUN_ID"] = "test"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "cora" in done.stdout, done.stderr
    assert ("teardown ran" in done.stdout) is not torchrun, done.stdout


def test_the_python_api_in_a_script_torchrun_started_runs_as_its_ranks(tmp_path):
    """``mggcn.train`` and ``mggcn.predict`` in a script under ``torchrun --nproc-per-node 2``: each process is one
    rank of the job (as ``mggcn train`` is there), not a job of its own joined to the world unchecked; every rank
    returns the model, rank 0 the predictions. The losses are those of ``nprocs=2`` (the same P and arithmetic:
    bitwise), and an ``nprocs`` other than torchrun's world size is refused in one line."""
    import json
    import textwrap

    import mggcn

    env, tmp = _env(tmp_path)
    env = {k: v for k, v in env.items() if k not in _RANK_VARIABLES}
    spec, options = "synthetic:n=300,features=8,classes=3", dict(hidden=(8,), epochs=3, quiet=True, seed=2)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""\
        import json, os, sys
        import mggcn
        run = mggcn.train({spec!r}, save_model="model.pt", **{options!r})  # written before any rank returns
        out = mggcn.predict("model.pt", {spec!r})
        try:
            mggcn.train({spec!r}, nprocs=1, epochs=1, quiet=True)
        except mggcn.ConfigError as err:
            refused = str(err)
        with open(f"rank{{os.environ['RANK']}}.json", "w") as f:
            json.dump({{"losses": [r["loss"] for r in run.history], "predictions": run.predictions is not None,
                        "predict": out is not None, "refused": refused}}, f)
        """))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    expected = [r["loss"] for r in mggcn.train(spec, nprocs=2, **options).history]
    assert [r["losses"] for r in ranks] == [expected, expected]
    assert [(r["predictions"], r["predict"]) for r in ranks] == [(True, True), (False, False)]
    assert {r["refused"] for r in ranks} == {"nprocs 1 disagrees with torchrun's world size 2; leave it out"}
