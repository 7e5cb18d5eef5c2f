"""Capacity planning: what one rank holds while it trains, and what it receives per epoch — before anything runs.

Per rank, with ``m = ⌈n / P⌉`` rows, ``nnz_i`` nonzeros of Â in its rows (≈ (nnz + n) / P with the random
ordering; self loops included), ``ib`` bytes per CSR index (4 while a block has < 2³¹ nonzeros, else 8), float32
values and activations (4 B), ``d_0 = F`` features, ``d_L = C`` classes, ``W`` parameters::

    adjacency    Â and Âᵀ, P column blocks each:  2 · [T · (m + 1) · ib + nnz_i · (ib + 4)]
    A^T training columns
                 when the training split is at most half the vertices (or --train-columns on), Âᵀ's blocks once
                 more with only the training vertices' columns, for the last layer's backward
                 (distributed.spmm.keeps_training_columns):
                 T · (m + 1) · ib + t · nnz_i · (ib + 4)
    features     X, unless the GCN caches Â·X:    4 · m · F
    Â·X          when the first layer aggregates first without input dropout (computed once): 4 · m · F;
                 X is then released before the first epoch, and counts in ``activations`` (below)
    labels       y (int64), three split masks (bool), the loss's label positions (int64), its training rows and
                 their label positions (int64):                                               m · (19 + 16 · t)
    optimizer    weights, gradients, Adam's two moments, the flat all-reduce buffer:            5 · 4 · W
    buffers      P > 1: the two broadcast buffers (gloo) or this rank's two shared-memory outboxes (distributed.shm),
                 shared by every SpMM of the epoch:                                              2 · 4 · m · max(widths)
    activations  the peak over the epoch of what autograd keeps plus the gradients in flight (below)

``T`` is the number of CSR tiles of the P blocks: P without tiling (GPUs), ``P · ⌈m / tile_cols⌉`` on CPUs where
each block is cut into column tiles (:func:`mggcn.distributed.tiled.tile_columns`; their row pointers cost at most 12.5%
of the nonzeros' bytes). ``widths`` are :func:`mggcn.nn.model.spmm_widths` (the order policy decides them).
Activations are the buffers of the model's :class:`~mggcn.nn.workspace.Workspace`, allocated in the first epoch and
reused by every later one: every layer's output (the logits too), the ``H·Wᵀ`` an SpMM reads, the ``Â·H`` an
aggregate-first layer's GEMM keeps, and the loss's row maxima and labels' logits (float32) and hits (bool); at the loss,
two float32 vectors of row sums besides. A gradient overwrites the buffer of what it is the gradient of wherever
backward no longer reads it (:mod:`mggcn.nn.model`): the loss's over the logits, an SpMM's over its ``H·Wᵀ``, a GEMM's
over its ``Â·H``, and a GCN layer that multiplies first writes the gradient of σ's output over that output, a block of
rows at a time through one block buffer of about :data:`~mggcn.nn.model.MASK_CHUNK` elements on a CPU,
:data:`~mggcn.nn.model.MASK_CHUNK_GPU` on a GPU (``sigma block``). Other gradients (an aggregate-first layer's SpMM,
dropout's, GraphSAGE's and GIN's) go to two shared gradient buffers used in turn. :func:`activation_peak` walks an epoch
tensor by tensor. For a 2-layer GCN F → h → C with Â·X cached (the order policy's choice for F ≤ 2h, h ≥ C) it is ``4 ·
m · (h + 2C) + 17 · m`` plus the block buffer (≤ 2 MiB on a CPU): ``out 0`` (h, then its gradient), ``H·W`` and the
logits (C each, then theirs), 9 bytes per row for the loss and 8 for its row sums.
Before the first epoch, while Â·X is computed, the rank holds X instead of the activations, and at P > 1 the two
temporaries of ``4 · m · F`` that receive Â·X's broadcasts: the activations part is the larger of the two peaks,
``max(epoch peak, 4 · m · F · (1 + 2 · [P > 1]))``.

MG-GCN's paper estimates ``4 · m · [d_0 + Σ_l max(d_l, d_l+1) + 3 · max_l min(d_l, d_l+1)] + 2 · 8 · nnz / P``:
one buffer per layer for its output, reused for its gradient, and three shared ones. Ours differs in small ways: σ's
backward reads bits kept of the output rather than the output, an aggregate-first hidden layer keeps its ``Â·H`` and
its SpMM's gradient needs a buffer of its own, Â·X replaces the first layer's SpMM, and the broadcast buffers are
sized by the epoch's widest SpMM rather than the features.

Not counted: the Python and PyTorch runtime (``mggcn bench`` measures it in the same run: a process that imports
torch and mggcn), the sparse library's workspace and allocator slack. The setup before the first epoch is not a
separate term: a rank reading its share of a prepared directory holds at most this plus one block
(``tests/training/test_setup_memory.py``, at P = 1, 2 and 3), so that the plan plus the runtime is the peak of the
whole process; a rank that reads a dataset whole holds the input graph too while it cuts its shard (at P > 1 the
whole graph).

Communication per epoch, received by each rank: ``(P − 1) · m · w · 4`` bytes per SpMM of width ``w`` (the
broadcasts), plus ``≈ 2 · (P − 1) / P · 4 · W`` for the gradient all-reduce; Â·X costs ``(P − 1) · m · F · 4``
once.

Legend: n = vertices, m = rows per rank, F = features, C = classes, W = parameters,
t = fraction of vertices in the training split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from mggcn.distributed.spmm import keeps_training_columns
from mggcn.distributed.tiled import gather_chunk_bytes, index_bytes, num_tiles
from mggcn.nn.model import aggregate_first, mask_chunk_rows, spmm_widths
from mggcn.utils.errors import ConfigError
from mggcn.utils.units import format_bytes

__all__ = ["DatasetSize", "PRESETS", "MemoryPlan", "plan_memory", "activation_peak", "num_parameters",
           "format_plan"]

FLOAT = 4
INT64 = 8
BOOL = 1


@dataclass(frozen=True)
class DatasetSize:
    """What the planner needs to know of a graph. ``edges``: nonzeros of A (both directions of an undirected
    edge, no self loops); ``train``: fraction of vertices in the training split."""

    name: str
    nodes: int
    edges: int
    features: int
    classes: int
    train: float = 0.5
    source: str = ""


# Sizes as PyG/OGB load them (edge_index as the trainer sees it).
PRESETS = {
    "products": DatasetSize(
        "ogbn-products", 2_449_029, 123_718_280, 100, 47, train=196_615 / 2_449_029,
        source="OGB: 61,859,140 undirected edges; PyG's edge_index holds both directions: 123,718,280"),
    "papers100M": DatasetSize(
        "ogbn-papers100M", 111_059_956, 2 * 1_615_685_872, 128, 172, train=1_207_179 / 111_059_956,
        source="OGB: 1,615,685,872 directed citation edges, made undirected for training (as OGB's examples do): "
               "3,231,371,744 nonzeros"),
    "reddit": DatasetSize(
        "reddit", 232_965, 114_615_892, 602, 41, train=153_431 / 232_965,
        source="PyG Reddit: edge_index [2, 114,615,892] (both directions)"),
    "proteins": DatasetSize(
        "proteins", 8_745_542, 1_309_240_502, 128, 256, train=0.5,
        source="the protein similarity graph of CAGNET and MG-GCN (as those papers give it): 8,745,542 vertices, "
               "1,309,240,502 nonzeros, 128 features, 256 classes; its split is not given: half the vertices train"),
}


def activation_peak(rows: int, dims: Sequence[int], *, order: str = "auto", caches_input: bool = True,
                    train_rows: int = 0, dropout: float = 0.0, input_dropout: float = 0.0, model: str = "gcn",
                    train_eps: bool = False, device: str = "cpu") -> tuple[int, dict]:
    """Peak bytes of the tensors a training epoch holds on one rank beyond the shard and the weights.

    Walks the forward and backward passes of :class:`mggcn.nn.model.GCN` (``model="sage"``:
    :class:`~mggcn.nn.sage.GraphSAGE`; ``"gin"``: :class:`~mggcn.nn.gin.GIN`, ``train_eps`` its ε) (with its
    :class:`~mggcn.nn.workspace.Workspace`) and the loss of :func:`mggcn.training.trainer.train_shard` tensor by tensor:
    workspace buffers stay (``ws:`` names, each as large as its widest use), other tensors are freed where the code
    drops their last reference. Returns ``(peak, alive)``, ``alive`` naming what is held at the peak of an epoch
    after the first. With dropout (approximate): its output and 1-byte mask per dropped input, kept until that
    layer's backward, and the gradient of the dropped input. ``train_rows`` (this rank's training rows) only sizes
    vectors of the loss, below the resolution that matters here, and is kept for callers. ``device`` (``cpu`` or
    ``cuda``) sizes σ's block buffer.
    """
    m, L = rows, len(dims) - 1
    ws: dict[str, int] = {}

    def epoch() -> tuple[int, dict]:
        live: dict[str, int] = {}
        peak, alive = 0, {}

        def note() -> None:
            nonlocal peak, alive
            total = sum(ws.values()) + sum(live.values())
            if total > peak:
                peak, alive = total, {**{f"ws:{k}": v for k, v in ws.items()}, **live}

        def alloc(name: str, width: int, item: int = FLOAT) -> str:
            live[name] = m * width * item
            note()
            return name

        def take(name: str, width: int, item: int = FLOAT, rows: int = m) -> str:
            ws[name] = max(ws.get(name, 0), rows * width * item)
            note()
            return f"ws:{name}"

        def take_grad(width: int, avoid: str) -> str:
            return take("grad b" if avoid == "ws:grad a" else "grad a", width)

        def free(*names: str) -> None:
            for name in names:
                live.pop(name, None)

        for i in range(L):  # forward: every output on the workspace (the logits too: the trainer asks)
            d_in, d_out = dims[i], dims[i + 1]
            # the trainer passes the cached Â·X whenever there is no input dropout: the first layer aggregates first
            agg = aggregate_first(d_in, d_out, i == 0, order) or (i == 0 and caches_input and model != "gcn")
            cached = i == 0 and caches_input and agg
            if (input_dropout if i == 0 else dropout) > 0:
                alloc(f"dropped input {i}", d_in)
                if i > 0:
                    alloc(f"dropout mask {i}", d_in, 1)
            if agg and not cached:
                take(f"A.H {i}", d_in)  # the SpMM's result, kept by the GEMM for dW
            if model == "gin":  # the local term (1+ε)·H, added to the SpMM's result (or to the cached Â·X)
                alloc(f"(1+eps) H {i}", d_in if agg else d_out)
                if cached and train_eps:  # ε needs a gradient: Â·X + (1+ε)·X is a new tensor, kept by the GEMM
                    alloc("A.X + (1+eps) X", d_in)
                elif cached:
                    take("A.H 0", d_in)
                free(f"(1+eps) H {i}")
            if i == 0 and agg and not (model != "gcn" and not cached):
                free("dropped input 0")  # X needs no gradient and, for the GCN, no GEMM reads it
            if not agg:
                take(f"H.W {i}" if model == "gin" and train_eps else "H.W", d_out)
            if model == "gin":
                take(f"mlp {i}", d_out)
            if model == "sage":
                take("root", d_out)  # H·W_rᵀ, read once by the addition
            take(f"out {i}", d_out)
        # the loss: row maxima, the labels' logits and hits, the gradient (computed in the forward, over the
        # logits), two vectors of row sums
        take("row max", 1)
        take("label logit", 1)
        take("label hits", 1, BOOL)
        alloc("label comparisons", 1, 2 * BOOL)
        free("label comparisons")
        grad = f"ws:out {L - 1}"
        alloc("row sums", 1)
        alloc("row sums / scale", 1)
        free("row sums", "row sums / scale")
        for i in reversed(range(L)):  # backward
            d_in, d_out = dims[i], dims[i + 1]
            agg = aggregate_first(d_in, d_out, i == 0, order) or (i == 0 and caches_input and model != "gcn")
            if model != "gcn":
                grad = _branched_backward(i, d_in, d_out, agg, grad, model, train_eps, alloc, take_grad, free)
                if i == 0:
                    break
                if f"dropout mask {i}" in live:
                    new = alloc(f"grad dropped {i}", d_in)
                    free(f"dropout mask {i}", f"dropped input {i}")
                    grad = new
                continue
            if i == 0:  # no gradient for X: the GEMM computes dW only, after the SpMM (into H·W) when it multiplies
                if not agg:  # first
                    take("H.W", d_out)
                break
            if agg:
                inner = take(f"A.H {i}", d_in)  # GEMM backward: the gradient of Â·H, over it
                grad = take_grad(d_in, avoid=inner)  # SpMM backward with Âᵀ
            else:
                inner = take("H.W", d_out)  # SpMM backward with Âᵀ, over H·W
                if f"dropout mask {i}" in live:
                    grad = take_grad(d_in, avoid=inner)  # GEMM backward
                else:  # GEMM backward over σ's output with σ's backward, a block of rows at a time
                    take("sigma block", d_in, rows=mask_chunk_rows(m, d_in, device))
                    grad = f"ws:out {i - 1}"
            if f"dropout mask {i}" in live:
                new = alloc(f"grad dropped {i}", d_in)
                free(f"dropout mask {i}", f"dropped input {i}")
                grad = new
            # σ's backward overwrites the gradient in place
        free(*list(live))
        return peak, alive

    epoch()  # the first epoch sizes the workspace
    return epoch()


def _branched_backward(i: int, d_in: int, d_out: int, agg: bool, grad: str, model: str, train_eps: bool,
                       alloc, take_grad, free) -> str:
    """The backward of a GraphSAGE or GIN layer in :func:`activation_peak`'s walk; returns the name of the gradient
    of the layer's input (fresh tensors: the input feeds two branches, see :mod:`mggcn.nn.sage`)."""
    first = i == 0
    if model == "gin":  # the MLP's second GEMM, then σ in place; the gradient of its input goes on the workspace
        inner = take_grad(d_out, avoid=grad)
        free(grad)
        grad = inner
    if agg:
        if first and not (model == "gin" and train_eps):
            return grad  # the first GEMM (and GraphSAGE's root GEMM) computes dW only
        inner = take_grad(d_in, avoid=grad)  # the GEMM (lin_l, or the MLP's first): the gradient of the sum
        if model == "sage" and not first:
            alloc(f"grad root {i}", d_in)
        free(grad)
        if model == "gin" and train_eps:
            alloc(f"grad eps {i}", d_in)  # ∂ε = Σ ∂Z ⊙ H: one product, summed
            free(f"grad eps {i}")
        if first:
            return inner
        alloc(f"grad spmm {i}", d_in)  # Âᵀ·∂, a new tensor
        if model == "gin":
            alloc(f"grad local {i}", d_in)  # (1+ε)·∂
            free(f"grad local {i}")  # autograd adds one of the two into the other
        free(inner, f"grad root {i}")
        return f"grad spmm {i}"
    inner = take_grad(d_out, avoid=grad)  # the SpMM with Âᵀ
    if model == "gin":
        alloc(f"grad local {i}", d_out)
        if train_eps:
            alloc(f"grad eps {i}", d_out)
            free(f"grad eps {i}")
        free(f"grad local {i}")
    if first:
        return inner
    alloc(f"grad gemm {i}", d_in)  # the GEMM's (lin_l, the MLP's first) input gradient, a new tensor
    if model == "sage":
        alloc(f"grad root {i}", d_in)
        free(f"grad root {i}")
    free(grad, inner)
    return f"grad gemm {i}"


@dataclass
class MemoryPlan:
    """Per-rank bytes by part, the peak total, and the communication volume per epoch."""

    nprocs: int
    rows: int
    widths: list[int]
    parts: dict[str, int] = field(default_factory=dict)
    activation_detail: dict[str, int] = field(default_factory=dict)
    comm_spmm: int = 0
    comm_allreduce: int = 0
    comm_once: int = 0

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def fits(self, capacity: int) -> bool:
        return self.total <= capacity


def plan_memory(num_nodes: int, edges: int, features: int, classes: int, hidden: Sequence[int], nprocs: int = 1, *,
                order: str = "auto", dropout: float = 0.0, input_dropout: float = 0.0, train: float = 0.5,
                rank_nnz: int | None = None, rank_nnz_t: int | None = None,
                symmetric: bool = False, tile_cols: int | None = None, model: str = "gcn",
                train_eps: bool = False, rank_nnz_train_t: int | None = None,
                train_columns: str = "auto", gather: bool = False, device: str = "cpu") -> MemoryPlan:
    """Per-rank memory of training ``[features, *hidden, classes]`` on a graph of ``num_nodes`` vertices and
    ``edges`` nonzeros (self loops are added: ``nnz = edges + num_nodes``), at ``nprocs`` ranks.

    Args:
        train: fraction of the vertices in the training split (the loss keeps their rows and labels).
        rank_nnz, rank_nnz_t: this rank's nonzeros of Â and Âᵀ when known (default ``⌈nnz / P⌉``);
            ``rank_nnz_train_t`` those of Âᵀ's training columns (default ``⌈train · nnz / P⌉``), kept when
            :func:`~mggcn.distributed.spmm.keeps_training_columns` says so for ``train_columns`` (its ``mode``).
        symmetric: Â = Âᵀ (an undirected graph with the ``sym`` norm): the shard shares its blocks of Â as Âᵀ's.
        tile_cols: columns per CSR tile on a CPU (:func:`mggcn.distributed.tiled.tile_columns`; None: untiled, as on
            GPUs).
        model: ``gcn``, ``sage`` or ``gin`` (``train_eps``: GIN's learnable ε): its parameters
            (:func:`num_parameters`) and activations (:func:`activation_peak`); GraphSAGE's and GIN's Â adds no
            self loops (``nnz = edges``).
        gather: the CPU's gather kernel runs (:func:`~mggcn.distributed.tiled.gather_kernel`: float32, FBGEMM); it
            multiplies whole blocks (``tile_cols`` None), each SpMM holding one chunk of rows in flight
            (:func:`~mggcn.distributed.tiled.gather_chunk_bytes`, under 1 MiB).
        device: ``cpu`` or ``cuda``, the size of σ's block buffer (:func:`~mggcn.nn.model.mask_chunk_rows`).
    """
    if nprocs < 1 or num_nodes < nprocs:
        raise ConfigError(f"nprocs must be between 1 and the {num_nodes} vertices, got {nprocs}", "nprocs")
    dims = [features, *hidden, classes]
    m = -(-num_nodes // nprocs)
    loops = num_nodes if model == "gcn" else 0
    nnz_rank = -(-(edges + loops) // nprocs) if rank_nnz is None else rank_nnz
    nnz_rank_t = nnz_rank if rank_nnz_t is None else rank_nnz_t
    caches = input_dropout == 0.0
    widths = spmm_widths(dims, order, caches)
    plan = MemoryPlan(nprocs=nprocs, rows=m, widths=widths)

    def blocks(nnz: int) -> int:
        ib = index_bytes(nnz, m)
        return nprocs * num_tiles(m, tile_cols) * (m + 1) * ib + nnz * (ib + FLOAT)

    cached = caches and aggregate_first(dims[0], dims[1], True, order)
    params = num_parameters(dims, model, train_eps)
    ntrain = math.ceil(train * m)
    plan.parts["adjacency A"] = blocks(nnz_rank)
    plan.parts["adjacency A^T"] = 0 if symmetric else blocks(nnz_rank_t)
    if keeps_training_columns(math.ceil(train * num_nodes), num_nodes, len(dims) - 1, train_columns):
        nnz_train = math.ceil(train * nnz_rank_t) if rank_nnz_train_t is None else rank_nnz_train_t
        plan.parts["A^T training columns"] = blocks(nnz_train)
    plan.parts["features X"] = FLOAT * m * features
    plan.parts["A.X (cached)"] = FLOAT * m * features if cached else 0
    # y, 3 masks; the loss's label positions (every row's, the training rows') and training rows
    plan.parts["labels, splits"] = m * (2 * INT64 + 3) + 2 * INT64 * ntrain
    plan.parts["optimizer"] = 5 * FLOAT * params
    plan.parts["broadcast buffers"] = 2 * FLOAT * m * max(widths or [features]) if nprocs > 1 else 0
    if gather and tile_cols is None:
        plan.parts["SpMM row chunk"] = max(gather_chunk_bytes(m, w, nnz_rank) for w in widths + [features])
    peak, detail = activation_peak(m, dims, order=order, caches_input=caches, train_rows=ntrain,
                                   dropout=dropout, input_dropout=input_dropout, model=model, train_eps=train_eps,
                                   device=device)
    before = 2 * FLOAT * m * features if cached and nprocs > 1 and features > max(widths or [0]) else 0
    if cached and model == "gcn":  # X lives until Â·X is computed (GraphSAGE and GIN read it every epoch)
        plan.parts["features X"] = 0
        before += FLOAT * m * features
    plan.parts["activations"] = max(peak, before)
    plan.activation_detail = detail
    plan.comm_spmm = sum((nprocs - 1) * m * w * FLOAT for w in widths)
    plan.comm_allreduce = round(2 * (nprocs - 1) / nprocs * FLOAT * (params + 5))
    plan.comm_once = (nprocs - 1) * m * features * FLOAT if cached else 0
    return plan


def num_parameters(dims: Sequence[int], model: str = "gcn", train_eps: bool = False) -> int:
    """Trained parameters of ``model`` with layer sizes ``dims``: per layer ``d_in·d_out + d_out`` for the GCN,
    ``2·d_in·d_out + d_out`` for GraphSAGE (W_l, b, W_r), ``d_in·d_out + d_out² + 2·d_out`` (+ 1 for a learnable
    ε) for GIN's MLP."""
    pairs = list(zip(dims[:-1], dims[1:], strict=True))
    if model == "sage":
        return sum(2 * a * b + b for a, b in pairs)
    if model == "gin":
        return sum(a * b + b * b + 2 * b + int(train_eps) for a, b in pairs)
    return sum(a * b + b for a, b in pairs)


def format_plan(plan: MemoryPlan, name: str, capacity: int | None = None) -> str:
    """The table ``mggcn plan`` prints."""
    lines = [f"{name}: P = {plan.nprocs}, {plan.rows:,} rows per rank, SpMM widths per epoch {plan.widths}",
             "per-rank memory:"]
    for part, size in plan.parts.items():
        lines.append(f"  {part:<20} {format_bytes(size):>12}")
    lines.append(f"  {'total':<20} {format_bytes(plan.total):>12}")
    lines.append(f"communication per epoch, received per rank: {format_bytes(plan.comm_spmm)} (SpMM broadcasts) "
                 f"+ {format_bytes(plan.comm_allreduce)} (gradient all-reduce); once before training: "
                 f"{format_bytes(plan.comm_once)} (A.X)")
    if capacity is not None:
        verdict = "fits" if plan.fits(capacity) else "does NOT fit"
        lines.append(f"{verdict} in {format_bytes(capacity)} per device ({100 * plan.total / capacity:.0f}% used; "
                     "plus the runtime, e.g. ~0.5 GiB CUDA context, and the sparse library's workspace)")
    return "\n".join(lines)
