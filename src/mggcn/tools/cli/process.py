"""What the ``mggcn`` program makes sure of before a command runs, as a Unix tool does: the standard streams
exist and every character can be written to them, the working directory exists, and the process may open the
files a job needs. Each failure is one line, never a traceback from deep inside a write or an import."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from mggcn.utils.errors import ConfigError
from mggcn.utils.files import OutputError
from mggcn.utils.streams import replace_unwritable_characters

__all__ = ["prepare_process", "GuardedStdout"]

# File descriptors a job of a few ranks opens (gloo's sockets, the fork server's pipes, the dataset's arrays), at
# least: fewer fail at any of them, in multiprocessing's or torch's words
MIN_OPEN_FILES = 64
_MAX_OPEN_FILES = 1 << 16


def prepare_process() -> None:
    """Run once by the ``mggcn`` program before its command: raises :class:`ConfigError` for what cannot be
    mended (a working directory that was removed, too few files allowed)."""
    for fd in (0, 1, 2):
        _open_on_devnull(fd)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:  # started with the descriptor closed: what is written goes nowhere
            setattr(sys, name, open(1 if name == "stdout" else 2, "w", closefd=False))  # noqa: SIM115
    replace_unwritable_characters()
    sys.stdout = GuardedStdout(sys.stdout)
    try:
        os.getcwd()
    except FileNotFoundError:
        raise ConfigError("the working directory no longer exists (it was removed): cd to another one") from None
    _raise_open_files_limit()


def _open_on_devnull(fd: int) -> None:
    """A standard descriptor the process started without (``>&-``) is opened on /dev/null: otherwise the next file
    opened takes its number, and what is printed lands in that file."""
    try:
        os.fstat(fd)
    except OSError:
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)  # inheritable, as a standard descriptor is
            os.close(null)
        else:
            os.set_inheritable(fd, True)  # os.open's are not: the processes started from this one would lack it


def _raise_open_files_limit() -> None:
    """The soft limit of open files up to the hard one (as far as 65536), as tools that open many do; a hard limit
    below :data:`MIN_OPEN_FILES` is one line naming it."""
    try:
        import resource
    except ImportError:  # Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, _MAX_OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < MIN_OPEN_FILES:
        raise ConfigError(f"this process may open {soft} files (ulimit -n), and a job needs at least "
                          f"{MIN_OPEN_FILES}: raise the limit")


class GuardedStdout:
    """Standard output whose failed write (a full disk, ``>/dev/full``) is an :class:`OutputError` naming it, which
    the command reports in one line; a reader that went away stays ``BrokenPipeError``."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._guarded(self._stream.write, text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    @staticmethod
    def _guarded(action: Callable[..., Any], *args: Any) -> Any:
        try:
            return action(*args)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise OutputError("standard output", f"cannot write: {err.strerror or err}", err.errno) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
