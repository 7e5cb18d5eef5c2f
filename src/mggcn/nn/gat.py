"""GAT (graph attention, PyG ``GATConv`` and ``torch_geometric.nn.models.GAT``) on the ranks' exchange of rows.

Layer l computes, per head h of H (``Z = H·Wᵀ`` viewed ``[m, H, C]``)

.. math::
    \\alpha_{ij} = \\mathrm{softmax}_j\\big(\\mathrm{LeakyReLU}_{0.2}(a_{src} \\cdot Z_j + a_{dst} \\cdot Z_i)\\big),
    \\qquad \\mathbf{h}_i' = \\Big\\Vert_h \\sum_{j \\to i} \\alpha_{ij} Z_j \\;(+\\,\\mathbf{b})

over the in-edges of i with its self loops replaced by one (PyG's default), parallel edges counted: a hidden layer
concatenates its heads (``hidden = H·C``), the last one averages them (``C = classes``), as PyG's GAT model builds
them. The aggregation is :meth:`~mggcn.distributed.spmm.SpMMOperator.attention_rows` of the operator ``gat``
(:func:`mggcn.nn.norm.normalize`: the edge multiplicities, unit diagonal), which uses the SpMM operator's exchange
for its own per-block kernels: one exchange of ``[Z | e_src]`` forward, one of ``[∂out | e_dst | lse | c]``
backward, plus an all-reduce of ``P·m·H`` values (the destinations' score gradients).

The layer always multiplies first (the attention needs ``Z``), so nothing is cached (``Â·X`` means nothing here).
Its one GEMM gives ``Z`` and both per-vertex score terms ``e = Σ_c Z·att`` at once: the weight is ``[W; A_src;
A_dst]`` (:meth:`GATLayer.scores_weight`, 2H more rows, each ``Σ_c att[h, c] · W[h·C + c]``), so the scores cost no
pass over ``Z`` and their gradients come back through the GEMM's.
Attention dropout (``attention_dropout``, PyG's ``GATConv(dropout=...)``) draws its masks from a hash of (seed,
layer, head, original source and destination ids): any P draws the same masks; :meth:`GAT.seed_attention` sets the
seed (the trainer: once per epoch, the same on every rank).

Buffers: the GAT's tensors are not on the workspace; a layer keeps for backward its input (the GEMM's, for ∂W),
``[Z | e_src | e_dst]`` [m, H·C + 2H], ``lse`` [m, H], and the attention's output [m, H·C]; σ keeps its output (the
next layer's input). ``grad_on_train_rows`` (the last layer's gradient is zero outside the training rows) is not
used: the backward runs over all rows (the same result, not faster).

Parameter names match PyG's (2.5 and later; ``predict`` reads 2.4's ``lin_src``/``lin_dst`` too):
``convs.{l}.lin.weight`` [H·C, d_in], ``convs.{l}.att_src`` and ``.att_dst`` [1, H, C], ``convs.{l}.bias`` [H·C]
(hidden) or [C] (last): the state dict loads with ``strict=True`` into
``torch_geometric.nn.models.GAT(d_0, hidden, L, classes, heads=H)``.

Legend: m = rows of this rank, H = heads, C = channels per head.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import nn

from mggcn.kernels.attention import EDGE_CHUNK, AttentionSpec
from mggcn.nn.arguments import check_probabilities
from mggcn.nn.functional import _TimedLinear, activate, check_inputs, hooked_module
from mggcn.nn.initialization import glorot_, glorot_linear
from mggcn.nn.model import Adj, LayerStack, check_order
from mggcn.nn.workspace import BufferWalk
from mggcn.utils.errors import ConfigError
from mggcn.utils.system import sparse_forward
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["GATLayer", "GAT"]

NEGATIVE_SLOPE = 0.2  # the scores' LeakyReLU (PyG GATConv's default)


class GATLayer(nn.Module):
    r"""One graph attention layer (PyG ``GATConv(in_dim, channels, heads=heads, concat=concat)``).

    Args:
        in_dim: ``d_in``. channels: ``C``, the output channels per head. heads: ``H``.
        concat: concatenate the heads (output ``H·C``) or average them (output ``C``).
        attention_dropout: dropout probability on the attention weights (training only).
        bias: add a learnable bias (default True).
        index: the layer's position in its model (its dropout masks hash it).
        generator: draw ``W``, ``att_src``, ``att_dst`` with PyG's ``glorot`` from it (:class:`GAT` does); None:
            from torch's global RNG, as ``GATConv`` draws them.

    Shapes: ``h`` [m, d_in] -> [m, H·C] (concat) or [m, C].
    """

    aggregate_first = False  # the attention needs Z = H·Wᵀ first (what the order policy asks of every layer)

    def __init__(self, in_dim: int, channels: int, heads: int = 1, concat: bool = True,
                 attention_dropout: float = 0.0, bias: bool = True, index: int = 0,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        if heads < 1 or channels < 1:
            raise ConfigError(f"a GAT layer needs at least one head and one channel, got {heads} heads of "
                              f"{channels}", "heads")
        check_probabilities(attention_dropout=attention_dropout)
        self.in_dim, self.channels, self.heads, self.concat = in_dim, channels, heads, concat
        self.attention_dropout, self.index = attention_dropout, index
        self.lin = glorot_linear(in_dim, heads * channels, bias=False, generator=generator)
        self.att_src = nn.Parameter(torch.empty(1, heads, channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, channels))
        glorot_(self.att_src, generator)
        glorot_(self.att_dst, generator)
        self.bias = nn.Parameter(torch.zeros(heads * channels if concat else channels)) if bias else None
        self.attention_seed = 0

    def scores_weight(self) -> torch.Tensor:
        """``[W; A_src; A_dst]`` [H·C + 2H, d_in]: ``W`` and per head h the rows ``Σ_c att[h, c] · W[h·C + c]``,
        so that the layer's one GEMM gives ``[Z | e_src | e_dst]`` (``e = Σ_c Z·att = H·(Σ_c att·W)ᵀ``, the same
        value summed in another order). The parameters' gradients come back through it (autograd, on weights)."""
        w = self.lin.weight.view(self.heads, self.channels, -1)
        # products and sums of weights' size (not einsum, a bmm that each thread of a busy machine would wait on)
        return torch.cat([self.lin.weight, *((att[0, :, :, None] * w).sum(dim=1) for att in (self.att_src,
                                                                                            self.att_dst))])

    def reset_parameters(self) -> None:
        """New weights from torch's global RNG, as ``GATConv.reset_parameters``: ``W``, ``att_src``, ``att_dst``
        with PyG's ``glorot``, a zero bias."""
        self.lin.reset_parameters()
        glorot_(self.att_src, None)
        glorot_(self.att_dst, None)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.channels}, heads={self.heads}, concat={self.concat}"

    @sparse_forward
    def forward(self, h: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                h_aggregated: torch.Tensor | None = None, **_unused) -> torch.Tensor:
        """``adj``: the :class:`~mggcn.distributed.spmm.SpMMOperator` of the ``gat`` operator (its exchange moves
        the rows). ``h_aggregated`` must be None (the layer multiplies first); the workspace keywords of
        :meth:`mggcn.nn.model.GCNLayer.forward` are accepted and unused."""
        if h_aggregated is not None:
            raise ValueError("a GAT layer multiplies first: it takes no precomputed aggregation")
        op = getattr(adj, "func", adj)  # a functools.partial (grad_on_train_rows) carries the operator
        m = h.shape[0]
        rows = _TimedLinear.apply(h, self.scores_weight(), None, timer, None, None)
        spec = AttentionSpec(NEGATIVE_SLOPE, self.attention_dropout if self.training else 0.0,
                             self.attention_seed, self.index)
        out = op.attention_rows(rows, self.heads, spec, timer)
        out = out.reshape(m, self.heads * self.channels) if self.concat else out.mean(dim=1)
        return out if self.bias is None else out + self.bias


class GAT(LayerStack):
    """A stack of :class:`GATLayer`, σ between layers, logits out (PyG's ``GAT`` model).

    ``activation``, ``dropout`` (on the input of every layer but the first), ``input_dropout`` and ``reuse_buffers``
    (accepted; GAT's tensors are not on the workspace): as :class:`~mggcn.nn.model.LayerStack`.

    Args:
        dims: ``[d_0, hidden..., classes]``, each hidden width the total over the heads (divisible by ``heads``).
        heads: attention heads of every layer (default 8).
        output_heads: the last layer's heads, which it averages; None (default): ``heads``, as PyG's ``GAT`` model
            builds it; 1 as PyG's GAT example and the GAT paper's Cora model.
        attention_dropout: dropout probability on the attention weights.
        order: accepted for the common signature; a GAT layer always multiplies first.
        bias: every layer adds a learnable bias (default True).
        seed: initialization seed (Glorot weights, zero biases), and the attention masks' seed until
            :meth:`seed_attention`; None (default): torch's global generator decides it, as for torch.nn's layers.
    """

    kind = "gat"
    pyg_name = "GAT"
    pyg_label = "GATConv"
    pyg_one_hidden_width = True
    options = ("heads", "output_heads", "attention_dropout")
    layer_weight = "convs.{}.lin.weight"  # [H·C, d_in]
    layer_bias = "convs.{}.bias"
    pyg_takes_edge_index = True  # GATConv computes its attention per edge of an edge list
    reads_training_columns = False  # its backward passes over every block of Âᵀ (see the module docstring)

    @classmethod
    def state_keys(cls) -> tuple[str, ...]:
        return cls.layer_weight, "convs.{}.att_src"

    @classmethod
    def state_dims(cls, state: dict[str, torch.Tensor]) -> list[int]:
        """Hidden layers give ``H·C`` (their weight's rows), the last one its ``C`` (each head's channels, the
        attention vectors' last size)."""
        try:
            dims = super().state_dims(state)
        except ValueError:
            cls._averaged_hidden_heads(state)
            raise
        heads, last = None, len(dims) - 2
        for layer in range(len(dims) - 1):  # every layer's vectors: the hidden layers' heads are layer 0's
            att = state.get(f"convs.{layer}.att_src")
            if (not isinstance(att, torch.Tensor) or att.dim() != 3 or att.shape[0] != 1
                    or att.shape[1] * att.shape[2] != dims[layer + 1]):
                raise ValueError(f"convs.{layer}.att_src is not the [1, heads, channels] of its layer's weight")
            if layer < last and heads not in (None, att.shape[1]):
                raise ValueError(f"layer {layer} has {att.shape[1]} attention head(s) and layer 0 {heads}: mggcn's "
                                 "GAT has the same heads in every hidden layer (PyG's GAT(heads=H))")
            heads = att.shape[1]  # the last layer's may differ (output_heads: PyG's example, the GAT paper's)
        if heads is None:
            raise ValueError("convs.0.att_src is not the [1, heads, channels] of its layer's weight")
        dims[-1] = int(state[f"convs.{last}.att_src"].shape[2])
        bias = state.get(f"convs.{last}.bias")
        if heads > 1 and isinstance(bias, torch.Tensor) and bias.shape == (heads * dims[-1],):
            raise ValueError(f"convs.{last}.bias has {heads}·{dims[-1]} entries: that layer concatenates its {heads} "
                             "heads (PyG's GATConv(concat=True)); mggcn's last GAT layer averages them, as PyG's GAT "
                             "model's does (concat=False)")
        return dims

    @classmethod
    def _averaged_hidden_heads(cls, state: dict[str, torch.Tensor]) -> None:
        """Say so where a layer's widths do not chain because a hidden layer averages its heads: the next layer takes
        one head's channels, not their concatenation."""
        layer = 0
        while isinstance(att := state.get(f"convs.{layer}.att_src"), torch.Tensor) and att.dim() == 3:
            following = state.get(cls.layer_weight.format(layer + 1))
            if (att.shape[1] > 1 and isinstance(following, torch.Tensor) and following.dim() == 2
                    and following.shape[1] == att.shape[2]):
                raise ValueError(f"layer {layer} averages its {att.shape[1]} heads (PyG's GATConv(concat=False)): "
                                 f"layer {layer + 1} takes their {att.shape[2]} channels; mggcn's GAT concatenates "
                                 "the heads of its hidden layers, as PyG's GAT model does")
            layer += 1

    @classmethod
    def same_model_options(cls, options: dict, explicit: bool = False) -> dict:
        if explicit and options.get("output_heads") is None:
            return options | {"output_heads": options.get("heads")}
        if options.get("output_heads") is not None and options.get("output_heads") == options.get("heads"):
            return options | {"output_heads": None}
        return options

    @classmethod
    def state_options(cls, state: dict[str, torch.Tensor]) -> dict:
        heads = [int(state[key].shape[1]) for key in sorted(
            (k for k in state if re.fullmatch(r"convs\.\d+\.att_src", k)), key=lambda k: int(k.split(".")[1]))]
        output = {"output_heads": heads[-1]} if heads[-1] != heads[0] else {}
        return {"heads": heads[0]} | output | cls.bias_option(state)

    @property
    def evaluates_differently(self) -> bool:
        return self.evaluates_differently_with(self.dropout, self.input_dropout, hasattr(self, "norms"),
                                               attention_dropout=self.attention_dropout)

    @classmethod
    def build(cls, dims: Sequence[int], train_eps: bool = False, heads: int = 8, output_heads: int | None = None,
              attention_dropout: float = 0.0, **common) -> GAT:
        return cls(dims, heads=heads, output_heads=output_heads, attention_dropout=attention_dropout, **common)

    @classmethod
    def operator(cls, norm: str) -> str:
        return "gat"

    @classmethod
    def linears(cls, d_in: int, d_out: int, heads: int = 1, last: bool = False) -> list[tuple[int, int, bool]]:
        """The layer's one linear map: ``d_in -> d_out`` (a hidden layer, ``d_out = H·C``), or ``d_in -> H·d_out``
        for the ``last`` layer (``d_out`` classes, each head's own)."""
        return [(d_in, d_out * heads if last else d_out, False)]

    @classmethod
    def num_parameters(cls, dims: Sequence[int], train_eps: bool = False, heads: int = 8,
                       output_heads: int | None = None, **options) -> int:
        """Per hidden layer ``d_in·d_out`` (W) + ``2·d_out`` (att_src, att_dst) + ``d_out`` (bias); the last layer
        has ``H·C`` outputs (``H`` its own heads) before its mean, so ``(d_in + 2)·H·C + C``."""
        total = 0
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            width = cls._layer(dims, i, heads, output_heads)[1]
            total += (a + 2) * width + b
        return total

    @classmethod
    def pyg_spmm_widths(cls, d_in: int, d_out: int, first: bool) -> list[int]:
        return [d_out, d_out]

    @classmethod
    def pyg_edge_weight(cls, edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, None]:
        return edge_index, None  # GATConv removes and adds the self loops itself

    @classmethod
    def pyg_convs(cls, dims: Sequence[int], state: dict[str, torch.Tensor], normalize: bool) -> nn.ModuleList:
        """PyG's ``GAT`` model's layers; with other heads in the last layer (``output_heads``), ``GATConv`` layers
        as PyG's example builds them."""
        from torch_geometric.nn import GATConv, models

        options = cls.state_options(state)
        heads, output_heads = options["heads"], options.get("output_heads")
        if output_heads is None:
            model = models.GAT(dims[0], dims[1], len(dims) - 1, dims[-1], heads=heads)
        else:
            last = len(dims) - 2
            model = nn.Module()
            model.convs = nn.ModuleList(
                GATConv(dims[i], dims[i + 1] if i == last else dims[i + 1] // heads,
                        heads=output_heads if i == last else heads, concat=i != last) for i in range(last + 1))
        model.load_state_dict(state, strict=True)
        return model.convs

    @classmethod
    def exchange_widths(cls, dims: Sequence[int], order: str = "auto", caches_input: bool = True, heads: int = 8,
                        output_heads: int | None = None, **options) -> list[int]:
        """Per layer the attention's two exchanges: ``[Z | e_src]`` (``H·C + H``) forward, ``[∂out | e_dst | lse |
        c]`` (``H·C + 3H``) backward; the last layer's ``Z`` has ``H·classes`` columns (``H`` its own heads)."""
        widths = []
        for i in range(len(dims) - 1):
            h, width = cls._layer(dims, i, heads, output_heads)
            widths += [width + h, width + 3 * h]
        return widths

    @classmethod
    def evaluation_widths(cls, dims: Sequence[int], order: str = "auto", caches_input: bool = True, heads: int = 8,
                          output_heads: int | None = None, **options) -> list[int]:
        layers = [cls._layer(dims, i, heads, output_heads) for i in range(len(dims) - 1)]
        return [width + h for h, width in layers]  # [Z | e_src] per layer

    @classmethod
    def evaluates_differently_with(cls, dropout: float = 0.0, input_dropout: float = 0.0, batch_norm: bool = False,
                                   attention_dropout: float = 0.0, **options) -> bool:
        return super().evaluates_differently_with(dropout, input_dropout, batch_norm) or attention_dropout > 0

    @classmethod
    def allreduce_widths(cls, dims: Sequence[int], heads: int = 8, output_heads: int | None = None,
                         **options) -> list[int]:
        """Per layer the all-reduce of the destinations' score gradients, ``[P·m, H]``."""
        return [cls._layer(dims, i, heads, output_heads)[0] for i in range(len(dims) - 1)]

    plans_whole_layers = True
    kept_bytes_per_edge = 4  # the attention's chunks' row ids (int32), per block (mggcn.kernels.attention)

    @staticmethod
    def _layer(dims: Sequence[int], i: int, heads: int, output_heads: int | None) -> tuple[int, int]:
        """Layer ``i``'s heads (the last layer's ``output_heads`` where given) and the columns of its ``Z``: its
        width (``H·C``), the last layer's ``H·classes``."""
        if i < len(dims) - 2:
            return heads, dims[i + 1]
        last_heads = heads if output_heads is None else output_heads
        return last_heads, dims[i + 1] * last_heads

    @staticmethod
    def _edge_step(walk: BufferWalk, edges: int, columns: int, heads: int, width: int, forward: bool) -> None:
        """The attention kernels' largest step over a block (a tile) of ``edges`` nonzeros and ``columns`` columns
        (:mod:`mggcn.kernels.attention`, one worker): a chunk of about :data:`~mggcn.kernels.attention.EDGE_CHUNK`
        edges and its ``r`` rows. Per tile, the head-major copy of its ``Z`` columns and, forward, of their
        ``e_src``. Per edge and head: forward the scores (the weights in place), the gather's column index (int32)
        and weight copy; backward ``pre`` and α, the stacked pattern's columns (int32) and, in turn, the gather's
        weight copy and output, the SDDMM's float32 values, their edge-major copy and the copy of ``Z``'s rows (and
        of the table in a lower precision), the LeakyReLU backward's output.
        Per row of the chunk the bags' offsets and forward the gather's output and the running max's update (new
        max, finite, rescale)."""
        if not edges:
            return
        chunk = min(edges, EDGE_CHUNK)
        rows = min(walk.rows, -(-walk.rows * chunk // edges))
        f, per_head = walk.float_bytes, chunk * heads
        if forward:
            step = per_head * (2 * f + 4) + rows * (f * width + 4 * f * heads + 16 * heads) + columns * f * heads
        else:
            gather, slope = per_head * f + rows * f * width, per_head * f
            dots = 4 * (per_head + rows * width) + per_head * f  # + the values' edge-major copy
            if f < 4:  # the SDDMM multiplies in float32: the table cast too
                dots += 4 * columns * width
            step = per_head * (2 * f + 4) + max(gather, dots, slope) + rows * 16 * heads + 8 * columns
        step += columns * f * width + 8 * (rows + 1)  # the tile's head-major table; the chunk's row pointers
        walk.alloc_bytes("edge step", step)
        walk.free("edge step")

    @classmethod
    def plan_layer(cls, walk: BufferWalk, i: int, dims: Sequence[int], *, heads: int = 8,
                   output_heads: int | None = None, block_edges: int = 0, columns: int = 0, nprocs: int = 1,
                   **options) -> str:
        """Layer ``i``'s forward in :class:`~mggcn.nn.workspace.BufferWalk`'s terms (the module docstring's
        buffers; none on the workspace): ``block_edges`` and ``columns``, the nonzeros and columns of a block of
        Â (a tile's on a CPU), size the per-edge step. Returns the name of the layer's output."""
        (heads, width), last = cls._layer(dims, i, heads, output_heads), i == len(dims) - 2
        walk.alloc(f"Z {i}", width + 2 * heads)  # the GEMM's [Z | e_src | e_dst]
        walk.alloc("running max", heads)
        walk.alloc("running sum", heads)
        walk.alloc(f"attention out {i}", width)
        walk.alloc(f"lse {i}", heads)
        if nprocs > 1:  # the exchange sends a compact copy of [Z | e_src]; at P = 1 the kernels read the view
            walk.alloc("rows sent", width + heads)
        cls._edge_step(walk, block_edges, columns, heads, width, forward=True)
        walk.alloc("row has entries, safe sum", 2 * heads)
        walk.free("rows sent", "running max", "running sum", "row has entries, safe sum")
        out = f"out {i}"
        if last:
            walk.alloc("head mean", dims[-1])
            walk.alloc(out, dims[-1])  # + bias: the logits
            walk.free("head mean")
        else:
            walk.alloc(out, width)  # + bias, then σ in place
        return out

    @classmethod
    def plan_layer_backward(cls, walk: BufferWalk, i: int, dims: Sequence[int], grad: str, *, heads: int = 8,
                            output_heads: int | None = None, block_edges: int = 0, columns: int = 0,
                            nprocs: int = 1, **options) -> str:
        """Layer ``i``'s backward from the gradient ``grad`` of its output, as :meth:`plan_layer`; the name of its
        input's gradient (layer 0: ``grad``, none computed)."""
        (heads, width), last = cls._layer(dims, i, heads, output_heads), i == len(dims) - 2
        if last:  # the mean over heads' backward: a new [m, H, C]; the logits' gradient (over them) stays
            grad = walk.alloc("grad heads", width)
        else:
            walk.free(f"out {i}")  # σ's backward was in place; σ's output is released
        walk.alloc("rows sent", width + 3 * heads)  # [∂out | e_dst | lse | c]
        walk.alloc(f"grad Z {i}", width + 2 * heads)  # [∂Z | ∂e_src | ∂e_dst]
        walk.alloc("grad e_dst", nprocs * heads)
        walk.alloc("grad * out", width)  # c's products (the rows of one worker; all of them with one)
        walk.free("grad * out")
        cls._edge_step(walk, block_edges, columns, heads, width, forward=False)
        walk.free("rows sent", f"attention out {i}", f"lse {i}", grad, "grad e_dst")
        walk.free(f"Z {i}")
        if i == 0:
            walk.free(f"grad Z {i}")
            return grad
        walk.alloc(f"grad h {i}", dims[i])
        walk.free(f"grad Z {i}")
        return f"grad h {i}"

    def __init__(self, dims: Sequence[int], heads: int = 8, attention_dropout: float = 0.0,
                 activation: str = "relu", dropout: float = 0.0, input_dropout: float = 0.0, order: str = "auto",
                 bias: bool = True, seed: int | None = None, reuse_buffers: bool = True,
                 output_heads: int | None = None) -> None:
        super().__init__(dims, activation, dropout, input_dropout, reuse_buffers, seed=seed)
        check_order(order)
        for name, value in (("heads", heads), ("output_heads", heads if output_heads is None else output_heads)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}", name)
        for width in dims[1:-1]:
            if width % heads:
                raise ConfigError(f"every hidden width must be divisible by heads: hidden {width} with {heads} "
                                  "heads", "heads")
        self.heads, self.attention_dropout = heads, attention_dropout
        self.output_heads = heads if output_heads is None else output_heads
        dims, generator = self.dims, torch.Generator().manual_seed(self.seed)  # the layers' weights from it
        last = len(dims) - 2
        self.convs.extend(
            GATLayer(dims[i], dims[i + 1] if i == last else dims[i + 1] // heads,
                     self._layer(dims, i, heads, output_heads)[0], concat=i != last,
                     attention_dropout=attention_dropout, bias=bias, index=i, generator=generator)
            for i in range(len(dims) - 1))
        self.seed_attention(self.seed)

    def seed_attention(self, seed: int) -> None:
        """The attention-dropout masks of the following forward passes come from ``seed`` (the trainer: once per
        epoch, the SAME seed on every rank, so that every P draws the same masks)."""
        for conv in self.convs:
            conv.attention_seed = int(seed)

    @property
    def caches_input_aggregation(self) -> bool:
        return False  # every layer multiplies first

    @sparse_forward
    def forward(self, x: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                x_aggregated: torch.Tensor | None = None, logits_in_workspace: bool = False,
                loss_on_train_rows: bool = False) -> torch.Tensor:
        """Logits [m, classes] for the rows ``x`` [m, d_0] (as :meth:`LayerStack.forward`; the logits are a new
        tensor whatever ``logits_in_workspace`` says, and ``loss_on_train_rows`` changes nothing)."""
        if x_aggregated is not None:
            raise ValueError("x_aggregated cannot be used with a GAT (its layers multiply first)")
        check_inputs(x, adj, self.dims[0], next(self.parameters()).dtype, type(self))
        h = self._drop(x, self.input_dropout)
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            if i > 0:
                h = self._drop(h, self.dropout)
            h = conv(h, adj, timer)
            if i < last:  # σ in place: on a copy of what a hook on the layer keeps, or of the attention's output
                # itself (kept for its backward), which a layer without a bias returns
                kept = hooked_module(conv) or conv.bias is None
                h = activate(h.clone() if kept else h, self.activation)
        return h
