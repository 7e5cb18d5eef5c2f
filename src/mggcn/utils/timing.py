"""Per-phase wall-clock accounting: of an epoch (SpMM, waiting on communication, GEMM, ...), and of a job's setup up
to its first epoch (:class:`SetupClock`: start-up, dataset, partition, shard, device, model).

One :class:`PhaseTimer` per rank, passed explicitly to the pieces that do the work. On CUDA a phase is timed by
synchronizing the compute stream at its ends (not the whole device, so broadcasts in flight on NCCL's stream keep
overlapping); this costs a little launch latency, so disable the timer where only the total matters. Whoever times
a device's work waits for it through :func:`synchronize`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["PHASES", "PhaseTimer", "NULL_TIMER", "SetupClock", "process_start", "synchronize"]

# Phases reported per epoch; "other" is the epoch's time not covered by the rest.
PHASES = ("spmm", "comm_wait", "gemm", "allreduce", "criterion", "optimizer")


def synchronize(device: torch.device | str | None, stream: bool = False) -> None:
    """Wait until the work queued on ``device`` is done: CUDA runs it asynchronously (``stream``: only the current
    stream's work, so that transfers queued on other streams keep going); on a CPU, or with no device, it is done
    when its calls return."""
    if device is None or torch.device(device).type != "cuda":
        return
    if stream:
        torch.cuda.current_stream(device).synchronize()
    else:
        torch.cuda.synchronize(device)


class PhaseTimer:
    """Accumulates seconds per phase until :meth:`reset`."""

    def __init__(self, device: torch.device | None = None, enabled: bool = True) -> None:
        self.enabled = enabled
        self.device = device
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.events: list[tuple[str, float, float]] | None = None  # (phase, start, end) when tracing

    def reset(self, trace: bool = False) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.events = [] if trace else None

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        synchronize(self.device, stream=True)
        start = time.perf_counter()
        try:
            yield
        finally:
            synchronize(self.device, stream=True)
            end = time.perf_counter()
            self.seconds[phase] += end - start
            if self.events is not None:
                self.events.append((phase, start, end))

    def mark(self, kind: str, start: float, end: float) -> None:
        """Record an interval in the trace only (e.g. a broadcast from issue to completion), not in a phase."""
        if self.events is not None:
            self.events.append((kind, start, end))


NULL_TIMER = PhaseTimer(enabled=False)


def process_start() -> float:
    """When this process started (``time.time()``'s clock; on Linux its age from ``/proc``, to its 10 ms ticks), so
    that a setup's time counts the interpreter's start and its imports; elsewhere: now. The age is the boot clock
    now less the process's start on it (both count from boot); the boot time ``/proc/stat`` gives is whole seconds
    of a wall clock that may have been set since, and put starts up to a second or more early."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])  # field 22, starttime, after the command name
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - max(age, 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


class SetupClock:
    """Wall-clock phases of a job from its start to its first epoch: each :meth:`mark` gives the time since the
    previous one (or since ``started``) to a phase, so the phases add up to :meth:`elapsed`.

    The clock travels with the job (a worker gets the launcher's phases so far, and counts its own start-up as the
    next phase), so its start is the command's, whatever process reads it last.
    """

    def __init__(self, started: float | None = None) -> None:
        self.started = time.time() if started is None else started
        self.last = self.started
        self.phases: dict[str, float] = {}

    def mark(self, phase: str) -> float:
        """The time since the last mark, added to ``phase``; returns it."""
        now = time.time()
        spent = max(0.0, now - self.last)
        self.phases[phase] = self.phases.get(phase, 0.0) + spent
        self.last = now
        return spent

    def elapsed(self) -> float:
        return self.last - self.started

    def record(self) -> dict:
        """``{"seconds": ..., "phases": {...}}`` up to the last mark."""
        return {"seconds": self.elapsed(), "phases": dict(self.phases)}
