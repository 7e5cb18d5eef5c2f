"""What the bench measures besides the configurations: the interpreter's own memory, the machine's copy bandwidth
and GEMM rate, and a loopback broadcast between two ranks."""

from __future__ import annotations

import time

import torch

from mggcn.distributed.context import init_distributed
from mggcn.tools.bench.memory import current_rss, release_memory, status_bytes, warm_runtime
from mggcn.tools.bench.options import BenchOptions
from mggcn.tools.roofline import Machine, measure_machine
from mggcn.utils.system import torch_threads

__all__ = ["baseline_worker", "machine_worker", "measure", "measure_after", "broadcast_worker", "describe_host"]


def describe_host() -> dict:
    """What the figures were measured on: the CPU, its cores and memory, the software, and the commit of the checkout
    mggcn runs from (None outside a git checkout); ``gpus`` empty, for :func:`~mggcn.tools.bench.run.run_bench` to
    fill in on CUDA (from a worker, as this process must make no CUDA context)."""
    import os
    import platform
    import subprocess

    from mggcn.config import __version__

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = None
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        commit = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory": memory, "gpus": [], "python": platform.python_version(),
            "torch": torch.__version__, "mggcn": __version__, "commit": commit}


def baseline_worker(device: str) -> dict:
    """The interpreter's own memory: RSS of a process that imported torch and mggcn (``import``), and after it ran
    each kind of kernel and mggcn's optimizer step once on a toy problem (``warm``: the code PyTorch loads on first
    use)."""
    import mggcn.training.job  # noqa: F401  (what `mggcn train` imports)

    release_memory()
    record = {"import": current_rss(), "import_anon": status_bytes("RssAnon")}
    warm_runtime(torch.device(device))
    release_memory()
    record.update(warm=current_rss(), warm_anon=status_bytes("RssAnon"))
    return record


def machine_worker(opts: BenchOptions, threads: int) -> Machine:
    ctx = init_distributed(opts.device, threads=threads)
    return measure(ctx.device, threads, opts)


def measure(device: torch.device, threads: int, opts: BenchOptions, repeats: int = 5) -> Machine:
    """The machine's copy bandwidth and GEMM rate with ``threads`` threads (then this process's threads again)."""
    scale = (4, 2) if device.type == "cuda" else (1, 1)
    with torch_threads(threads):
        return measure_machine(device.type, copy_bytes=opts.probe_copy * scale[0], gemm_size=opts.probe_gemm * scale[1],
                               repeats=repeats)


def measure_after(ctx, threads: int, opts: BenchOptions) -> dict | None:
    """The rates right after a configuration's epochs, measured by rank 0 while the other ranks wait (on a CPU the
    floor of P ranks is their work over the whole machine): the floor then sees the machine as the epochs did."""
    import torch.distributed as dist

    if ctx.world_size > 1:
        dist.barrier()
    machine = measure(ctx.device, threads, opts, repeats=3).as_dict() if ctx.is_main else None
    if ctx.world_size > 1:
        dist.barrier()
    return machine


def _cpu_times() -> tuple[int, int] | None:
    """(all, idle) clock ticks of the machine so far (Linux), or None."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(ticks), ticks[3] + ticks[4]


def broadcast_worker(timeout_s: float, nbytes: int = 16 << 20, repeats: int = 20) -> dict:
    """Two ranks broadcast ``nbytes`` back and forth (gloo, as the CPU SpMM does): the bytes per second, and the
    fraction of the machine's cores busy meanwhile (None where /proc/stat is missing)."""
    import torch.distributed as dist

    init_distributed("cpu", timeout_s, threads=1)
    data = torch.ones(nbytes // 4)
    for root in (0, 1):
        dist.broadcast(data, src=root)
    dist.barrier()
    ticks, start = _cpu_times(), time.perf_counter()
    for k in range(repeats):
        dist.broadcast(data, src=k % 2)
    seconds, after = time.perf_counter() - start, _cpu_times()
    busy = None if ticks is None or after is None else 1.0 - (after[1] - ticks[1]) / max(1, after[0] - ticks[0])
    return {"bytes": nbytes, "seconds": seconds / repeats, "bytes_per_s": nbytes * repeats / seconds, "busy": busy}
