"""The one atomic writer: a file is written whole or not at all, whoever writes it (outputs, checkpoints, the results
a worker hands its launcher, bench reports)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from mggcn.utils.outputs import follow_umask

__all__ = ["atomic_write"]


def atomic_write(path: str, write: Callable[[str], None], sync: bool = False) -> None:
    """``write(tmp)`` then rename ``tmp`` to ``path``: readers never see half a file. ``path`` gets the mode of any
    new file under the umask (:func:`mggcn.utils.outputs.follow_umask`), not the private one of ``tmp``.

    ``sync``: flush ``tmp`` to the disk before the rename, so that after a crash ``path`` holds either the old or
    the new content, never a torn one (checkpoints).
    """
    parent = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=".mggcn-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    try:
        write(tmp)
        follow_umask(tmp)  # mkstemp made it private; an output gets the mode of any new file
        if sync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
