"""Permissions of the files and directories mggcn writes: they follow the umask, like any file a program creates.

Outputs are written under temporary names and renamed into place (readers never see half a file), and Python's
``tempfile`` creates those private (0600 files, 0700 directories) whatever the umask says. :func:`follow_umask`
gives such an output, before its rename, the mode ``open()`` or ``mkdir()`` would have given it, so that a model,
its predictions, a checkpoint and a prepared dataset written by one run have the same permissions.
"""

from __future__ import annotations

import os
import threading

__all__ = ["current_umask", "follow_umask"]

_lock = threading.Lock()


def current_umask() -> int:
    """This process's umask, read without changing it where ``/proc`` says it (Linux), else set and put back."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike, directory: bool = False) -> None:
    """Give ``path`` the mode a new file (0666) or directory (0777) gets under the umask."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())
