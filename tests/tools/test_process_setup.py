"""The ``mggcn`` program in the process it is given, as a Unix tool is: standard output closed, full or of an
encoding without mggcn's characters, few files allowed, a working directory that was removed. Each is one line
(or no trouble at all), never a traceback from deep inside a write or an import."""

import errno
import io
import os
import resource
import subprocess
import sys

import pytest

from mggcn.tools.cli import process as cli_process
from mggcn.utils.errors import ConfigError
from mggcn.utils.files import OutputError

TRAIN = ["train", "builtin:karate", "--nprocs", "2", "--threads", "1", "--epochs", "2"]


def _mggcn(*args: str, env: dict | None = None, shell_prefix: str = "", **kwargs) -> subprocess.CompletedProcess:
    if shell_prefix:
        command = f"{shell_prefix} {sys.executable} -m mggcn " + " ".join(args)
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=180,
                              env={**os.environ, **(env or {})}, **kwargs)
    return subprocess.run([sys.executable, "-m", "mggcn", *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})}, errors="replace", **kwargs)


def _one_line(err: str, *words: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err and all(w in lines[0] for w in words), err


def test_closed_standard_output_runs_the_job_and_says_nothing(tmp_path):
    """`>&-`: the workers' final flush failed on a stdout of None (a traceback per rank), and a file opened next
    would have taken descriptor 1."""
    model = tmp_path / "m.pt"
    done = subprocess.run(["bash", "-c", f"exec {sys.executable} -m mggcn {' '.join(TRAIN)} --save-model {model} >&-"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert model.stat().st_size > 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_standard_output_on_a_full_device_is_one_line():
    done = subprocess.run(["bash", "-c", f"exec {sys.executable} -m mggcn {' '.join(TRAIN)} >/dev/full"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 1
    _one_line(done.stderr, "standard output: cannot write: No space left on device")


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_output_encoding_without_mggcn_s_characters_writes_them_as_question_marks(encoding):
    """The Â of the partition line killed rank 0 (UnicodeEncodeError), the ε of --help printed a traceback."""
    env = {"PYTHONIOENCODING": encoding}
    done = _mggcn(*TRAIN, env=env)
    assert done.returncode == 0 and "Error" not in done.stderr, done.stderr
    said = done.stdout + done.stderr  # read as UTF-8: latin-1's Â is no UTF-8, shown as U+FFFD
    assert "trained model" in done.stdout and ("of ?" if encoding == "ascii" else "of \ufffd") in said
    helped = _mggcn("train", "--help", env=env)
    assert helped.returncode == 0 and "Traceback" not in helped.stderr and "--gin-train-eps" in helped.stdout


def test_too_few_open_files_is_one_line_and_a_low_soft_limit_is_raised():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 64:
        pytest.skip("this machine allows fewer than 64 open files")
    done = _mggcn(*TRAIN, shell_prefix="ulimit -S -n 20;")  # the soft limit only: raised to the hard one
    assert done.returncode == 0, done.stderr
    done = _mggcn(*TRAIN, shell_prefix="ulimit -n 10;")  # the hard one too
    assert done.returncode == 2
    _one_line(done.stderr, "this process may open 10 files (ulimit -n), and a job needs at least 64")


def test_a_removed_working_directory_is_one_line(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    done = _mggcn("prepare", "builtin:karate", "out", shell_prefix=f"cd {gone} && rmdir {gone} &&",
                  env={"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    assert done.returncode == 2
    _one_line(done.stderr, "the working directory no longer exists")


def test_a_standard_descriptor_opened_on_dev_null_is_inherited():
    """`>&-`: descriptor 1, reopened on /dev/null, reaches the processes mggcn starts (the fork server, spawned
    workers), or the first file one of them opens takes number 1."""
    code = ("import subprocess, sys\nfrom mggcn.tools.cli.process import prepare_process\nprepare_process()\n"
            "subprocess.run([sys.executable, '-c', 'import os; os.fstat(1)'], check=True)\n")
    done = subprocess.run(["bash", "-c", f"exec {sys.executable} -c \"$0\" >&-", code], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.parametrize("limit, refused", [(63, True), (64, False)])
def test_the_least_number_of_open_files_a_job_needs_is_64(monkeypatch, limit, refused):
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda which: (limit, limit))
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: None)
    if refused:
        with pytest.raises(ConfigError, match=f"may open {limit} files"):
            cli_process._raise_open_files_limit()
    else:
        cli_process._raise_open_files_limit()


class _Full(io.StringIO):
    def flush(self) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_standard_output_that_fails_at_its_flush_is_named():
    """Buffered (no PYTHONUNBUFFERED, as a user runs it) `mggcn info DIR >/dev/full` fails at the command's last
    flush: one line, not a traceback with status 120."""
    with pytest.raises(OutputError, match="^standard output: cannot write: No space left on device$"):
        cli_process.GuardedStdout(_Full()).flush()
