"""Which local sparse kernel multiplies a block on which device, and how a block is cut for it.

On CUDA a block is one tile: cuSPARSE reads B through the GPU's caches as it is, and every tile costs a launch.
On a CPU, where B fits the last-level cache (:data:`~mggcn.config.GATHER_BYTES` per machine) a whole block is
multiplied by the gather-sum kernel (:func:`mggcn.kernels.tiled.gather_matmul`) where FBGEMM runs it and MKL's CSR
product is the slower one (:func:`gather_kernel`: x86 with AVX2 but not Intel's, float32 operands; :func:`cpu_spmm`);
a wider B, an Intel CPU, or a CPU without FBGEMM, gets MKL's CSR product on column tiles of
:data:`~mggcn.config.TILE_BYTES` of B each (:func:`tile_columns`). Tiles are no narrower than
keeps their extra row pointers under :data:`MAX_INDEX_OVERHEAD` of the nonzeros' bytes: blocks with few nonzeros
per row (many ranks, a sparse graph) stay whole. Indices are int32 where they fit (:func:`index_bytes`; a bit
faster in MKL).

The layers' dense kernels (:mod:`mggcn.nn.functional`) run a block of rows at a time on a CPU, sized to stay in
cache, and whole on a GPU (:func:`mask_chunk_rows`, :func:`chain_rows`); a weight gradient's sum is cut among the
CPU's threads (:func:`weight_grad_parts`).

How the CPU kernels share out their work, :data:`CPU_KERNELS_ENV` (:func:`cpu_kernels`): ``shared`` (the default)
cuts the gather SpMM, the GEMM-σ-GEMM and σ's backward into small items that the threads take
as they are free, each on one thread (:mod:`mggcn.kernels.shared`), so that a thread another process holds back
delays only its own item; ``static`` runs the same blocks as single ops that torch splits evenly among its threads,
each op waiting for the slowest (fast on a quiet machine, slow beside another job); ``simple`` is the path before the
gather kernel and the blocks: MKL's tiled CSR product, whole GEMMs, one GEMM per weight gradient.
"""

from __future__ import annotations

import functools
import os

import torch

from mggcn.config import GATHER_BYTES, TILE_BYTES
from mggcn.utils.errors import ConfigError

__all__ = ["MIN_TILE_COLUMNS", "MAX_INDEX_OVERHEAD", "gather_kernel", "index_bytes", "tile_columns", "max_tiles",
           "MASK_CHUNK", "MASK_CHUNK_GPU", "mask_chunk_rows", "GEMM_CHUNK", "chain_rows", "SPLIT_ROWS", "SPLIT_BYTES",
           "weight_grad_parts", "CPU_KERNELS_ENV", "CPU_KERNELS", "cpu_kernels", "CPU_SPMM_ENV", "CPU_SPMMS",
           "cpu_spmm", "shared_threads", "SHARED_CHUNK", "PIN_WORKERS_ENV", "worker_cpus", "process_cpus"]

CPU_KERNELS_ENV = "MGGCN_CPU_KERNELS"  # how the CPU kernels share out their work (read at every kernel call)
CPU_KERNELS = ("shared", "static", "simple")  # the first is the default
CPU_SPMM_ENV = "MGGCN_CPU_SPMM"  # which kernel multiplies a whole block on a CPU (read at every product)
CPU_SPMMS = ("gather", "mkl")
PIN_WORKERS_ENV = "MGGCN_PIN_WORKERS"  # "0": the shared kernels' workers float over the process's cores


def cpu_kernels() -> str:
    """The CPU kernels' way of sharing out work, from :data:`CPU_KERNELS_ENV` (unset or empty: ``shared``)."""
    value = os.environ.get(CPU_KERNELS_ENV, "") or CPU_KERNELS[0]
    if value not in CPU_KERNELS:
        raise ConfigError(f"{CPU_KERNELS_ENV} must be one of {', '.join(CPU_KERNELS)}, not {value!r}",
                          CPU_KERNELS_ENV)
    return value


def shared_threads(device: torch.device | str = "cpu") -> int:
    """How many workers take a kernel's items (:func:`mggcn.kernels.shared.run_items`): torch's threads on a CPU
    with ``shared`` kernels; 1 (the ops split their own work) elsewhere."""
    if torch.device(device).type != "cpu" or cpu_kernels() != "shared":
        return 1
    return torch.get_num_threads()


def worker_cpus(threads: int) -> list[int] | None:
    """The CPU each of ``threads`` workers of the shared kernels runs on (:func:`mggcn.kernels.shared.run_items`),
    or None: they go wherever the scheduler puts them. A process whose workers are as many as the cores it may run
    on pins worker ``w`` to the ``w``-th of them: left free, two of them can share a core while another process
    holds the other one, and the process then gets one core where a fair share would be more. With fewer workers
    than cores (several ranks on one machine, a thread count the user lowered) nothing is pinned, since every rank
    would pick the same first cores. :data:`PIN_WORKERS_ENV` set to ``0`` turns this off (``1``, unset or empty:
    on)."""
    pin = os.environ.get(PIN_WORKERS_ENV, "") or "1"
    if pin not in ("0", "1"):
        raise ConfigError(f"{PIN_WORKERS_ENV} must be 0 or 1, not {pin!r}", PIN_WORKERS_ENV)
    if threads < 2 or pin == "0" or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = process_cpus()
    return cpus if cpus is not None and len(cpus) == threads else None


def process_cpus() -> list[int] | None:
    """The CPUs the calling thread may run on, in order (None where the system does not say)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


# TILE_BYTES (mggcn.config), bytes of B one tile reads per machine: a few MiB, well inside the last-level cache
# shared by the ranks and past the per-core L2 (mggcn bench --compare-tiles measures others).
MIN_TILE_COLUMNS = 1024  # narrower tiles cost more passes over C than their cache hits save
MAX_INDEX_OVERHEAD = 0.125  # a block's extra row pointers, at most this fraction of its nonzeros' bytes
# GATHER_BYTES (mggcn.config), bytes of B up to which a block stays whole for the gather kernel, per machine: about
# the last-level cache, where the gather's random reads of B's rows hit it.


@functools.cache
def _fbgemm() -> bool:
    """Whether torch's embedding_bag runs FBGEMM's kernel here (x86 with AVX2); elsewhere it is a slow loop."""
    return ("fbgemm" in torch.backends.quantized.supported_engines
            and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"))


@functools.cache
def _cpu_vendor() -> str:
    """The CPU's vendor as Linux names it (``GenuineIntel``, ``AuthenticAMD``, ...); empty where it does not say."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def cpu_spmm() -> str:
    """Which CPU kernel multiplies a block that stays whole, from :data:`CPU_SPMM_ENV`; unset or empty: ``mkl`` on
    Intel's CPUs where torch has MKL (its CSR product runs its tuned code there, and beats the gather kernel at
    every width), ``gather`` elsewhere (MKL's generic code path on other vendors' CPUs is the slower one)."""
    value = os.environ.get(CPU_SPMM_ENV, "")
    if not value:
        return "mkl" if _cpu_vendor() == "GenuineIntel" and torch.backends.mkl.is_available() else "gather"
    if value not in CPU_SPMMS:
        raise ConfigError(f"{CPU_SPMM_ENV} must be one of {', '.join(CPU_SPMMS)}, not {value!r}", CPU_SPMM_ENV)
    return value


def gather_kernel(device: torch.device | str, dtype: torch.dtype = torch.float32) -> bool:
    """Whether a whole block on ``device`` multiplies ``dtype`` operands with the gather-sum kernel
    (:func:`mggcn.kernels.tiled.gather_matmul`): CPU, float32, FBGEMM, :func:`cpu_spmm` ``gather``, unless the
    kernels are ``simple``."""
    return (torch.device(device).type == "cpu" and dtype == torch.float32 and _fbgemm() and cpu_kernels() != "simple"
            and cpu_spmm() == "gather")


def index_bytes(nnz: int, size: int) -> int:
    """Bytes of one CSR index of a matrix with ``nnz`` nonzeros and ``size`` rows or columns at most."""
    return 4 if nnz < 2**31 and size < 2**31 else 8


def tile_columns(width: int, rows: int, block_nnz: int, device: torch.device | str = "cpu", local_ranks: int = 1,
                 tile_bytes: int | None = None) -> int | None:
    """Columns per tile of ``rows × rows`` blocks with about ``block_nnz`` nonzeros each, for SpMMs of ``width``
    (the widest of an epoch); ``None`` (no tiling) on CUDA and where one tile would do.

    A tile reads ``tile_bytes`` of B (default :data:`TILE_BYTES`; 0 turns tiling off), shared among the
    ``local_ranks`` ranks of one machine; tiles are widened until their row pointers cost at most
    :data:`MAX_INDEX_OVERHEAD` of the nonzeros' bytes (:func:`max_tiles`). By default a block whose B fits
    :data:`GATHER_BYTES` (shared the same way) stays whole where the gather kernel runs (:func:`gather_kernel`).
    """
    if torch.device(device).type != "cpu":
        return None
    if tile_bytes is None and gather_kernel(device) and rows * 4 * max(1, width) * max(1, local_ranks) <= GATHER_BYTES:
        return None
    tile_bytes = TILE_BYTES if tile_bytes is None else tile_bytes
    if tile_bytes <= 0:
        return None
    cols = max(MIN_TILE_COLUMNS, tile_bytes // (4 * max(1, width) * max(1, local_ranks)))
    cols = max(cols, -(-rows // max_tiles(rows, block_nnz)))
    return None if cols >= rows else cols


def max_tiles(rows: int, nnz: int) -> int:
    """The most tiles a ``rows``-row block of ``nnz`` nonzeros may have: one, plus as many as keep the extra row
    pointers within :data:`MAX_INDEX_OVERHEAD` of the nonzeros' bytes."""
    ib = index_bytes(nnz, rows)
    return 1 + int(MAX_INDEX_OVERHEAD * nnz * (ib + 4) / ((rows + 1) * ib))


# on a GPU there is no cache to fit and every block costs kernel launches (and Python calls)
MASK_CHUNK = 1 << 19  # elements (2 MiB of float32): σ's backward with a GEMM's ∂H runs a block of rows this size
MASK_CHUNK_GPU = 1 << 24  # elements (64 MiB) on a GPU: few and large kernels
GEMM_CHUNK = 1 << 20  # elements (4 MiB of float32): a GEMM, σ and the next GEMM run a block of rows this size
SPLIT_ROWS = 4096  # weight_grad splits the rows among the threads when each part gets at least this many
SPLIT_BYTES = 1 << 21  # and its partial products take at most this much (2 MiB) together
# shared kernels: a GEMM-σ-GEMM item (1 MiB of float32), small enough that the threads' last items end close together
SHARED_CHUNK = 1 << 18


def mask_chunk_rows(rows: int, width: int, device: torch.device | str = "cpu") -> int:
    """Rows per block of σ's backward fused with a GEMM's ``∂H`` (:func:`mggcn.nn.functional._grad_over_activation`)
    on ``device``: about :data:`MASK_CHUNK` elements on a CPU, :data:`MASK_CHUNK_GPU` on a GPU."""
    chunk = MASK_CHUNK if torch.device(device).type == "cpu" else MASK_CHUNK_GPU
    return max(1, min(rows, chunk // max(1, width)))


def chain_rows(rows: int, width: int, device: torch.device | str = "cpu") -> int:
    """Rows per block of a GEMM, σ and the next GEMM (:class:`mggcn.nn.functional._GemmActGemm`; ``width``: the
    wider of its two outputs): about :data:`GEMM_CHUNK` elements on a CPU, all of them on a GPU, where blocks would
    only add kernels. ``shared`` CPU kernels: :data:`SHARED_CHUNK` elements, the items their threads take;
    ``simple``: all of them (whole GEMMs)."""
    kernels = cpu_kernels()
    if torch.device(device).type != "cpu" or kernels == "simple":
        return max(1, rows)
    return max(1, min(rows, (SHARED_CHUNK if kernels == "shared" else GEMM_CHUNK) // max(1, width)))


def weight_grad_parts(rows: int, product_bytes: int, device: torch.device | str = "cpu") -> int:
    """Parts to cut the ``rows`` of a weight gradient's sum into (:func:`mggcn.nn.functional.weight_grad`; below 2:
    one GEMM). Only on a CPU, where MKL's GEMM would split the small result of ``product_bytes`` among the threads
    and each would read all of both operands: parts of at least :data:`SPLIT_ROWS` rows, their partial products at
    most :data:`SPLIT_BYTES` together; with ``shared`` kernels as many as that allows (the items the threads take:
    the same parts, so the same sum, at any thread count), with ``static`` two per thread (one ``bmm``);
    ``simple`` kernels: one GEMM."""
    kernels = cpu_kernels()
    if torch.device(device).type != "cpu" or kernels == "simple":
        return 1
    parts = min(rows // SPLIT_ROWS, SPLIT_BYTES // max(1, product_bytes))
    return parts if kernels == "shared" else min(2 * torch.get_num_threads(), parts)
