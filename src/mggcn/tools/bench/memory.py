"""The memory of the process this runs in: its resident size and peak, and a probe that splits a configuration's
life into the runtime (``base``), its setup and its training.

A peak is ``VmHWM`` (``/proc/self/status``; ``ru_maxrss`` where there is no /proc: on Linux a spawned process's
``ru_maxrss`` starts at its launcher's peak, which ``VmHWM`` does not).
"""

from __future__ import annotations

import ctypes
import gc
import resource
import warnings

import torch

from mggcn.nn.adam import Adam
from mggcn.utils.timing import synchronize

__all__ = ["current_rss", "peak_rss", "reset_peak_rss", "release_memory", "status_bytes", "ru_maxrss",
           "warm_runtime", "MemoryProbe"]


def status_bytes(key: str) -> int | None:
    """A size of ``/proc/self/status`` (``VmRSS``, ``VmHWM``, ``VmData``, ``RssAnon``), or None without /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def ru_maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def current_rss() -> int:
    rss = status_bytes("VmRSS")
    return ru_maxrss() if rss is None else rss


def peak_rss() -> int:
    """Peak RSS of this process since it started or since :func:`reset_peak_rss`."""
    hwm = status_bytes("VmHWM")
    return ru_maxrss() if hwm is None else hwm


def reset_peak_rss() -> bool:
    """Restart the peak at the current RSS (Linux ≥ 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def release_memory() -> None:
    """Collect garbage and give the heap's free pages back to the system (glibc), so that RSS is what is live."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def warm_runtime(device: torch.device, torch_adam: bool = False) -> None:
    """Run each kind of kernel once on a toy problem, so that the runtime's one-time costs (libraries paged in on
    first use) count in the base, not in the peak. The optimizer is the one the configuration trains with:
    mggcn's :class:`~mggcn.nn.adam.Adam`, or ``torch.optim.Adam`` (PyG; its first use imports ~70 MB of PyTorch)."""
    import torch.nn.functional as F

    dense = torch.rand(8, 8, device=device)
    with warnings.catch_warnings():  # PyTorch's notes on its sparse CSR tensors, printed in every bench otherwise
        warnings.filterwarnings("ignore", message="Sparse", category=UserWarning)
        adj = dense.relu().to_sparse_csr()
        adj = torch.sparse_csr_tensor(adj.crow_indices().int(), adj.col_indices().int(), adj.values(), adj.shape)
    weight = torch.randn(8, 4, device=device, requires_grad=True)
    loss = F.cross_entropy(torch.sparse.mm(adj, dense) @ weight, torch.zeros(8, dtype=torch.long, device=device))
    loss.backward()
    (torch.optim.Adam if torch_adam else Adam)([weight]).step()


class MemoryProbe:
    """base (before the graph) -> setup (graph loaded, structures built, rest freed) -> training peak.

    ``record``: ``base``, ``setup_peak`` (the process's peak before the reset), ``ready`` (RSS once the setup's
    leftovers are freed), ``peak_reset``, ``peak`` (the training peak), ``ru_maxrss``, ``whole`` (the process's peak,
    setup included), ``data`` (``VmData`` at the end: what ``--host-memory`` caps); on CUDA ``cuda_peak``.
    """

    def __init__(self, device: torch.device, torch_adam: bool = False) -> None:
        self.device = device
        warm_runtime(device, torch_adam)
        release_memory()
        self.record = {"base": current_rss()}

    def ready(self) -> None:
        self.record["setup_peak"] = peak_rss()  # the process's peak so far: runtime and setup
        release_memory()
        self.record.update(ready=current_rss(), peak_reset=reset_peak_rss())
        synchronize(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def done(self) -> dict:
        self.record.update(peak=peak_rss(), ru_maxrss=ru_maxrss(), data=status_bytes("VmData"))
        self.record["whole"] = max(self.record["setup_peak"], self.record["peak"])  # the process's peak, all of it
        if self.device.type == "cuda":
            self.record["cuda_peak"] = torch.cuda.max_memory_allocated(self.device)
        return self.record
