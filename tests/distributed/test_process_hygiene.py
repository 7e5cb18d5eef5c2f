"""What a job does to the process that starts it, and how the command ends when it is cut short: the global start
method left alone, Ctrl-C while the workers start, a reader of stdout that goes away under the installed command, a
torchrun rank stopped while it imports torch. Each case runs in a fresh interpreter."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from test_launch import _env, _signal_group

from cli_util import declared_command, process_alive


def test_a_job_leaves_the_global_start_method_unchosen(tmp_path):
    env, tmp = _env(tmp_path)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import multiprocessing
        import mggcn
        if __name__ == "__main__":
            mggcn.train("synthetic:n=200,features=4", nprocs=2, hidden=(4,), epochs=1, quiet=True)
            print("after the job:", multiprocessing.get_start_method(allow_none=True))
            multiprocessing.set_start_method("spawn")
            print("set:", multiprocessing.get_start_method())
        """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["after the job: None", "set: spawn"]
    assert os.listdir(tmp) == []


def test_every_method_of_the_fork_server_the_standard_launch_reaches_is_mggcns_servers():
    """The standard library's ``Popen._launch`` runs with ``forkserver`` meaning mggcn's server: every function of
    the module that is a method of multiprocessing's server (connect_to_new_process; ensure_running, were a later
    Python's launch to call it) is the method of mggcn's, whose key a Python 3.14 client authenticates with; the
    module's other names (read_signed) are its own."""
    import multiprocessing.forkserver as stdlib

    from mggcn.distributed import forkserver

    ours = forkserver._ThroughOurServer()
    methods = [name for name in dir(stdlib) if getattr(getattr(stdlib, name), "__self__", None) is stdlib._forkserver]
    assert {"connect_to_new_process", "ensure_running"} <= set(methods)
    for name in methods:
        assert getattr(ours, name).__self__ is forkserver._SERVER, name
    assert ours.read_signed is stdlib.read_signed
    launch = forkserver._Popen._launch
    assert launch.__globals__["forkserver"].connect_to_new_process.__self__ is forkserver._SERVER


def test_the_callers_own_fork_server_processes_get_nothing_of_mggcns(tmp_path):
    """mggcn forks its workers from a fork server of its own (signals blocked, its environment, torch preloaded): the
    caller's processes of multiprocessing's fork server, after a job, start as they would without it, and
    terminate() ends them (they inherited the blocked SIGTERM, and a Pool hung on leaving its with block)."""
    env, tmp = _env(tmp_path)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import multiprocessing, os, signal, sys, time
        import mggcn

        def child(queue):
            queue.put((sorted(s.name for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
                       "PYTHONSAFEPATH" in os.environ, "torch" in sys.modules))
            time.sleep(60)

        if __name__ == "__main__":
            mggcn.train("synthetic:n=200,features=4", nprocs=2, hidden=(4,), epochs=1, quiet=True)
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([])
            queue = context.Queue()
            p = context.Process(target=child, args=(queue,))
            p.start()
            print(queue.get(timeout=60))
            p.terminate()
            p.join(20)
            print("exit", p.exitcode)
            with context.Pool(2) as pool:
                print(pool.map(abs, [-1, -2]))
        """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env,
                         cwd=tmp_path)  # the Pool hung for ever
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["([], False, False)", "exit -15", "[1, 2]"], out.stdout
    assert os.listdir(tmp) == []


def _as_from_a_terminal(cmd: list[str]) -> list[str]:
    """``cmd`` started with Ctrl-C's default disposition, as a terminal starts a command, whatever this test run's
    own: a shell's background job (``pytest ... &`` in a script) ignores SIGINT, its children inherit that, and a
    Python started so never handles Ctrl-C (rightly: the shell asked for it). A handler set in Python does not
    survive exec, the default it stands for does."""
    reset = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", reset, *cmd]


def _fork_server_started(proc: subprocess.Popen, deadline: float) -> list[psutil.Process]:
    """Wait until the launcher ``proc`` has started multiprocessing's fork server; its descendants then."""
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            family = psutil.Process(proc.pid).children(recursive=True)
            if any("forkserver" in " ".join(p.cmdline()) for p in family):
                return family
        except psutil.Error:  # a child ended while being listed
            pass
        time.sleep(0.01)
    raise AssertionError("the fork server did not start")


@pytest.mark.parametrize("after_s", [0.0, 0.4, 1.5])
def test_ctrl_c_while_the_workers_start_is_one_line_and_130(tmp_path, after_s):
    """Ctrl-C reaches the whole process group (the terminal's): the launcher, the fork server importing torch, the
    workers. One line, status 130, no traceback from any of them, no process or file left."""
    env, tmp = _env(tmp_path)
    cmd = [sys.executable, "-m", "mggcn", "train", "synthetic:n=2000,features=8", "--nprocs", "2", "--epochs",
           "100000", "--quiet"]
    proc = subprocess.Popen(_as_from_a_terminal(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)

    def started() -> None:
        _fork_server_started(proc, time.monotonic() + 240)
        time.sleep(after_s)

    out, err, family = _signal_group(proc, signal.SIGINT, started, timeout=180)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    # before training: "interrupted"; once it trains, the run stops at an epoch's end and says its accuracies
    assert len(err.splitlines()) <= 1 and ("interrupted" in err or "trained model" in out), (out, err)
    _, alive = psutil.wait_procs(family, timeout=30)
    assert alive == []
    assert os.listdir(tmp) == []


def test_ctrl_c_in_the_moment_the_fork_server_starts_is_not_lost(tmp_path):
    """The launcher holds Ctrl-C back while it forks and execs the server (so that the server does not inherit a
    handler that would print its traceback): a Ctrl-C in that moment must reach the launcher once it is done, not be
    dropped (the job would then train on, uninterruptible by that Ctrl-C)."""
    env, _ = _env(tmp_path)
    script = textwrap.dedent("""\
        import os, signal
        from mggcn.distributed import forkserver
        start = forkserver._SERVER.ensure_running
        def ctrl_c_while_starting():
            os.kill(os.getpid(), signal.SIGINT)
            start()
        forkserver._SERVER.ensure_running = ctrl_c_while_starting
        try:
            forkserver.start_fork_server(forkserver.worker_context(print), None)
            print("lost")
        except KeyboardInterrupt:
            print("interrupted", forkserver.server_pid() is not None)
        """)
    out = subprocess.run(_as_from_a_terminal([sys.executable, "-c", script]), capture_output=True, text=True,
                         timeout=240, env=env)
    assert out.stdout.splitlines() == ["interrupted True"], (out.stdout, out.stderr)


def _console_script() -> str:
    """What the installed ``mggcn`` command runs: the entry point pyproject.toml declares, as pip's script calls it."""
    target = declared_command()
    module, function = target.split(":")
    return f"import sys\nfrom {module} import {function}\nsys.exit({function}())\n"


@pytest.mark.parametrize("nprocs", ["1", "2"])
def test_the_installed_command_ends_quietly_when_its_reader_goes_away(tmp_path, nprocs):
    env, tmp = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", _console_script(), "train", "synthetic:n=300", "--epochs", "500",
                             "--hidden", "4", "--nprocs", nprocs], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=300)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert rc == 141 and not err.strip(), (rc, err)
    assert os.listdir(tmp) == []


_STOP_AT_IMPORT = """import sys
class _Stop:  # the signal torchrun sends, arriving while MODULE is being imported
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            raise KeyboardInterrupt
sys.meta_path.insert(0, _Stop())
"""


@pytest.mark.parametrize("module, line", [("torch.nn", "mggcn train: interrupted"),
                                          ("mggcn.tools.cli.train", "mggcn: interrupted")])
def test_a_torchrun_rank_stopped_while_importing_ends_with_one_line(tmp_path, module, line):
    """A rank interrupted half-way through importing torch holds a half-loaded torch: ending must not import it
    again ("duplicate registrations", "partially initialized module")."""
    env, _ = _env(tmp_path)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_STOP_AT_IMPORT.format(module=module))
    env.update(PYTHONPATH=os.pathsep.join([str(hook), env["PYTHONPATH"]]), TORCHELASTIC_RUN_ID="test", RANK="0",
               WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    out = subprocess.run([sys.executable, "-m", "mggcn", "train", "synthetic:n=100", "--epochs", "1"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 130, out.stderr
    assert out.stderr.splitlines() == [line], out.stderr


_SIGTERM_AT_IMPORT = """import os, signal, sys
class _Term:  # a scheduler's SIGTERM, arriving while the command loads (before main() takes the signals)
    def find_spec(self, name, path=None, target=None):
        if name == "mggcn.tools.cli.bench":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
sys.meta_path.insert(0, _Term())
"""


def test_sigterm_while_the_command_loads_is_one_line_and_130(tmp_path):
    """As Ctrl-C there: not a silent death by the signal (143)."""
    env, _ = _env(tmp_path)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SIGTERM_AT_IMPORT)
    env.update(PYTHONPATH=os.pathsep.join([str(hook), env["PYTHONPATH"]]))
    out = subprocess.run([sys.executable, "-m", "mggcn", "report", "m.jsonl", "--out", "r"], capture_output=True,
                         text=True, timeout=120, env=env, cwd=tmp_path)
    assert (out.returncode, out.stderr.splitlines()) == (130, ["mggcn: interrupted"]), (out.returncode, out.stderr)


def test_sigterm_as_a_finished_command_exits_leaves_its_status(tmp_path):
    """A signal in the interpreter's last teardown, where it puts the default handlers back (taken by any thread
    of the process), does not kill a command that has done its work: it ends with its own status."""
    env, _ = _env(tmp_path)
    del env["PYTHONUNBUFFERED"]  # stderr as a user's: line-buffered, the line written as the command ends
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "mggcn", "report", "m.jsonl"], stderr=subprocess.PIPE,
                                text=True, env=env, cwd=tmp_path)
        line = proc.stderr.readline()  # said as the command ends: the signal lands in its exit
        proc.send_signal(signal.SIGTERM)
        assert line.startswith("mggcn report: error: the following arguments are required: --out")
        assert proc.wait(timeout=60) in (2, 130)


@pytest.mark.parametrize("nprocs", [1, 2])
@pytest.mark.parametrize("handler, sig, times", [("callers", "SIGTERM", 1), ("default", "SIGTERM", 1),
                                                 ("callers", "SIGINT", 1), ("callers", "SIGTERM", 2)])
def test_a_signal_that_stopped_mggcn_train_is_passed_on_to_the_callers_handler(tmp_path, nprocs, handler, sig,
                                                                                times):
    """SIGTERM or Ctrl-C during ``mggcn.train``: training stops at the epoch's end and writes its outputs, then the
    signal goes where it would have gone: to the caller's own handler (a service's), called once, after the
    outputs; by default SIGTERM ends the process (which carried on as if nothing had come). A SIGTERM sent twice
    (GNU timeout signals the child, then its group) stops it the same way, where it raised out of the launcher."""
    env, tmp = _env(tmp_path)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""\
        import os, signal, sys
        import mggcn
        if __name__ == "__main__":
            if {handler == "callers"}:
                signal.signal(signal.{sig}, lambda signum, frame: print("handler", signum, os.path.exists("model.pt"),
                                                                        flush=True))
            run = mggcn.train("synthetic:n=300,features=8,classes=3", nprocs={nprocs}, hidden=(8,), epochs=100000,
                              log_every=1, save_model="model.pt")
            print("returned", run.stopped, flush=True)
        """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    try:
        for line in proc.stdout:
            if line.startswith("epoch"):
                break
        for _ in range(times):  # twice: back to back, as GNU timeout signals the child and then its group
            proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    ours = [line for line in out.splitlines() if not line.startswith("epoch")]
    if handler == "callers":
        assert proc.returncode == 0, err
        assert ours[-2:] == [f"handler {getattr(signal, sig).value} True", "returned interrupted"], out
        assert sum(line.startswith("handler") for line in ours) == 1, out  # once, not for each of two signals
    else:
        assert proc.returncode == 128 + signal.SIGTERM, err  # the status a shell shows for a death by SIGTERM
        assert not any(line.startswith("returned") for line in ours), out
    assert (tmp_path / "model.pt").is_file()  # the outputs came first
    assert os.listdir(tmp) == []


def test_a_ctrl_c_pending_when_a_worker_unblocks_its_signals_is_reported_not_a_traceback(tmp_path):
    """The fork server holds SIGINT blocked; a Ctrl-C that came meanwhile arrives the moment a new worker unblocks
    it, before the worker's job begins: it is reported as an interrupt, as one during the job is, not raised through
    multiprocessing's bootstrap as a traceback."""
    import json

    script = textwrap.dedent(f"""
        import os, signal
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})  # before any thread starts, as in the server
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        from mggcn.distributed import launch
        os.kill(os.getpid(), signal.SIGINT)  # pending, as a Ctrl-C the fork server held
        launch._worker_entry(0, 1, {str(tmp_path)!r}, print, ("the job ran",), dict(os.environ), os.getppid())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr and "the job ran" not in out.stdout, out
    assert json.loads((tmp_path / "error.0").read_text())["kind"] == "interrupt"


def test_a_fork_server_this_process_cannot_wait_on_is_started_anew(tmp_path):
    """multiprocessing asks its fork server whether it lives by waiting on it: where the server is not this
    process's child, that fails for good (ChildProcessError), and every later job with workers failed with it.
    Two ways there: the server died and another waiter reaped it (a library's ``os.wait``, SIGCHLD ignored), and a
    process forked from the one that started the server (a ``ProcessPoolExecutor`` worker of a script that trained
    with workers). Either starts a server of its own and trains as the first job did."""
    env, _ = _env(tmp_path)
    script = textwrap.dedent("""
        import os, signal
        import torch
        import mggcn
        from mggcn.distributed.forkserver import server_pid

        def losses():
            run = mggcn.train("builtin:karate", nprocs=2, epochs=2, hidden=(4,), quiet=True)
            return [r["loss"] for r in run.history]

        if __name__ == "__main__":
            torch.set_num_threads(1)  # no OpenMP pool in this process: a forked child may compute
            first = losses()
            pid = server_pid()
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # reaped here, not by multiprocessing
            assert losses() == first, "after the server was reaped"
            child = os.fork()
            if child == 0:
                try:
                    os._exit(0 if losses() == first else 3)
                except BaseException as err:
                    print(f"forked child: {type(err).__name__}: {err}", flush=True)
                    os._exit(4)
            assert os.waitpid(child, 0)[1] == 0, "the forked child failed"
            print("ok")
        """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_an_interrupt_python_only_notes_stops_workers_as_ctrl_c_does(tmp_path):
    """``_thread.interrupt_main()`` (a debugger's or an IDE's stop, a timer thread of the caller's) wakes no system
    call: the launcher, waiting on its workers, handled it only once the job had ended, and dropped it. It now stops
    the job at an epoch's end, as Ctrl-C does, in a job far from its last epoch."""
    env, _ = _env(tmp_path)
    script = textwrap.dedent("""
        import _thread, os, threading, time
        import mggcn

        def interrupt_once_training():
            while not (os.path.exists("m.jsonl") and os.path.getsize("m.jsonl")):
                time.sleep(0.05)
            _thread.interrupt_main()

        if __name__ == "__main__":
            threading.Thread(target=interrupt_once_training, daemon=True).start()
            run = mggcn.train("builtin:karate", nprocs=2, epochs=20000, hidden=(4,), quiet=True, metrics="m.jsonl")
            print(run.stopped, len(run.history))
        """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    stopped, epochs = out.stdout.split()
    assert out.returncode == 0 and stopped == "interrupted" and 0 < int(epochs) < 20000, out.stdout + out.stderr


@pytest.mark.parametrize("encoding", [{"PYTHONUTF8": "0", "LC_ALL": "C"}, {"PYTHONIOENCODING": "ascii"}],
                         ids=["C locale", "PYTHONIOENCODING=ascii"])
def test_a_locale_without_mggcns_characters_writes_them_as_question_marks(tmp_path, encoding):
    """mggcn's lines hold Â, ε and ×: where the streams' encoding lacks them, the ranks failed on their first line
    (UnicodeEncodeError, reported as bad input) and a job in the caller's process raised it. Ranks, the command
    and a job in the caller's process now write "?" for them; the caller's streams keep their error handler."""
    env, _ = _env(tmp_path)
    env = {k: v for k, v in env.items() if k not in ("LC_ALL", "LANG", "PYTHONIOENCODING", "PYTHONUTF8")}
    env.update(encoding)
    out = subprocess.run([sys.executable, "-m", "mggcn", "train", "builtin:karate", "--epochs", "2", "--nprocs", "2"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path, errors="replace")
    assert out.returncode == 0 and "% of ?)" in out.stdout, out.stdout + out.stderr
    script = textwrap.dedent("""
        import sys
        import mggcn

        if __name__ == "__main__":
            before = sys.stdout.errors
            for nprocs in (1, 2):
                mggcn.train("builtin:karate", epochs=2, nprocs=nprocs, hidden=(4,))
            print("handler kept" if sys.stdout.errors == before else f"handler {sys.stdout.errors}")
        """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, errors="replace")
    assert out.returncode == 0 and out.stdout.count("% of ?)") == 2, out.stdout + out.stderr
    assert out.stdout.rstrip().endswith("handler kept")


def test_a_temporary_directory_too_long_for_a_socket_path_still_runs_workers(tmp_path):
    """HPC scratch paths are long: a ``TMPDIR`` beyond about 75 bytes left no room in a Unix socket's 108 for the
    fork server's socket under it, and a job with workers ended in multiprocessing's traceback ("AF_UNIX path too
    long"). Its socket directory now goes in /tmp, as Python 3.14's multiprocessing does, and is removed at exit."""
    env, _ = _env(tmp_path)
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    env["TMPDIR"] = str(deep)
    out = subprocess.run([sys.executable, "-m", "mggcn", "train", "builtin:karate", "--epochs", "2", "--nprocs", "2",
                          "--quiet"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0 and "trained model" in out.stdout, out.stdout + out.stderr
    script = textwrap.dedent("""
        import multiprocessing.util
        import mggcn

        if __name__ == "__main__":
            mggcn.train("builtin:karate", epochs=2, nprocs=2, hidden=(4,), quiet=True)
            print(multiprocessing.util.get_temp_dir())
        """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    socket_dir = out.stdout.strip()
    assert out.returncode == 0 and os.path.dirname(socket_dir) in ("/tmp", "/var/tmp", "/usr/tmp"), out.stderr
    assert not os.path.exists(socket_dir) and os.listdir(deep) == []  # removed at its exit


def test_a_job_directory_that_cannot_take_the_dataset_is_one_line(tmp_path):
    """The dataset the launcher writes for its workers (under TMPDIR) past the file size limit (``ulimit -f``, or a
    full disk) ended in a traceback from deep inside the writer; it is one line naming the directory and the
    system's reason, and the job's directory is removed."""
    import resource

    env, tmp = _env(tmp_path)

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    out = subprocess.run([sys.executable, "-m", "mggcn", "train", "synthetic:n=3000", "--epochs", "2", "--nprocs", "2",
                          "--quiet"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         preexec_fn=small_files)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "cannot write the dataset for the workers" in out.stderr and out.stderr.endswith(": File too large\n")
    assert os.listdir(tmp) == []


def test_out_of_memory_in_one_process_is_one_line_as_in_a_worker(tmp_path):
    """A job in the command's own process (--nprocs 1) that runs out of memory (here under an address-space limit
    2.3 GiB above what the command's imports map, a layer of 2.4 GB and its gradient) ended in torch's traceback,
    where a worker's is one line. It is one line, exit 1. The limit counts from the imports: torch's CUDA builds
    map gigabytes more than its CPU build."""
    import resource

    env, _ = _env(tmp_path)
    imports = subprocess.run([sys.executable, "-c", "import mggcn.tools.cli, mggcn.training.job; "
                              "print(open('/proc/self/status').read())"], env=env, capture_output=True, text=True,
                             timeout=300, check=True).stdout
    mapped = int(next(line.split()[1] for line in imports.splitlines() if line.startswith("VmSize:"))) << 10

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (23 << 30) // 10, resource.getrlimit(resource.RLIMIT_AS)[1]))

    out = subprocess.run([sys.executable, "-m", "mggcn", "train", "synthetic:n=3000", "--hidden", "200000", "--epochs",
                          "1", "--quiet"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         preexec_fn=limited)
    assert out.returncode == 1 and out.stderr.startswith("mggcn train: error: out of memory (") and \
        out.stderr.count("\n") == 1, out.stderr
    assert "enforce fail" not in out.stderr and ".cpp:" not in out.stderr  # torch's C++ check, no help to a user
    # two workers, each under the same limit, with twice the width: a rank's line says the same
    out = subprocess.run([sys.executable, "-m", "mggcn", "train", "synthetic:n=3000", "--hidden", "400000", "--epochs",
                          "1", "--quiet", "--nprocs", "2"], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, preexec_fn=limited)
    assert out.returncode == 1 and re.fullmatch(r"mggcn: rank [01] ran out of memory \(RuntimeError: [^\n]*\); "
                                                r"`mggcn plan` sizes a job before it runs\n", out.stderr), out.stderr
    assert "enforce fail" not in out.stderr



def test_the_fork_server_ends_before_the_launcher_does(tmp_path):
    """No process of a job outlives its launcher (docs/reliability.md): the launcher stopped by SIGTERM lets its
    fork server go and waits for it at its exit (the server went on for its own teardown, torch loaded, after the
    launcher had returned to the shell). Output goes to a file: a pipe's end would wait for the server anyway."""
    env, _ = _env(tmp_path)
    metrics, log = tmp_path / "m.jsonl", open(tmp_path / "log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "mggcn", "train", "synthetic:n=3000", "--nprocs", "2", "--epochs",
                             "100000", "--metrics", str(metrics), "--quiet"], stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "log").read_text()
            time.sleep(0.2)
        servers = [c for c in psutil.Process(proc.pid).children()
                   if "multiprocessing.forkserver" in " ".join(c.cmdline())]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
        lingering = [s.pid for s in servers if process_alive(s)]
    finally:
        log.close()
        if proc.poll() is None:
            proc.kill()
    assert len(servers) == 1 and not lingering, (servers, lingering)


def test_sigterm_to_the_process_group_stops_training_at_an_epoch_end_not_with_the_fork_server(tmp_path):
    """A batch system stopping the job sends SIGTERM to its whole process group: the launcher, the fork server, the
    workers. The server must not die of it (it keeps SIGTERM blocked), or the launcher reports "rank N exited with
    status 255" instead of stopping at an epoch's end with status 130."""
    import psutil

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    src = os.path.dirname(os.path.dirname(__import__("mggcn").__file__))
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "mggcn", "train", "synthetic:n=2000,features=8", "--nprocs", "2",
                             "--epochs", "100000", "--log-every", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        for line in proc.stdout:  # the workers train
            if line.lstrip().startswith("epoch"):
                break
        family = psutil.Process(proc.pid).children(recursive=True)
        server = [p for p in family if "forkserver" in " ".join(p.cmdline())]
        assert server, [p.cmdline() for p in family]
        with open(f"/proc/{server[0].pid}/status") as status:
            blocked = int(next(line for line in status if line.startswith("SigBlk:")).split()[1], 16)
        assert blocked & (1 << (signal.SIGTERM - 1)), "the fork server does not block SIGTERM"
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (out[-2000:], err)
    assert "exited with status" not in err and "stopped by a signal after epoch" in out, (out[-2000:], err)


def test_a_job_keeps_the_start_method_the_caller_chose(tmp_path):
    """The other half of test_a_job_leaves_the_global_start_method_unchosen: a start method the caller set before
    the job is still set after it (not put back to "not chosen", which then falls to the platform's fork)."""
    import textwrap

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    src = os.path.dirname(os.path.dirname(__import__("mggcn").__file__))
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import multiprocessing
        import mggcn
        if __name__ == "__main__":
            multiprocessing.set_start_method("spawn")
            mggcn.train("synthetic:n=200,features=4", nprocs=2, hidden=(4,), epochs=1, quiet=True)
            print("after the job:", multiprocessing.get_start_method(allow_none=True))
        """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["after the job: spawn"]


_BIND_LISTENER = """\
import multiprocessing.util as u, os, socket
from mggcn.distributed.forkserver import _socket_directory_that_fits
_socket_directory_that_fits()
path = os.path.join(u.get_temp_dir(), "listener-12345678")  # multiprocessing's name for the server's socket
with socket.socket(socket.AF_UNIX) as s:
    s.bind(path)
print(len(path))
"""


@pytest.mark.parametrize("length", [74, 75, 76, 77])
def test_a_temporary_directory_at_the_socket_path_limit_still_holds_the_servers_socket(tmp_path, length):
    """TMPDIR lengths around the limit: 75 bytes + "/pymp-XXXXXXXX/listener-XXXXXXXX" is 107 bytes (the longest
    path a Unix socket takes), 76 makes 108 (too long: multiprocessing's directory must go to /tmp instead)."""
    base = str(tmp_path)
    if len(base) + 2 > length:
        pytest.skip("pytest's tmp_path is too long for this length")
    tmp = os.path.join(base, "d" * (length - len(base) - 1))
    os.makedirs(tmp)
    assert len(os.fsencode(tmp)) == length
    src = os.path.dirname(os.path.dirname(__import__("mggcn").__file__))
    env = dict(os.environ, TMPDIR=tmp, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _BIND_LISTENER], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) <= 107
