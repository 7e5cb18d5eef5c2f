"""Running the ``mggcn`` command as a user would, each command line in a process of its own.

``run_cli`` and ``run_cli_many`` run a command line the way ``python -m mggcn`` does, in a process of its own, but
pay the import of torch once per test session: a server process (started at the first call, ended with the
session) imports the command and what its commands import when they run (torch, scipy, the training and prediction
code), then forks one child per command line. A child's stdout and stderr go to files; an exception the command
lets escape is printed as the interpreter prints it (a traceback) and exits 1; the exit handlers run as at an
interpreter's exit; a child killed by a signal is reported as such (a negative return code, as ``subprocess``).

``popen_cli`` (signals, pipes, terminals) and the tests that need a fresh interpreter (what is imported, the
launcher killed) start a real ``python -m mggcn``.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading


def declared_command() -> str:
    """The entry point of the ``mggcn`` command that pyproject.toml declares (``module:function``); on Python 3.10,
    which has no tomllib, as the installed distribution (``pip install -e``) records it from that file."""
    try:
        import tomllib
    except ModuleNotFoundError:
        from importlib.metadata import entry_points

        return next(e.value for e in entry_points(group="console_scripts") if e.name == "mggcn")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["scripts"]["mggcn"]


def popen_cli(*args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "mggcn", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, **kwargs)


def worker_processes(proc: subprocess.Popen) -> list:
    """The ranks a launcher process started (psutil processes, oldest first): forked by its fork server, or
    spawned; not the fork server, the resource tracker or the job directory's watcher."""
    import psutil

    def is_rank(child) -> bool:
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                return True
            return "forkserver" in " ".join(child.parent().cmdline()) and "forkserver" in " ".join(child.cmdline())
        except (psutil.NoSuchProcess, AttributeError):
            return False

    children = psutil.Process(proc.pid).children(recursive=True)
    return sorted((c for c in children if is_rank(c)), key=lambda c: c.create_time())


def run_cli(*args: str, timeout: float = 240, cwd: str | None = None) -> subprocess.CompletedProcess:
    """``python -m mggcn ARGS`` in ``cwd``: its return code, stdout and stderr; raises ``TimeoutExpired`` (the
    command killed) when it runs past ``timeout`` seconds."""
    argv = list(args)
    result = run_cli_many([(argv, cwd or os.getcwd())], timeout=timeout)[0]
    if result["timed_out"]:
        raise subprocess.TimeoutExpired([sys.executable, "-m", "mggcn", *argv], timeout, result["stdout"],
                                        result["stderr"])
    return subprocess.CompletedProcess([sys.executable, "-m", "mggcn", *argv], result["rc"], result["stdout"],
                                       result["stderr"])


def run_cli_many(commands: list[tuple[list[str], str]], timeout: float = 120) -> list[dict]:
    """Run each ``(argv, cwd)`` in turn; per command ``{"rc", "signal", "stdout", "stderr", "timed_out"}``."""
    return [_Client.get().run(argv, cwd, timeout) for argv, cwd in commands]


class _Client:
    """The test session's end of the server: one JSON line per command each way."""

    _lock = threading.Lock()
    _instance: _Client | None = None

    @classmethod
    def get(cls) -> _Client:
        with cls._lock:
            if cls._instance is None or cls._instance.proc.poll() is not None:
                cls._instance = cls()
            return cls._instance

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="mggcn-cli-server-")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), self.dir], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True)
        atexit.register(self.close)

    def run(self, argv: list[str], cwd: str, timeout: float) -> dict:
        request = {"argv": argv, "cwd": cwd, "timeout": timeout, "env": dict(os.environ, PYTHONUNBUFFERED="1")}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        # the server kills a command at its timeout and answers; 120 s more is for the server itself
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout + 120)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.proc.kill()
            raise RuntimeError(f"the mggcn command server did not answer for {argv}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _serve(work_dir: str) -> None:
    import scipy.sparse  # noqa: F401  (imported once, before forking: what the commands import when they run)
    import torch  # noqa: F401

    import mggcn.tools.cli  # noqa: F401
    import mggcn.training.job  # noqa: F401
    import mggcn.training.predict  # noqa: F401

    answers = os.fdopen(os.dup(1), "w")  # the children's fd 1 and 2 go to their files
    for k, line in enumerate(sys.stdin):
        request = json.loads(line)
        out, err = (os.path.join(work_dir, f"{k}.{s}") for s in ("out", "err"))
        result = _run_one(request["argv"], request["cwd"], out, err, request["timeout"], request["env"],
                          answers.fileno())
        for path in (out, err):
            os.unlink(path)
        answers.write(json.dumps(result) + "\n")
        answers.flush()


def _run_one(argv: list[str], cwd: str, out: str, err: str, timeout: float, env: dict[str, str],
             answers_fd: int) -> dict:
    import runpy
    import signal
    import time
    import traceback

    pid = os.fork()
    if pid == 0:  # the child: behave as `python -m mggcn ARGV` in cwd
        code = 1
        try:
            os.close(answers_fd)
            os.environ.clear()  # the test's environment now (a test may have set a variable since the server began)
            os.environ.update(env)
            os.chdir(cwd)
            for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                    (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                handle = os.open(path, flags, 0o600)
                os.dup2(handle, fd)
                os.close(handle)
            sys.argv = ["mggcn", *argv]
            runpy.run_module("mggcn", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    deadline, status, timed_out = time.monotonic() + timeout, None, False
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
        return {"rc": os.waitstatus_to_exitcode(status), "stdout": fo.read(), "stderr": fe.read(),
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, "timed_out": timed_out}


if __name__ == "__main__":
    _serve(sys.argv[1])


def process_alive(process) -> bool:
    """Whether a psutil process runs and is no zombie; one reaped between the two questions is gone."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
