"""Waiting for a device's queued work (mggcn.utils.timing.synchronize) and the phase timer that uses it."""

import subprocess
import sys
import time
from types import SimpleNamespace

import torch

from mggcn.utils import timing
from mggcn.utils.timing import PhaseTimer, SetupClock, synchronize


class _Stream:
    def __init__(self, waited: list, device) -> None:
        self.waited, self.device = waited, device

    def synchronize(self) -> None:
        self.waited.append(("stream", self.device))


def _record(monkeypatch) -> list:
    waited: list = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(("device", device)))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream(waited, device))
    return waited


def test_synchronize_waits_for_a_cuda_device_only(monkeypatch):
    waited = _record(monkeypatch)
    synchronize(torch.device("cpu"))
    synchronize("cpu")
    synchronize(None)
    assert waited == []  # the CPU's work is done when its calls return
    synchronize(torch.device("cuda", 1))
    synchronize("cuda:0", stream=True)  # only the compute stream: other streams' transfers keep going
    assert waited == [("device", torch.device("cuda", 1)), ("stream", "cuda:0")]


def test_a_phase_waits_for_the_compute_stream_at_its_ends_on_cuda_only(monkeypatch):
    waited = _record(monkeypatch)
    timer = PhaseTimer(torch.device("cpu"))
    with timer("gemm"):
        pass
    assert waited == []
    cuda = torch.device("cuda", 0)
    timer = PhaseTimer(cuda)
    with timer("gemm"):
        assert waited == [("stream", cuda)]
    assert waited == [("stream", cuda)] * 2 and timer.seconds["gemm"] >= 0.0
    with PhaseTimer(cuda, enabled=False)("spmm"):
        pass
    assert len(waited) == 2


def test_process_start_is_when_the_process_was_spawned():
    """A child's ``process_start`` lies between its parent's spawn call and the child's own reading of the clock
    (less one 10 ms tick of /proc's resolution): never before it was spawned, as a boot time in whole seconds of a
    wall clock set since boot would put it."""
    import subprocess
    import sys
    import time

    code = "import time; from mggcn.utils.timing import process_start; print(process_start(), time.time())"
    before = time.time()
    start, now = map(float, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout.split())
    assert before - 0.011 <= start <= now


def _clock(monkeypatch, **fns):
    """timing's own ``time`` module replaced: the test's clock, pytest's untouched."""
    monkeypatch.setattr(timing, "time", SimpleNamespace(**fns))


def test_a_phase_timed_twice_in_an_epoch_adds_up(monkeypatch):
    ticks = iter([1.0, 1.5, 10.0, 10.25])
    _clock(monkeypatch, perf_counter=lambda: next(ticks))
    timer = PhaseTimer()
    for _ in range(2):  # e.g. the GEMMs of two layers
        with timer("gemm"):
            pass
    assert timer.seconds["gemm"] == 0.75


def test_a_traced_epoch_records_its_phases(monkeypatch):
    timer = PhaseTimer()
    timer.reset(trace=True)
    with timer("spmm"):
        pass
    timer.mark("broadcast", 1.0, 2.0)
    assert [e[0] for e in timer.events] == ["spmm", "broadcast"]
    timer.reset()
    assert timer.events is None


def test_setup_phases_add_up_to_the_elapsed_time(monkeypatch):
    now = iter([101.0, 103.5])
    _clock(monkeypatch, time=lambda: next(now))
    clock = SetupClock(started=100.0)
    assert clock.mark("dataset") == 1.0 and clock.mark("model") == 2.5
    assert clock.record() == {"seconds": 3.5, "phases": {"dataset": 1.0, "model": 2.5}}


def test_process_start_counts_the_time_before_the_call():
    """Half a second after its start, a process's ``process_start`` is still its start, not the moment it is asked."""
    code = ("import time; time.sleep(0.5); from mggcn.utils.timing import process_start; "
            "print(process_start(), time.time())")
    before = time.time()
    start, now = map(float, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout.split())
    assert before - 0.011 <= start <= now - 0.45
