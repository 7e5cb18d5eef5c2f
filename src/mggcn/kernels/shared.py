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
count once every worker has stopped. :mod:`mggcn.kernels.policy` decides when kernels run this way
(:func:`~mggcn.kernels.policy.shared_threads`).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

__all__ = ["run_items"]

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_lock = threading.Lock()
_local = threading.local()  # .busy: this thread is taking items (a nested call runs its items itself)


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


def run_items(count: int, item: Callable[[int, int], None], threads: int) -> None:
    """``item(k, worker)`` for every ``k`` in ``range(count)``, taken by ``threads`` workers as they are free
    (``worker``: which one, ``0 <= worker < threads``, for a per-worker buffer); each worker's ops run on one thread.
    With one thread, one item, or inside another call's item: one after the other, on the caller's threads.
    An item's exception is raised here once every worker has stopped."""
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
    futures = [_workers(threads).submit(work, w) for w in range(threads)]
    errors = [f.exception() for f in futures]  # waits for every worker before the count is restored
    torch.set_num_threads(caller_threads)
    for err in errors:
        if err is not None:
            raise err
