"""What training changes in the process: kept in a process mggcn owns, undone in the caller's (mggcn.utils.system)."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import scipy.sparse  # noqa: F401  (scipy adds a warning filter of its own when first imported)
import torch

import mggcn
from mggcn.utils import system


def _process_state() -> dict:
    return {"threads": torch.get_num_threads(), "torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state(),
            "filters": list(warnings.filters), "sigint": signal.getsignal(signal.SIGINT),
            "sigterm": signal.getsignal(signal.SIGTERM), "mmap_threshold": system.mmap_threshold()}


def _assert_same(before: dict, after: dict) -> None:
    assert after["threads"] == before["threads"]
    assert torch.equal(after["torch_rng"], before["torch_rng"])
    for a, b in zip(after["numpy_rng"], before["numpy_rng"], strict=True):
        assert np.array_equal(a, b)
    assert after["filters"] == before["filters"]
    assert after["sigint"] is before["sigint"] and after["sigterm"] is before["sigterm"]
    assert after["mmap_threshold"] == before["mmap_threshold"]


def test_train_in_the_callers_process_leaves_it_as_it_was(monkeypatch):
    assert not system.owns_process()  # pytest's process is the caller's, as a notebook's would be
    calls = []
    monkeypatch.setattr(system, "set_mmap_threshold", lambda nbytes: calls.append(nbytes))
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    np.random.seed(99)
    before = _process_state()
    # threads=2 and dropout: the rank changes the thread count and draws dropout masks while it trains
    result = mggcn.train("builtin:karate", nprocs=1, hidden=(8,), epochs=3, dropout=0.5, input_dropout=0.2,
                         threads=2, quiet=True)
    assert len(result.history) == 3
    _assert_same(before, _process_state())
    assert calls == []  # glibc cannot report its threshold, so none is set where it could not be put back


def test_a_rank_in_the_callers_process_is_undone_unless_the_process_is_owned(monkeypatch):
    torch.set_num_threads(1)
    filters = list(warnings.filters)
    with system.caller_settings_kept():
        system.enter_rank(2, mmap_threshold=None)
        assert torch.get_num_threads() == 2
        assert any(f[1] is not None and f[1].pattern.startswith("Sparse CSR tensor") for f in warnings.filters)
    assert torch.get_num_threads() == 1 and list(warnings.filters) == filters

    monkeypatch.setattr(system._State, "owned", True)  # a launched worker: the settings stay
    try:
        with system.caller_settings_kept():
            system.enter_rank(2, mmap_threshold=None)
        assert torch.get_num_threads() == 2
    finally:
        warnings.filters[:] = filters
        torch.set_num_threads(1)


def test_stop_on_signal_asks_to_stop_and_restores_the_handlers():
    previous = signal.getsignal(signal.SIGTERM)
    with system.StopOnSignal() as stop:
        assert signal.getsignal(signal.SIGTERM) is not previous
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested
    assert signal.getsignal(signal.SIGTERM) is previous


def _openmp_spin_counts(env: dict, cmd: list[str], cwd, keep_policy: bool = False) -> tuple[list[str], str]:
    """Run ``cmd`` with GNU OpenMP's settings shown as each process loads torch (``OMP_DISPLAY_ENV=VERBOSE``): the
    spin count of every process in order (0: threads that wait sleep at once, the PASSIVE wait policy; unset, libgomp
    spins first), and stdout."""
    env = {k: v for k, v in env.items() if keep_policy or k != system.OPENMP_WAIT_ENV} | {"OMP_DISPLAY_ENV": "VERBOSE"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=cwd)
    assert out.returncode == 0, out.stderr
    counts = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", out.stderr)
    if "OPENMP DISPLAY ENVIRONMENT" not in out.stderr:
        pytest.skip("torch's OpenMP here is not GNU's (libgomp), which alone shows its settings so")
    return counts, out.stdout


def test_the_command_and_its_workers_wait_for_work_asleep(tmp_path):
    """The mggcn command, and the fork server that loads torch for its workers, have OpenMP's waiting threads sleep
    (system.openmp_waits_passively): the command's process and the server's both show it."""
    cmd = [sys.executable, "-m", "mggcn", "train", "builtin:karate", "--nprocs", "2", "--epochs", "1", "--quiet"]
    counts, _ = _openmp_spin_counts(dict(os.environ), cmd, tmp_path)
    assert len(counts) == 2 and counts == ["0", "0"]
    # a setting of the user's own wins
    env = dict(os.environ) | {system.OPENMP_WAIT_ENV: "ACTIVE"}
    counts, _ = _openmp_spin_counts(env, cmd, tmp_path, keep_policy=True)
    assert len(counts) == 2 and "0" not in counts


def test_a_job_launched_from_a_callers_process_leaves_its_environment(tmp_path):
    """A caller that loaded torch first keeps its own OpenMP setting and environment; the workers the job starts
    (through the fork server) wait asleep all the same."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""\
        import os
        import torch
        import mggcn
        if __name__ == "__main__":
            mggcn.train("builtin:karate", nprocs=2, hidden=(4,), epochs=1, quiet=True)
            print(os.environ.get({system.OPENMP_WAIT_ENV!r}))
        """))
    counts, stdout = _openmp_spin_counts(dict(os.environ), [sys.executable, str(script)], tmp_path)
    assert len(counts) == 2 and counts[0] != "0" and counts[1] == "0"
    assert stdout.splitlines() == ["None"]


def test_a_rank_starts_the_vector_math_on_one_thread_before_its_threads_are_set(monkeypatch):
    """MKL's vector math can go wrong in one thread when a process's first call of a function comes from two threads
    at once (epoch 1's loss of a seed's run then changes in the sixth digit: scripts/rank_check.py repeat under
    load). enter_rank calls each function once, on fewer elements than torch gives a second thread, in both float
    widths, while the thread count is still the caller's, and only in the process's first rank."""
    calls = []

    def recording(name, fn):
        def call(x, *args, **kwargs):
            calls.append((name, x.dtype, x.numel(), torch.get_num_threads()))
            return fn(x, *args, **kwargs)
        return call

    for name in system._VECTOR_MATH:
        monkeypatch.setattr(torch, name, recording(name, getattr(torch, name)))
    monkeypatch.setattr(system._State, "vector_math", False)
    torch.set_num_threads(1)
    with system.caller_settings_kept():
        system.enter_rank(2, mmap_threshold=None)
        system.enter_rank(2, mmap_threshold=None)  # a second rank in the process: nothing again
    called = [(n, str(d)) for n, d, _, _ in calls]
    assert sorted(called) == sorted((n, str(d)) for n in system._VECTOR_MATH for d in (torch.float32, torch.float64))
    grain = 2048  # torch's per-thread grain of these ops: fewer elements run on the calling thread alone
    assert all(numel < grain and threads == 1 for _, _, numel, threads in calls)
    assert {"exp", "log", "sqrt"} <= set(system._VECTOR_MATH)  # the loss's and Adam's


_SIGNAL_AFTER_THE_COMMAND = """
import os, signal, sys, time
from mggcn.utils.system import hold_signals, signals_end_process
hold_signals()
os.kill(os.getpid(), signal.SIG{name})  # held: arrives while the command finishes
print("still here", flush=True)
signals_end_process()  # the held signal ends the process now, with 130
time.sleep(5)
print("not reached", flush=True)
"""


@pytest.mark.parametrize("name", ["INT", "TERM"])
def test_a_signal_after_the_command_ends_it_with_130_and_no_traceback(name):
    """Ctrl-C or SIGTERM in a command's last moments (after its outputs, in the interpreter's teardown) killed it by
    the signal (status -15) or printed a KeyboardInterrupt traceback; held, then delivered, it ends the process with
    the status of an interrupted command, 130, and nothing on stderr."""
    out = subprocess.run([sys.executable, "-c", _SIGNAL_AFTER_THE_COMMAND.format(name=name)], capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (130, "still here\n", "")


_SIGTERM_TO_ANOTHER_THREAD = """
import os, signal, sys, threading, time
from mggcn.utils.system import hold_signals, sigterm_as_interrupt
import io
import subprocess
import sys
import time
from types import SimpleNamespace
import pytest
from mggcn.tools import roofline
from mggcn.tools.roofline import Machine, epoch_floor, mggcn_work
from mggcn.training.job import format_epoch
from mggcn.utils import timing
from mggcn.utils.errors import says_out_of_memory
from mggcn.utils.progress import Progress, epoch_progress
from mggcn.utils.timing import PhaseTimer, SetupClock
import errno
import json
import os
from mggcn.utils import system
from mggcn.tools.cli import process as cli_process
from mggcn.utils.errors import ConfigError
from mggcn.utils.files import OutputError
from mggcn.utils.files import clipped, link_to_nothing
import signal
worker = threading.Thread(target=time.sleep, args=(3,), daemon=True)  # as OpenBLAS's, made at the start
worker.start()
with sigterm_as_interrupt({ending}):
    hold_signals()  # as the command does at the end of its block: in its main thread
os.kill(os.getpid(), signal.SIGTERM)  # the main thread holds it: the kernel gives it to the worker
time.sleep(1)
print("not reached", flush=True)
"""


def test_a_sigterm_another_thread_takes_after_the_commands_block_is_no_death_by_it():
    """Between the end of the command's block and its last handlers, its main thread holds SIGTERM, but another
    thread (OpenBLAS's, numpy's) takes it: under the default disposition the process died by it (status -15, which
    the command's exit test saw once in a while). The command's block leaves a handler that ends it with 130."""
    out = [subprocess.run([sys.executable, "-c", _SIGTERM_TO_ANOTHER_THREAD.format(ending=e)], capture_output=True,
                          text=True, timeout=60) for e in ("ending=130", "")]
    assert (out[0].returncode, out[0].stdout, out[0].stderr) == (130, "", "")
    assert out[1].returncode == -signal.SIGTERM  # a caller's block (mggcn.train's) restores what was there


@pytest.mark.parametrize("var, block, mine", [
    (system.OPENMP_WAIT_ENV, system.children_wait_passively, "ACTIVE"),
    ("PYTHONSAFEPATH", system.working_directory_not_imported, "x"),
])
def test_the_environment_a_block_sets_for_children_is_the_callers_again_after_it(monkeypatch, var, block, mine):
    """A notebook's mggcn.train(nprocs=2) passes these to its workers only: a PYTHONSAFEPATH left behind makes the
    caller's next `python tool.py` unable to import tool.py's neighbours; the caller's own setting stays its own."""
    monkeypatch.delenv(var, raising=False)
    with block():
        assert var in os.environ
    assert var not in os.environ
    monkeypatch.setenv(var, mine)
    with block():
        assert os.environ[var] == mine
    assert os.environ[var] == mine


@pytest.fixture
def fresh_stop(monkeypatch):
    monkeypatch.setattr(system._State, "stop_signal", None)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_a_second_sigterm_only_asks_again_a_second_ctrl_c_stops_at_once(fresh_stop):
    with system.StopOnSignal() as stop:
        try:
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)  # GNU timeout, a supervisor asking again: the epoch still ends
        except KeyboardInterrupt:
            pytest.fail("a second SIGTERM stopped the job at once")
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)


def test_the_first_stop_signal_is_passed_on_to_the_callers_handler(fresh_stop):
    got = []
    signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    with system.stop_signal_passed_on():
        system.note_stop_signal(signal.SIGTERM)
        system.note_stop_signal(signal.SIGINT)  # a later one does not count
    assert got == [signal.SIGTERM]


def test_a_sigterm_under_its_default_handler_ends_as_it_would_have(fresh_stop):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with pytest.raises(SystemExit) as ended:
        with system.stop_signal_passed_on():
            system.note_stop_signal(signal.SIGTERM)
    assert ended.value.code == 128 + signal.SIGTERM  # 143, the status a shell shows for it


def test_ctrl_c_under_its_default_handler_is_not_raised_again(fresh_stop):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with system.stop_signal_passed_on():  # the job's result says it was interrupted
            system.note_stop_signal(signal.SIGINT)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C was raised again in the caller after the job had stopped for it")


def test_a_process_that_ignores_ctrl_c_keeps_ignoring_it_in_the_block(fresh_stop):
    """A launcher started in the background (`mggcn train ... &`, Ctrl-C ignored): a Ctrl-C meant for the foreground
    job must not stop it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with system.sigterm_as_interrupt(sigint=True):
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)  # SIGTERM is taken
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_sigterm_in_the_block_is_told_from_ctrl_c(fresh_stop):
    """The launcher tells them apart (Terminated): a second SIGTERM while the workers stop is ignored, a second
    Ctrl-C stops at once; and the caller's SIGTERM handler, not a KeyboardInterrupt, follows mggcn.train."""
    caught = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with system.sigterm_as_interrupt(sigint=True):
                signal.raise_signal(sig)
        except KeyboardInterrupt as stop:
            caught.append(type(stop))
    assert caught == [system.Terminated, KeyboardInterrupt]


def test_glibcs_largest_mmap_threshold_is_taken():
    """The settings check lets MMAP_THRESHOLD_MAX through (--mmap-threshold 32M): the rank must take it too."""
    code = ("from mggcn.config import MMAP_THRESHOLD_MAX as M\nfrom mggcn.utils import system\n"
            "print(system.set_mmap_threshold(M), system.mmap_threshold() == M)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "True True\n"), done.stderr


def test_a_job_in_the_callers_process_puts_back_the_data_layers_threads():
    import torch

    from mggcn.utils.parallel import configured_threads, set_threads

    set_threads(None)
    threads = torch.get_num_threads()
    try:
        with system.caller_settings_kept():
            system.enter_rank(1, mmap_threshold=None)
            assert configured_threads() == 1
        assert configured_threads() is None  # thread_map uses every core again, as before the job
    finally:
        set_threads(None)
        torch.set_num_threads(threads)
