"""Where :func:`mggcn.data.prepared.writer.prepare` writes: ``OUT_DIR`` checked, a partial directory beside it, and
the finished dataset put in ``OUT_DIR``'s place.

The partial directory is held under an advisory lock (``flock`` on the directory) for as long as its process lives,
so a later prepare into the same ``OUT_DIR`` tells a partial directory whose writer was killed (SIGKILL, the OOM
killer: no cleanup ran) from one another prepare is still writing, and removes only the first. Putting it in place
re-checks ``OUT_DIR``, since another process may have written there meanwhile: without ``overwrite`` whatever
appeared is kept and the prepare fails; with it, only what ``--overwrite`` may replace is replaced.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mggcn.data.prepared.reader import MANIFEST
from mggcn.utils.errors import ConfigError, GraphError
from mggcn.utils.files import LINK_LOOP, is_special, link_to_nothing, resolve_links
from mggcn.utils.outputs import follow_umask

__all__ = ["output_dir", "replaceable", "remove_stale", "PartialDir"]

# rename(2) onto something there: a non-empty directory, a file, a directory over a file
_TAKEN = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR)


def output_dir(out_dir: Any, source: Any, overwrite: bool) -> Path:
    """``out_dir`` as an absolute path, where the dataset may go. Replacing (``overwrite``) removes what is there, so
    it is allowed only for what prepare would write: a prepared dataset (its manifest, perhaps damaged) or an
    empty directory; never a file, the working directory an empty path names, or a directory holding the input."""
    if not str(out_dir).strip():
        raise ConfigError("out_dir is empty: give the path of the dataset's directory", "out_dir")
    out = Path(out_dir).absolute()
    if not out.parent.is_dir():
        nothing = link_to_nothing(out.parent)  # a link on the way that loops or leads nowhere, named as such
        if nothing is not None:
            raise GraphError(f"{out}: {nothing}")
        why = "is not a directory" if out.parent.exists() else "does not exist"
        raise GraphError(f"{out}: the parent directory {out.parent} {why}")
    if is_special(out):  # --overwrite would move a device node aside and remove it
        raise GraphError(f"{out}: is a device, FIFO or socket, not a directory; give a path for the dataset's "
                         "directory")
    if not (out.exists() or out.is_symlink()):
        return out
    if not overwrite:
        raise ConfigError(f"{out}: already exists; remove it or allow overwriting it", "overwrite")
    if isinstance(source, (str, os.PathLike)) and os.path.exists(source):
        resolved = resolve_links(out, source)
        if resolved is None:
            raise ConfigError(f"{out}: {LINK_LOOP}", "overwrite")
        real, held = resolved
        if real == held or real in held.parents:
            raise ConfigError(f"{out}: holds the input {source}; write the dataset somewhere else", "overwrite")
    if out.is_symlink() or not out.is_dir():
        raise ConfigError(f"{out}: is not a directory; overwrite=True replaces only a prepared dataset", "overwrite")
    if not replaceable(out):
        raise ConfigError(f"{out}: is not a prepared dataset (no {MANIFEST}); overwrite=True replaces only a prepared "
                          "dataset or an empty directory", "overwrite")
    return out


def replaceable(out: Path) -> bool:
    """Whether ``out`` is what a prepare may replace: a directory (not a link to one) holding a prepared dataset
    (its manifest, perhaps damaged) or nothing."""
    if out.is_symlink() or not out.is_dir():
        return False
    try:
        return (out / MANIFEST).is_file() or not any(out.iterdir())
    except OSError:
        return False


def _lock(path: Path) -> int | None:
    """An exclusive lock on the directory ``path`` (its descriptor, held until closed); None where it is taken, or
    where the file system has no locks (then nothing is ever taken for stale)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_stale(out: Path) -> list[Path]:
    """Remove the partial directories of ``out`` that no live process holds: those of a prepare that was killed."""
    removed = []
    try:
        names = os.listdir(out.parent)
    except OSError:
        return removed
    for name in names:
        if not name.startswith((f".{out.name}.partial-", f".{out.name}.old-")):
            continue
        path = out.parent / name
        fd = _lock(path) if path.is_dir() and not path.is_symlink() else None
        if fd is None:
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
        removed.append(path)
    return removed


class PartialDir:
    """The directory a dataset is written in, beside ``out``, locked while this process lives; :meth:`install` puts
    it in ``out``'s place, :meth:`discard` removes it. ``removed``: stale partial directories removed on the way."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.existed = out.exists() or out.is_symlink()
        self.removed = remove_stale(out)
        # made under a name the stale check skips, and renamed once locked: no moment where another prepare could
        # take it for stale
        fresh = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
        self._fds = [fd for fd in (_lock(fresh),) if fd is not None]
        self.path = fresh.with_name(fresh.name.replace(".new-", ".partial-", 1))
        try:
            os.rename(fresh, self.path)
        except OSError:
            self._unlock()
            shutil.rmtree(fresh, ignore_errors=True)
            raise

    def _unlock(self) -> None:
        while self._fds:
            os.close(self._fds.pop())

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._unlock()

    def install(self, source: Any, overwrite: bool) -> None:
        """Put the finished directory in ``out``'s place. ``out`` is checked again (:func:`output_dir`): what
        appeared there while the dataset was written is kept unless ``overwrite`` may replace it; an existing ``out``
        is moved aside first, put back if the dataset cannot take its place, and removed after."""
        try:
            out = output_dir(self.out, source, overwrite)
        except ConfigError:
            if self.existed:
                raise
            raise _taken(self.out) from None  # not there when this prepare began
        follow_umask(self.path, directory=True)  # mkdtemp made it private; the dataset gets a new directory's mode
        old = None
        if out.exists() or out.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            self._fds += [fd for fd in (_lock(old),) if fd is not None]
            try:
                os.rename(out, old / out.name)
            except OSError:
                os.rmdir(old)
                raise
        try:
            os.rename(self.path, out)  # never over a non-empty directory or a file: rename(2) refuses them
        except OSError as exc:
            if old is not None:
                os.rename(old / out.name, out)
                os.rmdir(old)
            if exc.errno in _TAKEN:
                raise _taken(out) from None
            raise
        finally:
            self._unlock()
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _taken(out: Path) -> ConfigError:
    return ConfigError(f"{out}: was written by another process while this prepare ran; kept as it is: remove it or "
                       "allow overwriting it", "overwrite")
