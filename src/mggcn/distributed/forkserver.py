"""mggcn's own fork server, from which the launcher forks its local workers.

A worker forked from a fork server starts in milliseconds, torch already imported, instead of paying torch's import
itself; and like spawn, unlike fork, it inherits none of the launcher's threads, CUDA context or memory. The server
is mggcn's alone (a :class:`multiprocessing.forkserver.ForkServer` of its own, not multiprocessing's one per
process): it starts with Ctrl-C and SIGTERM blocked and OpenMP's threads asleep (:func:`start_fork_server`), and
preloads torch and the job's module; a caller's own processes started with
``multiprocessing.get_context("forkserver")`` come from multiprocessing's server, with the caller's settings, and
never inherit those (their ``terminate()`` would do nothing, a ``Pool`` would hang on its exit).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import multiprocessing.util
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

from mggcn.utils.errors import ConfigError
from mggcn.utils.system import children_wait_passively, working_directory_not_imported

__all__ = ["worker_context", "start_fork_server", "start_method_left_alone", "let_go_of_the_fork_server",
           "SERVER_BLOCKS", "server_pid"]

# The signals the fork server starts with blocked (:func:`start_fork_server`), which each worker unblocks.
SERVER_BLOCKS = {signal.SIGINT, signal.SIGTERM}

_SERVER = multiprocessing.forkserver.ForkServer()


class _ThroughOurServer:
    """multiprocessing's ``forkserver`` module as the standard ``Popen._launch`` sees it, but reaching mggcn's
    server: that method finds the server through its module's global ``forkserver``, whose functions of the server
    (``connect_to_new_process``, ``ensure_running``, ...) are bound methods of its one ``_forkserver``. Each of
    those is taken from mggcn's server instead (the same method of its own instance: on Python 3.14 the client
    authenticates with the key of the server it connects to); the module's other names are its own."""

    def __getattr__(self, name: str) -> Any:
        found = getattr(multiprocessing.forkserver, name)
        if getattr(found, "__self__", None) is multiprocessing.forkserver._forkserver:
            return getattr(_SERVER, name)
        return found


def _through_our_server(method: types.FunctionType) -> types.FunctionType:
    """``method`` (the standard library's own, of this Python) with ``forkserver`` meaning :class:`_ThroughOurServer`
    in its globals: the launch stays exactly the standard library's, whatever its version."""
    scope = dict(method.__globals__, forkserver=_ThroughOurServer())
    return types.FunctionType(method.__code__, scope, method.__name__, method.__defaults__, method.__closure__)


if hasattr(mp.context, "ForkServerContext"):  # not on Windows, whose multiprocessing has no fork server
    import multiprocessing.popen_forkserver

    class _Popen(multiprocessing.popen_forkserver.Popen):
        _launch = _through_our_server(multiprocessing.popen_forkserver.Popen._launch)

    class _Process(mp.context.ForkServerProcess):  # at module level: a child unpickles it by name
        @staticmethod
        def _Popen(process_obj: Any) -> _Popen:
            return _Popen(process_obj)

    class _Context(mp.context.ForkServerContext):
        Process = _Process  # type: ignore[assignment]


def worker_context(fn: Callable[..., Any]) -> mp.context.BaseContext:
    """The context whose processes are forked from mggcn's fork server: a fresh interpreter, started by this
    process's first job, that imports torch, scipy and the module of the job's function once (a process that runs
    many jobs, a notebook or the tests, pays torch's import once). Where there is no fork server (Windows), workers
    are spawned."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    module = getattr(fn, "__module__", None)
    job = [module] if module and module not in ("__main__", "__mp_main__") else []  # never re-run a script there
    _SERVER.set_forkserver_preload(["torch", "scipy.sparse", *job])  # no effect once the server runs
    return _Context()


def server_pid() -> int | None:
    """The pid of mggcn's fork server, None before it started."""
    return _SERVER._forkserver_pid


@contextlib.contextmanager
def _signals_held_back() -> Iterator[None]:
    """In the main thread: a signal of :data:`SERVER_BLOCKS` during the block is noted instead of handled, then
    raised again after it (with the handler it would have met); elsewhere, nothing (only the main thread handles
    signals in Python)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: noted.append(signum)) for sig in SERVER_BLOCKS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
    for sig in dict.fromkeys(noted):
        signal.raise_signal(sig)


def start_fork_server(context: mp.context.BaseContext, cleaner: subprocess.Popen | None) -> None:
    """Start the fork server (if it does not run yet) with Ctrl-C blocked: it shares the terminal's process group, and
    a Ctrl-C while it imports torch would print its traceback beside the launcher's one line. A blocked signal stays
    blocked across fork and exec, so a Ctrl-C waits in the server until it ignores SIGINT by itself once its imports
    are done (which discards it); the workers unblock it and take the default handler back. The launcher blocks it
    only while the server process starts (a fork and an exec), and a Ctrl-C in that moment stays pending, reaching
    the launcher once it unblocks: blocked, never ignored, so no Ctrl-C is lost. The mask is this thread's, and the
    kernel hands a process's signal to any thread that does not block it (a library's worker thread), so the main
    thread also holds its Python handler back meanwhile: a Ctrl-C that arrives that way is raised again once the
    server runs, never in the middle of its start.

    SIGTERM is blocked and held back the same way, and stays blocked in the server (which never handles it, as the
    resource tracker ignores it): sent to the whole process group (``kill -TERM -PGID``, a batch system or service
    manager stopping the job), it would end the server, and its workers with it before they could finish their
    epoch and checkpoint, each one reported as "exited with status 255" (multiprocessing's words for a worker whose
    server vanished). The server still ends with this process (its end of the pipe closes).

    The server's socket lies in multiprocessing's temporary directory of this process (``pymp-*``), removed at its
    exit; the ``cleaner`` removes it should this process be killed."""
    if context.get_start_method() != "forkserver":
        return
    _socket_directory_that_fits()
    # the resource tracker first: starting it unblocks SIGINT and SIGTERM (and would let them reach the server)
    with working_directory_not_imported(server=True):
        multiprocessing.resource_tracker.ensure_running()
    with _signals_held_back():
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, SERVER_BLOCKS)  # this thread's: the one that forks
        try:
            with start_method_left_alone(), children_wait_passively(), working_directory_not_imported(server=True):
                _ensure_server()  # the server loads torch for the workers
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    if _Exit.pid != os.getpid():  # once per process (a process forked from this one starts its own server)
        _Exit.pid = os.getpid()
        atexit.register(_stop_server)
    if cleaner is not None:
        try:
            cleaner.stdin.write(f"{multiprocessing.util.get_temp_dir()}\n".encode())
            cleaner.stdin.flush()
        except OSError:
            pass  # the cleaner is gone: the directory goes at this process's exit all the same


class _Exit:
    pid = 0  # of the process that registered _stop_server (one forked from it inherits the handler, not the server)


_SERVER_EXIT_S = 5.0  # how long the process's exit waits for the server to end by itself


def _stop_server() -> None:
    """At this process's exit: close its end of the server's pipe (the server then ends, as it would once this
    process is gone) and wait for it, so that no process of the job outlives the launcher; one that has not ended
    within :data:`_SERVER_EXIT_S` (its interpreter's teardown, torch loaded) is killed, its workers long done."""
    pid, fd = _SERVER._forkserver_pid, _SERVER._forkserver_alive_fd
    if pid is None or os.getpid() != _Exit.pid:
        return
    try:
        if fd is not None:
            os.close(fd)
        _SERVER._forkserver_alive_fd = None
        deadline = time.monotonic() + _SERVER_EXIT_S
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.01)
    except OSError:  # ChildProcessError included: reaped by another waiter, or gone
        pass
    _SERVER._forkserver_pid = None


# The longest path a Unix socket may have (sun_path, 108 bytes with its NUL), and what multiprocessing adds to its
# temporary directory's for the fork server's socket: "/pymp-XXXXXXXX" then "/listener-XXXXXXXX"
_SOCKET_PATH_MAX = 107
_SOCKET_PATH_ADDED = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def _socket_directory_that_fits() -> None:
    """Where ``TMPDIR`` is too long to hold the fork server's socket (HPC scratch paths often are), multiprocessing's
    temporary directory of this process goes in the system's own one (``/tmp``), as Python 3.14's multiprocessing
    does by itself; multiprocessing removes it at exit. One that was made already, too long, is said in one line."""
    config = mp.process.current_process()._config
    made = config.get("tempdir")
    if made is not None:
        if len(os.fsencode(made)) + len("/listener-XXXXXXXX") > _SOCKET_PATH_MAX:
            raise ConfigError(f"TMPDIR: multiprocessing's temporary directory {made} is too long a path for the fork "
                              f"server's socket ({_SOCKET_PATH_MAX} bytes): set TMPDIR to a shorter directory",
                              "TMPDIR")
        return
    if len(os.fsencode(tempfile.gettempdir())) + _SOCKET_PATH_ADDED <= _SOCKET_PATH_MAX:
        return
    for base in ("/tmp", "/var/tmp", "/usr/tmp"):
        if os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            made = tempfile.mkdtemp(prefix="pymp-", dir=base)
            multiprocessing.util.Finalize(None, shutil.rmtree, args=(made, True), exitpriority=-100)
            config["tempdir"] = made
            return
    raise ConfigError(f"TMPDIR {tempfile.gettempdir()} is too long a path for the fork server's socket "
                      f"({_SOCKET_PATH_MAX} bytes with what is added to it), and /tmp cannot be written: set TMPDIR "
                      "to a shorter directory", "TMPDIR")


def _ensure_server() -> None:
    """The fork server running, started anew where the one this process knows of is not its child: multiprocessing
    asks a server whether it lives by waiting on it, which fails for good (``ChildProcessError``) in a process
    forked from the one that started it (a ``ProcessPoolExecutor`` worker of a script that trained), or once
    another waiter reaped the server after it died (SIGCHLD ignored, a library's ``os.wait``)."""
    try:
        _SERVER.ensure_running()
    except ChildProcessError:
        if _SERVER._forkserver_alive_fd is not None:
            try:  # a forked copy of the parent's end of the server's pipe, or the end of a server that is gone
                os.close(_SERVER._forkserver_alive_fd)
            except OSError:
                pass
        _SERVER._forkserver_alive_fd = _SERVER._forkserver_address = _SERVER._forkserver_pid = None
        _SERVER.ensure_running()


@contextlib.contextmanager
def start_method_left_alone() -> Iterator[None]:
    """Start the fork server or workers without choosing the process's start method: multiprocessing, preparing
    them, reads the global start method, which fixes it at the platform's default, and the caller's own
    ``multiprocessing.set_start_method`` would then fail ("context has already been set"). The library uses its
    own context (:func:`worker_context`); the global one is left unchosen when it was."""
    unset = mp.get_start_method(allow_none=True) is None
    try:
        yield
    finally:
        if unset:
            mp.set_start_method(None, force=True)  # back to "not chosen yet"


def let_go_of_the_fork_server() -> None:
    """A worker forked by the fork server holds a copy of the launcher's end of the pipe by which the server learns
    that the launcher is gone (multiprocessing's module-level server is the one the child's bootstrap filled in).
    Closing it lets a killed launcher end the server, and the server's end ends its workers; else server and workers
    would wait on each other."""
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None
