"""The one writer of files: whoever writes (outputs, checkpoints, the results a worker hands its launcher, bench
reports), a regular file is written whole or not at all, and a file that cannot be written is named.

* A regular file (or a new path) is written under a temporary name beside it and renamed into place: readers, and
  a crash, never see half a file, and a failed write leaves the old file as it was.
* A special file the user named (``/dev/null``, ``/dev/stdout``, a FIFO, a terminal) is written to directly, never
  renamed over: as root the rename would replace the device node itself with a regular file. So is any existing name
  under ``/proc``, or an open descriptor's name (``/dev/stdout`` redirected to a file). A FIFO that no process reads
  is refused at once instead of blocking the run.
* A link to a regular file stays a link: the file it points to is replaced.
* Any failure (disk full, an I/O error, a reader that went away, a read-only or missing directory) raises
  :class:`OutputError`, whose one line names the file and the system's reason (``No space left on device``).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from mggcn.utils.errors import ConfigError
from mggcn.utils.outputs import follow_umask

try:
    import fcntl
except ImportError:  # Windows: no advisory locks
    fcntl = None

__all__ = ["HELD_MESSAGE", "LINK_LOOP", "OutputError", "atomic_write", "check_not_held", "check_writable",
           "is_special", "link_to_nothing", "open_output", "resolve_links", "same_file", "name_limit", "clipped",
           "write_error", "write_failure", "write_output", "written_in_place"]

LINK_LOOP = "a link that leads back to itself (a loop of symbolic links)"


class OutputError(OSError):
    """An output that could not be written. ``str(err)`` is one line: the file, then the reason; ``filename``
    and ``errno`` are those of the failure. The command line prints it and exits 1 (the run failed)."""

    def __init__(self, path: str, reason: str, code: int | None = None) -> None:
        super().__init__(code, reason, path)

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def write_error(path: str, err: OSError, doing: str = "cannot write") -> OutputError:
    """``err`` (a write of ``path`` that failed) as an :class:`OutputError`: ``path: doing: why``, in the system's
    words (:func:`write_failure`); one already is returned as it is."""
    if isinstance(err, OutputError):
        return err
    return OutputError(path, f"{doing}: {write_failure(err, os.path.dirname(os.path.abspath(path)))}", err.errno)


def write_failure(err: OSError, directory: str | os.PathLike) -> str:
    """Why a write into ``directory`` failed, in the system's words: numpy's ``tofile`` reports a short write without
    an errno ("800000 requested and 16384 written"), which on a file system with no space left is that."""
    if err.strerror:
        return err.strerror
    try:
        full = os.statvfs(directory).f_bavail == 0
    except OSError:
        full = False
    return os.strerror(errno.ENOSPC) if full else str(err) or type(err).__name__


def is_special(path: str | os.PathLike) -> bool:
    """Whether ``path`` (followed through links) exists and is neither a regular file nor a directory: a device,
    a FIFO, a socket, a terminal."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def resolve_links(*paths: str | os.PathLike) -> list[Path] | None:
    """``paths``, absolute, with every symbolic link followed; None where the links of one of them loop
    (:data:`LINK_LOOP`). The loop is asked of the system: ``Path.resolve`` raises RuntimeError for one before
    Python 3.13, and from 3.13 returns the path as it is."""
    if any(_loops(p) for p in paths):
        return None
    try:
        return [Path(p).resolve() for p in paths]
    except (OSError, RuntimeError):
        return None


def _loops(path: str | os.PathLike) -> bool:
    try:
        os.stat(path)
    except OSError as err:
        return err.errno == errno.ELOOP
    except ValueError:  # a NUL in the name: no loop, the caller's open says what is wrong
        return False
    return False


def link_to_nothing(path: str | os.PathLike) -> str | None:
    """Why nothing can be made at ``path``, said of the nearest of it and its ancestors that is there as a name:
    a link that loops (:data:`LINK_LOOP`) or leads to nothing; None where that one is no such link."""
    near = os.path.abspath(path)
    while not os.path.lexists(near) and os.path.dirname(near) != near:
        near = os.path.dirname(near)
    if not os.path.islink(near) or os.path.exists(near):
        return None
    return f"{near} is {LINK_LOOP}" if _loops(near) else f"{near} is a link to {os.readlink(near)}, which does " \
        "not exist"


def same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file (links and other spellings followed); where one is not there yet,
    whether they resolve to the same name, the file it will be."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)


_DESCRIPTOR_LINK = re.compile(r"/dev/(stdin|stdout|stderr|fd/\d+)|/proc/(self|thread-self|\d+)(/task/\d+)?/fd/\d+")


def written_in_place(path: str) -> bool:
    """Whether ``path`` is written where it is, not replaced: a special file, an existing name under ``/proc``, or
    an open descriptor's name (``/dev/stdout``, ``/dev/fd/N``: redirected to a file, a link to it through
    ``/proc/self/fd``; replacing the file would leave the process's stdout writing to a deleted one). A regular
    file elsewhere under ``/dev`` (``/dev/shm``, a tmpfs) is replaced as any other."""
    if is_special(path):
        return True
    name = os.path.abspath(path)
    return os.path.exists(path) and (name.startswith("/proc/") or _DESCRIPTOR_LINK.fullmatch(name) is not None)


def open_in_place(path: str, mode: str) -> IO[Any]:
    """``path``, written where it is, opened for ``mode``. Where it is the very file this process's stdout or stderr
    writes (``--out /dev/stdout > file``), through that descriptor, whose offset the lines printed share: a file
    opened anew would have its own, and the two would write over each other. What Python's own streams hold is
    written out first, so the file keeps the order of the writes."""
    import sys

    try:
        here = os.stat(path)
    except (OSError, ValueError):
        here = None
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        try:
            same = here is not None and stat.S_ISREG(here.st_mode) and os.path.samestat(here, os.fstat(fd))
        except OSError:  # no such descriptor (a daemon's)
            same = False
        if same:
            if stream is not None:
                stream.flush()
            return os.fdopen(os.dup(fd), mode.replace("a", "w"))  # no O_TRUNC, no seek: at the shared offset
    return open(path, mode)  # noqa: SIM115 - the caller closes it


def _check_reader(path: str) -> None:
    """A FIFO must have a reader now: opening it for writing would otherwise block until one comes."""
    try:
        fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return  # not there yet: a regular file will be made
    if not fifo:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ENXIO:
            raise OutputError(path, "a FIFO that no process is reading (start its reader first)", err.errno) from None
        raise write_error(path, err) from None
    os.close(fd)


def name_limit(directory: str | os.PathLike) -> int:
    """The longest name, in bytes, a file in ``directory`` may have (255 on most file systems)."""
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def clipped(path: str | os.PathLike, keep: int = 100) -> str:
    """``path`` as a message shows it: whole, or when longer than ``keep`` characters its start and its end."""
    text = os.fsdecode(path)
    return text if len(text) <= keep else f"{text[:keep // 2]}...{text[-(keep // 2):]}"


def check_writable(option: str, path: str, directory: str) -> None:
    """``directory`` takes a new file (tried, not guessed from permission bits, which root ignores), or
    :class:`~mggcn.utils.errors.ConfigError` naming ``option`` and ``path``."""
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".mggcn-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(f"{option} {path}: cannot write in {directory} ({err.strerror})", option) from None


def atomic_write(path: str, write: Callable[[str], None], sync: bool = False) -> None:
    """``write(tmp)`` then rename ``tmp`` to ``path``: readers never see half a file. ``path`` gets the mode of any
    new file under the umask (:func:`mggcn.utils.outputs.follow_umask`), not the private one of ``tmp``. A special
    file, a name under ``/proc`` or ``/dev/stdout`` (:func:`written_in_place`), is given to ``write`` itself.

    ``sync``: flush ``tmp`` to the disk before the rename, so that after a crash ``path`` holds either the old or
    the new content, never a torn one (checkpoints).

    Raises:
        OutputError: the file could not be written (naming ``path`` and why); nothing is left of the attempt.
    """
    path = os.fspath(path)
    if written_in_place(path):
        _check_reader(path)
        try:
            write(path)
        except Exception as err:
            if _os_error(err) is None:
                raise
            raise write_error(path, _os_error(err)) from None
        return
    target = os.path.realpath(path)  # a link stays a link: the file it points to is replaced
    parent = os.path.dirname(target)
    _remove_abandoned(parent)
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=_TEMPORARY, suffix=os.path.splitext(path)[1])
    except OSError as err:
        raise write_error(path, err, f"cannot write in {parent}") from None
    if not _LOCKS:  # Windows: a file open here could not be renamed or removed
        os.close(fd)
    try:
        if _LOCKS:
            _lock(fd, block=True)  # held while the file is written: a process killed meanwhile lets go of it
        write(tmp)
        follow_umask(tmp)  # mkstemp made it private; an output gets the mode of any new file
        if sync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(err, Exception) and _os_error(err) is not None:
            raise write_error(path, _os_error(err)) from None
        raise
    finally:
        if _LOCKS:
            os.close(fd)


_TEMPORARY = ".mggcn-tmp-"  # the prefix of atomic_write's temporary files, which mkstemp ends with 8 characters
_TEMPORARY_NAME = re.compile(r"\.mggcn-tmp-[a-z0-9_]{8}(\.[^.]*)?")
# A temporary file unchanged this long, that no process holds locked, was left by a writer killed mid-write. An
# hour: where locks are only local (some NFS mounts), a live writer on another host holds none visible here.
ABANDONED_S = 3600.0
_LOCKS = fcntl is not None  # no advisory locks (Windows): nothing tells a live writer's file from a dead one's


def _lock(fd: int, block: bool) -> bool:
    """An exclusive advisory lock on ``fd`` (waiting for it with ``block``); whether it was taken. On a file system
    without such locks a writer goes on unlocked and a sweeper takes nothing."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except BlockingIOError:  # a live writer holds it
        return False
    except OSError:
        return block
    return True


HELD_MESSAGE = "another process is writing it (two runs given one file?): give each run a file of its own"


def check_not_held(option: str, path: str) -> None:
    """:class:`~mggcn.utils.errors.ConfigError` naming ``option`` and ``path`` when a regular file there is being
    written by another process (a log it holds locked, :func:`open_output`): said before a run, not at its first
    line, after its setup."""
    try:
        if not _LOCKS or not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO's open would wait for its reader
            return
        fd = os.open(path, os.O_RDONLY)  # a local flock takes it (one may write none); NFS's refuses it, below
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # a live writer holds it
        raise ConfigError(f"{option} {path}: {HELD_MESSAGE}", option) from None
    except OSError:  # no such locks here (NFS wants the file open for writing, some file systems have none):
        pass  # nothing to tell, as the writer then writes unlocked
    finally:
        os.close(fd)  # and the lock with it


def _remove_abandoned(directory: str) -> None:
    """Remove the temporary files of :func:`atomic_write` in ``directory`` whose writer was killed mid-write (SIGKILL,
    out of memory): as large as the output (a checkpoint) and otherwise there for ever, one more per kill. A file
    is abandoned when it has mkstemp's name of :data:`_TEMPORARY`, no process holds its lock and it has not changed
    for :data:`ABANDONED_S` seconds (a writer takes the lock the moment it makes the file)."""
    if not _LOCKS:
        return
    try:
        entries = [e for e in os.scandir(directory) if _TEMPORARY_NAME.fullmatch(e.name)]
    except OSError:
        return
    now = time.time()
    for entry in entries:
        try:
            if not entry.is_file(follow_symlinks=False) or now - entry.stat().st_mtime < ABANDONED_S:
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if _lock(fd, block=False):
                os.unlink(entry.path)
        except OSError:
            pass
        finally:
            os.close(fd)


def _os_error(err: BaseException) -> OSError | None:
    """The OSError behind ``err``, if any: ``torch.save`` reports a write that failed (a full disk) as a RuntimeError
    of its own, raised while handling the OSError."""
    seen: BaseException | None = err
    while seen is not None and not isinstance(seen, OSError):
        seen = seen.__cause__ or seen.__context__
    return seen


def write_output(path: str, write: Callable[[IO[Any]], None], text: bool = False, sync: bool = False) -> None:
    """``write(f)`` into an open file ``f`` (binary, or ``text``), whole or not at all (:func:`atomic_write`): the
    form for writers that take a file object (``np.save``, ``torch.save``, ``json.dump``), which then never see, or
    change, the file's name (``np.save`` adds ``.npy`` to a name without it)."""

    def into(target: str) -> None:
        # a regular file reached in place (/dev/stdout redirected to it) is appended to, not emptied under its writer
        in_place = target == path and written_in_place(path)
        mode = ("a" if in_place and os.path.isfile(path) else "w") + ("" if text else "b")
        with open_in_place(target, mode) if in_place else open(target, mode) as f:
            # a pipe or a device cannot seek: writers that would (np.save on a real file) stream instead
            write(f if text or target != path or not written_in_place(path) else _Stream(f))

    atomic_write(path, into, sync)


class _Stream:
    """Only ``write`` and ``flush`` of a binary file: what a writer may do with a FIFO or a device."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f

    def write(self, data: bytes) -> int:
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()


class _OutputStream:
    """A text file written as it goes (a log), whose every failure names it (:class:`OutputError`)."""

    def __init__(self, path: str) -> None:
        self.path, self._broken = path, False
        _check_reader(path)
        try:
            # closed by close(); emptied once it is this run's
            self._file = open_in_place(path, "a") if written_in_place(path) else open(path, "a")  # noqa: SIM115
        except OSError as err:
            raise write_error(path, err) from None
        # a regular file is cut back to what the last flush wrote whole when a write fails (a full disk): it never
        # ends in part of a line; a pipe or a device cannot be cut
        self._fd = os.dup(self._file.fileno()) if stat.S_ISREG(os.fstat(self._file.fileno()).st_mode) else None
        if self._fd is not None and not written_in_place(path):  # a file reached in place (/dev/stdout) goes on
            self._hold()
            self._file.truncate(0)
        self._whole = 0 if self._fd is None else os.lseek(self._fd, 0, os.SEEK_END)  # never cut below this

    def _hold(self) -> None:
        """Lock the file for this run: another run writing the same file (two jobs given one path) would interleave
        its lines with this one's, torn; it is refused instead, before the file is emptied."""
        if fcntl is None:
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            os.close(self._fd)
            raise OutputError(self.path, HELD_MESSAGE) from None
        except OSError:  # a file system without locks: written unlocked
            pass

    def _do(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except OSError as err:
            self._broken = True
            self._cut()
            raise write_error(self.path, err) from None

    def write(self, text: str) -> None:
        self._do(lambda: self._file.write(text))

    def writelines(self, lines: Any) -> None:
        self._do(lambda: self._file.writelines(lines))

    def flush(self) -> None:
        """Write out what was written so far: a whole number of lines, which a later failure does not cut into."""
        self._do(self._file.flush)
        if self._fd is not None:
            self._whole = os.lseek(self._fd, 0, os.SEEK_CUR)

    def _cut(self) -> None:
        """After a failed write: close (what the buffer still holds may land in part), then cut the file back to the
        last flush."""
        try:
            self._file.close()
        except OSError:
            pass
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, self._whole)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Close, raising a failure to write what is left; after a failure already raised, quietly (the error is
        said once, and what was not written is lost either way)."""
        if not self._broken:
            self._do(self._file.close)
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            return
        self._cut()


def open_output(path: str) -> _OutputStream:
    """``path`` opened for writing text as it goes (the ``--metrics`` log: each epoch's line lands when it is
    written, to be followed with ``tail -f``); a FIFO must have its reader; failures raise :class:`OutputError`."""
    return _OutputStream(os.fspath(path))
