"""Memory caps on a configuration's processes, and telling a configuration that ran out of memory from one that
failed.

``--gpu-memory SIZE``: each process may allocate at most SIZE on its GPU, through PyTorch's caching allocator
(``torch.cuda.set_per_process_memory_fraction``); the CUDA context and libraries' own workspaces are outside it.
``--host-memory SIZE``: ``RLIMIT_DATA`` of each process of a CPU run (every rank gets SIZE): its private writable
memory (heap, anonymous maps, thread stacks as reserved, about 8-16 MB a thread) may not grow beyond SIZE, so an
allocation past it fails at once (``RuntimeError: ... can't allocate memory``, ``MemoryError``) instead of the
machine swapping or killing. Memory-mapped files (a prepared dataset's arrays, the page cache) and shared memory
(mggcn's broadcast outboxes) are outside it. ``RLIMIT_AS`` is no use here: PyTorch reserves far more address space
than it touches.

A configuration ran out of memory when its error is one of :func:`out_of_memory`'s; its row then says so. Each
process writes how far its setup went (:class:`SetupNotes`) at its marks and when it fails, so such a row still
tells the setup's time, or the phase it died in.
"""

from __future__ import annotations

import json
import os
import re
import resource
from contextlib import contextmanager

import torch

from mggcn.utils.errors import ConfigError, says_out_of_memory
from mggcn.utils.files import atomic_write
from mggcn.utils.timing import SetupClock
from mggcn.utils.units import format_bytes

__all__ = ["cap_memory", "lift_caps", "out_of_memory", "gpu_memory_worker", "check_gpu_memory", "SetupNotes",
           "read_notes"]

# A worker's error reaches the bench as "rank R failed: TYPE: MESSAGE" or "rank R was killed by signal NAME"
# (mggcn.distributed.launch).
_RAISED = re.compile(r"failed: ([\w.]+): (.*)", re.DOTALL)


def out_of_memory(error: str) -> bool:
    """Whether a worker's error (:class:`~mggcn.distributed.launch.WorkerError`'s text) says it ran out of memory:
    ``torch.cuda.OutOfMemoryError``, ``MemoryError`` (numpy's included), a ``RuntimeError`` (or ``OSError``) whose
    message says an allocation (or a thread's stack) failed, or death by SIGKILL (on Linux usually the kernel's
    out-of-memory killer)."""
    if "killed by signal SIGKILL" in error:
        return True
    raised = _RAISED.search(error)
    if raised is None:
        return False
    return says_out_of_memory(raised.group(1), raised.group(2))


def cap_memory(gpu_memory: int | None, host_memory: int | None, device: torch.device) -> None:
    """In a configuration's process: cap what it may allocate on ``device`` (``gpu_memory``) or on the host
    (``host_memory``, RLIMIT_DATA)."""
    if host_memory is not None:
        # OpenMP's threads made first: a thread's stack counts against the cap, and OpenMP, unable to make one
        # under it, ends the process (status 1, "libgomp: Thread creation failed") instead of raising
        torch.ones(torch.get_num_threads() << 16).add_(1)
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        soft = host_memory if hard == resource.RLIM_INFINITY else min(host_memory, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    if gpu_memory is not None and device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, gpu_memory / total), device)


def lift_caps(gpu_memory: int | None, host_memory: int | None, device: torch.device) -> None:
    """Undo :func:`cap_memory` once the configuration has trained: the machine's rates measured after it (copies
    of hundreds of MB) are the bench's, not the configuration's."""
    if host_memory is not None:
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
    if gpu_memory is not None and device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(1.0, device)


def gpu_memory_worker() -> dict[str, list]:
    """The name and memory of each GPU PyTorch sees (run in a worker, so that the bench's own process holds no CUDA
    context, which would take memory of the GPU its configurations measure)."""
    found = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    return {"names": [p.name for p in found], "totals": [p.total_memory for p in found]}


def check_gpu_memory(gpu_memory: int, totals: list[int], gpus_used: int) -> None:
    """Refuse a cap larger than a GPU the configurations run on, or a cap without a GPU."""
    if not totals:
        raise ConfigError("gpu_memory: no CUDA device is visible to PyTorch", "gpu_memory")
    smallest = min(totals[:max(1, gpus_used)])
    if gpu_memory > smallest:
        raise ConfigError(f"gpu_memory {format_bytes(gpu_memory)} is more than the GPU's {format_bytes(smallest)}",
                          "gpu_memory")


class SetupNotes:
    """How far one process of a configuration got: its setup clock's record, in ``directory/RANK.json``, written at
    :meth:`write` and when the process fails (:meth:`on_failure`). ``directory`` None: nothing is written."""

    def __init__(self, directory: str | None, rank: int, clock: SetupClock, left_out: str | None = None) -> None:
        self.directory, self.rank, self.clock, self.left_out = directory, rank, clock, left_out

    def record(self) -> dict:
        """The clock's record, without the phase ``left_out`` (the bench's own work, which ``mggcn train`` does not
        do)."""
        record = self.clock.record()
        skipped = record["phases"].pop(self.left_out, 0.0) if self.left_out else 0.0
        record["seconds"] -= skipped
        return record

    def write(self) -> None:
        if self.directory is None:
            return
        record = self.record()
        atomic_write(os.path.join(self.directory, f"{self.rank}.json"),
                     lambda tmp: _dump(record, tmp))

    @contextmanager
    def on_failure(self):
        """Write the notes when the body raises (then the error goes on)."""
        try:
            yield self
        except BaseException:
            try:
                self.write()
            except OSError:
                pass  # a full disk: the error itself matters more
            raise


def _dump(record: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(record, f)


def read_notes(directory: str, nprocs: int) -> list[dict | None]:
    """Each rank's notes (None for a rank that wrote none: killed before its first mark)."""
    notes = []
    for rank in range(nprocs):
        try:
            with open(os.path.join(directory, f"{rank}.json")) as f:
                notes.append(json.load(f))
        except (OSError, ValueError):
            notes.append(None)
    return notes
