"""Start P local worker processes as one torch.distributed job, and watch them.

The same harness serves ``mggcn train --nprocs P`` and the multi-process tests: the job fails — with the rank and its
error named — as soon as any worker raises or dies (a signal, running out of memory), and the others are stopped
rather than left waiting in a collective; a job that runs past its timeout is stopped too, naming the ranks still
running. Never a bare ``join()``.

Rendezvous goes through a file in a private temporary directory, so no TCP port has to be free. Under ``torchrun``
none of this is used: each process is already a rank.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from mggcn.distributed.context import rank_environment, refuse_together, shutdown
from mggcn.distributed.forkserver import (
    SERVER_BLOCKS,
    let_go_of_the_fork_server,
    start_fork_server,
    start_method_left_alone,
    worker_context,
)
from mggcn.distributed.shm import sweep_outboxes
from mggcn.utils.cleanup import start_cleaner, stop_cleaner
from mggcn.utils.errors import ConfigError, without_source_locations
from mggcn.utils.files import OutputError, atomic_write
from mggcn.utils.launcher import under_torchrun
from mggcn.utils.streams import replace_unwritable_characters
from mggcn.utils.system import (
    Terminated,
    children_wait_passively,
    die_with_parent,
    die_with_process,
    own_process,
    sigterm_as_interrupt,
    working_directory_not_imported,
)

__all__ = ["WorkerError", "WorkerBadInput", "WorkerNonFiniteLoss", "WorkerOutputError", "JobInterrupted",
           "run_workers", "exit_now", "launch", "refuse_unguarded_script", "refuse_script_without_a_file",
           "UNGUARDED_EXIT", "peer_lost"]


class WorkerError(RuntimeError):
    """A worker of a local job failed or hung. ``rank`` is the first failed rank; ``detail`` its traceback;
    ``kind`` what ended it (:func:`_kind_of`: ``"broken_pipe"`` when its own output went away, ``"interrupt"``
    for Ctrl-C, ``"bad_input"`` for bad data or settings, else ``"error"``); ``option`` the setting its error
    concerns (an :class:`~mggcn.utils.errors.InputError`'s, a non-finite loss's ``lr``), and ``reason`` that
    error's own words, with which the message ends: the command line names the setting there by its flag, as it
    does for the same error raised in its own process."""

    def __init__(self, rank: int, message: str, detail: str = "", kind: str = "error", option: str | None = None,
                 reason: str | None = None) -> None:
        super().__init__(f"rank {rank} {message}")
        self.rank, self.detail, self.kind, self.option, self.reason = rank, detail, kind, option, reason
        self.message = message

    def __reduce__(self) -> tuple:  # pickled (a ProcessPoolExecutor's task) and copied with what it was made of
        return type(self), (self.rank, self.message, self.detail, self.kind, self.option, self.reason)

    @staticmethod
    def of_kind(rank: int, message: str, detail: str = "", kind: str = "error", option: str | None = None,
                reason: str | None = None) -> WorkerError:
        """The error of a rank's failure, of the class its ``kind`` says: a worker's bad input is also a
        ``ValueError`` (:class:`WorkerBadInput`), its non-finite loss a ``FloatingPointError``
        (:class:`WorkerNonFiniteLoss`), an output it could not write an ``OSError`` (:class:`WorkerOutputError`),
        as the same errors are when the job runs in the caller's process; one
        ``except`` clause then catches them at any ``nprocs``."""
        cls = {"bad_input": WorkerBadInput, "non_finite": WorkerNonFiniteLoss,
               "output": WorkerOutputError}.get(kind, WorkerError)
        return cls(rank, message, detail, kind, option, reason)


class WorkerBadInput(WorkerError, ValueError):
    """A worker refused its data or settings (a GraphError or ConfigError in its process)."""


class WorkerNonFiniteLoss(WorkerError, FloatingPointError):
    """A worker's loss stopped being finite (a NonFiniteLoss in its process)."""


class WorkerOutputError(WorkerError, OSError):
    """Rank 0 could not write an output (an OutputError in its process, naming the file)."""


def _kind_of(exc: BaseException) -> str:
    """What a worker's exception says of how the job ended (:attr:`WorkerError.kind`), by its type: ``"bad_input"``
    for what the command line reports as bad input (a ``ValueError``: GraphError, ConfigError, found by the rank
    that reads the rows), ``"non_finite"`` for a loss that stopped being finite (a ``FloatingPointError``),
    ``"output"`` for an output that could not be written (an ``OutputError``, naming the file)."""
    if isinstance(exc, BrokenPipeError):
        return "broken_pipe"
    if isinstance(exc, OutputError):
        return "output"
    if isinstance(exc, ValueError):
        return "bad_input"
    if isinstance(exc, FloatingPointError):
        return "non_finite"
    return "interrupt" if isinstance(exc, KeyboardInterrupt) else "error"


def _job_directory() -> str:
    """A new private directory for a job, in the temporary directory (``TMPDIR``) where its path can stand in the
    ``file://`` URL of the ranks' rendezvous: torch cuts the URL's path at ``#`` or ``?`` (separate jobs would
    share one file) and cannot encode a name that is no text; in /tmp otherwise."""
    base = tempfile.gettempdir()
    if not (base.isprintable() and base.isascii() and not any(c in base for c in "#?%;")):
        base = "/tmp"
    return tempfile.mkdtemp(prefix="mggcn-job-", dir=base)


def _worker_entry(rank: int, nprocs: int, workdir: str, fn: Callable[..., Any], args: tuple,
                  environ: dict[str, str], launcher: int) -> None:
    no_memory = _no_memory_mark(workdir, rank)  # named now: naming it after a MemoryError could fail as well
    try:  # from the first line: a Ctrl-C held while the server forked arrives as the signals are unblocked
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, ignored by the fork server, counts here
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SERVER_BLOCKS)  # blocked since the server started (see there)
        own_process()  # the settings a rank makes (threads, allocator) stay in this process
        replace_unwritable_characters()  # its lines hold Â and ε, in whatever locale the launcher runs
        die_with_parent()
        die_with_process(launcher)  # the fork server is the parent: a killed launcher ends it only at its exit
        let_go_of_the_fork_server()
        os.environ.clear()  # the launcher's environment as it is now, not as it was when the fork server started
        os.environ.update(environ)
        os.environ.update({
            "RANK": str(rank), "WORLD_SIZE": str(nprocs), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(nprocs),
            "MGGCN_INIT_METHOD": f"file://{os.path.join(workdir, 'rendezvous')}",
        })
        result = fn(*args)
        shutdown(clean=True)
        atomic_write(os.path.join(workdir, f"result.{rank}"), lambda tmp: _pickle_to(tmp, result))
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent, KeyboardInterrupt included
        try:
            _report_failure(workdir, rank, exc)
        except MemoryError:  # too little memory left to word the report (ulimit -v, --host-memory): a mark instead
            os.close(os.open(no_memory, os.O_WRONLY | os.O_CREAT, 0o600))
        os._exit(1)  # skip atexit handlers that could block on a broken process group
    exit_now(0)


def _report_failure(workdir: str, rank: int, exc: BaseException) -> None:
    option = getattr(exc, "option", None)
    reason = without_source_locations(" ".join(str(exc).split()))  # one line
    report = {"time": time.time(), "error": f"{type(exc).__name__}: {reason}", "reason": reason,
              "option": option if isinstance(option, str) else None, "detail": traceback.format_exc(),
              "kind": _kind_of(exc)}
    atomic_write(os.path.join(workdir, f"error.{rank}"), lambda tmp: _json_to(tmp, report))


def _no_memory_mark(workdir: str, rank: int) -> str:
    """The file a rank makes when it ran out of memory so far that even its error report could not be written."""
    return os.path.join(workdir, f"no-memory.{rank}")


def _pickle_to(path: str, obj: Any) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def _json_to(path: str, obj: Any) -> None:
    with open(path, "w") as f:
        json.dump(obj, f)


def exit_now(status: int) -> None:
    """End the process without interpreter teardown, once its work and outputs are done: destroying gloo's
    C++ state at interpreter exit occasionally aborts ("terminate called without an active exception")."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: the process started without the descriptor (``>&-``)
            stream.flush()
    os._exit(status)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _stop(procs: list[mp.process.BaseProcess], grace_s: float = 3.0) -> None:
    procs = [p for p in procs if p.pid is not None]  # started ones only (a failed start leaves the rest unstarted)
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()


def run_workers(fn: Callable[..., Any], nprocs: int, args: tuple = (), timeout_s: float | None = None,
                grace_s: float = 60.0, settle_s: float = 5.0,
                handoff: Callable[[str], tuple] | None = None) -> list[Any]:
    """Run ``fn(*args)`` in ``nprocs`` spawned processes (ranks 0..P-1) and return their results in rank order.

    ``fn`` must be importable (a module-level function); it joins the job with
    :func:`mggcn.distributed.context.init_distributed`, which reads the environment set here. Raises
    :class:`WorkerError` when a rank raises, dies or, with ``timeout_s``, has not finished in time.

    When a rank fails, its peers usually fail next on the broken connection; the others get ``settle_s`` seconds
    to end by themselves, and the error reported is the root cause (:func:`_root_cause`): the earliest failure
    that is not a peer's lost connection.

    On Ctrl-C or SIGTERM the workers get SIGTERM and ``grace_s`` seconds to stop by themselves (mggcn's workers
    finish their epoch and save a checkpoint); the results are then returned as usual. A second Ctrl-C, or the
    grace running out, stops them at once. Workers that the signal ends before they could stop by themselves (it
    came before training started) raise :class:`JobInterrupted`.

    The private directory of the job is removed when this returns, and, by a small watcher process, when the
    launcher is killed (a killed launcher's workers die with it: :func:`die_with_parent`). ``handoff(directory)``,
    when given, runs once that directory exists, before any worker starts, and returns the workers' ``args``: what
    it writes there (a dataset the workers read) goes with the directory.
    """
    refuse_unguarded_script()
    refuse_script_without_a_file()
    workdir = _job_directory()
    cleaner = start_cleaner(workdir)
    procs: list[mp.process.BaseProcess] = []
    try:
        if handoff is not None:
            args = handoff(workdir)
        context = worker_context(fn)
        start_fork_server(context, cleaner)
        environ = dict(os.environ)
        procs = [context.Process(target=_worker_entry, args=(rank, nprocs, workdir, fn, args, environ, os.getpid()),
                                 name=f"mggcn-rank{rank}") for rank in range(nprocs)]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with sigterm_as_interrupt(sigint=True):  # the launcher's handlers are back before the workers are stopped
            return _run(procs, nprocs, workdir, deadline, timeout_s, grace_s, settle_s)
    finally:
        _stop(procs)
        sweep_outboxes()  # the shared memory of a worker killed before its peers could unlink it
        shutil.rmtree(workdir, ignore_errors=True)
        stop_cleaner(cleaner)


def _run(procs: list, nprocs: int, workdir: str, deadline: float | None, timeout_s: float | None,
         grace_s: float, settle_s: float) -> list[Any]:
    """Start the workers, wait for them (asking them to stop on Ctrl-C or SIGTERM), return their results."""
    interrupted = None
    _start(procs)
    running = dict(enumerate(procs))
    while running:
        try:
            _wait_for_any(running, deadline, timeout_s, procs, workdir, settle_s, interrupted)
        except KeyboardInterrupt as stop:
            sig = signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT
            if interrupted is not None:
                if sig == signal.SIGINT:  # a second Ctrl-C: stop now
                    raise
                continue  # SIGTERM again (`timeout` sends it twice): the workers are stopping already
            # Ctrl-C or SIGTERM: ask the workers to stop (they finish the epoch and checkpoint), give them time
            interrupted = sig
            for p in running.values():
                if p.is_alive():
                    os.kill(p.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            timeout_s = grace_s
    results = []
    for rank in range(nprocs):
        with open(os.path.join(workdir, f"result.{rank}"), "rb") as f:
            results.append(pickle.load(f))  # written by our own worker into our private directory
    return results


def _start(procs: list) -> None:
    with start_method_left_alone(), children_wait_passively(), working_directory_not_imported():
        for p in procs:  # a spawned worker loads torch itself
            p.start()


# Exit status of a spawned worker whose bootstrap re-ran the launching script's top level (no __main__ guard).
UNGUARDED_EXIT = 3


def refuse_unguarded_script() -> None:
    """In a worker that is still importing the launching script (a script that calls mggcn at its top level,
    without ``if __name__ == "__main__":``), end the worker at once, quietly, with :data:`UNGUARDED_EXIT`: the
    launcher then says what to do, once, instead of every worker starting a job of its own and failing with
    multiprocessing's traceback."""
    if getattr(mp.current_process(), "_inheriting", False):
        exit_now(UNGUARDED_EXIT)


def refuse_script_without_a_file() -> None:
    """In the launcher: refuse a main script that was read from stdin (``python - < script.py``), with one line
    saying what to do (:class:`ConfigError` naming ``nprocs``). Each worker starts by running the script that
    started it again, from its file (which is how an unguarded script is caught), and this one has none:
    multiprocessing would print a traceback per worker instead. A daemonic process (a ``multiprocessing.Pool``'s
    worker) may not start workers at all: refused too."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if getattr(main, "__spec__", None) is None and isinstance(path, str) and not os.path.isfile(path):
        raise ConfigError(f"nprocs > 1 needs the script that calls mggcn in a file, and it was read from {path}: "
                          "worker processes start by running that file again (as with torch.multiprocessing); save "
                          "it, put the call to mggcn under `if __name__ == \"__main__\":` and run the file", "nprocs")
    if mp.current_process().daemon:  # multiprocessing's own refusal is an AssertionError from deep inside
        raise ConfigError("nprocs > 1 starts worker processes, and this process is a daemonic one (a worker of a "
                          "multiprocessing.Pool), which may not have children: use nprocs=1 here, or run it in a "
                          "concurrent.futures.ProcessPoolExecutor, whose workers may", "nprocs")


# How long the launcher waits on its workers at a time: a signal Python only notes, waking no system call
# (``_thread.interrupt_main``, as a debugger or an IDE's stop button sends it), is handled between two waits.
_WAIT_SLICE_S = 0.5


def _wait_sentinels(running: dict, deadline: float | None) -> list:
    """The sentinels of the workers in ``running`` that have ended, once one has; [] at the ``deadline``."""
    while True:
        left = _WAIT_SLICE_S if deadline is None else min(_WAIT_SLICE_S, deadline - time.monotonic())
        ready = multiprocessing.connection.wait([p.sentinel for p in running.values()], timeout=max(0.0, left))
        if ready or (deadline is not None and time.monotonic() >= deadline):
            return ready


def _wait_for_any(running: dict, deadline: float | None, timeout_s: float | None, procs, workdir: str,
                  settle_s: float, interrupted: signal.Signals | None) -> None:
    """Wait until some worker ends; drop the finished ones from ``running``; raise on failure or timeout."""
    ready = _wait_sentinels(running, deadline)
    if not ready:
        ranks = ", ".join(str(r) for r in sorted(running))
        raise WorkerError(min(running), f"did not finish within {timeout_s:g} s (still running: ranks {ranks})")
    failed = _reap(running, ready, workdir)
    if not failed:
        return
    # the peers of a failed rank fail next on the lost connection: let them end and report, then pick the cause
    settle = time.monotonic() + settle_s
    while running and time.monotonic() < settle:
        ready = multiprocessing.connection.wait([p.sentinel for p in running.values()],
                                                timeout=max(0.0, settle - time.monotonic()))
        failed.update(_reap(running, ready, workdir))
    if _all_interrupted(failed, interrupted):
        sig = interrupted or signal.SIGINT  # Ctrl-C reached the workers (they share the terminal) first
        raise JobInterrupted(min(failed), f"was stopped by {sig.name} before it could stop by itself")
    # a rank still running may have reported its own error already (its teardown outlasting the settling)
    for rank in [r for r in running if os.path.exists(os.path.join(workdir, f"error.{r}"))]:
        del running[rank]
        failed[rank] = _Failure.of(rank, 1, workdir)
    if running and all(f.peer_lost for f in failed.values()):
        raise _unresponsive(running, failed)
    raise _root_cause(failed)


def _unresponsive(running: dict, failed: dict[int, _Failure]) -> WorkerError:
    """The ranks that failed all lost a peer, and ranks are still running once they have ended: those went silent
    (stopped by SIGSTOP, hung, or slower than the collectives' timeout) and are the cause, not the peers whose
    collectives gave up on them."""
    first = min(failed.values(), key=lambda f: (f.when, f.rank))
    others = f" (still running: ranks {', '.join(map(str, sorted(running)))})" if len(running) > 1 else ""
    return WorkerError(min(running), f"stopped responding (stopped, hung, or slower than the timeout_s= seconds a "
                       f"collective may wait): the other ranks gave up on it{others}; rank {first.rank} "
                       f"{first.message}", first.detail, option="timeout_s")


def _reap(running: dict, ready: list, workdir: str) -> dict[int, _Failure]:
    """Join the ``ready`` workers, drop them from ``running``; their failures by rank."""
    failed = {}
    for rank, p in list(running.items()):
        if p.sentinel in ready:
            p.join()
            del running[rank]
            if p.exitcode != 0:
                failed[rank] = _Failure.of(rank, p.exitcode, workdir)
    return failed


class JobInterrupted(WorkerError):
    """Ctrl-C or SIGTERM ended a worker before it could stop by itself (before training began)."""


# What a rank reports when a PEER failed: a lost connection (gloo, NCCL, the store) or a collective timeout.
_PEER_LOST = re.compile(
    r"connection (reset|closed|refused)|closed by peer|broken pipe|socket (closed|timeout)|timed out|"
    r"connectFullMesh|no route to host|connect timeout|"
    r"DistNetworkError|DistBackendError|ncclRemoteError|communicator was aborted",
    re.IGNORECASE)


def peer_lost(message: str) -> bool:
    """Whether a rank's error ``message`` only says that a peer went away (a lost connection, a collective that
    timed out), not what went wrong."""
    return bool(_PEER_LOST.search(message))


class _Failure:
    """One rank's failure: when, what (its error report, or the signal or status it died of), and whether it only
    says that a peer went away."""

    def __init__(self, rank: int, when: float, message: str, detail: str = "", peer_lost: bool = False,
                 kind: str = "error", option: str | None = None, reason: str | None = None) -> None:
        self.rank, self.when, self.message, self.detail, self.peer_lost = rank, when, message, detail, peer_lost
        self.kind, self.option, self.reason = kind, option, reason

    @classmethod
    def of(cls, rank: int, exitcode: int, workdir: str) -> _Failure:
        path = os.path.join(workdir, f"error.{rank}")
        try:
            with open(path) as f:
                report = json.load(f)
            kind = str(report.get("kind", "error"))
            # a BrokenPipeError of the rank's own output (`| head`), bad input: their own cause, whatever the text says
            lost = peer_lost(report["error"]) and kind not in ("broken_pipe", "bad_input")
            return cls(rank, float(report["time"]), f"failed: {report['error']}", report["detail"], lost, kind,
                       report.get("option"), report.get("reason"))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        try:
            when = os.path.getmtime(_no_memory_mark(workdir, rank))
            return cls(rank, when, "failed: MemoryError: out of memory (too little left to report more)")
        except OSError:
            pass
        if exitcode == UNGUARDED_EXIT:
            return cls(rank, time.time(), "exited before joining the job: it re-ran the top level of the script "
                       "that started it; put the call to mggcn under `if __name__ == \"__main__\":` (workers are "
                       "spawned processes, as with torch.multiprocessing)")
        said = _describe_exit(exitcode)
        if exitcode == -signal.SIGKILL:  # a signal no process can handle: most often the kernel's, memory gone
            said += (" (usually the out-of-memory killer's, or a scheduler's: `mggcn plan` sizes a job's memory, and "
                     "on Linux the kernel's log, `dmesg`, names what it killed)")
        return cls(rank, time.time(), said)


def _interrupted_by(failure: _Failure, sig: signal.Signals | None) -> bool:
    """Whether ``failure`` is a worker ended by the interrupt: Ctrl-C (KeyboardInterrupt) or, once the launcher
    was interrupted (``sig``), the SIGTERM it forwarded or the signal itself."""
    if failure.kind == "interrupt":
        return True
    return sig is not None and failure.message in (_describe_exit(-sig), _describe_exit(-signal.SIGTERM))


def _all_interrupted(failed: dict[int, _Failure], sig: signal.Signals | None) -> bool:
    """Whether the ranks that failed together were all ended by the interrupt (:func:`_interrupted_by`), a peer
    that lost its connection to an interrupted rank counting as one: whichever of them ended first, the job was
    stopped, not failed."""
    stopped = [_interrupted_by(f, sig) for f in failed.values()]
    return any(stopped) and all(s or f.peer_lost for s, f in zip(stopped, failed.values()))


def _root_cause(failed: dict[int, _Failure]) -> WorkerError:
    """The failure to report among ranks that failed together: the earliest one that is not a lost connection to
    a peer (a death by signal writes no report: it counts from when the launcher saw it), else the earliest."""
    causes = [f for f in failed.values() if not f.peer_lost] or list(failed.values())
    first = min(causes, key=lambda f: (f.when, f.rank))
    return WorkerError.of_kind(first.rank, first.message, first.detail, first.kind, first.option, first.reason)


def _refuse_a_group_the_job_would_not_match(rank: int, world: int) -> None:
    """A torch.distributed group the caller made before the job (``mp.spawn`` and ``init_process_group``) is the
    job's where the environment names this process's place in it, as torchrun's variables do; without them each of
    its processes would run a job of its own on the whole graph, without a word, and with other values the job's
    collectives would not match the group's."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    theirs, torchrun = (dist.get_rank(), dist.get_world_size()), under_torchrun()
    if (theirs == (rank, world)) if torchrun else theirs[1] == 1:  # outside torchrun, a group of one is its own
        return
    group = f"this process is rank {theirs[0]} of a torch.distributed group of {theirs[1]} made before the job"
    if torchrun:
        raise ConfigError(f"RANK={rank} and WORLD_SIZE={world}, but {group}: set them to its rank and size", "RANK")
    raise ConfigError(f"{group}, and RANK and WORLD_SIZE are not set: each process would run the job alone on the "
                      "whole graph. Set RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE as torchrun does (the job "
                      "then runs across the group), or call mggcn outside the group", "nprocs")


def launch(fn: Callable[..., Any], job: Any, check: Callable[[Any, int], Any], nprocs: int | None = None,
           grace_s: float = 60.0, on_checked: Callable[[Any, int], None] | None = None,
           share: Callable[[Any, Any, str], Any] | None = None) -> Any:
    """Run the job function ``fn`` on every rank: the one dispatch of ``mggcn train``, ``mggcn predict`` and the API.

    ``check(job, P)`` runs first, in this process, and returns the dataset it opened (so bad input stops the job
    before any worker starts); ``on_checked(dataset, P)`` then may report it. Then:

    * under torchrun (:func:`under_torchrun`): this process is one rank; it dies with its agent
      (:func:`~mggcn.utils.system.die_with_parent`: a killed agent must not leave its workers training on, unnoticed
      by the other nodes), checks the job, joins the others with its check's outcome (a refusal on one node ends
      every rank with it: :func:`~mggcn.distributed.context.refuse_together`), then ``fn(job, dataset)`` with the
      dataset it checked, P torchrun's world size (``nprocs``, when given, must agree);
    * ``nprocs`` 1 (or None): ``fn(job, dataset)`` in this process, reusing the checked dataset;
    * ``nprocs`` P > 1: ``fn(job)`` on P spawned workers (:func:`run_workers`), where ``share(job, dataset,
      directory)``, when given, may hand the checked dataset over through the job's private directory and return
      the job the workers run (so that they read what this process already read or generated, instead of doing it
      P times over); in a worker still importing an unguarded script, nothing is checked: it ends at once
      (:func:`refuse_unguarded_script`).

    Before all of it, the rank variables of the environment must fit together
    (:func:`~mggcn.distributed.context.rank_environment`; :class:`ConfigError` naming the variable).

    Returns this process's result (under torchrun) or rank 0's. Raises :class:`WorkerError` when a worker fails
    (:class:`JobInterrupted` when Ctrl-C or SIGTERM ended the workers before they could stop by themselves).
    """
    rank, world = rank_environment()[:2]  # a stray or broken RANK or WORLD_SIZE: one line, before anything reads it
    _refuse_a_group_the_job_would_not_match(rank, world)
    if under_torchrun():
        return _as_torchrun_rank(fn, job, check, world, nprocs, on_checked)
    nprocs = 1 if nprocs is None else nprocs
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ConfigError(f"nprocs must be an integer of at least 1, got {nprocs!r}", "nprocs")
    if nprocs > 1:
        refuse_unguarded_script()
        refuse_script_without_a_file()  # before the dataset is read
    dataset = check(job, nprocs)
    if on_checked is not None:
        on_checked(dataset, nprocs)
    if nprocs == 1:
        return fn(job, dataset)
    if share is None:
        del dataset
        return run_workers(fn, nprocs, (job,), grace_s=grace_s)[0]
    held = [dataset]  # handed over inside run_workers, then let go of before the workers start
    del dataset

    def handoff(directory: str) -> tuple:
        return (share(job, held.pop(), directory),)

    return run_workers(fn, nprocs, (job,), grace_s=grace_s, handoff=handoff)[0]


def _as_torchrun_rank(fn: Callable[..., Any], job: Any, check: Callable[[Any, int], Any], world: int,
                      nprocs: int | None, on_checked: Callable[[Any, int], None] | None) -> Any:
    """:func:`launch` in a rank torchrun started: the job checked here, every rank told of the others' checks,
    then ``fn(job, dataset)`` with the dataset checked, not read a second time."""
    if nprocs is not None and nprocs != world:
        raise ConfigError(f"nprocs {nprocs} disagrees with torchrun's world size {world}; leave it out", "nprocs")
    die_with_parent()
    try:
        dataset = _checked_as_a_rank(check, job, world)
    except Exception as failure:
        refuse_together(job, failure)
        raise
    refuse_together(job, None)
    if on_checked is not None:
        on_checked(dataset, world)
    return fn(job, dataset)


def _checked_as_a_rank(check: Callable[[Any, int], Any], job: Any, world: int) -> Any:
    """``check(job, world)`` in a torchrun rank, its refusal of ``nprocs`` (more ranks than vertices) said of the
    world size it is: the command line would name ``--nprocs``, which the user did not give."""
    try:
        return check(job, world)
    except ConfigError as err:
        given = f"nprocs {world} "
        if err.option != "nprocs" or not str(err).startswith(given):
            raise
        raise ConfigError(f"torchrun's world size {world} (WORLD_SIZE) {str(err)[len(given):]}",
                          "WORLD_SIZE") from None
