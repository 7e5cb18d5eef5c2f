"""CPU work that holds up when the machine is shared: numbered work items taken by whichever thread is running.

Torch's CPU ops split their work statically among OpenMP threads and wait for all of them at a barrier at the end
of the op. When another process takes a core, the thread that shares it runs at a fraction of its speed and every
op waits for its share; the threads that finished spin at the barrier, taking the cycles the late one needs. A
kernel made of many short ops (the gather SpMM's row chunks, the blocked GEMM-σ-GEMM) then pays the slowest thread
at every one of them. Here a kernel is cut into many small items (a block of rows), and ``threads`` workers (pool
threads; the caller sleeps until they are done) take the next item from a shared counter until none is left, each
running its ops on one thread, in the caller's grad mode: a worker that the scheduler holds back takes fewer items
instead of holding up the others, and idle workers sleep instead of spinning. Every item is the same computation
whichever worker runs it (a per-worker buffer is aligned alike for every worker), so results do not depend on the
scheduling.

The ops between kernels (the loss, the optimizer, small reductions) stay torch's, split among OpenMP's threads; in
mggcn's processes those threads sleep while they wait for work instead of spinning
(:func:`mggcn.utils.system.openmp_waits_passively`), so that the one sharing a core with another process has its
turn when the next op comes, rather than a scheduler slice later.

The ops of an item run on one thread: each worker sets torch's thread count to 1 while it takes items (torch's
setting reaches OpenMP and MKL; with OpenMP it may be shared by the process's threads), and the caller restores its
count once every worker has stopped. Where the workers are as many as the process's cores, each runs on its own
core (:func:`~mggcn.kernels.policy.worker_cpus`): the scheduler cannot then put two of them on one core while
another process has the other, and a worker that shares its core takes fewer items. :mod:`mggcn.kernels.policy`
decides when kernels run this way (:func:`~mggcn.kernels.policy.shared_threads`).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from mggcn.kernels.policy import process_cpus, worker_cpus

__all__ = ["run_items"]

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_lock = threading.Lock()
_local = threading.local()  # .busy: this thread is taking items (a nested call runs its items itself); .cpus: the
# CPUs this pool thread was last set to run on (absent: never set, the process's)


def _reset_after_fork() -> None:
    """A forked child has none of its parent's pool threads: the next call starts its own pool."""
    global _pool, _pool_size, _lock
    _pool, _pool_size, _lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _workers(count: int) -> ThreadPoolExecutor:
    """The pool, with at least ``count`` threads (a larger thread count later gets a larger pool)."""
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size < count:
            old, _pool, _pool_size = _pool, ThreadPoolExecutor(count, "mggcn-kernel"), count
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def _run_on(cpus: set[int] | None, caller_cpus: list[int] | None) -> None:
    """Keep this pool thread on ``cpus``; None: on the caller's CPUs, should an earlier call have pinned it.
    Best effort: a system that refuses leaves the thread where it is."""
    pinned = getattr(_local, "cpus", None)
    if cpus is None:
        if pinned is None or caller_cpus is None:
            return
        target = set(caller_cpus)
    elif cpus == pinned:
        return
    else:
        target = cpus
    try:
        os.sched_setaffinity(0, target)  # 0: this thread only, on Linux
    except OSError:
        return
    _local.cpus = cpus


def run_items(count: int, item: Callable[[int, int], None], threads: int) -> None:
    """``item(k, worker)`` for every ``k`` in ``range(count)``, taken by ``threads`` workers as they are free
    (``worker``: which one, ``0 <= worker < threads``, for a per-worker buffer); each worker's ops run on one thread.
    With one thread, one item, or inside another call's item: one after the other, on the caller's threads.
    An item's exception is raised here once every worker has stopped."""
    cpus = worker_cpus(threads)  # for the pool's size, however many items this call has
    threads = min(threads, count)
    if threads <= 1 or getattr(_local, "busy", False):
        for k in range(count):
            item(k, 0)
        return
    order = itertools.count()  # next() on it is atomic under the GIL: each k goes to one worker
    failed = threading.Event()  # a failed item stops the other workers from taking more

    grad_enabled = torch.is_grad_enabled()  # thread-local: the pool's threads take the caller's

    def work(worker: int) -> None:
        _local.busy = True
        _run_on(None if cpus is None else {cpus[worker]}, caller_cpus)
        torch.get_num_threads()  # torch's first call on a thread sets its count from the process's: done before ours
        torch.set_num_threads(1)
        try:
            with torch.set_grad_enabled(grad_enabled):
                while not failed.is_set() and (k := next(order)) < count:
                    item(k, worker)
        except BaseException:
            failed.set()
            raise
        finally:
            _local.busy = False

    caller_threads = torch.get_num_threads()
    caller_cpus = None if cpus is not None else process_cpus()  # where a thread an earlier call pinned goes back
    futures = [_workers(threads).submit(work, w) for w in range(threads)]
    errors = [f.exception() for f in futures]  # waits for every worker before the count is restored
    torch.set_num_threads(caller_threads)
    for err in errors:
        if err is not None:
            raise err
