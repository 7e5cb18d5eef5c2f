"""Directories a process makes for itself under TMPDIR, removed however it ends: at an ordinary exit by the process,
and, should it be killed (``kill -9`` included), by a small watcher process waiting on a pipe only this process holds.

Importing this module loads no torch.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["start_cleaner", "stop_cleaner", "private_directory"]

# The process writes further directories it leaves to the cleaner should it be killed, one a line, and "done" when it
# ends by itself (its own exit removes them then, and a fork server it keeps for later jobs still needs its socket).
_CLEANER = """import shutil, sys
said = sys.stdin.buffer.read().decode().splitlines()  # ends when the process closes its end, or dies
shutil.rmtree(sys.argv[1], ignore_errors=True)
if said[-1:] != ["done"]:
    for path in said:
        shutil.rmtree(path, ignore_errors=True)
"""


def start_cleaner(directory: str) -> subprocess.Popen | None:
    """A watcher that removes ``directory`` once this process is gone, however it ends: it waits for the end of a
    pipe only this process holds (None where it cannot start: an ordinary exit removes the directory all the
    same)."""
    try:
        return subprocess.Popen([sys.executable, "-S", "-c", _CLEANER, directory], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def stop_cleaner(cleaner: subprocess.Popen | None) -> None:
    """Tell the watcher this process ends by itself, and wait for it to remove its directory."""
    if cleaner is not None:
        try:
            cleaner.stdin.write(b"done\n")
            cleaner.stdin.close()
        except OSError:
            pass  # the cleaner is gone: nothing to tell it
        try:
            cleaner.wait(10)
        except subprocess.TimeoutExpired:
            cleaner.kill()
            cleaner.wait()


@contextlib.contextmanager
def private_directory(prefix: str) -> Iterator[str]:
    """A new private directory under TMPDIR for the block, removed when it ends, or by the watcher should this
    process be killed inside it."""
    path = tempfile.mkdtemp(prefix=prefix)
    cleaner = start_cleaner(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        stop_cleaner(cleaner)
