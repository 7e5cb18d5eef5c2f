"""The GCN as plain single-device PyTorch; distribution enters only through the ``adj`` operator it is given.

Layer l computes ``H_{l+1} = σ(Â · H_l · W_lᵀ + b_l)``; ``adj`` is a callable ``H -> Â·H`` (a
:class:`~mggcn.distributed.spmm.StagedSpMM`, across ranks or in one process) that takes two keywords: ``out``, a
workspace buffer for its result, and ``grad_ws``, the workspace whose gradient buffers receive its backward's result.

Order policy (it decides the SpMM width, hence the communication volume): each layer multiplies by W before
aggregating — ``Â·(H·Wᵀ)`` — or after — ``(Â·H)·Wᵀ`` — whichever makes its SpMMs narrower, counting forward and
backward: a hidden layer runs its SpMM in both passes at width ``d_in`` or ``d_out``; the first layer needs no
gradient with respect to its input, so aggregate-first costs it one SpMM at ``d_in`` (forward only) against two at
``d_out``. Without input dropout, ``Â·X`` never changes, so it is computed once before training and the first
layer costs one GEMM per epoch.

Memory (MG-GCN's discipline, in PyTorch terms): autograd keeps only what backward reads — a layer's GEMM keeps
its input (for ``∂W``), the SpMM keeps nothing (its backward needs only Âᵀ), σ keeps its output, which is also the
next layer's input, so each hidden activation is held once. The bias is added inside the GEMM (``addmm``) when the
GEMM is the layer's last step, σ overwrites the layer's fresh output in place, and no ``E × d`` tensor exists
anywhere. Those buffers are a :class:`~mggcn.nn.workspace.Workspace`, allocated at the first epoch and reused by every
later one: every layer's output (whether a GEMM or an SpMM produces it), the ``Â·H`` an aggregate-first layer's GEMM
keeps, the ``H·Wᵀ`` an SpMM reads. A gradient overwrites the buffer of what it is the gradient of once backward no
longer reads it (the MG-GCN paper's reuse): ``∂(H·Wᵀ)`` over ``H·Wᵀ`` (the SpMM's backward reads only Âᵀ),
``∂(Â·H)`` over ``Â·H`` (after ``∂W``), and in a GCN the gradient of σ's output over that output when a GEMM reads
it: ``∂W`` first, then the GEMM's ``∂H`` and σ's backward a block of rows at a time, each block's rows of ``∂H``
computed into a small buffer and written over those rows of ``H`` once σ's backward has read their signs. So a
hidden layer that multiplies first holds one ``m × d_out`` buffer for its output and its gradient. The other
gradients (an aggregate-first layer's SpMM, dropout's) go on two gradient buffers used in turn.
The logits are a new tensor unless the caller asks for them on the workspace too (the trainer does, and the loss
writes their gradient over them). :mod:`mggcn.tools.plan` counts these bytes.

Where a layer ends with its GEMM (it aggregates first, or Â·X is cached) and the next one multiplies first, the first
GEMM, σ and the second GEMM run as one step a block of rows at a time (:class:`~mggcn.nn.functional._GemmActGemm`),
on the same buffers: σ and the second GEMM read each block of the first GEMM's output while it is still in cache.

The autograd functions that do this (the timed GEMM, σ in place, the fused GEMM-σ-GEMM, dropout) are in
:mod:`mggcn.nn.functional`; this module holds the order policy, the GCN layer and what every model shares
(:class:`LayerStack`).

Parameter names match PyG: ``convs.{l}.lin.weight`` [d_out, d_in] and ``convs.{l}.bias`` [d_out], so the state
dict loads into PyG's ``models.GCN``, or ``torch.nn.ModuleList([GCNConv(...), ...])`` (prefix ``convs.`` dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from mggcn.config import ACTIVATIONS, ORDERS
from mggcn.kernels.policy import mask_chunk_rows
from mggcn.nn.arguments import as_seed, check_dims, check_probabilities
from mggcn.nn.batch_norm import BatchNorm, batch_norm_
from mggcn.nn.functional import _GemmActGemm, _TimedLinear, activate, check_inputs, check_width, dropout, hooked_module
from mggcn.nn.initialization import glorot_linear
from mggcn.nn.workspace import BufferWalk, GradSpec, OutSpec, Workspace, WorkspaceClaims
from mggcn.utils.errors import ConfigError
from mggcn.utils.system import sparse_forward
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["GCNLayer", "GCN", "LayerStack", "aggregate_first", "spmm_widths", "check_order"]


Adj = Callable[..., torch.Tensor]  # adj(H, out=OutSpec, grad_ws=GradSpec) -> Â·H (σ may overwrite it)


class TrainRowsAdj:
    """The last layer's ``adj`` when the loss reads the logits only at the training rows: the gradient reaching its
    SpMM is zero elsewhere, so the SpMM's backward may multiply by Âᵀ's training columns (the operator's
    ``grad_on_train_rows``)."""

    def __init__(self, op: Adj) -> None:
        self.op = op

    def __call__(self, b: torch.Tensor, out: OutSpec = None, grad_ws: GradSpec = None) -> torch.Tensor:
        return self.op(b, out=out, grad_ws=grad_ws, grad_on_train_rows=True)

    @property
    def rows(self) -> int:
        return self.op.rows

    def run(self, b: torch.Tensor, transpose: bool = False, out: torch.Tensor | None = None) -> torch.Tensor:
        """The operator's product without autograd (for a layer that runs its SpMMs itself), with Âᵀ's training
        columns alone where the operator keeps them."""
        return self.op.run(b, transpose=transpose, out=out, train_columns=transpose and self.op.has_training_columns)


def input_sigma(input_activation: str | None, ws: Workspace | None, multiplies_first: bool) -> str | None:
    """The σ whose backward a layer given ``input_activation`` does (None without one): only a hidden layer that
    multiplies first (``multiplies_first``), with a workspace, does the backward of the σ before it."""
    if input_activation is None:
        return None
    if ws is None or not multiplies_first:
        raise ValueError("input_activation needs a workspace and a hidden layer that multiplies first")
    return input_activation


def check_order(order: str) -> None:
    """``order`` one of :data:`ORDERS`, or a :class:`~mggcn.utils.errors.ConfigError` naming it."""
    if order not in ORDERS:
        raise ConfigError(f"order must be one of {', '.join(ORDERS)}, got '{order}'", "order")


def aggregate_first(d_in: int, d_out: int, first: bool, order: str = "auto") -> bool:
    """True for ``(Â·H)·Wᵀ``, False for ``Â·(H·Wᵀ)``; see the module docstring."""
    if order != "auto":
        return order == "aggregate-first"
    if first:
        return d_in <= 2 * d_out
    return d_in < d_out


def spmm_widths(dims: list[int], order: str, caches_input: bool, forward: bool = False) -> list[int]:
    """The width of every SpMM an epoch runs (forward and backward; ``forward``: the forward's alone, as an
    evaluation runs them), for sizing buffers and counting traffic."""
    widths = []
    for i in range(len(dims) - 1):
        if i == 0 and caches_input:
            continue  # the trainer computes Â·X once and the first layer reads it, whatever the order policy
        agg = aggregate_first(dims[i], dims[i + 1], i == 0, order)
        if i == 0 and agg:
            widths += [dims[0]]  # the first layer's input needs no gradient: no backward SpMM
        else:
            width = dims[i] if agg else dims[i + 1]
            widths += [width] if forward else [width, width]
    return widths


class GCNLayer(nn.Module):
    r"""One graph convolution ``Â · H · Wᵀ + b`` (PyG ``GCNConv`` with a precomputed Â).

    Args:
        in_dim: ``d_in``. out_dim: ``d_out``.
        first: the layer reads the input features (no input gradient needed).
        order: ``auto`` (the policy of the module docstring), ``aggregate-first`` or ``transform-first``.
        bias: add a learnable bias (default True).
        generator: initialize ``W`` with PyG's ``glorot`` from this generator (:class:`GCN` does); None: from
            torch's global RNG, as ``GCNConv`` draws its weight.

    Shapes: ``h`` [m, d_in] -> [m, d_out].
    """

    def __init__(self, in_dim: int, out_dim: int, first: bool = False, order: str = "auto", bias: bool = True,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        check_order(order)
        self.lin = glorot_linear(in_dim, out_dim, bias=False, generator=generator)
        self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None
        self.first = first
        self.aggregate_first = aggregate_first(in_dim, out_dim, first, order)

    def reset_parameters(self) -> None:
        """New weights from torch's global RNG (PyG's ``glorot``, a zero bias), as ``GCNConv.reset_parameters``."""
        self.lin.reset_parameters()
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        # The bias is the layer's, added after the SpMM, so ``lin`` itself shows bias=False.
        return f"{self.lin.in_features}, {self.lin.out_features}, bias={self.bias is not None}"

    @sparse_forward
    def forward(self, h: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                h_aggregated: torch.Tensor | None = None, workspace: Workspace | None = None, key: str = "",
                output_in_workspace: bool = False, input_activation: str | None = None) -> torch.Tensor:
        """``h_aggregated`` is a precomputed ``Â·h``; when given, no SpMM runs.

        With ``workspace``, what the GEMMs and SpMMs produce lives on its buffers: ``H·Wᵀ`` before an SpMM, ``Â·H``
        before a GEMM (named after ``key``), and with ``output_in_workspace`` the layer's output (``out {key}``; the
        next forward overwrites it). The bias is added inside the GEMM, or in place to the SpMM's result. Backward
        writes each gradient over the buffer of what it is the gradient of, where nothing reads that any more: the
        SpMM's ``∂(H·Wᵀ)`` over ``H·Wᵀ``, the GEMM's ``∂(Â·H)`` over ``Â·H``, and, with ``input_activation`` (``h``
        is that σ's output, applied with ``activate(..., deferred=True)``, and read by nothing else), this layer's
        GEMM writes ``∂h``, σ's backward included, over ``h``. Other input gradients go on the workspace's two
        gradient buffers (none for the first layer's input, which may be a leaf that keeps it).
        """
        if isinstance(adj, torch.Tensor):  # PyG's conv(x, edge_index): said in one line
            check_inputs(h, adj, self.lin.in_features, self.lin.weight.dtype)
        check_width(h if h_aggregated is None else h_aggregated, self.lin.in_features)
        ws, weight, bias = workspace, self.lin.weight, self.bias
        out = (ws, f"out {key}") if ws is not None and output_in_workspace else None
        input_grad_ws = None if self.first else ws
        sigma = input_sigma(input_activation, ws, not (self.first or self.aggregate_first))
        if h_aggregated is not None or self.aggregate_first:
            a, a_grad = self._gemm_input(h, adj, h_aggregated, ws, key)
            return _TimedLinear.apply(a, weight, bias, timer, out, a_grad)
        hw = _TimedLinear.apply(h, weight, None, timer, None if ws is None else (ws, "H.W"), input_grad_ws, sigma)
        return self._aggregate(hw, adj, out, ws)

    def forward_with_next(self, nxt: GCNLayer, h: torch.Tensor, adj: Adj, adj_next: Adj, activation: str,
                          workspace: Workspace, timer: PhaseTimer = NULL_TIMER,
                          h_aggregated: torch.Tensor | None = None, key: str = "", key_next: str = "",
                          output_in_workspace: bool = False) -> torch.Tensor:
        """This layer, σ and ``nxt`` in one step, for a layer that ends with its GEMM (it aggregates first, or is
        given ``h_aggregated``) followed by one that multiplies first: the two GEMMs and σ a block of rows at a time
        (:class:`~mggcn.nn.functional._GemmActGemm`), then ``nxt``'s SpMM and bias. The same values, buffers and
        gradients as this layer's :meth:`forward`, ``activate(..., deferred=True)`` and ``nxt``'s :meth:`forward` with
        ``input_activation``; ``key``, ``key_next``: their workspace keys; ``output_in_workspace``: ``nxt``'s."""
        if not (h_aggregated is not None or self.aggregate_first) or nxt.aggregate_first:
            raise ValueError("forward_with_next needs a layer that ends with its GEMM and one that multiplies first")
        a, a_grad = self._gemm_input(h, adj, h_aggregated, workspace, key)
        hw = _GemmActGemm.apply(a, self.lin.weight, self.bias, nxt.lin.weight, activation, timer, workspace,
                                key, a_grad)
        return nxt._aggregate(hw, adj_next, (workspace, f"out {key_next}") if output_in_workspace else None, workspace)

    def _gemm_input(self, h: torch.Tensor, adj: Adj, h_aggregated: torch.Tensor | None, ws: Workspace | None,
                    key: str) -> tuple[torch.Tensor, GradSpec]:
        """What the GEMM multiplies in a layer that ends with it — ``Â·h``, or ``h_aggregated`` — and where that
        GEMM's backward puts its gradient (over ``Â·h``'s buffer; none for the precomputed one)."""
        if h_aggregated is not None:
            return h_aggregated, None
        h_agg = adj(h, out=None if ws is None else (ws, f"A.H {key}"), grad_ws=None if self.first else ws)
        return h_agg, None if ws is None else (ws, f"A.H {key}")

    def _aggregate(self, hw: torch.Tensor, adj: Adj, out: OutSpec, ws: Workspace | None) -> torch.Tensor:
        """``Â·(H·Wᵀ) + b`` of a layer that multiplies first, the SpMM's gradient over ``H·Wᵀ``'s buffer."""
        z = adj(hw, out=out, grad_ws=None if ws is None else (ws, "H.W"))
        return z if self.bias is None else z.add_(self.bias)


class LayerStack(nn.Module):
    """What every model shares: a stack of layers (``convs``), σ between them, dropout, the workspace, and the
    first layer's precomputed aggregation. Subclasses fill ``convs``; each layer takes ``(h, adj, timer,
    h_aggregated, workspace, key, output_in_workspace)`` as :meth:`GCNLayer.forward` does.

    Args:
        dims: ``[d_0 (features), d_1, ..., d_L (classes)]``.
        activation: ``relu``, ``leaky_relu`` (slope 0.01) or ``elu`` (α 1), on every layer but the last.
        dropout: dropout probability on the input of every layer but the first.
        input_dropout: dropout probability on the input features (0 lets ``Â·X`` be computed once).
        reuse_buffers: keep activations and gradients on a :class:`~mggcn.nn.workspace.Workspace` reused by every
            forward and backward (default True; a forward while an earlier one's graph awaits its backward takes
            another: :class:`~mggcn.nn.workspace.WorkspaceClaims`). The logits are a new tensor unless asked; a
            forward then backpropagates once (False for ``retain_graph`` and more). Gradients are first order only
            (``create_graph=True`` is refused); a layer with a forward hook gives it an output of its own.
        seed: the initialization seed (None: drawn from torch's global generator, as torch.nn's layers draw their
            weights); dropout masks come from a generator seeded with it until :meth:`seed_dropout` is called.
        batch_norm: a batch norm after every layer but the last, before σ, its statistics over every rank's
            vertices (:mod:`mggcn.nn.batch_norm`; PyG's ``norm="batch_norm"``, under its names ``norms.{l}``).
    """

    kind = ""  # "gcn", "sage", "gin", "gat": the --model name (mggcn.nn.models registers each class under it)

    # What the tools know of a model without building one (mggcn plan, the roofline, the bench, checkpoints), each
    # class saying it of itself; the defaults are the GCN's (one linear per layer, Â with self loops).
    pyg_name = "GCN"  # the torch_geometric.nn.models class its weights load into (pyg_state_dict)
    pyg_label = "GCNConv"  # what the bench calls PyG's run (pyg_convs: GCNConv layers on a normalized adjacency)
    pyg_one_hidden_width = False  # PyG's model takes one hidden width (the bench's PyG run needs equal widths)
    pyg_takes_edge_index = False  # the bench gives PyG's layers the edge list instead of a CSR adjacency
    reads_training_columns = True  # the last layer's backward multiplies by Âᵀ's training columns when kept
    self_loops = True  # its Â adds the identity: nonzeros = edges + vertices
    activation_inside_layers = False  # σ acts inside each layer too (GIN's MLP), not only between layers
    options: tuple[str, ...] = ()  # the TrainConfig fields only this model takes
    layer_weight = "convs.{}.lin.weight"  # layer l's weight [d_out, d_in]: a state dict's model and sizes by it
    layer_bias: str | None = None  # layer l's bias, where the model takes ``bias=`` (None: it does not)
    # GCNLayer.forward's ``input_activation``: its layers that multiply first do the backward of the σ before them
    takes_input_activation = False

    @classmethod
    def keeps_training_columns(cls, **options) -> bool:
        """Whether the last layer's backward may read Âᵀ's training columns alone with the model's ``options``
        (:attr:`reads_training_columns`; not where a norm couples the rows)."""
        return cls.reads_training_columns

    @classmethod
    def reads_input(cls, train_eps: bool = False) -> bool:
        """Whether forward still reads ``x`` when given the cached ``Â·x`` (then the trainer keeps X); ``train_eps``:
        GIN's learnable ε. The GCN: no."""
        return False

    @classmethod
    def state_keys(cls) -> tuple[str, ...]:
        """Names (``{}``: the layer) of a layer's tensors that tell a state dict of this model from the others'."""
        return (cls.layer_weight,)

    @classmethod
    def state_dims(cls, state: dict[str, torch.Tensor]) -> list[int]:
        """``[d_0, ..., d_L]`` of a state dict of this model, from each layer's :attr:`layer_weight`; a
        ``ValueError`` saying what does not fit."""
        dims: list[int] = []
        layer = 0
        while cls.layer_weight.format(layer) in state:
            name = cls.layer_weight.format(layer)
            tensor = state[name]
            if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2:
                raise ValueError(f"{name} is not a matrix (a [d_out, d_in] tensor)")
            d_out, d_in = tensor.shape
            if d_out == 0 or d_in == 0:
                raise ValueError(f"{name} is {d_out} × {d_in}: a layer has no width")
            if dims and dims[-1] != d_in:
                raise ValueError(f"layer {layer} takes {d_in} inputs but layer {layer - 1} gives {dims[-1]}")
            dims = dims or [int(d_in)]
            dims.append(int(d_out))
            layer += 1
        return dims

    @classmethod
    def same_model_options(cls, options: dict, explicit: bool = False) -> dict:
        """The model's own settings spelled one way per model they build (GAT: ``output_heads == heads`` is None;
        ``explicit``: each as the model has it, GAT's None as its ``heads``), e.g. to compare or to name them."""
        return options

    @classmethod
    def state_options(cls, state: dict[str, torch.Tensor]) -> dict:
        """The model's own options (:func:`~mggcn.nn.models.make_model`'s) a state dict's keys and shapes fix."""
        return ({"batch_norm": True} if "norms.0.module.weight" in state else {}) | cls.bias_option(state)

    @classmethod
    def bias_option(cls, state: dict[str, torch.Tensor]) -> dict:
        """``{"bias": False}`` for the weights of a model made without biases (PyG's ``bias=False``: its first layer
        has a weight and no :attr:`layer_bias`), else nothing."""
        if cls.layer_bias is not None and cls.layer_weight.format(0) in state and cls.layer_bias.format(0) not in state:
            return {"bias": False}
        return {}

    @classmethod
    def build(cls, dims: Sequence[int], train_eps: bool = False, **common) -> LayerStack:
        """The model with layer sizes ``dims`` and the :class:`LayerStack` arguments ``common``."""
        return cls(dims, **common)

    @classmethod
    def operator(cls, norm: str) -> str:
        """The Â it aggregates with (:data:`mggcn.config.OPERATORS`), given the ``--norm`` option."""
        return norm

    @classmethod
    def linears(cls, d_in: int, d_out: int) -> list[tuple[int, int, bool]]:
        """The linear maps of a layer as ``(in, out, always needs its input's gradient)`` (the roofline's GEMMs)."""
        return [(d_in, d_out, False)]

    @classmethod
    def num_parameters(cls, dims: Sequence[int], train_eps: bool = False) -> int:
        """Trained parameters with layer sizes ``dims``: each linear's weight, and a bias per layer."""
        return sum(a * b + b for a, b in zip(dims[:-1], dims[1:], strict=True))

    @classmethod
    def pyg_spmm_widths(cls, d_in: int, d_out: int, first: bool) -> list[int]:
        """The widths of the SpMMs PyG's layer runs in an epoch (GCNConv multiplies first, forward and backward)."""
        return [d_out, d_out]

    @classmethod
    def pyg_edge_weight(cls, edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The edges and weights PyG's layers are given (GCNConv: ``gcn_norm`` with self loops)."""
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        return gcn_norm(edge_index, None, num_nodes, add_self_loops=True)

    @classmethod
    def pyg_convs(cls, dims: Sequence[int], state: dict[str, torch.Tensor], normalize: bool) -> nn.ModuleList:
        """PyG's layers holding the weights ``state`` (a :meth:`pyg_state_dict`); ``normalize``: they normalize the
        adjacency themselves (given a raw ``edge_index``)."""
        from torch_geometric.nn import GCNConv

        convs = nn.ModuleList(GCNConv(a, b, cached=True, normalize=normalize)
                              for a, b in zip(dims[:-1], dims[1:], strict=True))
        convs.load_state_dict({k.removeprefix("convs."): v for k, v in state.items()})
        return convs

    @classmethod
    def exchange_widths(cls, dims: Sequence[int], order: str = "auto", caches_input: bool = True,
                        **options) -> list[int]:
        """The width of every exchange of rows an epoch runs, forward and backward (the operator's buffers are
        sized by the widest, the plan counts the traffic): the SpMMs' (:func:`spmm_widths`); ``options``: the
        model's own (:attr:`options`)."""
        return spmm_widths(list(dims), order, caches_input)

    @classmethod
    def evaluation_widths(cls, dims: Sequence[int], order: str = "auto", caches_input: bool = True,
                          **options) -> list[int]:
        """The exchanges of a forward alone: what measuring the accuracies adds to an epoch when the model
        evaluates differently (:meth:`evaluates_differently_with`)."""
        return spmm_widths(list(dims), order, caches_input, forward=True)

    @classmethod
    def evaluates_differently_with(cls, dropout: float = 0.0, input_dropout: float = 0.0, batch_norm: bool = False,
                                   **options) -> bool:
        """:attr:`evaluates_differently` of the model built with these settings (the plan has no model)."""
        return dropout > 0 or input_dropout > 0 or batch_norm

    @classmethod
    def allreduce_widths(cls, dims: Sequence[int], **options) -> list[int]:
        """The width of every all-reduce of ``P·m`` rows an epoch's layers run besides the gradients' (none)."""
        return []

    plans_whole_layers = False  # the plan walks each layer by plan_layer / plan_layer_backward (GAT)
    kept_bytes_per_edge = 0  # per nonzero of the blocks of Â and Âᵀ, index arrays its kernels build once and keep

    # The plan's walk of an epoch (mggcn.tools.plan.activation_peak) asks each model for its own buffers.
    @classmethod
    def plan_before_gemm(cls, walk: BufferWalk, i: int, d_in: int, d_out: int, agg: bool, cached: bool,
                         train_eps: bool) -> None:
        """Layer ``i``'s tensors between its aggregation (if first) and its GEMM."""

    @classmethod
    def plan_transform_buffer(cls, i: int, train_eps: bool) -> str | None:
        """The workspace buffer of layer ``i``'s ``H·W`` when it multiplies first (None: the layer's output
        buffer)."""
        return "H.W"

    @classmethod
    def plan_after_gemm(cls, walk: BufferWalk, i: int, d_out: int, **options) -> None:
        """Layer ``i``'s tensors between its GEMM and its output (``options``: the model's own)."""

    @classmethod
    def plan_backward(cls, walk: BufferWalk, i: int, d_in: int, d_out: int, agg: bool, grad: str,
                      train_eps: bool) -> str:
        """Layer ``i``'s backward from the gradient ``grad`` of its output; the name of its input's gradient (layer
        0: computes ``dW`` only)."""
        if i == 0:  # no gradient for X: the GEMM computes dW only, after the SpMM (into H·W) when it multiplies
            if not agg:  # first
                walk.take("H.W", d_out)
            return grad
        if agg:
            inner = walk.take(f"A.H {i}", d_in)  # GEMM backward: the gradient of Â·H, over it
            return walk.take_grad(d_in, avoid=inner)  # SpMM backward with Âᵀ
        inner = walk.take("H.W", d_out)  # SpMM backward with Âᵀ, over H·W
        return plan_input_grad(walk, i, d_in, avoid=inner)  # GEMM backward

    def __init__(self, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
                 input_dropout: float = 0.0, reuse_buffers: bool = True, seed: int | None = None,
                 batch_norm: bool = False) -> None:
        super().__init__()
        self.dims = check_dims(type(self).__name__, dims)
        check_probabilities(dropout=dropout, input_dropout=input_dropout)
        if activation not in ACTIVATIONS:
            raise ConfigError(f"activation must be one of {', '.join(ACTIVATIONS)}, got '{activation}'", "activation")
        self.activation, self.dropout, self.input_dropout = activation, dropout, input_dropout
        self.convs = nn.ModuleList()
        if batch_norm:  # after each hidden layer, before σ (PyG's norms.{l}), over every rank's vertices
            self.norms = nn.ModuleList(BatchNorm(d) for d in self.dims[1:-1])
        self.workspace = Workspace() if reuse_buffers else None
        self._claims = WorkspaceClaims()
        # from the CPU generator torch.manual_seed seeds, whatever the default device (a model built under "meta")
        self.seed = int(torch.empty((), dtype=torch.int64, device="cpu").random_()) if seed is None else as_seed(seed)
        self._dropout_generator: torch.Generator | None = None

    def reset_parameters(self) -> None:
        """New weights from torch's global RNG, as PyG's models' ``reset_parameters``: each layer's (its own
        ``reset_parameters``, else its submodules'), and the batch norms' (weights and running statistics)."""
        for layer in [*self.convs, *getattr(self, "norms", [])]:
            resets = [layer] if hasattr(layer, "reset_parameters") else list(layer.modules())
            for module in resets:
                if hasattr(module, "reset_parameters"):
                    module.reset_parameters()

    def seed_dropout(self, seed: int) -> None:
        """Draw the following dropout masks from a generator seeded with ``seed`` (the trainer: once per epoch and
        rank). Until the first call, masks come from a generator seeded with the initialization seed."""
        device = next(self.parameters()).device
        if self._dropout_generator is None or self._dropout_generator.device != device:
            self._dropout_generator = torch.Generator(device=device)
        self._dropout_generator.manual_seed(seed)

    def seed_attention(self, seed: int) -> None:
        """Draw the following attention-dropout masks from ``seed``, the same on every rank (GAT's; the trainer
        calls it once per epoch). A model without attention has nothing to seed."""

    def _drop(self, h: torch.Tensor, p: float) -> torch.Tensor:
        if not (p and self.training):
            return h
        if self._dropout_generator is None or self._dropout_generator.device != h.device:
            self.seed_dropout(self.seed)
        return dropout(h, p, self._dropout_generator)

    @property
    def evaluates_differently(self) -> bool:
        """Whether the model in eval mode gives other logits than in training mode (dropout; GAT's attention
        dropout, GIN's batch norm): then a training forward's logits do not measure its accuracy. Said by
        :meth:`evaluates_differently_with`, the rule the plan asks too."""
        return self.evaluates_differently_with(self.dropout, self.input_dropout, hasattr(self, "norms"))

    @property
    def caches_input_aggregation(self) -> bool:
        """Whether ``Â·X`` may be computed once and passed to :meth:`forward`."""
        return self.input_dropout == 0.0

    def whole_input_aggregation(self, x_aggregated: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
        """The first layer's whole input made from ``x_aggregated`` (``Â·x``, which it may overwrite) where the model
        then reads ``x`` no more: :meth:`forward` takes it as ``x_aggregated`` with ``x`` None, and the caller may
        let go of X. None where forward reads ``x`` beside it (:meth:`reads_input`). The GCN's is ``Â·x``."""
        return None if self.reads_input() else x_aggregated

    @sparse_forward
    def forward(self, x: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                x_aggregated: torch.Tensor | None = None, logits_in_workspace: bool = False,
                loss_on_train_rows: bool = False) -> torch.Tensor:
        """Logits [m, classes] for the rows ``x`` [m, d_0]; ``x_aggregated`` is a precomputed ``Â·x``.

        ``logits_in_workspace``: return the logits on the workspace buffer ``out {L-1}`` (overwritten by the next
        forward) instead of a new tensor, so that an epoch allocates nothing of their size.
        ``loss_on_train_rows``: the loss reads the logits only at the training rows (the trainer's
        :class:`~mggcn.nn.loss.MaskedCrossEntropy`); every layer is row-wise after its SpMM, so the gradient of the
        last layer's SpMM is zero elsewhere, and ``adj`` (an :class:`~mggcn.distributed.spmm.SpMMOperator`) is told
        so: its backward may read only Âᵀ's training columns."""
        if x_aggregated is not None and not self.caches_input_aggregation:
            raise ValueError("x_aggregated cannot be used with input dropout")
        if x_aggregated is None:  # (the trainer gives Â·X cached, and no X where the model does not read it)
            check_inputs(x, adj, self.dims[0], next(self.parameters()).dtype, type(self))
        h = self._drop(x, self.input_dropout)
        last = len(self.convs) - 1
        deferred = False
        ws = None if self.workspace is None else self._claims.free(self.workspace)

        def adj_of(i: int) -> Adj:
            return TrainRowsAdj(adj) if loss_on_train_rows and self.reads_training_columns and i == last else adj

        i = 0
        while i <= last:
            if i > 0:
                h = self._drop(h, self.dropout)
            h_agg = x_aggregated if i == 0 else None
            if self._runs_with_next(i, h_agg is not None):  # layers i and i + 1 in one step (the GCN says when)
                j = i + 1
                h = self.convs[i].forward_with_next(self.convs[j], h, adj_of(i), adj_of(j), self.activation,
                                                    ws, timer, h_agg, str(i), str(j),
                                                    output_in_workspace=j < last or logits_in_workspace)
                i = j
            else:  # a hooked layer's output is a tensor of its own, which nothing changes after the hook has it
                extra = {"input_activation": self.activation} if deferred else {}
                hooked = hooked_module(self.convs[i])
                h = self.convs[i](h, adj_of(i), timer, h_aggregated=h_agg, workspace=ws, key=str(i),
                                  output_in_workspace=(i < last or logits_in_workspace) and not hooked, **extra)
                h = h.clone() if hooked and i < last else h
            if i < last:
                if hasattr(self, "norms"):
                    h = batch_norm_(h, self.norms[i], adj, ws, str(i))
                deferred = self._defers_activation(i + 1)
                h = activate(h, self.activation, deferred)
            i += 1
        return h if ws is None else self._claims.hold(ws, h)

    def _runs_with_next(self, i: int, aggregated: bool) -> bool:
        """Whether layer ``i``, σ and layer ``i + 1`` run as one step (``aggregated``: layer ``i`` is given its
        input's aggregation); the GCN says when."""
        return False

    def _defers_activation(self, i: int) -> bool:
        """Whether layer ``i``'s GEMMs do the backward of the σ before it, writing the gradient over σ's output
        (see :meth:`GCNLayer.forward`): they read σ's output alone, so its buffer then holds its gradient (the MG-GCN
        paper's reuse). Only for layers that take ``input_activation`` (:attr:`takes_input_activation`)."""
        return self.takes_input_activation and torch.is_grad_enabled() and self._gemm_reads_activation(i)

    def _gemm_reads_activation(self, i: int) -> bool:
        """Whether layer ``i``'s GEMMs read σ's output directly (no dropout between) and are its only readers: a
        layer that multiplies first, with buffers on the workspace."""
        return (self.workspace is not None and not self.convs[i].aggregate_first
                and not (self.dropout and self.training))

    def pyg_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under the names of the matching PyG model (``torch_geometric.nn.models.GCN``,
        ``GraphSAGE`` or ``GIN``), detached, on CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}


def plan_input_grad(walk: BufferWalk, i: int, d_in: int, avoid: str) -> str:
    """Where the backward of a hidden layer ``i`` that multiplies first puts ``∂H``, in :class:`BufferWalk`'s terms:
    over σ's output with σ's backward, a block of rows at a time, unless dropout is between (then on the gradient
    buffer that does not hold ``avoid``)."""
    if f"dropout mask {i}" in walk.live:
        return walk.take_grad(d_in, avoid=avoid)
    walk.take("sigma block", d_in, rows=mask_chunk_rows(walk.rows, d_in, walk.device))
    return f"ws:out {i - 1}"


class GCN(LayerStack):
    """A stack of :class:`GCNLayer`, σ between layers, logits out.

    ``dims``, ``activation``, ``dropout``, ``input_dropout`` and ``reuse_buffers``: as :class:`LayerStack`.

    Args:
        order: the order policy, see :func:`aggregate_first`.
        bias: every layer adds a learnable bias (default True).
        seed: initialization seed, the same weights on every rank; None (default): torch's generator decides it.
    """

    kind = "gcn"
    takes_input_activation = True
    options = ("batch_norm",)
    layer_bias = "convs.{}.bias"

    def __init__(self, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
                 input_dropout: float = 0.0, order: str = "auto", bias: bool = True, seed: int | None = None,
                 reuse_buffers: bool = True, batch_norm: bool = False) -> None:
        super().__init__(dims, activation, dropout, input_dropout, reuse_buffers, seed=seed, batch_norm=batch_norm)
        dims, generator = self.dims, torch.Generator().manual_seed(self.seed)  # the layers' weights from it
        self.convs.extend(
            GCNLayer(dims[i], dims[i + 1], first=(i == 0), order=order, bias=bias, generator=generator)
            for i in range(len(dims) - 1))

    def _runs_with_next(self, i: int, aggregated: bool) -> bool:
        # layer i ends with its GEMM (it aggregates first, or is given its input's aggregation), σ follows, and
        # layer i + 1's GEMM alone reads σ's output: the two GEMMs and σ a block of rows at a time
        # (GCNLayer.forward_with_next; with autograd, the same buffers and gradients as the deferred σ). Layers with
        # forward hooks run one by one, so that every hook sees its layer's call.
        return (i + 1 < len(self.convs) and (aggregated or self.convs[i].aggregate_first)
                and not hasattr(self, "norms")
                and self._gemm_reads_activation(i + 1) and not any(hooked_module(c) for c in self.convs[i:i + 2]))

    def gcnconv_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under PyG's names (``convs.{l}.lin.weight``, ``convs.{l}.bias``), detached, on CPU."""
        return self.pyg_state_dict()
