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
    features     X, unless the model reads only Â·X (the GCN, a GIN with a fixed ε):    4 · m · F
    Â·X          without input dropout (computed once; the first layer reads it whatever the order policy):
                 4 · m · F; where the model reads X no more, X is released before the first epoch and counts in
                 ``activations`` (below)
    labels       y (int64), three split masks (bool), the loss's label positions (int64), its training rows and
                 their label positions (int64):                                               m · (19 + 16 · t)
                 multi-label (``multilabel``: y uint8 [m, C] of 0/1): y, three masks, each row's label count
                 (int64) and loss factor (float32), the training rows (int64):        m · (C + 15 + 8 · t)
    optimizer    weights, gradients, Adam's two moments, the flat all-reduce buffer:            5 · 4 · W
    kernel indices  GAT: its attention kernels' row ids, 4 bytes per nonzero of Â's and Âᵀ's blocks
    buffers      P > 1: the two broadcast buffers (gloo) or this rank's two shared-memory outboxes (distributed.shm),
                 shared by every SpMM of the epoch:                                              2 · 4 · m · max(widths)
    activations  the peak over the epoch of what autograd keeps plus the gradients in flight (below)

``T`` is the number of CSR tiles of the P blocks: P without tiling (GPUs), ``P · ⌈m / tile_cols⌉`` on CPUs where
each block is cut into column tiles (:func:`mggcn.kernels.policy.tile_columns`; their row pointers cost at most 12.5%
of the nonzeros' bytes). ``widths`` are the model's exchanges (:meth:`~mggcn.nn.model.LayerStack.exchange_widths`:
the SpMMs' :func:`~mggcn.nn.model.spmm_widths`, which the order policy decides; GAT's below).
Activations are the buffers of the model's :class:`~mggcn.nn.workspace.Workspace`, allocated in the first epoch and
reused by every later one: every layer's output (the logits too), the ``H·Wᵀ`` an SpMM reads, the ``Â·H`` an
aggregate-first layer's GEMM keeps, and the loss's row maxima and labels' logits (float32) and hits (bool); at the loss,
two float32 vectors of row sums besides (multi-label: the predicted labels, 1 byte per label, and two int64 counts per
row on the workspace, and one float32 vector of row losses). A gradient overwrites the buffer of what it is the
gradient of wherever backward no longer reads it (:mod:`mggcn.nn.model`): the loss's over the logits, an SpMM's over
its ``H·Wᵀ``, a GEMM's over its ``Â·H``, and a GCN layer that multiplies first writes the gradient of σ's output over
that output, a block of rows at a time through one block buffer of about :data:`~mggcn.kernels.policy.MASK_CHUNK`
elements on a CPU, :data:`~mggcn.kernels.policy.MASK_CHUNK_GPU` on a GPU (``sigma block``). Other gradients (an
aggregate-first layer's SpMM, dropout's, GraphSAGE's and GIN's where they do not go over their input) go to two shared
gradient buffers used in turn. :func:`activation_peak` walks an epoch tensor by tensor. For a 2-layer GCN F → h → C
with Â·X cached (whenever there is no input dropout) and h ≥ C it is ``4 · m · (h + 2C) + 17 · m`` plus the block
buffer (≤ 2 MiB on a CPU): ``out 0`` (h, then its gradient), ``H·W`` and the logits (C each, then theirs), 9 bytes per
row for the loss and 8 for its row sums.
Before the first epoch, while Â·X is computed, the rank holds X instead of the activations, and at P > 1 the two
temporaries of ``4 · m · F`` that receive Â·X's broadcasts: the activations part is the larger of the two peaks,
``max(epoch peak, 4 · m · F · (1 + 2 · [P > 1]))``.

MG-GCN's paper estimates ``4 · m · [d_0 + Σ_l max(d_l, d_l+1) + 3 · max_l min(d_l, d_l+1)] + 2 · 8 · nnz / P``:
one buffer per layer for its output, reused for its gradient, and three shared ones. Ours differs in small ways: σ's
backward reads bits kept of the output rather than the output, an aggregate-first hidden layer keeps its ``Â·H`` and
its SpMM's gradient needs a buffer of its own, Â·X replaces the first layer's SpMM, and the broadcast buffers are
sized by the epoch's widest SpMM rather than the features.

Not counted: the Python and PyTorch runtime (``mggcn bench`` measures it in the same run: a process that imports
torch and mggcn), the sparse library's workspace and allocator slack, and with ``bf16`` on a CPU without bfloat16
instructions the float32 copies torch's bfloat16 GEMM makes of its operands (up to about half the plan again). The
setup before the first epoch is not a separate term: a rank reading its share of a prepared directory holds at most
this plus one block (``tests/training/test_setup_memory.py``, at P = 1, 2 and 3), so that the plan plus the runtime
is the peak of the whole process; a rank that reads a dataset whole holds the input graph too while it cuts its
shard (at P > 1 the whole graph).

GAT (``--model gat``, ``H`` heads; a layer's ``Z`` has ``z = H·C`` columns, the last layer's ``H · classes`` before
its mean over heads) multiplies first, caches no Â·X and keeps nothing on the workspace but the loss's vectors;
:meth:`mggcn.nn.gat.GAT.plan_layer` and ``plan_layer_backward`` walk each layer. Per layer it keeps for backward
the GEMM's ``[Z | e_src | e_dst]``, ``4 · m · (z + 2H)``, the attention's output and the biased output (σ in place),
``4 · m · z`` each, and ``lse``, ``4 · m · H``; the last layer's output is the logits, ``4 · m · C``. The layer in
flight adds the running max and sum, forward a copy of the rows it exchanges (``m · (z + H)``, at P > 1), backward
the rows it exchanges (``m · (z + 3H)``, with ``c``), the gradient ``[∂Z | ∂e_src | ∂e_dst]`` ``m · (z + 2H)`` and the
partial ``∂e_dst`` ``[P·m, H]``, and one step of the per-edge kernels on a chunk of ``min(EDGE_CHUNK, nonzeros of a
tile)`` edges: ``12 · H`` bytes per edge forward, ``20 · H`` backward, plus per row of the chunk the gather's output
``4 · z`` and per tile a head-major copy of its ``Z`` columns (``4 · w · z``, ``w`` the tile's columns). So a 2-layer
GAT F → H·C → classes peaks in the last layer's backward at
``4 · m · (3 · H·C + 5 · H · classes + (11 + P) · H + classes) + step`` (or in the first layer's backward, when its
``Z`` is the wider by far). The kernels keep their chunks' row ids, 4 bytes per nonzero of Â's and Âᵀ's blocks
(``kernel indices``). Its exchanges are ``z + H`` and ``z + 3H`` wide per layer (the broadcast buffers are sized by
the widest), and each layer's backward all-reduces ``P·m·H`` score gradients: ``2 · (P − 1) · m · H · 4`` bytes
received per layer (``the layers' all-reduces``). The walk counts one chunk in flight; where several CPU threads
take the kernels' items, each holds one of at most :data:`~mggcn.kernels.attention.ITEM_EDGES` edges (in all no more
than one ``EDGE_CHUNK``). Not counted: attention dropout's per-edge masks and hash keys (a chunk's,
transient).

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
from mggcn.kernels.policy import index_bytes, mask_chunk_rows
from mggcn.kernels.tiled import gather_chunk_bytes, num_tiles
from mggcn.nn.model import LayerStack, aggregate_first
from mggcn.nn.models import model_type, num_parameters, option_keyword
from mggcn.nn.workspace import BufferWalk
from mggcn.utils.errors import ConfigError
from mggcn.utils.units import format_bytes

__all__ = ["DatasetSize", "PRESETS", "MemoryPlan", "plan_memory", "activation_peak", "plan_need", "format_plan"]

FLOAT = 4
# What the processes of a CPU job hold besides the plans, in the machine's memory: the first process's Python, torch
# and mggcn (the command's own at P = 1), and each further rank's pages of its own (forked from a server whose pages
# they share); a little above the whole job's proportional set size over the plans' sum, measured at P = 1, 2 and 3.
CPU_RUNTIME = 5 << 26  # 0.3125 GiB
CPU_RUNTIME_PER_RANK = 1 << 27  # 0.125 GiB
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
                    train_eps: bool = False, device: str = "cpu", precision: str = "fp32", block_edges: int = 0,
                    columns: int | None = None, nprocs: int = 1, multilabel: bool = False,
                    **options) -> tuple[int, dict]:
    """Peak bytes of the tensors a training epoch holds on one rank beyond the shard and the weights.

    Walks the forward and backward passes of :class:`mggcn.nn.model.GCN` (``model="sage"``:
    :class:`~mggcn.nn.sage.GraphSAGE`; ``"gin"``: :class:`~mggcn.nn.gin.GIN`, ``train_eps`` its ε) (with its
    :class:`~mggcn.nn.workspace.Workspace`) and the loss of :func:`mggcn.training.trainer.train_shard` tensor by tensor:
    workspace buffers stay (``ws:`` names, each as large as its widest use), other tensors are freed where the code
    drops their last reference. Returns ``(peak, alive)``, ``alive`` naming what is held at the peak of an epoch
    after the first. With dropout (approximate): its output and 1-byte mask per dropped input, kept until that
    layer's backward, and the gradient of the dropped input. ``train_rows`` (this rank's training rows) only sizes
    vectors of the loss, below the resolution that matters here, and is kept for callers. ``device`` (``cpu`` or
    ``cuda``) sizes σ's block buffer. ``precision``: the activations' element size (bf16: 2 bytes; the loss then
    reads a float32 copy of the logits). ``multilabel``: the loss is binary cross-entropy with logits
    (:class:`~mggcn.nn.loss.MaskedBinaryCrossEntropy`).

    A model whose layers the plan walks whole (``plans_whole_layers``: GAT, :meth:`~mggcn.nn.gat.GAT.plan_layer`)
    is also given ``block_edges`` and ``columns`` (the nonzeros and columns of one block of Â, a tile's on a CPU;
    ``columns`` None: ``rows``), ``nprocs`` and its own ``options`` (GAT's ``heads``).
    """
    kind = model_type(model)
    ws: dict[str, int] = {}
    layers = {**options, "block_edges": block_edges, "columns": rows if columns is None else columns,
              "nprocs": nprocs} if kind.plans_whole_layers else None

    def epoch() -> tuple[int, dict]:
        walk = BufferWalk(rows, ws, device, float_bytes(precision))
        logits = _plan_forward(walk, dims, kind, order, caches_input, dropout, input_dropout, train_eps, layers,
                               options)
        grad = _plan_loss(walk, logits, dims[-1], multilabel)
        _plan_backward(walk, dims, kind, order, caches_input, train_eps, grad, layers)
        walk.free(*list(walk.live))
        return walk.peak, walk.alive

    epoch()  # the first epoch sizes the workspace
    return epoch()


def _aggregates_first(dims: Sequence[int], i: int, order: str, caches_input: bool) -> bool:
    """Whether layer ``i`` aggregates before its GEMM: by the order policy, or, for layer 0, because the trainer
    passes the cached Â·X whenever there is no input dropout and the layer then takes it whatever the order policy
    says."""
    return aggregate_first(dims[i], dims[i + 1], i == 0, order) or (i == 0 and caches_input)


def _plan_forward(walk: BufferWalk, dims: Sequence[int], kind: type[LayerStack], order: str, caches_input: bool,
                  dropout: float, input_dropout: float, train_eps: bool, layers: dict | None, options: dict) -> str:
    """The forward pass: every output on the workspace (the logits too: the trainer asks), or, for a model whose
    layers are walked whole (``layers``: their keywords), where its layers put them. Returns the logits' name.
    ``options``: the model's own settings."""
    logits = f"ws:out {len(dims) - 2}"
    for i in range(len(dims) - 1):
        d_in, d_out = dims[i], dims[i + 1]
        if (input_dropout if i == 0 else dropout) > 0:
            walk.alloc(f"dropped input {i}", d_in)
            if i > 0:
                walk.alloc(f"dropout mask {i}", d_in, 1)
        if layers is not None:
            logits = kind.plan_layer(walk, i, dims, **layers)
            continue
        agg = _aggregates_first(dims, i, order, caches_input)
        cached = i == 0 and caches_input and agg
        if agg and not cached:
            walk.take(f"A.H {i}", d_in)  # the SpMM's result, kept by the GEMM for dW
        kind.plan_before_gemm(walk, i, d_in, d_out, agg, cached, train_eps)
        if i == 0 and agg and (cached or not kind.reads_input(train_eps)):
            walk.free("dropped input 0")  # X needs no gradient and, for the GCN, no GEMM reads it
        transform = None if agg else kind.plan_transform_buffer(i, train_eps)
        if transform is not None:
            walk.take(transform, d_out)
        kind.plan_after_gemm(walk, i, d_out, **options)
        walk.take(f"out {i}", d_out)
        if options.get("batch_norm") and i < len(dims) - 2:  # x̂, read by the norm's backward; a block's squares
            walk.take(f"norm {i}", d_out)
            walk.take("sigma block", d_out, rows=mask_chunk_rows(walk.rows, d_out, walk.device))
    return logits


def _plan_loss(walk: BufferWalk, logits: str, classes: int, multilabel: bool = False) -> str:
    """The loss: row maxima, the labels' logits and hits, the gradient (computed in the forward, over the
    ``logits``), two vectors of row sums (multi-label: the predicted labels and micro-F1's two counts per row, the
    gradient, one vector of row losses). Returns the name of what holds the gradient of the logits. Logits of lower
    precision are read as a float32 copy, whose gradient the cast's backward turns into a new tensor of the logits'
    type."""
    low = walk.float_bytes < FLOAT
    if low:
        walk.alloc("logits float32", classes, FLOAT)
    if multilabel:
        walk.take("predicted labels", classes, BOOL)
        walk.take("label counts", 2, INT64)
        walk.alloc("row losses", 1, FLOAT)
        walk.free("row losses")
    else:
        walk.take("row max", 1, FLOAT)
        walk.take("label logit", 1, FLOAT)
        walk.take("label hits", 1, BOOL)
        walk.alloc("label comparisons", 1, 2 * BOOL)
        walk.free("label comparisons")
        walk.alloc("row sums", 1, FLOAT)
        walk.alloc("row sums / scale", 1, FLOAT)
        walk.free("row sums", "row sums / scale")
    grad = logits
    if low:
        grad = walk.alloc("grad logits", classes)
        walk.free("logits float32")
    return grad


def _plan_backward(walk: BufferWalk, dims: Sequence[int], kind: type[LayerStack], order: str, caches_input: bool,
                   train_eps: bool, grad: str, layers: dict | None) -> None:
    """The backward pass, from ``grad`` (the gradient of the logits)."""
    for i in reversed(range(len(dims) - 1)):
        d_in, d_out = dims[i], dims[i + 1]
        if layers is not None:
            grad = kind.plan_layer_backward(walk, i, dims, grad, **layers)
        else:
            grad = kind.plan_backward(walk, i, d_in, d_out, _aggregates_first(dims, i, order, caches_input),
                                      grad, train_eps)
        if i == 0:
            break
        if f"dropout mask {i}" in walk.live:
            new = walk.alloc(f"grad dropped {i}", d_in)
            walk.free(f"dropout mask {i}", f"dropped input {i}", *([] if grad.startswith("ws:") else [grad]))
            grad = new
        # σ's backward overwrites the gradient in place


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
    comm_layers: int = 0  # the layers' own all-reduces of P·m rows (GAT's score gradients), received per rank
    item: int = FLOAT  # bytes of a feature, an activation, a value of Â, an exchanged element (precision)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def fits(self, capacity: int, device: str = "cuda") -> bool:
        """Whether the plan fits ``capacity`` bytes: per GPU on ``cuda``, of the machine the ranks share on
        ``cpu`` (:func:`plan_need`); the one verdict ``mggcn plan`` prints and exits by."""
        return plan_need(self, device) <= capacity


def plan_memory(num_nodes: int, edges: int, features: int, classes: int, hidden: Sequence[int], nprocs: int = 1, *,
                order: str = "auto", dropout: float = 0.0, input_dropout: float = 0.0, train: float = 0.5,
                rank_nnz: int | None = None, rank_nnz_t: int | None = None,
                symmetric: bool = False, tile_cols: int | None = None, model: str = "gcn",
                train_eps: bool = False, rank_nnz_train_t: int | None = None,
                train_columns: str = "auto", gather: bool = False, device: str = "cpu",
                precision: str = "fp32", multilabel: bool = False, **options) -> MemoryPlan:
    """Per-rank memory of training ``[features, *hidden, classes]`` on a graph of ``num_nodes`` vertices and
    ``edges`` nonzeros (self loops are added: ``nnz = edges + num_nodes``), at ``nprocs`` ranks.

    Args:
        train: fraction of the vertices in the training split (the loss keeps their rows and labels).
        rank_nnz, rank_nnz_t: this rank's nonzeros of Â and Âᵀ when known (default ``⌈nnz / P⌉``);
            ``rank_nnz_train_t`` those of Âᵀ's training columns (default ``⌈train · nnz / P⌉``), kept when
            :func:`~mggcn.distributed.spmm.keeps_training_columns` says so for ``train_columns`` (its ``mode``).
        symmetric: Â = Âᵀ (an undirected graph with the ``sym`` norm): the shard shares its blocks of Â as Âᵀ's.
        tile_cols: columns per CSR tile on a CPU (:func:`mggcn.kernels.policy.tile_columns`; None: untiled: GPUs).
        model: ``gcn``, ``sage``, ``gin`` (``train_eps``: GIN's learnable ε) or ``gat``: its parameters, exchanges
            and activations (:func:`activation_peak`); GraphSAGE's and GIN's Â adds no self loops (``nnz = edges``).
        gather: the CPU's gather kernel runs (:func:`~mggcn.kernels.policy.gather_kernel`: float32, FBGEMM); it
            multiplies whole blocks (``tile_cols`` None), each SpMM holding one chunk of rows in flight
            (:func:`~mggcn.kernels.tiled.gather_chunk_bytes`, under 1 MiB).
        device: ``cpu`` or ``cuda``, the size of σ's block buffer (:func:`~mggcn.kernels.policy.mask_chunk_rows`).
        precision: one of :data:`~mggcn.config.PRECISIONS`: bf16 stores the features, Â's values, the activations
            and the exchanged rows in 2 bytes, and keeps a bfloat16 copy of the weights and of their gradients
            beside the float32 ones (:mod:`mggcn.training.precision`).
        multilabel: the labels are a 0/1 matrix [n, ``classes``] (binary cross-entropy), its bytes and buffers.
        options: the model's own settings (its class's ``options``: GAT's ``heads``, ``attention_dropout``).
    """
    if nprocs < 1 or num_nodes < nprocs:
        raise ConfigError(f"nprocs must be between 1 and the {num_nodes} vertices, got {nprocs}", "nprocs")
    dims = [features, *hidden, classes]
    m = -(-num_nodes // nprocs)
    kind = _model_with(model, options)
    nnz_rank = -(-(edges + (num_nodes if kind.self_loops else 0)) // nprocs) if rank_nnz is None else rank_nnz
    nnz_rank_t = nnz_rank if rank_nnz_t is None else rank_nnz_t
    # the trainer computes Â·X once whenever there is no input dropout (GAT multiplies first: no Â·X)
    cached = input_dropout == 0.0 and not kind.plans_whole_layers
    widths = kind.exchange_widths(dims, order, cached, **options)
    plan = MemoryPlan(nprocs=nprocs, rows=m, widths=widths, item=float_bytes(precision))
    params = num_parameters(dims, model, train_eps, **options)
    ntrain = math.ceil(train * m)
    nnz_train = None
    if kind.keeps_training_columns(**options) and keeps_training_columns(math.ceil(train * num_nodes), num_nodes,
                                                                         len(dims) - 1, train_columns):
        nnz_train = math.ceil(train * nnz_rank_t) if rank_nnz_train_t is None else rank_nnz_train_t
    plan.parts.update(_adjacency_parts(m, nprocs, tile_cols, nnz_rank, None if symmetric else nnz_rank_t, nnz_train,
                                       plan.item))
    _add_dense_parts(plan, features, cached, ntrain, params, classes if multilabel else 0)
    _add_kernel_parts(plan, kind, features, gather and tile_cols is None, nnz_rank, 0 if symmetric else nnz_rank_t)
    peak, detail = activation_peak(m, dims, order=order, caches_input=cached, train_rows=ntrain,
                                   dropout=dropout, input_dropout=input_dropout, model=model, train_eps=train_eps,
                                   device=device, precision=precision, **_block_shape(m, nprocs, nnz_rank, tile_cols),
                                   multilabel=multilabel, **options)
    plan.parts["activations"] = max(peak, _before_first_epoch(plan, features, cached, kind, train_eps))
    plan.activation_detail = detail
    evaluates = kind.evaluates_differently_with(dropout, input_dropout, **options)  # a forward more per epoch
    _add_communication(plan, features, params, cached, kind.allreduce_widths(dims, **options), 5 + 12 * multilabel,
                       kind.evaluation_widths(dims, order, cached, **options) if evaluates else [])
    return plan


def _add_kernel_parts(plan: MemoryPlan, kind: type[LayerStack], features: int, gather: bool, nnz: int,
                      nnz_t: int) -> None:
    """What the kernels hold beside the activations: the gather SpMM's chunk of rows in flight (``gather``: it runs,
    on whole blocks; GAT runs its own kernels), and the index arrays a model's kernels keep per nonzero of Â's and
    Âᵀ's blocks (``nnz``, ``nnz_t``; 0 when Âᵀ's blocks are Â's)."""
    if gather and not kind.plans_whole_layers:
        plan.parts["SpMM row chunk"] = max(gather_chunk_bytes(plan.rows, w, nnz) for w in plan.widths + [features])
    if kind.kept_bytes_per_edge:
        plan.parts["kernel indices"] = kind.kept_bytes_per_edge * (nnz + nnz_t)


def _model_with(model: str, options: dict) -> type[LayerStack]:
    """The class of ``model``, which must take every one of ``options`` (its ``options``)."""
    kind = model_type(model)
    unknown = sorted(set(options) - {option_keyword(o) for o in kind.options})
    if unknown:
        raise ConfigError(f"model {model} takes no option {', '.join(unknown)}", unknown[0])
    return kind


def _block_shape(m: int, nprocs: int, nnz: int, tile_cols: int | None) -> dict[str, int]:
    """What a model whose layers are walked whole is told of one block of Â (a tile of it on a CPU) besides
    ``nprocs``: its ``columns`` and nonzeros (``block_edges``, of this rank's ``nnz`` over P blocks of ``m``
    columns)."""
    columns = m if tile_cols is None else min(m, tile_cols)
    return {"nprocs": nprocs, "columns": columns, "block_edges": -(-nnz * columns // (nprocs * m))}


def _add_dense_parts(plan: MemoryPlan, features: int, cached: bool, ntrain: int, params: int,
                     labels: int = 0) -> None:
    """The rank's dense arrays: features (or Â·X when ``cached``), labels and splits of its rows (``ntrain`` of
    them training; ``labels``: the columns of multi-label labels, 0 for one class per row), the optimizer's state
    for ``params`` weights, and the broadcast buffers."""
    m, item = plan.rows, plan.item
    plan.parts["features X"] = item * m * features
    plan.parts["A.X (cached)"] = item * m * features if cached else 0
    # y, 3 masks; the loss's label positions (every row's, the training rows') and training rows; multi-label, y
    # [m, C] of bytes, 3 masks, each row's label count and loss factor, the training rows
    plan.parts["labels, splits"] = (m * (2 * INT64 + 3) + 2 * INT64 * ntrain if not labels else
                                    m * (labels + 3 + INT64 + FLOAT) + INT64 * ntrain)
    # weights, gradients, Adam's two moments, the flat all-reduce buffer; a lower precision's copies of the first two
    plan.parts["optimizer"] = 5 * FLOAT * params + (2 * item * params if item < FLOAT else 0)
    plan.parts["broadcast buffers"] = 2 * item * m * max(plan.widths or [features]) if plan.nprocs > 1 else 0


def _adjacency_parts(m: int, nprocs: int, tile_cols: int | None, nnz: int, nnz_t: int | None,
                     nnz_train_t: int | None, item: int = FLOAT) -> dict[str, int]:
    """Bytes of a rank's CSR blocks (its ``nprocs`` blocks of ``m`` rows, in tiles of ``tile_cols`` columns, values
    of ``item`` bytes) of Â, of Âᵀ (``nnz_t`` None: Â = Âᵀ, shared) and of Âᵀ's training columns (``nnz_train_t``
    None: not kept)."""

    def blocks(count: int) -> int:
        ib = index_bytes(count, m)
        return nprocs * num_tiles(m, tile_cols) * (m + 1) * ib + count * (ib + item)

    parts = {"adjacency A": blocks(nnz), "adjacency A^T": 0 if nnz_t is None else blocks(nnz_t)}
    if nnz_train_t is not None:
        parts["A^T training columns"] = blocks(nnz_train_t)
    return parts


def _add_communication(plan: MemoryPlan, features: int, params: int, cached: bool,
                       allreduces: Sequence[int] = (), stats: int = 5, evaluation: Sequence[int] = ()) -> None:
    """What a rank receives: per epoch, the broadcasts of every SpMM (and of the forward that measures the
    accuracies, ``evaluation``, where the model evaluates otherwise than it trains) and the gradient all-reduce
    (``params`` and the epoch's ``stats`` numbers: 5, multi-label 17), and the layers' ring all-reduces of ``P·m``
    rows of the widths ``allreduces`` (``2 · (P − 1) / P`` of their bytes); once, Â·X's broadcasts when it is
    ``cached``."""
    nprocs, m = plan.nprocs, plan.rows
    plan.comm_spmm = sum((nprocs - 1) * m * w * plan.item for w in [*plan.widths, *evaluation])
    plan.comm_allreduce = round(2 * (nprocs - 1) / nprocs * FLOAT * (params + stats))
    plan.comm_layers = sum(2 * (nprocs - 1) * m * w * plan.item for w in allreduces)
    plan.comm_once = (nprocs - 1) * m * features * plan.item if cached else 0


def _before_first_epoch(plan: MemoryPlan, features: int, cached: bool, kind: type[LayerStack], train_eps: bool) -> int:
    """Bytes beyond ``plan``'s parts while Â·X is computed (``cached``): the broadcast buffers of X's blocks where X
    is wider than every SpMM of an epoch, and X itself where no epoch reads it (its part is then 0)."""
    m, nprocs, item = plan.rows, plan.nprocs, plan.item
    before = 2 * item * m * features if cached and nprocs > 1 and features > max(plan.widths or [0]) else 0
    if cached and not kind.reads_input(train_eps):  # X lives until Â·X is computed (GraphSAGE reads it)
        plan.parts["features X"] = 0
        before += item * m * features
    return before


def float_bytes(precision: str) -> int:
    """Bytes of a feature or activation element under ``precision``."""
    return 2 if precision == "bf16" else FLOAT


def plan_need(plan: MemoryPlan, device: str = "cuda") -> int:
    """The memory ``plan`` needs: per GPU its total (the CUDA context and the sparse library's workspace are the
    device's and its driver's, said beside it); on a CPU, of the machine, every rank's and the processes' runtime
    (:data:`CPU_RUNTIME`)."""
    if device != "cpu":
        return plan.total
    return plan.total * plan.nprocs + CPU_RUNTIME + CPU_RUNTIME_PER_RANK * (plan.nprocs - 1)


def format_plan(plan: MemoryPlan, name: str, capacity: int | None = None, device: str = "cuda") -> str:
    """The table ``mggcn plan`` prints; with ``capacity`` (bytes, more than 0: per GPU on ``cuda``, of the machine
    the ranks share on ``cpu``), whether it fits."""
    if capacity is not None and capacity <= 0:  # what 0, or a size under a byte (0.1), reads as
        raise ConfigError(f"memory must be more than 0 bytes, got {capacity}", "memory")
    lines = [f"{name}: P = {plan.nprocs}, {plan.rows:,} rows per rank, SpMM widths per epoch {plan.widths}",
             "per-rank memory:"]
    for part, size in plan.parts.items():
        lines.append(f"  {part:<20} {format_bytes(size):>12}")
    lines.append(f"  {'total':<20} {format_bytes(plan.total):>12}")
    peers = (plan.nprocs - 1) * plan.parts.get("broadcast buffers", 0)
    if device == "cpu" and peers:  # a rank's resident memory (top, ps, VmHWM) counts every page it maps
        lines.append(f"  {'+ peers outboxes':<20} {format_bytes(peers):>12}  (--shm: the other ranks' outboxes, "
                     "mapped; in each rank's RSS, not more memory)")
    lines.append(f"communication per epoch, received per rank: {format_bytes(plan.comm_spmm)} (SpMM broadcasts) "
                 f"+ {format_bytes(plan.comm_allreduce)} (gradient all-reduce)"
                 + (f" + {format_bytes(plan.comm_layers)} (the layers' all-reduces)" if plan.comm_layers else "")
                 + f"; once before training: {format_bytes(plan.comm_once)} (A.X)")
    if capacity is not None and device == "cpu":  # the ranks share the machine's memory
        need = plan_need(plan, device)
        verdict = "fits" if plan.fits(capacity, device) else "does NOT fit"
        lines.append(f"{verdict} in {format_bytes(capacity)} of the machine ({plan.nprocs} rank(s) × "
                     f"{format_bytes(plan.total)} + {format_bytes(need - plan.total * plan.nprocs)} for Python and "
                     f"torch = {format_bytes(need)}, {100 * need / capacity:.0f}% used)")
    elif capacity is not None:
        verdict = "fits" if plan.fits(capacity, device) else "does NOT fit"
        lines.append(f"{verdict} in {format_bytes(capacity)} per device ({100 * plan.total / capacity:.0f}% used; "
                     "plus the runtime, e.g. ~0.5 GiB CUDA context, and the sparse library's workspace)")
    return "\n".join(lines)
