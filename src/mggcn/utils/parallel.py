"""Independent chunks of one array job on all cores, in threads.

numpy's sorts, element-wise operations, gathers and its random generators' bulk fills release the GIL, so a job cut
into chunks that share nothing (blocks of edges, ranges of rows) runs on every core from plain Python threads, with
no process start and no copy of the inputs. Results come back in the order of the chunks, so what a job computes
never depends on how many threads ran it.

The budget is the cores this process may run on, or what a rank was given (:func:`set_threads`, called by
:func:`mggcn.utils.system.enter_rank`): local ranks share a host's cores.

Importing this module loads no torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["available_cores", "configured_threads", "thread_budget", "set_threads", "thread_map"]

T = TypeVar("T")
R = TypeVar("R")


class _State:
    threads: int | None = None  # None: every core this process may use


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def set_threads(threads: int | None) -> None:
    """The threads :func:`thread_map` uses from now on in this process (None: every available core)."""
    _State.threads = None if threads is None else max(1, int(threads))


def configured_threads() -> int | None:
    """What :func:`set_threads` set (None: every available core)."""
    return _State.threads


def thread_budget() -> int:
    return _State.threads or available_cores()


def thread_map(fn: Callable[[T], R], items: Iterable[T], threads: int | None = None) -> list[R]:
    """``[fn(item) for item in items]``, the items spread over ``threads`` threads (default :func:`thread_budget`).

    The results are in the order of ``items``; the first exception (in that order) is raised once every started
    item has ended. One thread, or one item, runs in the calling thread.
    """
    items = list(items)
    workers = min(len(items), threads or thread_budget())
    if workers <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(workers, thread_name_prefix="mggcn-data") as pool:
        return list(pool.map(fn, items))
