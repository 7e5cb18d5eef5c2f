"""Per-phase wall-clock accounting of an epoch: where the time goes (SpMM, waiting on communication, GEMM, ...).

One :class:`PhaseTimer` per rank, passed explicitly to the pieces that do the work. On CUDA a phase is timed by
synchronizing the compute stream at its ends (not the whole device, so broadcasts in flight on NCCL's stream keep
overlapping); this costs a little launch latency, so disable the timer where only the total matters.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["PHASES", "PhaseTimer", "NULL_TIMER"]

# Phases reported per epoch; "other" is the epoch's time not covered by the rest.
PHASES = ("spmm", "comm_wait", "gemm", "allreduce", "criterion", "optimizer")


class PhaseTimer:
    """Accumulates seconds per phase until :meth:`reset`."""

    def __init__(self, device: torch.device | None = None, enabled: bool = True) -> None:
        self.enabled = enabled
        self.sync = device is not None and device.type == "cuda"
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
        if self.sync:
            torch.cuda.current_stream().synchronize()
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.sync:
                torch.cuda.current_stream().synchronize()
            end = time.perf_counter()
            self.seconds[phase] += end - start
            if self.events is not None:
                self.events.append((phase, start, end))

    def mark(self, kind: str, start: float, end: float) -> None:
        """Record an interval in the trace only (e.g. a broadcast from issue to completion), not in a phase."""
        if self.events is not None:
            self.events.append((kind, start, end))


NULL_TIMER = PhaseTimer(enabled=False)
