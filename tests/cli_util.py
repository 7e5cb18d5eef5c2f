"""Running the ``mggcn`` command in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys


def run_cli(*args: str, timeout: float = 240, cwd: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "mggcn", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env)


def popen_cli(*args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "mggcn", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, **kwargs)


# ------------------------------------------------------------------------------------- many commands, one import
#
# ``run_cli_many`` runs a list of ``mggcn`` command lines the way ``python -m mggcn`` does, each in its own
# process, but pays the import of torch once: a fresh server process imports the command and forks one child per
# command line. A child's stdout and stderr go to files; an exception the command lets escape is printed as the
# interpreter prints it (a traceback), and a child killed by a signal is reported as such.


def run_cli_many(commands: list[tuple[list[str], str]], timeout: float = 120) -> list[dict]:
    """Run each ``(argv, cwd)``; returns per command ``{"rc", "signal", "stdout", "stderr", "timed_out"}``."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mggcn-cli-many-") as tmp:
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            json.dump({"commands": commands, "timeout": timeout, "dir": tmp}, f)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        done = subprocess.run([sys.executable, os.path.abspath(__file__), spec], capture_output=True, text=True,
                              env=env, timeout=timeout * len(commands) + 120)
        if done.returncode != 0:
            raise RuntimeError(f"run_cli_many: the server failed: {done.stderr[-2000:]}")
        with open(os.path.join(tmp, "results.json")) as f:
            return json.load(f)


def _serve(spec_path: str) -> None:
    import json
    import runpy
    import signal
    import time
    import traceback

    import mggcn.tools.cli  # noqa: F401  (imported once, before forking)

    with open(spec_path) as f:
        spec = json.load(f)
    results = []
    for k, (argv, cwd) in enumerate(spec["commands"]):
        out, err = (os.path.join(spec["dir"], f"{k}.{s}") for s in ("out", "err"))
        pid = os.fork()
        if pid == 0:  # the child: behave as `python -m mggcn ARGV` in cwd
            code = 1
            try:
                os.chdir(cwd)
                for fd, path in ((1, out), (2, err)):
                    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.dup2(handle, fd)
                    os.close(handle)
                sys.argv = ["mggcn", *argv]
                runpy.run_module("mggcn", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        deadline, status, timed_out = time.monotonic() + spec["timeout"], None, False
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                status, timed_out = os.waitpid(pid, 0)[1], True
            else:
                time.sleep(0.02)
        with open(out, errors="replace") as fo, open(err, errors="replace") as fe:
            results.append({"rc": os.waitstatus_to_exitcode(status), "stdout": fo.read(), "stderr": fe.read(),
                            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                            "timed_out": timed_out})
    with open(os.path.join(spec["dir"], "results.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    _serve(sys.argv[1])
