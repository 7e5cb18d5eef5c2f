"""Start P local worker processes as one torch.distributed job, and watch them.

The same harness serves ``mggcn train --nprocs P`` and the multi-process tests: the job fails — with the rank and its
error named — as soon as any worker raises or dies (a signal, running out of memory), and the others are stopped
rather than left waiting in a collective; a job that runs past its timeout is stopped too, naming the ranks still
running. Never a bare ``join()``.

Rendezvous goes through a file in a private temporary directory, so no TCP port has to be free. Under ``torchrun``
none of this is used: each process is already a rank.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from mggcn.data.graph import ConfigError
from mggcn.distributed.context import shutdown
from mggcn.utils.files import atomic_write
from mggcn.utils.system import die_with_parent, own_process, sigterm_as_interrupt

__all__ = ["WorkerError", "run_workers", "exit_now", "launch", "under_torchrun"]


class WorkerError(RuntimeError):
    """A worker of a local job failed or hung. ``rank`` is the first failed rank; ``detail`` its traceback."""

    def __init__(self, rank: int, message: str, detail: str = "") -> None:
        super().__init__(f"rank {rank} {message}")
        self.rank, self.detail = rank, detail


def _worker_entry(rank: int, nprocs: int, workdir: str, fn: Callable[..., Any], args: tuple) -> None:
    own_process()  # the settings a rank makes (threads, allocator) stay in this process
    die_with_parent()
    os.environ.update({
        "RANK": str(rank), "WORLD_SIZE": str(nprocs), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(nprocs),
        "MGGCN_INIT_METHOD": f"file://{os.path.join(workdir, 'rendezvous')}",
    })
    try:
        result = fn(*args)
        shutdown(clean=True)
        atomic_write(os.path.join(workdir, f"result.{rank}"), lambda tmp: _pickle_to(tmp, result))
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent, KeyboardInterrupt included
        with open(os.path.join(workdir, f"error.{rank}"), "w") as f:
            f.write(f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
        os._exit(1)  # skip atexit handlers that could block on a broken process group
    exit_now(0)


def _pickle_to(path: str, obj: Any) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def exit_now(status: int) -> None:
    """End the process without interpreter teardown, once its work and outputs are done: destroying gloo's
    C++ state at interpreter exit occasionally aborts ("terminate called without an active exception")."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _stop(procs: list[mp.process.BaseProcess], grace_s: float = 3.0) -> None:
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
                grace_s: float = 60.0) -> list[Any]:
    """Run ``fn(*args)`` in ``nprocs`` spawned processes (ranks 0..P-1) and return their results in rank order.

    ``fn`` must be importable (a module-level function); it joins the job with
    :func:`mggcn.distributed.context.init_distributed`, which reads the environment set here. Raises
    :class:`WorkerError` when a rank raises, dies or, with ``timeout_s``, has not finished in time.

    On Ctrl-C or SIGTERM the workers get SIGTERM and ``grace_s`` seconds to stop by themselves (mggcn's workers
    finish their epoch and save a checkpoint); the results are then returned as usual. A second Ctrl-C, or the
    grace running out, stops them at once.
    """
    workdir = tempfile.mkdtemp(prefix="mggcn-job-")
    context = mp.get_context("spawn")
    procs = [context.Process(target=_worker_entry, args=(rank, nprocs, workdir, fn, args), name=f"mggcn-rank{rank}")
             for rank in range(nprocs)]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with sigterm_as_interrupt():
        return _run(procs, nprocs, workdir, deadline, timeout_s, grace_s)


def _run(procs: list, nprocs: int, workdir: str, deadline: float | None, timeout_s: float | None,
         grace_s: float) -> list[Any]:
    try:
        for p in procs:
            p.start()
        running = dict(enumerate(procs))
        interrupted = False
        while running:
            try:
                _wait_for_any(running, deadline, timeout_s, procs, workdir)
            except KeyboardInterrupt:
                if interrupted:
                    raise
                # Ctrl-C or SIGTERM: ask the workers to stop (they finish the epoch and checkpoint), give them time
                interrupted = True
                for p in running.values():
                    if p.is_alive():
                        os.kill(p.pid, signal.SIGTERM)
                deadline = time.monotonic() + grace_s
                timeout_s = grace_s
        results = []
        for rank in range(nprocs):
            with open(os.path.join(workdir, f"result.{rank}"), "rb") as f:
                results.append(pickle.load(f))
        return results
    finally:
        _stop(procs)
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_for_any(running: dict, deadline: float | None, timeout_s: float | None, procs, workdir: str) -> None:
    """Wait until some worker ends; drop the finished ones from ``running``; raise on failure or timeout."""
    wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
    ready = multiprocessing.connection.wait([p.sentinel for p in running.values()], timeout=wait_s)
    if not ready:
        ranks = ", ".join(str(r) for r in sorted(running))
        raise WorkerError(min(running), f"did not finish within {timeout_s:g} s (still running: ranks {ranks})")
    failed = []
    for rank, p in list(running.items()):
        if p.sentinel in ready:
            p.join()
            del running[rank]
            if p.exitcode != 0:
                failed.append(rank)
    if failed:
        raise _first_failure(failed, procs, workdir)


def _first_failure(ranks: list[int], procs: list[mp.process.BaseProcess], workdir: str) -> WorkerError:
    """The root cause among ranks that ended together: a peer of a failed rank fails next, on the broken
    connection, so the earliest error report (or a death by signal, which writes none) wins."""

    def when(rank: int) -> float:
        path = os.path.join(workdir, f"error.{rank}")
        return os.path.getmtime(path) if os.path.exists(path) else float("-inf")

    rank = min(ranks, key=lambda r: (when(r), r))
    return _failure(rank, procs[rank].exitcode or 1, workdir)


def _failure(rank: int, exitcode: int, workdir: str) -> WorkerError:
    path = os.path.join(workdir, f"error.{rank}")
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        return WorkerError(rank, f"failed: {text.splitlines()[0]}", detail=text)
    return WorkerError(rank, _describe_exit(exitcode))


def under_torchrun() -> bool:
    """Whether this process is a rank torchrun started (not one of mggcn's own workers)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MGGCN_INIT_METHOD" not in os.environ)


def launch(fn: Callable[..., Any], job: Any, check: Callable[[Any, int], Any], nprocs: int | None = None,
           grace_s: float = 60.0, torchrun: bool = True, on_checked: Callable[[Any, int], None] | None = None) -> Any:
    """Run the job function ``fn`` on every rank: the one dispatch of ``mggcn train``, ``mggcn predict`` and the API.

    ``check(job, P)`` runs first, in this process, and returns the dataset it opened (so bad input stops the job
    before any worker starts); ``on_checked(dataset, P)`` then may report it. Then:

    * under torchrun (``torchrun=True``): this process is one rank; ``fn(job)``, with P torchrun's world size
      (``nprocs``, when given, must agree);
    * ``nprocs`` 1 (or None): ``fn(job, dataset)`` in this process, reusing the checked dataset;
    * ``nprocs`` P > 1: ``fn(job)`` on P spawned workers (:func:`run_workers`).

    Returns this process's result (under torchrun) or rank 0's. Raises :class:`WorkerError` when a worker fails.
    """
    if torchrun and under_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if nprocs is not None and nprocs != world:
            raise ConfigError(f"nprocs {nprocs} disagrees with torchrun's world size {world}; leave it out",
                              "nprocs")
        dataset = check(job, world)
        if on_checked is not None:
            on_checked(dataset, world)
        del dataset
        return fn(job)
    nprocs = nprocs or 1
    dataset = check(job, nprocs)
    if on_checked is not None:
        on_checked(dataset, nprocs)
    if nprocs == 1:
        return fn(job, dataset)
    del dataset
    return run_workers(fn, nprocs, (job,), grace_s=grace_s)[0]
