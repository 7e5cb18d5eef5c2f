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

Work items: each tile of a block is cut into chunks of whole rows (at most
:data:`~mggcn.kernels.attention.ITEM_EDGES` edges each on a CPU with several workers, and about an equal share per
worker on a small tile) that the CPU's workers take as they are free, each running its ops on one thread
(:func:`mggcn.kernels.shared.run_items`; on a GPU, or with other kernels, one chunk after the other). A chunk
writes only its own rows (the online softmax forward, ``∂Z`` and ``∂e_src`` backward); its ``∂e_dst`` (other rows)
is added in chunk order whichever worker computed it, so results are the same bits on any number of workers. The
chunks' index arrays are built on the first call and kept with the operator's block: 4 bytes per edge (the row
ids, int32).

Memory: kept for backward, ``out`` [m, H, C] and ``lse`` [m, H] (besides the inputs Z, e_src, e_dst the caller keeps).
Forward, while it runs: the rows sent ``[m, H·C + H]``, the running max and sum [m, H], the operator's receive
buffers at that width, and per received block its ``Z`` columns copied once (w × H·C, an embedding table). Backward:
the rows sent ``[m, H·C + 3H]``, ``c`` [m, H], ``∂Z`` [m, H·C] (the result), ``∂e_src`` [m, H] and the partial
``∂e_dst`` [P·m, H]. Per-edge values ``[nnz, H]`` exist only for the chunks of rows in flight, one per worker
(about :data:`~mggcn.kernels.attention.EDGE_CHUNK` edges, or ITEM_EDGES with several workers, some 60·H bytes
each), plus per tile the copy of its received rows' table, head-major (w × H·C).

Legend: m = rows per rank, H = heads, C = channels per head, P = ranks, w = a block's columns.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from mggcn.kernels import attention as kernels
from mggcn.kernels.attention import AttentionSpec, Chunk
from mggcn.kernels.policy import shared_threads
from mggcn.kernels.shared import run_items
from mggcn.kernels.tiled import TiledCSR
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

# the SpMM operator (mggcn.distributed.spmm.SpMMOperator) whose exchange moves the rows; that module calls this one
# (SpMMOperator.attention), so its class is not imported here
SpMMOperator = Any

__all__ = ["attention"]


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


# per block (the operator's, built once), per (tile, edges per chunk): its chunks' index arrays (tile_chunks)
_chunk_cache: weakref.WeakKeyDictionary[TiledCSR, dict[tuple[int, int], list[Chunk]]] = weakref.WeakKeyDictionary()


def _tile_chunks(block: TiledCSR, t: int, workers: int) -> list[Chunk]:
    """Tile ``t`` of ``block`` a run of rows at a time (:func:`~mggcn.kernels.attention.tile_chunks`): at most
    :data:`~mggcn.kernels.attention.EDGE_CHUNK` edges per chunk, and with several ``workers`` at most
    :data:`~mggcn.kernels.attention.ITEM_EDGES` and about an equal share each on a small tile. Built on the first
    call and kept with the block: 4 bytes per edge (its row id)."""
    tile = block.tiles[t]
    size = kernels.EDGE_CHUNK
    if workers > 1:
        size = min(size, kernels.ITEM_EDGES, max(1, -(-tile._nnz() // workers)))
    per_block = _chunk_cache.setdefault(block, {})
    if (t, size) not in per_block:
        per_block[(t, size)] = kernels.tile_chunks(tile, size)
    return per_block[(t, size)]


class _Tile:
    """One tile of a block, columns ``start:start + w``, and its chunks, run as work items (one op per item on one
    thread each on a CPU, :func:`~mggcn.kernels.shared.run_items`)."""

    def __init__(self, block: TiledCSR, t: int, heads: int, workers: int) -> None:
        self.tile, self.start = block.tiles[t], block.starts[t]
        self.width = self.tile.shape[1]
        self.cols = slice(self.start, self.start + self.width)
        self.chunks = _tile_chunks(block, t, workers)
        self.heads, self.workers = heads, workers

    def run(self, item: Callable[[int, Chunk], None]) -> None:
        """``item(k, chunk)`` for every chunk, each on one worker."""
        run_items(len(self.chunks), lambda k, _worker: item(k, self.chunks[k]), self.workers)

    def columns(self, chunk: Chunk) -> torch.Tensor:
        """The head-major table's rows of each head's edges (:func:`~mggcn.kernels.attention.head_columns`)."""
        return kernels.head_columns(chunk.col, self.heads, self.width)

    def dropout(self, chunk: Chunk, spec: AttentionSpec, ids: _Ids, source: int, columns: torch.Tensor | None,
                transpose: bool, dtype: torch.dtype) -> torch.Tensor | None:
        """``q`` [nnz, H]: the kept edges' ``1 / (1 − p)``, 0 elsewhere (None: no dropout)."""
        if not spec.dropout:
            return None
        at = chunk.col.to(torch.int64) + self.start
        own = ids.own(chunk.row.to(torch.int64) + chunk.r0)
        other = ids.of(source, at if columns is None else columns[at])
        src, dst = (own, other) if transpose else (other, own)
        keep = kernels.dropout_keep(spec.seed, spec.layer, src, dst, self.heads, spec.dropout)
        return keep.to(dtype) / (1.0 - spec.dropout)


def _tiles(block: TiledCSR, heads: int, device: torch.device):
    """The nonempty tiles of ``block`` (:class:`_Tile`)."""
    workers = shared_threads(device)
    for t, tile in enumerate(block.tiles):
        if tile._nnz():
            yield _Tile(block, t, heads, workers)


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
            for tile in _tiles(block, heads, rows.device):
                part = rows[tile.cols]
                table = kernels.head_major(part[:, :heads * channels].view(-1, heads, channels))
                e_src = part[:, heads * channels:].contiguous()  # gathered per edge: a strided source is slow
                tile.run(functools.partial(self._chunk, tile, table, e_src, source, columns))

    def _chunk(self, tile: _Tile, table: torch.Tensor, e_src: torch.Tensor, source: int,
               columns: torch.Tensor | None, _k: int, chunk: Chunk) -> None:
        """Rows ``chunk.r0:chunk.r1``: fold the chunk's edges into their running max, sum and accumulator."""
        here = slice(chunk.r0, chunk.r1)
        score = F.leaky_relu_(_pick(e_src, chunk.col).add_(_pick(self.e_dst[here], chunk.row)), self.spec.slope)
        old_max = self.max[here]
        new_max = torch.maximum(old_max, kernels.segment_max(chunk.crow, score))
        finite = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
        rescale = torch.exp(old_max - finite)  # 0 where nothing was summed yet
        weight = score.sub_(_pick(finite, chunk.row)).exp_().mul_(chunk.val.to(score.dtype)[:, None])
        self.sum[here].mul_(rescale).add_(kernels.segment_sum(chunk.crow, weight))
        q = tile.dropout(chunk, self.spec, self.ids, source, columns, False, weight.dtype)
        if q is not None:
            weight.mul_(q)
        cols = tile.columns(chunk)
        offsets = kernels.head_rows(chunk.crow, tile.heads, cols.dtype)[:-1]
        self.acc[here].mul_(rescale[:, :, None]).add_(kernels.gather_head_major(offsets, cols, weight, table))
        old_max.copy_(new_max)

    def result(self) -> torch.Tensor:
        """``out`` [m, H, C]; ``lse`` [m, H] on :attr:`lse`. A row without entries (padding) gets 0 for both."""
        some = self.sum > 0
        safe = torch.where(some, self.sum, torch.ones_like(self.sum))
        self.lse = torch.where(some, self.max + torch.log(safe), torch.zeros_like(self.sum))
        return self.acc.div_(safe[:, :, None])


class _InOrder:
    """Runs each item's ``commit`` in item order whichever worker computed it (so a sum over items is the same
    bits whatever the scheduling); a failed item releases the workers waiting for it, which raise its error."""

    def __init__(self) -> None:
        self.next, self.error = 0, None
        self.turn = threading.Condition()

    def _fail(self, error: BaseException) -> None:
        with self.turn:
            self.error = self.error or error
            self.turn.notify_all()

    def commit(self, compute: Callable[[Chunk], Callable[[], None]], k: int, chunk: Chunk) -> None:
        """Item ``k``: ``compute(chunk)`` now, then the step it returns once item ``k − 1``'s has run."""
        try:
            done = compute(chunk)
        except BaseException as error:
            self._fail(error)
            raise
        with self.turn:
            self.turn.wait_for(lambda: self.next == k or self.error is not None)
            if self.error is not None:
                raise self.error  # the first failure, whichever worker the caller hears from first
            try:
                done()
            except BaseException as error:
                self.error = error
                raise
            finally:
                self.next += 1
                self.turn.notify_all()


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
            for tile in _tiles(block, heads, rows.device):
                part = rows[tile.cols]
                table = kernels.head_major(part[:, :width].view(-1, heads, channels))
                # the SDDMM multiplies 16-bit operands in float32: the table converted once per tile, not per chunk
                dots = table if table.element_size() >= 4 else table.float()
                e_dst, lse, c = (part[:, width + k * heads: width + (k + 1) * heads].contiguous() for k in range(3))
                # ∂e_dst's rows: this tile's columns as rows of rank source's block of grad_dst
                target = torch.arange(tile.start, tile.start + tile.width, device=rows.device)
                target = (target if columns is None else columns[target]) + source * m
                tile.run(functools.partial(_InOrder().commit, functools.partial(
                    self._chunk, tile, table, dots, e_dst, lse, c, target, source, columns)))

    def _chunk(self, tile: _Tile, table: torch.Tensor, dots: torch.Tensor, e_dst: torch.Tensor, lse: torch.Tensor,
               c: torch.Tensor, target: torch.Tensor, source: int, columns: torch.Tensor | None,
               chunk: Chunk) -> Callable[[], None]:
        """Rows ``chunk.r0:chunk.r1`` (sources): their ``∂Z`` and ``∂e_src``; returns the step that adds the chunk's
        ``∂e_dst`` (run in chunk order). ``dots``: ``table`` as the SDDMM multiplies it (float32 for 16-bit)."""
        here = slice(chunk.r0, chunk.r1)
        pre = _pick(self.e_src[here], chunk.row).add_(_pick(e_dst, chunk.col))
        alpha = F.leaky_relu(pre, self.spec.slope).sub_(_pick(lse, chunk.col)).exp_()
        alpha.mul_(chunk.val.to(alpha.dtype)[:, None])
        q = tile.dropout(chunk, self.spec, self.ids, source, columns, True, alpha.dtype)
        weight = alpha if q is None else alpha * q
        cols = tile.columns(chunk)
        rows = kernels.head_rows(chunk.crow, tile.heads, cols.dtype)
        self.grad_z[here].add_(kernels.gather_head_major(rows[:-1], cols, weight, table))
        del weight
        grad_alpha = kernels.edge_dots_head_major(rows, cols, self.z[here], dots)
        del rows, cols
        if q is not None:
            grad_alpha.mul_(q)
        grad_e = grad_alpha.sub_(_pick(c, chunk.col)).mul_(alpha)
        grad_e.mul_(kernels.leaky_relu_slope(pre, self.spec.slope))
        self.grad_src[here].add_(kernels.segment_sum(chunk.crow, grad_e))
        return lambda: self.grad_dst.index_add_(0, _pick(target, chunk.col), grad_e)

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
