"""GAT's attention aggregation across ranks, exact (forward and backward), on the SpMM operators' own exchange.

For this rank's destination rows i and every source j with an entry of Â = ``normalize(A, "gat")`` (w_ij the edge
multiplicity, the diagonal 1):

.. math::
    s_{ij} = \\mathrm{LeakyReLU}(e^{src}_j + e^{dst}_i), \\quad
    \\alpha_{ij} = \\frac{w_{ij} \\exp s_{ij}}{\\sum_{j'} w_{ij'} \\exp s_{ij'}}, \\quad
    out_i = \\sum_j \\alpha_{ij} q_{ij} Z_j

per head, with ``Z`` [m, H, C] (``H·Wᵀ`` by heads), ``e_src``, ``e_dst`` [m, H] (``Σ_c Z·att``) and ``q`` the
attention-dropout factor (mask / (1 − p)). A multiplicity ``w`` is exactly ``w`` PyG edges with the same score.

Forward: ONE pass of the operator's exchange (:meth:`~mggcn.distributed.spmm.SpMMOperator.run` with an
accumulator) over the rows ``[Z | e_src]`` (width H·C + H: received rows bring their own ``e_src``, so a compacted
block of the sparse exchange needs no index map for it). Each block updates a per-row online softmax (running max
``M``, sum ``l``, accumulator rescaled by ``exp(M_old − M_new)`` when a block raises the max, as flash attention
does); then ``out = acc / l`` and ``lse = M + log l`` are kept for backward.

Backward: ONE pass in the transposed direction (the blocks of Âᵀ: this rank's sources j as rows, the destinations i
of rank s as columns) over the rows ``[∂out | e_dst | lse | c]`` (width H·C + 3H) with ``c_i = <∂out_i, out_i>`` per
head (the softmax backward's ``Σ_j α_ij ∂α_ij``). Per block: ``α_ij`` recomputed from ``e_src_j`` (local),
``e_dst_i`` and ``lse_i`` (received); ``∂Z_j += Σ_i α_ij q_ij ∂out_i``; ``∂α_ij = q_ij <∂out_i, Z_j>``;
``∂e_ij = α_ij (∂α_ij − c_i) · LeakyReLU'(e_src_j + e_dst_i)``; ``∂e_src_j += Σ_i ∂e_ij`` (local rows);
``∂e_dst_i += Σ_j ∂e_ij`` is a partial sum for rank s's rows (a compacted block's columns mapped back to the
sender's rows by the plan's ``columns``), accumulated in a ``[P·m, H]`` buffer and summed over ranks by one
``all_reduce``, of which each rank keeps its own slice. Communication added over an SpMM of the same widths: that
all-reduce (P·m·H values per layer per backward), and the ``lse`` and ``c`` columns.

Attention dropout: ``q_ij`` per (seed, layer, head, original source id, original destination id) from a
counter-based hash (:func:`mggcn.kernels.attention.dropout_keep`), so P = 1 and P = 4 draw the same masks; the
original ids of a block's columns come from an all-gather of the operator's ``vertex_ids``, once per operator. A
merged parallel edge (multiplicity w) is kept or dropped as one (PyG drops its w copies independently).

Memory: kept for backward, ``out`` [m, H, C] and ``lse`` [m, H] (besides the inputs Z, e_src, e_dst the caller keeps).
Forward, while it runs: the rows sent ``[m, H·C + H]``, the running max and sum [m, H], the operator's receive
buffers at that width, and per received block its ``Z`` columns copied once (w × H·C, an embedding table). Backward:
the rows sent ``[m, H·C + 3H]``, ``c`` [m, H], ``∂Z`` [m, H·C] (the result), ``∂e_src`` [m, H] and the partial
``∂e_dst`` [P·m, H]. Per-edge values ``[nnz, H]`` exist only for the chunk of rows in flight (about
:data:`~mggcn.kernels.attention.EDGE_CHUNK` edges, some 60·H bytes each).

Legend: m = rows per rank, H = heads, C = channels per head, P = ranks, w = a block's columns.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from mggcn.kernels.attention import (
    AttentionSpec,
    dropout_keep,
    edge_dots,
    gather_heads,
    leaky_relu_slope,
    row_chunks,
    segment_max,
    segment_sum,
)
from mggcn.kernels.tiled import TiledCSR
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

# the SpMM operator (mggcn.distributed.spmm.SpMMOperator) whose exchange moves the rows; that module calls this one
# (SpMMOperator.attention), so its class is not imported here
SpMMOperator = Any

__all__ = ["attention"]


class _Edges:
    """The edges of a chunk of rows ``r0:r1`` of a tile whose first column is ``start``, from rank ``source``'s rows
    (:func:`~mggcn.kernels.attention.row_chunks`): rows (less ``r0``), columns, received rows, multiplicities."""

    def __init__(self, chunk: tuple, start: int, dtype: torch.dtype) -> None:
        self.r0, self.r1, self.crow, self.row, self.col, val = chunk
        self.at = self.col + start  # the received row of each edge
        self.weight = val.to(dtype)[:, None]
        self.size = self.r1 - self.r0

    def dropout(self, spec: AttentionSpec, heads: int, ids: _Ids, source: int, columns: torch.Tensor | None,
                transpose: bool) -> torch.Tensor | None:
        """``q`` [nnz, H]: the kept edges' ``1 / (1 − p)``, 0 elsewhere (None: no dropout)."""
        if not spec.dropout:
            return None
        own = ids.own(self.row + self.r0)
        other = ids.of(source, self.at if columns is None else columns[self.at])
        src, dst = (own, other) if transpose else (other, own)
        keep = dropout_keep(spec.seed, spec.layer, src, dst, heads, spec.dropout)
        return keep.to(self.weight.dtype) / (1.0 - spec.dropout)


class _Ids:
    """Original vertex ids: this rank's rows and every rank's (from the operator's ``vertex_ids``)."""

    def __init__(self, op: SpMMOperator, rank: int) -> None:
        self.all = op.all_vertex_ids()
        self.rank, self.rows = rank, op.rows

    def own(self, rows: torch.Tensor) -> torch.Tensor:
        return self.of(self.rank, rows)

    def of(self, rank: int, rows: torch.Tensor) -> torch.Tensor:
        return self.all[rank * self.rows + rows]


def _pick(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[index]`` along the rows (index_select: faster than advanced indexing)."""
    return torch.index_select(values, 0, index)


def _chunks(block: TiledCSR, dtype: torch.dtype):
    """Every chunk of rows of every tile of ``block`` (:func:`~mggcn.kernels.attention.row_chunks`) and the
    columns of its tile."""
    for tile, start in zip(block.tiles, block.starts):
        if tile._nnz():
            for chunk in row_chunks(tile):
                yield _Edges(chunk, start, dtype), slice(start, start + tile.shape[1])


class _ForwardAttention:
    """The forward pass's accumulator (:class:`~mggcn.distributed.spmm.BlockAccumulator`'s interface): an online
    softmax per row and head across the blocks and tiles in the order they come."""

    def __init__(self, e_dst: torch.Tensor, channels: int, spec: AttentionSpec, ids: _Ids | None,
                 timer: PhaseTimer) -> None:
        m, heads = e_dst.shape
        self.e_dst, self.channels, self.spec, self.ids, self.timer = e_dst, channels, spec, ids, timer
        self.max = torch.full((m, heads), float("-inf"), dtype=e_dst.dtype, device=e_dst.device)
        self.sum = torch.zeros_like(self.max)
        self.acc = torch.zeros(m, heads, channels, dtype=e_dst.dtype, device=e_dst.device)
        self.lse: torch.Tensor | None = None

    def add(self, block: TiledCSR, rows: torch.Tensor, source: int = 0, columns: torch.Tensor | None = None) -> None:
        heads, channels = self.e_dst.shape[1], self.channels
        with self.timer("spmm"):
            table = rows[:, :heads * channels].reshape(rows.shape[0], heads, channels)
            e_src = rows[:, heads * channels:]
            for edges, columns_of_tile in _chunks(block, rows.dtype):
                here = slice(edges.r0, edges.r1)
                pre = _pick(e_src, edges.at) + _pick(self.e_dst[here], edges.row)
                score = torch.nn.functional.leaky_relu(pre, self.spec.slope)
                old_max = self.max[here]
                new_max = torch.maximum(old_max, segment_max(edges.row, score, edges.size))
                finite = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
                rescale = torch.exp(old_max - finite)  # 0 where nothing was summed yet
                weight = torch.exp(score - _pick(finite, edges.row)).mul_(edges.weight)
                q = edges.dropout(self.spec, heads, self.ids, source, columns, transpose=False)
                self.sum[here].mul_(rescale).add_(segment_sum(edges.row, weight, edges.size))
                if q is not None:
                    weight.mul_(q)
                self.acc[here].mul_(rescale[:, :, None]).add_(
                    gather_heads(edges.crow, edges.col, weight, table[columns_of_tile]))
                old_max.copy_(new_max)

    def result(self) -> torch.Tensor:
        """``out`` [m, H, C]; ``lse`` [m, H] on :attr:`lse`. A row without entries (padding) gets 0 for both."""
        some = self.sum > 0
        safe = torch.where(some, self.sum, torch.ones_like(self.sum))
        self.lse = torch.where(some, self.max + torch.log(safe), torch.zeros_like(self.sum))
        return self.acc.div_(safe[:, :, None])


class _BackwardAttention:
    """The backward pass's accumulator, over the blocks of Âᵀ (module docstring): ``∂Z``, ``∂e_src`` for this rank's
    rows, and the partial ``∂e_dst`` of every rank's rows."""

    def __init__(self, z: torch.Tensor, e_src: torch.Tensor, spec: AttentionSpec, ids: _Ids | None, world: int,
                 timer: PhaseTimer) -> None:
        m, heads, channels = z.shape
        self.z, self.e_src, self.spec, self.ids, self.timer = z, e_src, spec, ids, timer
        self.grad_z = torch.zeros_like(z)
        self.grad_src = torch.zeros_like(e_src)
        self.grad_dst = torch.zeros(world * m, heads, dtype=z.dtype, device=z.device)

    def add(self, block: TiledCSR, rows: torch.Tensor, source: int = 0, columns: torch.Tensor | None = None) -> None:
        m, heads, channels = self.z.shape
        width = heads * channels
        with self.timer("spmm"):
            grad_out = rows[:, :width].reshape(rows.shape[0], heads, channels)
            e_dst, lse, c = (rows[:, width + k * heads: width + (k + 1) * heads] for k in range(3))
            for edges, columns_of_tile in _chunks(block, rows.dtype):
                here = slice(edges.r0, edges.r1)
                pre = _pick(self.e_src[here], edges.row) + _pick(e_dst, edges.at)
                alpha = torch.nn.functional.leaky_relu(pre, self.spec.slope).sub_(_pick(lse, edges.at)).exp_()
                alpha.mul_(edges.weight)
                q = edges.dropout(self.spec, heads, self.ids, source, columns, transpose=True)
                weight = alpha if q is None else alpha * q
                table = grad_out[columns_of_tile]
                self.grad_z[here].add_(gather_heads(edges.crow, edges.col, weight, table))
                grad_alpha = edge_dots(edges.crow, edges.col, self.z[here], table)
                if q is not None:
                    grad_alpha.mul_(q)
                grad_e = grad_alpha.sub_(_pick(c, edges.at)).mul_(alpha).mul_(leaky_relu_slope(pre, self.spec.slope))
                self.grad_src[here].add_(segment_sum(edges.row, grad_e, edges.size))
                target = edges.at if columns is None else columns[edges.at]
                self.grad_dst.index_add_(0, target + source * m, grad_e)

    def result(self) -> torch.Tensor:
        return self.grad_z


class _AttentionFunction(torch.autograd.Function):
    """``(Z, e_src, e_dst) -> out`` (module docstring); keeps ``Z``, ``e_src``, ``e_dst``, ``out`` and ``lse``."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, e_src: torch.Tensor, e_dst: torch.Tensor,  # type: ignore[override]
                op: SpMMOperator, spec: AttentionSpec, timer: PhaseTimer) -> torch.Tensor:
        m, heads, channels = z.shape
        ids = _Ids(op, op.ctx.rank) if spec.dropout else None
        acc = _ForwardAttention(e_dst.detach(), channels, spec, ids, timer)
        rows = torch.cat([z.detach().reshape(m, heads * channels), e_src.detach()], dim=1)
        out = op.run(rows, accumulator=acc)
        del rows
        ctx.op, ctx.spec, ctx.timer, ctx.ids = op, spec, timer, ids
        ctx.save_for_backward(z, e_src, e_dst, out, acc.lse)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        z, e_src, e_dst, out, lse = ctx.saved_tensors
        op = ctx.op
        m, heads, channels = z.shape
        grad_out = grad_out.contiguous()
        c = (grad_out * out).sum(dim=2)
        rows = torch.cat([grad_out.view(m, heads * channels), e_dst, lse, c], dim=1)
        del c
        acc = _BackwardAttention(z, e_src, ctx.spec, ctx.ids, op.ctx.world_size, ctx.timer)
        grad_z = op.run(rows, transpose=True, accumulator=acc)
        del rows
        grad_dst = acc.grad_dst
        if op.ctx.world_size > 1:
            with ctx.timer("allreduce"):
                dist.all_reduce(grad_dst, group=op.ctx.group)
        rank = op.ctx.rank
        return grad_z, acc.grad_src, grad_dst[rank * m:(rank + 1) * m], None, None, None


def attention(z: torch.Tensor, e_src: torch.Tensor, e_dst: torch.Tensor, op: SpMMOperator,
              spec: AttentionSpec | None = None, timer: PhaseTimer = NULL_TIMER) -> torch.Tensor:
    """GAT's attention aggregation on this rank's rows, with autograd (module docstring): ``z`` [m, H, C], ``e_src``
    and ``e_dst`` [m, H] -> [m, H, C]. ``op``: the SpMM operator of ``normalize(A, "gat")``'s shard, whose exchange
    moves the rows. Collective at P > 1 (every rank calls it, forward and backward)."""
    return _AttentionFunction.apply(z, e_src, e_dst, op, AttentionSpec() if spec is None else spec, timer)
