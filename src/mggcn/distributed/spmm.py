"""The distributed SpMM ``C = Â · B`` with B row-distributed like H, as an autograd function.

Forward, P stages: in stage j rank j broadcasts its rows ``B_j`` (m × d) and every rank i computes
``C_i += Â[i, j] · B_j``. Backward is the same scheme with the blocks of Âᵀ: ``dB_i = Σ_j Âᵀ[i, j] · dC_j``. When
``dC`` is zero outside the training rows (the last layer: the loss reads nothing else) and the operator keeps Âᵀ's
training columns (:func:`keeps_training_columns`), the backward multiplies those instead: the same broadcasts,
smaller multiplies.

Overlap: received rows land in two buffers used alternately (stage j in buffer j mod 2), shared by every layer and
by forward and backward. Rank i multiplies its own block ``Â[i, i] · B_i`` first, while the broadcasts of stages 0
and 1 are in flight, then the received blocks in stage order. The broadcast of stage j+1 is issued before stage j
multiplies, so it is in flight during that multiply; it may only be issued once stage j−1's multiply, which read
the same buffer, is done — on CPU the multiply has returned by then; on CUDA, NCCL's stream waits for the work
already queued on the compute stream when a collective is issued, and ``work.wait()`` makes the compute stream
wait for the broadcast, so the GPU overlaps the two without host synchronization. ``overlap=False`` runs each stage's
broadcast to completion before its multiply (CAGNET's 1D scheme), to measure what the overlap buys.

CPU ranks of one host can broadcast through shared memory instead (:mod:`mggcn.distributed.shm`): stage j's root copies
its rows into its outbox and broadcasts a token; the others multiply out of that outbox. The stages, their order and the
overlap are the same; only what a stage moves changes.

Legend: m = rows per rank, d = width of B.
"""

from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist

from mggcn.config import TRAIN_COLUMNS
from mggcn.distributed.attention import attention_rows
from mggcn.distributed.context import DistContext, all_gather_rows, all_reduce_sum, held_until_shutdown
from mggcn.distributed.shm import SharedOutboxes
from mggcn.kernels.attention import AttentionSpec
from mggcn.kernels.tiled import TiledCSR
from mggcn.nn.workspace import GradSpec, OutSpec, grad_destination
from mggcn.utils.autograd import once_differentiable
from mggcn.utils.errors import ConfigError
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["BlockAccumulator", "BroadcastBuffers", "SpMMOperator", "StagedSpMM", "local_adj", "local_spmm",
           "TRAINING_COLUMNS_MAX", "check_train_columns", "keeps_training_columns", "training_columns"]

# Âᵀ's training columns are kept when the training split is at most this fraction of the vertices (see
# keeps_training_columns)
TRAINING_COLUMNS_MAX = 0.5


def keeps_training_columns(num_train: int, num_nodes: int, layers: int, mode: str = "auto") -> bool:
    """Whether training keeps a copy of Âᵀ's blocks restricted to the training vertices' columns for the last
    layer's backward SpMM (:meth:`SpMMOperator.use_training_columns`); ``mode`` (``--train-columns``, one of
    :data:`~mggcn.config.TRAIN_COLUMNS`): ``auto`` as below, ``on`` whenever there is a training vertex and a
    backward SpMM in the last layer, ``off`` never.

    The loss reads the logits only at the training rows and every layer is row-wise after its SpMM, so the gradient
    reaching the last layer's SpMM is zero on the other rows and ``Âᵀ·∂C`` needs only the columns of training
    vertices. The copy costs the fraction ``t = num_train / num_nodes`` of Âᵀ's nonzeros and saves the fraction
    ``1 − t`` of one SpMM every epoch: it is kept when ``t ≤`` :data:`TRAINING_COLUMNS_MAX` (ogbn-products 0.08,
    ogbn-papers100M 0.01; Reddit's 0.66 is not) and the last layer is not the first (whose SpMM has no backward).
    The same on every rank: both counts are global."""
    check_train_columns(mode)
    if mode == "off" or layers < 2 or num_train <= 0:
        return False
    return mode == "on" or num_train <= TRAINING_COLUMNS_MAX * num_nodes


def check_train_columns(mode: str) -> None:
    """``mode`` one of :data:`~mggcn.config.TRAIN_COLUMNS`, or a :class:`~mggcn.utils.errors.ConfigError` naming
    the option."""
    if mode not in TRAIN_COLUMNS:
        raise ConfigError(f"train_columns must be one of {', '.join(TRAIN_COLUMNS)}, got '{mode}'", "train_columns")


def training_columns(ctx: DistContext, blocks: list[TiledCSR], train: torch.Tensor) -> list[TiledCSR]:
    """This rank's blocks of Âᵀ with only the columns of training vertices: block j keeps the columns of rank j's
    training rows. ``train``: this rank's training mask (bool [m]). Collective at P > 1: each rank broadcasts its
    mask in turn (m bytes)."""
    own = train.to(device=ctx.device, dtype=torch.uint8)
    out = []
    for j, block in enumerate(blocks):
        mask = own if j == ctx.rank else torch.empty_like(own)
        if ctx.world_size > 1:
            dist.broadcast(mask, src=j, group=ctx.group)
        out.append(block.keep_columns(mask.bool()))
    return out


class BroadcastBuffers:
    """The two receive buffers, sized once for the widest SpMM of an epoch and viewed at each SpMM's width.

    A wider SpMM than planned (``Â·X`` once before training, at the feature width) gets a temporary per stage
    instead: the shared pair keeps the size the epoch needs, and the temporaries are gone after that one SpMM.
    """

    def __init__(self, rows: int, width: int, dtype: torch.dtype, device: torch.device) -> None:
        self.rows = rows
        self._flat = [torch.empty(rows * width, dtype=dtype, device=device) for _ in range(2)]

    def view(self, stage: int, width: int) -> torch.Tensor:
        flat = self._flat[stage % 2]
        if flat.numel() < self.rows * width:
            return torch.empty(self.rows, width, dtype=flat.dtype, device=flat.device)
        return flat[: self.rows * width].view(self.rows, width)

    @property
    def nbytes(self) -> int:
        return sum(f.numel() * f.element_size() for f in self._flat)


def local_spmm(blocks: list[TiledCSR], b: torch.Tensor, timer: PhaseTimer = NULL_TIMER,
               out: torch.Tensor | None = None, accumulator: BlockAccumulator | None = None) -> torch.Tensor:
    """``Â · B`` when one rank holds everything (P = 1), into ``out`` or a new tensor (not zeroed first:
    ``beta=0``); with ``accumulator``, its result for the one block (:meth:`SpMMOperator.run`)."""
    if accumulator is not None:
        if blocks[0].nnz:
            accumulator.add(blocks[0], b, 0)
        return accumulator.result()
    if out is None:
        out = torch.empty(blocks[0].rows, b.shape[1], dtype=b.dtype, device=b.device)
    with timer("spmm"):
        return blocks[0].matmul(b, out)


class BlockAccumulator:
    """``out = Σ`` of the blocks' products in the order they come: the first one writes, the others add.
    Every SpMM operator sums its stages through one.

    An operator's :meth:`SpMMOperator.run` takes another accumulator in its place (``accumulator=``): anything with
    this :meth:`add` and :meth:`result` then sees every nonempty block with the rows it multiplies (GAT's attention,
    :mod:`mggcn.distributed.attention`, computes its own per-block kernels that way on the same exchange)."""

    def __init__(self, out: torch.Tensor, timer: PhaseTimer) -> None:
        self.out, self.timer, self.started = out, timer, False

    def add(self, block: TiledCSR, rows: torch.Tensor, source: int = 0, columns: torch.Tensor | None = None) -> None:
        """``out (+)= block · rows``. ``source``: the rank whose rows ``rows`` are (the block's column block);
        ``columns``: for a compacted block, the sender's row of each of its columns (``rows[k]`` is the sender's
        row ``columns[k]``); None: ``rows`` are all the sender's rows, in order."""
        with self.timer("spmm"):
            block.matmul(rows, self.out, accumulate=self.started)
        self.started = True

    def result(self) -> torch.Tensor:
        return self.out if self.started else self.out.zero_()


class SpMMOperator:
    """What every SpMM across ranks is: ``H -> Â·H`` on this rank's rows, with autograd, as :mod:`mggcn.nn.model`
    calls it. A subclass implements :meth:`run` (one product with Â or Âᵀ, no autograd) and sets ``rows`` (m), and
    counts in ``sent_bytes`` / ``recv_bytes`` what its transport moved. Implementations: :class:`StagedSpMM` (the
    staged broadcast, through gloo/NCCL or shared memory) and
    :class:`mggcn.distributed.exchange.SparseExchangeSpMM` (only the rows a block references)."""

    ctx: DistContext
    rows: int
    sent_bytes: int
    recv_bytes: int
    # the original vertex id of each of this rank's rows (int64 [m], -1 on padding rows); None: the rows' ids in the
    # partition's order are the original ids (one process, no renumbering). GAT's attention dropout hashes them.
    vertex_ids: torch.Tensor | None = None
    adj_t_train: list[TiledCSR] | None = None  # Âᵀ's training columns, once use_training_columns kept them
    # which Â it applies (mggcn.config.OPERATORS), where it says so (mggcn.adjacency_operator's): a model refuses
    # another than its own; None: not said
    norm: str | None = None

    @property
    def has_training_columns(self) -> bool:
        return self.adj_t_train is not None

    def all_vertex_ids(self) -> torch.Tensor:
        """The original id of every rank's rows in rank order (int64 [P·m] on the operator's device, -1 on padding
        rows), from each rank's :attr:`vertex_ids`. Collective the first time (an all-gather; every rank calls it at
        the same point), then kept."""
        ctx = self.ctx
        ids = getattr(self, "_all_vertex_ids", None)
        if ids is None:
            if self.vertex_ids is None:
                ids = torch.arange(ctx.world_size * self.rows, dtype=torch.int64, device=ctx.device)
            else:
                ids = all_gather_rows(ctx, self.vertex_ids.to(device=ctx.device, dtype=torch.int64))
            self._all_vertex_ids = ids
        return ids

    @property
    def real_rows(self) -> int:
        """How many of this rank's rows are vertices: every partition puts a rank's padding rows after its vertices
        (:class:`~mggcn.distributed.partition.Partition`), so they are the first ``real_rows``."""
        real = getattr(self, "_real_rows", None)
        if real is None:
            if self.vertex_ids is None:
                if self.ctx.world_size > 1:
                    raise ValueError("the operator's vertex_ids tell its vertices from its padding rows: set them")
                real = self.rows
            else:
                real = int((self.vertex_ids >= 0).sum())
                if not bool((self.vertex_ids[:real] >= 0).all()):
                    raise ValueError("a rank's padding rows must come after its vertices")
            self._real_rows = real
        return real

    @property
    def num_vertices(self) -> int:
        """The vertices of every rank (:attr:`real_rows` summed). Collective the first time (every rank asks at the
        same point), then kept."""
        total = getattr(self, "_num_vertices", None)
        if total is None:
            count = torch.tensor([self.real_rows], dtype=torch.float64, device=self.ctx.device)
            total = self._num_vertices = int(self.sum_over_ranks(count).item())
        return total

    def __deepcopy__(self, memo: dict) -> SpMMOperator:
        """What ``copy.deepcopy`` of a module that holds the operator gets (torch cannot copy sparse CSR tensors):
        another operator on the same Â, Âᵀ, communicator and buffers — nothing writes the matrices, and the buffers
        hold nothing between two products — with counters of its own."""
        memo[id(self)] = twin = copy.copy(self)
        return twin

    def sum_over_ranks(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the ranks, in place (a layer's statistics over every vertex); returns it."""
        return all_reduce_sum(self.ctx, tensor)

    def __call__(self, b: torch.Tensor, out: OutSpec = None, grad_ws: GradSpec = None,
                 grad_on_train_rows: bool = False) -> torch.Tensor:
        """``Â·b`` with autograd; ``out``: a workspace buffer for the result (None: a new tensor); ``grad_ws``:
        where ``Âᵀ·∂C`` goes in backward (:data:`~mggcn.nn.workspace.GradSpec`: the workspace's gradient buffers,
        or a named buffer — b's own, which backward does not read; None: a new tensor). ``grad_on_train_rows``: the
        caller promises ``∂C`` is zero outside the training rows (the last layer of a model whose loss reads only
        those), so backward may multiply by Âᵀ's training columns (:meth:`use_training_columns`)."""
        if b.dim() != 2 or b.shape[0] != self.rows:  # fewer rows would be read past, more silently left out
            raise ValueError(f"Â·b: b must be [{self.rows}, d], a row per vertex of this rank's rows, got "
                             f"{list(b.shape)}")
        return _SpMMFunction.apply(b, self, out, grad_ws, grad_on_train_rows and self.has_training_columns)

    def attention_rows(self, rows: torch.Tensor, heads: int, spec: AttentionSpec,
                       timer: PhaseTimer = NULL_TIMER) -> torch.Tensor:
        """GAT's attention aggregation over this operator's blocks and exchange, on one tensor ``rows`` =
        ``[Z | e_src | e_dst]`` [m, H·C + 2H], a GAT layer's one GEMM's output
        (:func:`mggcn.distributed.attention.attention_rows`): [m, H, C], with autograd. The model calls it on the
        operator it is given, as it calls the SpMM."""
        return attention_rows(rows, heads, self, spec, timer)

    def run(self, b: torch.Tensor, transpose: bool = False, out: torch.Tensor | None = None,
            train_columns: bool = False, accumulator: BlockAccumulator | None = None) -> torch.Tensor:
        """``Â·b`` (or ``Âᵀ·b``; with ``train_columns`` Âᵀ's training columns) on this rank's rows ``b`` (m × d),
        into ``out`` (not ``b``) or a new tensor. ``accumulator``: instead of multiplying, hand each nonempty block
        and the rows of ``b`` it reads to ``accumulator.add`` (:class:`BlockAccumulator`) and return its
        :meth:`~BlockAccumulator.result` (``out`` unused)."""
        raise NotImplementedError

    def use_training_columns(self, train: torch.Tensor) -> None:
        """Keep Âᵀ's blocks restricted to the training vertices' columns (:func:`training_columns`; ``train`` this
        rank's training mask) for backward passes whose gradient is zero outside the training rows. Collective."""
        raise NotImplementedError


class StagedSpMM(SpMMOperator):
    """``C_i = Σ_j Â[i, j] · B_j`` across ranks; call it on the local rows ``B_i`` (m × d), get ``C_i``.

    Args:
        ctx: this rank's distributed context.
        adj: the P column blocks ``Â[i, j]`` of this rank (m × m).
        adj_t: the P column blocks ``Âᵀ[i, j]`` of this rank, for the backward pass.
        buffers: the shared broadcast buffers (m rows).
        outboxes: broadcast through these shared-memory outboxes instead of gloo's (an SpMM wider than them
            falls back to gloo, with temporary buffers).
        overlap: issue stage j+1's broadcast before stage j's multiply (default) or not.
        timer: where SpMM and communication-wait seconds are accounted.
    """

    def __init__(self, ctx: DistContext, adj: list[TiledCSR], adj_t: list[TiledCSR],
                 buffers: BroadcastBuffers | None = None, overlap: bool = True,
                 timer: PhaseTimer = NULL_TIMER, outboxes: SharedOutboxes | None = None) -> None:
        if len(adj) != ctx.world_size or len(adj_t) != ctx.world_size:
            raise ValueError(f"rank {ctx.rank}: {len(adj)} blocks of Â for a world of {ctx.world_size}")
        self.ctx, self.adj, self.adj_t = ctx, adj, adj_t
        self.rows = adj[0].rows
        self.buffers = buffers
        self.outboxes = outboxes
        self.overlap = overlap
        self.timer = timer
        self.skip = [b.nnz == 0 for b in adj], [b.nnz == 0 for b in adj_t]
        self.skip_train: list[bool] = []
        # bytes handed to / received from the broadcasts, the root counted as sending to each of the P - 1 others
        self.sent_bytes = self.recv_bytes = 0

    def use_training_columns(self, train: torch.Tensor) -> None:
        self.adj_t_train = training_columns(self.ctx, self.adj_t, train)
        self.skip_train = [b.nnz == 0 for b in self.adj_t_train]

    def run(self, b: torch.Tensor, transpose: bool = False, out: torch.Tensor | None = None,
            train_columns: bool = False, accumulator: BlockAccumulator | None = None) -> torch.Tensor:
        """One staged SpMM with Â (or Âᵀ, or Âᵀ's training columns) on this rank's rows ``b``, into ``out``
        (m × d, not ``b``) or a new tensor; no autograd. The broadcasts are the same with the training columns:
        only the multiplies shrink. ``accumulator``: see :meth:`SpMMOperator.run`."""
        blocks = self.adj_t if transpose else self.adj
        empty = self.skip[1] if transpose else self.skip[0]
        if transpose and train_columns:
            blocks, empty = self.adj_t_train, self.skip_train
        if self.ctx.world_size == 1:
            return local_spmm(blocks, b, self.timer, out, accumulator)
        b = b.contiguous()
        shm = self.outboxes if self.outboxes is not None and self.outboxes.fits(b) else None
        if shm is not None:
            call, shm.calls = shm.calls, shm.calls + 1
        elif self.buffers is None and self.outboxes is None:
            self.buffers = BroadcastBuffers(self.rows, b.shape[1], b.dtype, b.device)
        if accumulator is None:
            accumulator = BlockAccumulator(torch.empty_like(b) if out is None else out, self.timer)
        out = accumulator
        num_stages, rank = self.ctx.world_size, self.ctx.rank

        def receive_buffer(stage: int) -> torch.Tensor:
            if self.buffers is None:  # wider than the outboxes: a temporary for this SpMM
                return torch.empty_like(b)
            return self.buffers.view(stage, b.shape[1])

        def issue(stage: int) -> tuple[torch.Tensor, dist.Work, float]:
            issued = time.perf_counter()
            nbytes = b.numel() * b.element_size()
            if stage == rank:
                self.sent_bytes += (num_stages - 1) * nbytes
            else:
                self.recv_bytes += nbytes
            if shm is None:
                rows = b if stage == rank else receive_buffer(stage)
                work = dist.broadcast(rows, src=stage, group=self.ctx.group, async_op=True)
                return rows, held_until_shutdown(self.ctx, work), issued
            if stage == rank:
                with self.timer("comm_wait"):  # the root's one copy is the whole cost of its broadcast
                    shm.publish(b, call)
            rows = b if stage == rank else shm.outbox(stage, call, b.shape[1])
            return rows, shm.signal(stage), issued

        pending = issue(0)
        for stage in range(num_stages):
            rows, work, issued = pending
            if self.overlap and stage + 1 < num_stages:
                pending = issue(stage + 1)
            if self.overlap and stage == 0 and not empty[rank]:
                out.add(blocks[rank], b, rank)  # the local block needs no broadcast: it runs while the first two fly
            with self.timer("comm_wait"):
                work.wait()
            self.timer.mark("broadcast", issued, time.perf_counter())
            if not empty[stage] and not (self.overlap and stage == rank):
                out.add(blocks[stage], rows, stage)
            if not self.overlap and stage + 1 < num_stages:
                pending = issue(stage + 1)
        return out.result()


class _SpMMFunction(torch.autograd.Function):
    """Keeps nothing for backward but the operator: ``∂B = Âᵀ·∂C`` needs only the blocks of Âᵀ (so ``∂B`` may
    overwrite B's buffer). Results go to the workspace buffers given (``out`` forward, ``grad_ws`` backward) or to
    new tensors."""

    @staticmethod
    def forward(ctx, b: torch.Tensor, op: SpMMOperator, out: OutSpec,  # type: ignore[override]
                grad_ws: GradSpec, train_columns: bool) -> torch.Tensor:
        ctx.op, ctx.grad_ws, ctx.train_columns = op, grad_ws, train_columns
        dest = None if out is None else out[0].take(out[1], op.rows, b.shape[1], b)
        return op.run(b, out=dest)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        dest = grad_destination(ctx.grad_ws, ctx.op.rows, grad.shape[1], like=grad, avoid=grad)
        restricted = {"train_columns": True} if ctx.train_columns else {}
        return ctx.op.run(grad, transpose=True, out=dest, **restricted), None, None, None, None


def local_adj(adj: torch.Tensor | TiledCSR, adj_t: torch.Tensor | TiledCSR,
              timer: PhaseTimer = NULL_TIMER) -> StagedSpMM:
    """``H -> Â·H`` in one process, with the CSR of Âᵀ built once for backward (never ``Â.t()`` at run time).
    ``adj`` and ``adj_t``: torch sparse CSR tensors or tiled blocks."""
    def block(a):
        return a if isinstance(a, TiledCSR) else TiledCSR.from_torch(a)

    return StagedSpMM(DistContext(), [block(adj)], [block(adj_t)], timer=timer)
