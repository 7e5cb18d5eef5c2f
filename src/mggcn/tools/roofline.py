"""The roofline floor of one training epoch: the bytes its SpMMs must move and the flops its GEMMs must do, over
what the machine can move and compute (both measured here, not taken from a data sheet).

SpMM ``C = Â·B`` (``r`` rows, ``nnz`` nonzeros, width ``d``): CSR indices ``(r + 1)·ib + nnz·ib``, values
``4·nnz``, one feature row ``4·d`` read per nonzero, the output ``4·r·d`` written once. The per-nonzero row read is
the traffic a row-gathering kernel issues; caches may serve part of it, so :attr:`EpochWork.spmm_bytes_min` also
gives the compulsory traffic, each row of B read once (``4·n·d``), a floor no implementation can beat.
GEMM ``[M×K]·[K×N]``: ``2·M·K·N`` flops; its time is the larger of flops / GEMM rate and bytes / bandwidth.

Per epoch (:func:`mggcn.nn.model.spmm_widths` gives the SpMMs under the order policy): for each layer the
forward GEMM and ``∂W``, and ``∂H`` for every layer but the first; the last layer's backward SpMM reads only the
training columns when mggcn keeps them (:func:`mggcn.distributed.spmm.keeps_training_columns`). On a CPU the ranks of
one machine share its cores and memory, so the floor of P ranks is the whole job's work over the machine; on GPUs
each rank has its own device. Broadcast rows received over the machine's memory count as moved bytes there; on GPUs
they travel on their own links and are not in the floor.

Legend: n = vertices, m = rows per rank, ib = bytes per CSR index.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from mggcn.distributed.spmm import keeps_training_columns
from mggcn.kernels.policy import index_bytes
from mggcn.nn.model import spmm_widths
from mggcn.nn.models import model_type
from mggcn.tools.plan import FLOAT
from mggcn.utils.timing import synchronize

__all__ = ["Machine", "EpochWork", "measure_machine", "mggcn_work", "pyg_work", "epoch_floor"]


@dataclass(frozen=True)
class Machine:
    """Measured: bytes/s of a large tensor copy (read + write counted) and flop/s of a large square matmul."""

    device: str
    threads: int
    bandwidth: float
    gemm_rate: float

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class EpochWork:
    """One epoch of ONE rank: SpMM bytes (per-nonzero row reads, and compulsory), GEMM flops and bytes,
    broadcast bytes received."""

    spmm_bytes: int
    spmm_bytes_min: int
    gemm_flops: int
    gemm_bytes: int
    gemms: tuple[tuple[int, int, int], ...]
    comm_bytes: int = 0


def _best_seconds(fn, repeats: int, sync) -> float:
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def _copy_seconds(nbytes: int, device: torch.device, repeats: int, sync) -> float:
    src = torch.ones(nbytes // FLOAT, device=device)
    dst = torch.empty_like(src)
    return _best_seconds(lambda: dst.copy_(src), repeats, sync)


def measure_machine(device: str = "cpu", copy_bytes: int = 512 << 20, gemm_size: int = 4096,
                    repeats: int = 5) -> Machine:
    """The best of ``repeats``: a ``copy_bytes`` tensor copy and a ``gemm_size``² float32 matmul, with the
    current ``torch.get_num_threads()``."""
    dev = torch.device(device)
    sync = functools.partial(synchronize, dev)
    copy_s = _copy_seconds(copy_bytes, dev, repeats, sync)
    a = torch.randn(gemm_size, gemm_size, device=dev)
    b = torch.randn(gemm_size, gemm_size, device=dev)
    gemm_s = _best_seconds(lambda: a @ b, repeats, sync)
    return Machine(device=dev.type, threads=torch.get_num_threads(), bandwidth=2 * copy_bytes / copy_s,
                   gemm_rate=2 * gemm_size**3 / gemm_s)


def _spmm(rows: int, cols_total: int, nnz: int, width: int, blocks: int) -> tuple[int, int]:
    ib = index_bytes(nnz, rows)
    fixed = blocks * (rows + 1) * ib + nnz * (ib + FLOAT) + FLOAT * rows * width
    return fixed + FLOAT * nnz * width, fixed + FLOAT * cols_total * width


def _work(rows: int, num_nodes: int, nnz: int, widths: Sequence[int], gemms: list[tuple[int, int, int]],
          nprocs: int, last_fraction: float = 1.0) -> EpochWork:
    """``last_fraction``: the last SpMM (the last layer's backward) reads that fraction of the nonzeros and of the
    columns (Âᵀ's training columns)."""
    spmm = [_spmm(rows, num_nodes, nnz, w, nprocs) for w in widths]
    if widths and last_fraction < 1.0:
        spmm[-1] = _spmm(rows, math.ceil(last_fraction * num_nodes), math.ceil(last_fraction * nnz), widths[-1],
                         nprocs)
    return EpochWork(
        spmm_bytes=sum(s[0] for s in spmm), spmm_bytes_min=sum(s[1] for s in spmm),
        gemm_flops=sum(2 * a * b * c for a, b, c in gemms),
        gemm_bytes=sum(FLOAT * (a * b + b * c + a * c) for a, b, c in gemms), gemms=tuple(gemms),
        comm_bytes=sum((nprocs - 1) * rows * w * FLOAT for w in widths))


def _layer_gemms(rows: int, d_in: int, d_out: int, first: bool, model: str) -> list[tuple[int, int, int]]:
    """The GEMMs of one layer's forward and backward: ``H·Wᵀ``, ``∂W`` and (but in the first layer, unless the
    linear always needs it) ``∂H`` of each of the model's linears (:meth:`~mggcn.nn.model.LayerStack.linears`: one
    for the GCN, two for GraphSAGE (W_l, W_r), GIN's MLP)."""
    gemms = []
    for a, b, always in model_type(model).linears(d_in, d_out):
        gemms += [(rows, a, b), (b, rows, a)] + ([(rows, b, a)] if always or not first else [])
    return gemms


def mggcn_work(num_nodes: int, nnz: int, dims: Sequence[int], nprocs: int = 1, order: str = "auto",
               caches_input: bool = True, model: str = "gcn", train: float = 1.0) -> EpochWork:
    """One rank's epoch in mggcn (``nnz`` of Â, spread evenly over the ranks) training ``model``. The order policy
    changes the SpMM widths, not the GEMM shapes; ``train`` (the training split's fraction of the vertices) decides
    whether the last layer's backward reads only Âᵀ's training columns
    (:func:`~mggcn.distributed.spmm.keeps_training_columns`)."""
    m = -(-num_nodes // nprocs)
    gemms = [g for i in range(len(dims) - 1) for g in _layer_gemms(m, dims[i], dims[i + 1], i == 0, model)]
    restricted = keeps_training_columns(math.ceil(train * num_nodes), num_nodes, len(dims) - 1)
    return _work(m, num_nodes, -(-nnz // nprocs), spmm_widths(list(dims), order, caches_input), gemms, nprocs,
                 train if restricted else 1.0)


def pyg_work(num_nodes: int, nnz: int, dims: Sequence[int], model: str = "gcn") -> EpochWork:
    """PyG's epoch: ``GCNConv`` multiplies by W first, then aggregates, forward and backward (its first layer too:
    ∂W needs ``Âᵀ·∂out``); ``SAGEConv`` and ``GINConv`` aggregate first, at ``d_in``, and need no backward
    aggregation in the first layer."""
    gemms, widths = [], []
    for i in range(len(dims) - 1):
        d_in, d_out = dims[i], dims[i + 1]
        gemms += _layer_gemms(num_nodes, d_in, d_out, i == 0, model)
        widths += model_type(model).pyg_spmm_widths(d_in, d_out, i == 0)
    return _work(num_nodes, num_nodes, nnz, widths, gemms, 1)


def epoch_floor(work: EpochWork, machine: Machine, nprocs: int = 1, shared: bool = True) -> dict:
    """Seconds of the floor: SpMM bytes / bandwidth + Σ GEMM max(flops / rate, bytes / bandwidth) (+ received
    broadcast bytes / bandwidth when the ranks share the machine), times ``nprocs`` when they share it."""
    gemm_s = sum(max(2 * a * b * c / machine.gemm_rate, FLOAT * (a * b + b * c + a * c) / machine.bandwidth)
                 for a, b, c in work.gemms)
    spmm_s = work.spmm_bytes / machine.bandwidth
    spmm_min_s = work.spmm_bytes_min / machine.bandwidth
    comm_s = work.comm_bytes / machine.bandwidth if shared else 0.0
    scale = nprocs if shared else 1
    return {"floor_s": scale * (spmm_s + gemm_s + comm_s), "floor_min_s": scale * (spmm_min_s + gemm_s + comm_s),
            "spmm_s": scale * spmm_s, "gemm_s": scale * gemm_s, "comm_s": scale * comm_s}
