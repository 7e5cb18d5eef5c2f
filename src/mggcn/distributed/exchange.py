"""The sparsity-aware distributed SpMM ``C = Â · B``: each rank receives only the rows of B its blocks reference.

Rank i's block ``Â[i, j]`` reads row r of ``B_j`` only when its column r holds a nonzero. At construction every rank
lists, per block, the distinct columns it references (for Â and, separately, for Âᵀ: on a directed graph or with
``mean`` norm the patterns differ), tells each rank j which of j's rows it needs (one ``all_to_all`` of counts, one
of indices), and compacts the columns of ``Â[i, j]`` to those rows (a ``m × k_ij`` CSR, built once). Every call is then
one ``all_to_all_single`` with split sizes: rank j packs, for each i, the ``k_ij`` rows i needs; rank i receives
them back to back and multiplies each compacted block with its slice. Nothing is sent to oneself. Âᵀ's training
columns (:meth:`SparseExchangeSpMM.use_training_columns`) get an exchange of their own: the last layer's backward
then moves only the training rows the blocks reference.

Overlap: the all-to-all is issued asynchronously, the diagonal block ``Â[i, i] · B_i`` (local rows only) multiplies
while it is in flight, then the off-diagonal blocks. ``overlap=False`` waits for the exchange first.

``mode`` (``--comm``):

* ``sparse``: every pair sends exactly the rows referenced.
* ``auto``: a pair whose block references at least ``dense_fraction`` (0.8) of the sender's m rows gets all m rows,
  as a broadcast would send them: the rows go as one contiguous copy instead of a gather of scattered rows, and the
  receiver multiplies with the block as it is, so no compacted copy of that block is kept. The extra bytes are
  at most ``(1 − dense_fraction)·m·d`` for that pair, which buys a gather-free pack and the memory of one block.
  Pairs below the threshold use the sparse exchange, empty blocks send nothing. (A pair is never cheaper in bytes
  with the broadcast; the rule trades at most 25% more bytes on nearly dense pairs for simpler memory traffic.)

Accounting: ``sent_bytes`` / ``recv_bytes`` grow by the sizes of what each call hands to the collective for, and
receives from, the other ranks (the all-to-all's split sizes × width × element size). The construction's index
exchange is not counted. :class:`mggcn.distributed.spmm.StagedSpMM` counts the same way (a broadcast root is counted as
sending its rows to each of the P − 1 others).

Memory: a send and a receive buffer of ``Σ_j k`` rows each at the widest width seen (the broadcast version keeps
2·m rows), plus the compacted copies of the sparse off-diagonal blocks (at most the nonzeros of the originals).

Legend: m = rows per rank, d = width of B, k_ij = rows of B_j that Â[i, j] references.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from mggcn.distributed.context import DistContext, held_until_shutdown
from mggcn.distributed.spmm import BlockAccumulator, SpMMOperator, local_spmm, training_columns
from mggcn.kernels.tiled import TiledCSR
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["DENSE_FRACTION", "ExchangePlan", "SparseExchangeSpMM"]

DENSE_FRACTION = 0.8


class ExchangePlan:
    """Who sends which rows to whom for one direction (Â or Âᵀ), and the blocks to multiply with.

    ``send_index[i]``: this rank's rows rank i needs (``None``: all m rows, contiguous); ``recv_rows[j]``: how many
    rows arrive from rank j; ``blocks[j]``: the block to multiply with them (compacted unless dense or diagonal);
    ``columns[j]``: for a compacted block, rank j's row of each of its columns (sorted int64 on the blocks' device),
    else None.
    """

    def __init__(self, ctx: DistContext, blocks: list[TiledCSR], mode: str, dense_fraction: float) -> None:
        p, rank, m = ctx.world_size, ctx.rank, blocks[0].rows
        needed = [b.columns() if j != rank else torch.empty(0, dtype=torch.int64) for j, b in enumerate(blocks)]
        dense = [j != rank and mode == "auto" and needed[j].numel() >= dense_fraction * m and needed[j].numel() > 0
                 for j in range(p)]
        # a dense pair asks for every row: its request is m rows, and the sender then copies b instead of gathering
        request = [torch.arange(m, dtype=torch.int64) if dense[j] else needed[j] for j in range(p)]
        # the collectives get tensors on the rank's device (NCCL takes no CPU tensor); read back on the CPU
        self.recv_rows = [r.numel() for r in request]
        counts = torch.tensor(self.recv_rows, dtype=torch.int64, device=ctx.device)
        their_counts = torch.empty_like(counts)
        dist.all_to_all_single(their_counts, counts, group=ctx.group)
        self.send_rows = their_counts.cpu().tolist()
        their_index = torch.empty(sum(self.send_rows), dtype=torch.int64, device=ctx.device)
        dist.all_to_all_single(their_index, torch.cat(request).to(ctx.device), output_split_sizes=self.send_rows,
                               input_split_sizes=self.recv_rows, group=ctx.group)
        self.rank, self.rows = rank, m
        device = blocks[0].device
        self.send_index: list[torch.Tensor | None] = []
        for chunk in torch.split(their_index.cpu(), self.send_rows):
            full = chunk.numel() == m and bool(torch.equal(chunk, torch.arange(m)))
            self.send_index.append(None if full else chunk.to(device))
        self.blocks = [b if (j == rank or dense[j]) else b.compact(needed[j]) for j, b in enumerate(blocks)]
        self.columns = [None if (j == rank or dense[j]) else needed[j].to(device) for j in range(p)]
        self.empty = [b.nnz == 0 for b in self.blocks]
        self.dense_pairs = sum(dense)


class SparseExchangeSpMM(SpMMOperator):
    """``C_i = Σ_j Â[i, j] · B_j`` across ranks, moving only referenced rows; same interface as ``StagedSpMM``.

    Construction is collective (every rank must build it, in the same order with the other collectives).

    Args:
        ctx: this rank's distributed context.
        adj: the P column blocks ``Â[i, j]`` of this rank (m × m).
        adj_t: the P column blocks ``Âᵀ[i, j]`` of this rank, for the backward pass.
        mode: ``"sparse"`` or ``"auto"`` (see the module docstring).
        overlap: multiply the diagonal block while the exchange is in flight (default) or wait first.
        timer: where SpMM and communication-wait seconds are accounted.
        dense_fraction: ``auto``'s threshold, the fraction of the sender's rows above which a pair gets all rows.
    """

    def __init__(self, ctx: DistContext, adj: list[TiledCSR], adj_t: list[TiledCSR], mode: str = "sparse",
                 overlap: bool = True, timer: PhaseTimer = NULL_TIMER,
                 dense_fraction: float = DENSE_FRACTION) -> None:
        if len(adj) != ctx.world_size or len(adj_t) != ctx.world_size:
            raise ValueError(f"rank {ctx.rank}: {len(adj)} blocks of Â for a world of {ctx.world_size}")
        if mode not in ("sparse", "auto"):
            raise ValueError(f"SparseExchangeSpMM: mode must be 'sparse' or 'auto', got '{mode}' "
                             "(use mggcn.distributed.spmm.StagedSpMM for 'broadcast')")
        self.ctx, self.adj, self.adj_t = ctx, adj, adj_t
        self.rows = adj[0].rows
        self.overlap, self.timer = overlap, timer
        self.sent_bytes = self.recv_bytes = 0
        self.mode, self.dense_fraction = mode, dense_fraction
        self.plans = None
        if ctx.world_size > 1:
            self.plans = (ExchangePlan(ctx, adj, mode, dense_fraction), ExchangePlan(ctx, adj_t, mode, dense_fraction))
        self.train_plan: ExchangePlan | None = None
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def _views(self, plan: ExchangePlan, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Send and receive buffers at this width, shared by both directions and grown to the largest seen."""
        width = b.shape[1]
        need_send, need_recv = sum(plan.send_rows) * width, sum(plan.recv_rows) * width
        if (self._buffers is None or self._buffers[0].numel() < need_send or self._buffers[1].numel() < need_recv
                or self._buffers[0].dtype != b.dtype):
            old = (0, 0) if self._buffers is None else (self._buffers[0].numel(), self._buffers[1].numel())
            self._buffers = (torch.empty(max(need_send, old[0]), dtype=b.dtype, device=b.device),
                             torch.empty(max(need_recv, old[1]), dtype=b.dtype, device=b.device))
        return (self._buffers[0][:need_send].view(-1, width), self._buffers[1][:need_recv].view(-1, width))

    def use_training_columns(self, train: torch.Tensor) -> None:
        """Âᵀ's training columns, and their own exchange: a rank then sends only the training rows the others'
        restricted blocks reference."""
        blocks = training_columns(self.ctx, self.adj_t, train)
        if self.ctx.world_size > 1:
            self.train_plan = ExchangePlan(self.ctx, blocks, self.mode, self.dense_fraction)
            blocks = self.train_plan.blocks  # what it multiplies with (compacted where sparse)
        self.adj_t_train = blocks

    def run(self, b: torch.Tensor, transpose: bool = False, out: torch.Tensor | None = None,
            train_columns: bool = False, accumulator: BlockAccumulator | None = None) -> torch.Tensor:
        """One exchange SpMM with Â (or Âᵀ, or Âᵀ's training columns) on this rank's rows ``b``, into ``out`` or a
        new tensor; no autograd. ``accumulator``: see :meth:`~mggcn.distributed.spmm.SpMMOperator.run` (a
        compacted block comes with its ``columns``)."""
        train_columns = transpose and train_columns
        if self.ctx.world_size == 1:
            blocks = self.adj_t_train if train_columns else self.adj_t if transpose else self.adj
            return local_spmm(blocks, b, self.timer, out, accumulator)
        plan = self.train_plan if train_columns else self.plans[1 if transpose else 0]
        b = b.contiguous()
        send, recv = self._views(plan, b)
        with self.timer("spmm"):  # packing is memory traffic of the SpMM's kind
            offset = 0
            for index, rows in zip(plan.send_index, plan.send_rows):
                if rows:
                    if index is None:
                        send[offset: offset + rows].copy_(b)
                    else:
                        torch.index_select(b, 0, index, out=send[offset: offset + rows])
                offset += rows
        issued = time.perf_counter()
        work = dist.all_to_all_single(recv, send, output_split_sizes=plan.recv_rows,
                                      input_split_sizes=plan.send_rows, group=self.ctx.group, async_op=True)
        held_until_shutdown(self.ctx, work)
        row_bytes = b.shape[1] * b.element_size()
        self.sent_bytes += sum(plan.send_rows) * row_bytes
        self.recv_bytes += sum(plan.recv_rows) * row_bytes
        if not self.overlap:
            with self.timer("comm_wait"):
                work.wait()
        if accumulator is None:
            accumulator = BlockAccumulator(torch.empty_like(b) if out is None else out, self.timer)
        out = accumulator
        rank = self.ctx.rank
        if not plan.empty[rank]:
            out.add(plan.blocks[rank], b, rank)
        if self.overlap:
            with self.timer("comm_wait"):
                work.wait()
        self.timer.mark("exchange", issued, time.perf_counter())
        offset = 0
        for j, rows in enumerate(plan.recv_rows):
            if j != rank and not plan.empty[j]:
                out.add(plan.blocks[j], recv[offset: offset + rows], j, plan.columns[j])
            offset += rows
        return out.result()
