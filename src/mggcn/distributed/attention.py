"""GAT's attention aggregation across ranks, exact (forward and backward), on the SpMM operators' own exchange.

For this rank's destination rows i and every source j with an entry of Â = ``normalize(A, "gat")`` (w_ij the edge
multiplicity, the diagonal 1):

.. math::
    s_{ij} = \\mathrm{LeakyReLU}(e^{src}_j + e^{dst}_i), \\quad
    \\alpha_{ij} = \\frac{w_{ij} \\exp s_{ij}}{\\sum_{j'} w_{ij'} \\exp s_{ij'}}, \\quad
    out_i = \\sum_j \\alpha_{ij} q_{ij} Z_j

per head, with ``Z`` [m, H, C] (``H·Wᵀ`` by heads), ``e_src``, ``e_dst`` [m, H] (``Σ_c Z·att``) and ``q`` the
attention-dropout factor (mask / (1 − p)). A multiplicity ``w`` is exactly ``w`` PyG edges with the same score.

The input is one tensor ``[Z | e_src | e_dst]`` [m, H·C + 2H] (:func:`attention_rows`; a GAT layer's one GEMM
makes it), and so is its gradient ``[∂Z | ∂e_src | ∂e_dst]``: no copies of the parts either way.

Forward: ONE pass of the operator's exchange (:meth:`~mggcn.distributed.spmm.SpMMOperator.run` with an
accumulator) over the rows ``[Z | e_src]`` (width H·C + H, a view of the input: received rows bring their own
``e_src``, so a compacted block of the sparse exchange needs no index map for it). Each block updates a per-row
online softmax (running max ``M``, sum ``l``, accumulator rescaled by ``exp(M_old − M_new)`` when a block raises the
max, as flash attention does); then ``out = acc / l`` and ``lse = M + log l`` are kept for backward.

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
:data:`~mggcn.kernels.attention.ITEM_EDGES` edges each on a CPU with several workers, together no more than one
``EDGE_CHUNK``, and about an equal share per worker on a small tile) that the CPU's workers take as they are free,
each running its ops on one thread (:func:`mggcn.kernels.shared.run_items`; on a GPU, or with other kernels, one
chunk after the other). A chunk writes only its own rows (the online softmax forward, ``∂Z`` and ``∂e_src``
backward); its ``∂e_dst`` (other rows) is added in chunk order whichever worker computed it, so results are the same
bits on any number of workers. The chunks' index arrays are built on the first call and kept with the operator's
block: 4 bytes per edge (the row ids, int32).

Row-wise steps outside the kernels (the online softmax's start and end, the received tiles' copies, the backward's
rows sent) run as one work item per CPU worker over a run of rows (:func:`_by_rows`): on a machine that other jobs
share, an op split between torch's threads waits at its end for the thread that ran least, so a handful of such ops
per step would each pay that wait.

Memory: kept for backward, ``out`` [m, H, C] and ``lse`` [m, H] (besides the input the caller keeps).
Forward, while it runs: the rows sent (at P > 1 a compact copy, ``[m, H·C + H]``), the running max and sum [m, H],
the operator's receive buffers at that width, and per received tile its ``Z`` columns copied once, head-major
(w × H·C, an embedding table), and its ``e_src``. Backward: the rows sent ``[m, H·C + 3H]``, the gradient
``[m, H·C + 2H]`` (the result) and the partial ``∂e_dst`` [P·m, H]. Per-edge values ``[nnz, H]`` exist only for
the chunks of rows in flight, one per worker (about :data:`~mggcn.kernels.attention.EDGE_CHUNK` edges in all, some
60·H bytes each), plus per tile the copy of its received rows' table, head-major (w × H·C).

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

from mggcn.kernels import attention as kernels
from mggcn.kernels.attention import AttentionSpec, Chunk
from mggcn.kernels.policy import shared_threads
from mggcn.kernels.shared import run_items
from mggcn.kernels.tiled import TiledCSR
from mggcn.utils.autograd import once_differentiable
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

# the SpMM operator (mggcn.distributed.spmm.SpMMOperator) whose exchange moves the rows; that module calls this one
# (SpMMOperator.attention_rows), so its class is not imported here
SpMMOperator = Any

__all__ = ["attention", "attention_rows"]


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


# rows per worker below which a row-wise step runs on the caller's threads alone: its wait for the workers would
# cost more than the step
_MIN_ROWS = 4096


def _by_rows(m: int, step: Callable[[slice], None], device: torch.device) -> None:
    """``step(rows)`` over ``m`` rows cut into one run per CPU worker, each on one thread
    (:func:`~mggcn.kernels.shared.run_items`): the caller waits for the workers once per call, not once per op of
    ``step``, which a machine running other jobs makes slow. On a GPU one call over all rows. ``step``'s ops must
    be row-wise (the same bits for any cut)."""
    workers = max(1, min(shared_threads(device), m // _MIN_ROWS))
    bounds = [m * k // workers for k in range(workers + 1)]
    run_items(workers, lambda k, _worker: step(slice(bounds[k], bounds[k + 1])), workers)


def _tile_rows(part: torch.Tensor, heads: int, channels: int, count: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A tile's received rows ``part`` [w, H·C + count·H] as the kernels read them, copied in one row-wise pass
    (:func:`_by_rows`): the head-major table of their ``Z``, [H·w, C] (:func:`~mggcn.kernels.attention.head_major`),
    and the ``count`` [w, H] column blocks after it, each compact (gathered per edge: a strided source is slow)."""
    w, width = part.shape[0], heads * channels
    table = torch.empty(heads, w, channels, dtype=part.dtype, device=part.device)
    blocks = [torch.empty(w, heads, dtype=part.dtype, device=part.device) for _ in range(count)]

    def copy(rows: slice) -> None:
        table[:, rows].copy_(part[rows, :width].view(-1, heads, channels).transpose(0, 1))
        for k, block in enumerate(blocks):
            block[rows].copy_(part[rows, width + k * heads: width + (k + 1) * heads])

    _by_rows(w, copy, part.device)
    return table.view(heads * w, channels), blocks


# per block (the operator's, built once), per (tile, edges per chunk): its chunks' index arrays (tile_chunks)
_chunk_cache: weakref.WeakKeyDictionary[TiledCSR, dict[tuple[int, int], list[Chunk]]] = weakref.WeakKeyDictionary()


def _tile_chunks(block: TiledCSR, t: int, workers: int) -> list[Chunk]:
    """Tile ``t`` of ``block`` a run of rows at a time (:func:`~mggcn.kernels.attention.tile_chunks`): at most
    :data:`~mggcn.kernels.attention.EDGE_CHUNK` edges per chunk, and with several ``workers`` at most
    :data:`~mggcn.kernels.attention.ITEM_EDGES` and ``EDGE_CHUNK / workers``, and about an equal share each on a
    small tile. Built on the first call and kept with the block: 4 bytes per edge (its row id)."""
    tile = block.tiles[t]
    size = kernels.EDGE_CHUNK
    if workers > 1:
        # the workers' chunks in flight, together no more than one EDGE_CHUNK (what the memory plan counts)
        size = max(1, min(size // workers, kernels.ITEM_EDGES, -(-tile._nnz() // workers)))
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
        self.max = torch.empty(m, heads, dtype=e_dst.dtype, device=e_dst.device)
        self.sum = torch.empty_like(self.max)
        self.acc = torch.empty(m, heads, channels, dtype=e_dst.dtype, device=e_dst.device)
        self.lse = torch.empty_like(self.max)

        def start(rows: slice) -> None:
            self.max[rows].fill_(float("-inf"))
            self.sum[rows].zero_()
            self.acc[rows].zero_()

        _by_rows(m, start, e_dst.device)

    def add(self, block: TiledCSR, rows: torch.Tensor, source: int = 0, columns: torch.Tensor | None = None) -> None:
        heads, channels = self.e_dst.shape[1], self.channels
        with self.timer("spmm"):
            for tile in _tiles(block, heads, rows.device):
                table, (e_src,) = _tile_rows(rows[tile.cols], heads, channels, 1)
                tile.run(functools.partial(self._chunk, tile, table, e_src, source, columns))

    def _chunk(self, tile: _Tile, table: torch.Tensor, e_src: torch.Tensor, source: int,
               columns: torch.Tensor | None, _k: int, chunk: Chunk) -> None:
        """Rows ``chunk.r0:chunk.r1``: fold the chunk's edges into their running max, sum and accumulator."""
        here = slice(chunk.r0, chunk.r1)
        e_dst = self.e_dst[here].contiguous()  # a column block of the GEMM's rows: gathered from a compact copy
        score = F.leaky_relu_(_pick(e_src, chunk.col).add_(_pick(e_dst, chunk.row)), self.spec.slope)
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
        def finish(rows: slice) -> None:
            total = self.sum[rows]
            some = total > 0
            safe = torch.where(some, total, torch.ones_like(total))
            torch.where(some, self.max[rows] + torch.log(safe), torch.zeros_like(total), out=self.lse[rows])
            self.acc[rows].div_(safe[:, :, None])

        _by_rows(self.sum.shape[0], finish, self.sum.device)
        return self.acc


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
    rows, and the partial ``∂e_dst`` of every rank's rows (``grad_dst`` [P·m, H]), into the zeroed tensors given
    (views of one gradient)."""

    def __init__(self, z: torch.Tensor, e_src: torch.Tensor, grad_z: torch.Tensor, grad_src: torch.Tensor,
                 grad_dst: torch.Tensor, spec: AttentionSpec, ids: _Ids | None, timer: PhaseTimer) -> None:
        self.z, self.e_src, self.spec, self.ids, self.timer = z, e_src, spec, ids, timer
        self.grad_z, self.grad_src, self.grad_dst = grad_z, grad_src, grad_dst

    def add(self, block: TiledCSR, rows: torch.Tensor, source: int = 0, columns: torch.Tensor | None = None) -> None:
        m, heads, channels = self.z.shape
        with self.timer("spmm"):
            for tile in _tiles(block, heads, rows.device):
                table, (e_dst, lse, c) = _tile_rows(rows[tile.cols], heads, channels, 3)
                # the SDDMM multiplies 16-bit operands in float32: the table converted once per tile, not per chunk
                dots = table if table.element_size() >= 4 else table.float()
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
        e_src = self.e_src[here].contiguous()  # a column block of the GEMM's rows: gathered from a compact copy
        pre = _pick(e_src, chunk.row).add_(_pick(e_dst, chunk.col))
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
        grad_e = kernels.leaky_relu_grad(grad_alpha.sub_(_pick(c, chunk.col)).mul_(alpha), pre, self.spec.slope)
        self.grad_src[here].add_(kernels.segment_sum(chunk.crow, grad_e))
        return lambda: self.grad_dst.index_add_(0, _pick(target, chunk.col), grad_e)

    def result(self) -> torch.Tensor:
        return self.grad_z


def _backward_start(grad_out: torch.Tensor, out: torch.Tensor, e_dst: torch.Tensor, lse: torch.Tensor,
                    world: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward's rows sent ``[∂out | e_dst | lse | c]`` (``c = <∂out, out>`` per head), its zeroed gradient
    ``[∂Z | ∂e_src | ∂e_dst]`` [m, H·C + 2H], and the zeroed partial ``∂e_dst`` of every rank's rows [P·m, H]
    (apart from ∂Z's columns: index_add_ into a strided target is several times slower), in one row-wise pass."""
    m, heads, channels = out.shape
    width = heads * channels
    sent = torch.empty(m, width + 3 * heads, dtype=out.dtype, device=out.device)
    grad = torch.empty(m, width + 2 * heads, dtype=out.dtype, device=out.device)
    grad_dst = torch.empty(world, m, heads, dtype=out.dtype, device=out.device)

    def start(r: slice) -> None:
        sent[r, :width].view(-1, heads, channels).copy_(grad_out[r])
        sent[r, width:width + heads].copy_(e_dst[r])
        sent[r, width + heads:width + 2 * heads].copy_(lse[r])
        torch.sum(grad_out[r] * out[r], dim=2, out=sent[r, width + 2 * heads:])
        grad[r].zero_()
        grad_dst[:, r].zero_()

    _by_rows(m, start, out.device)
    return sent, grad, grad_dst.view(world * m, heads)


class _AttentionFunction(torch.autograd.Function):
    """``[Z | e_src | e_dst] -> out`` (module docstring: ``rows`` [m, H·C + 2H], a layer's GEMM output, whose
    columns are ``Z`` by heads and the two score terms); keeps ``rows``, ``out`` and ``lse``; the gradient is one
    tensor of ``rows``' shape."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, heads: int, op: SpMMOperator,  # type: ignore[override]
                spec: AttentionSpec, timer: PhaseTimer) -> torch.Tensor:
        width = rows.shape[1] - 2 * heads
        ids = _Ids(op, op.ctx.rank) if spec.dropout else None
        acc = _ForwardAttention(rows.detach()[:, width + heads:], width // heads, spec, ids, timer)
        out = op.run(rows.detach()[:, :width + heads], accumulator=acc)  # [Z | e_src]: a view, no copy at P = 1
        ctx.op, ctx.spec, ctx.timer, ctx.ids, ctx.heads = op, spec, timer, ids, heads
        ctx.save_for_backward(rows, out, acc.lse)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        rows, out, lse = ctx.saved_tensors
        op, heads = ctx.op, ctx.heads
        m, channels = out.shape[0], out.shape[2]
        width, world, rank = heads * channels, op.ctx.world_size, op.ctx.rank
        z, e_src, e_dst = rows[:, :width].view(m, heads, channels), rows[:, width:width + heads], rows[:, -heads:]
        sent, grad, grad_dst = _backward_start(grad_out, out, e_dst, lse, world)
        acc = _BackwardAttention(z, e_src, grad[:, :width].view(m, heads, channels), grad[:, width:width + heads],
                                 grad_dst, ctx.spec, ctx.ids, ctx.timer)
        op.run(sent, transpose=True, accumulator=acc)
        del sent
        if world > 1:
            with ctx.timer("allreduce"):
                dist.all_reduce(grad_dst, group=op.ctx.group)
        grad[:, -heads:].copy_(grad_dst[rank * m:(rank + 1) * m])
        return grad, None, None, None, None


def attention_rows(rows: torch.Tensor, heads: int, op: SpMMOperator, spec: AttentionSpec | None = None,
                   timer: PhaseTimer = NULL_TIMER) -> torch.Tensor:
    """:func:`attention` on the columns of one tensor ``rows`` = ``[Z | e_src | e_dst]`` [m, H·C + 2H] (a GAT
    layer's one GEMM makes it: :class:`~mggcn.nn.gat.GATLayer`), with autograd: [m, H, C]; ``rows``' gradient is one
    tensor, with no copies of its three parts."""
    if rows.dim() != 2 or (rows.shape[1] - 2 * heads) % heads or rows.shape[1] <= 2 * heads:
        raise ValueError(f"rows [m, H·C + 2H] expected for {heads} heads, got {list(rows.shape)}")
    return _AttentionFunction.apply(rows, heads, op, AttentionSpec() if spec is None else spec, timer)


def attention(z: torch.Tensor, e_src: torch.Tensor, e_dst: torch.Tensor, op: SpMMOperator,
              spec: AttentionSpec | None = None, timer: PhaseTimer = NULL_TIMER) -> torch.Tensor:
    """GAT's attention aggregation on this rank's rows, with autograd (module docstring): ``z`` [m, H, C], ``e_src``
    and ``e_dst`` [m, H] -> [m, H, C]. ``op``: the SpMM operator of ``normalize(A, "gat")``'s shard, whose exchange
    moves the rows. Collective at P > 1 (every rank calls it, forward and backward)."""
    m, heads, channels = z.shape
    return attention_rows(torch.cat([z.reshape(m, heads * channels), e_src, e_dst], dim=1), heads, op, spec, timer)
