"""GIN (a 2-layer MLP on the sum of the neighbours and (1 + ε) times the vertex) on the GCN's distributed SpMM.

Layer l computes PyG ``GINConv`` with ``nn = MLP([d_in, d_out, d_out])`` (ReLU between, no norm, no dropout):

.. math::
    \\mathbf{h}_i' = \\mathrm{MLP}\\Big((1 + \\epsilon) \\cdot \\mathbf{h}_i + \\sum_{j \\to i} \\mathbf{h}_j\\Big),
    \\qquad \\mathrm{MLP}(\\mathbf{z}) = \\mathbf{W}_2 \\, \\sigma(\\mathbf{W}_1 \\mathbf{z} + \\mathbf{b}_1)
    + \\mathbf{b}_2,

that is ``H' = σ(((Â + (1+ε) I)·H)·W_1ᵀ + b_1)·W_2ᵀ + b_2`` with ``Â = A`` (:func:`mggcn.nn.norm.normalize` with
``"sum"``: the in-edges as given). The aggregation is one SpMM with A plus the local term ``(1+ε)·H`` (no
communication); ε is 0 and fixed by default, learnable with ``train_eps`` (``--gin-train-eps``).

The order policy (:func:`~mggcn.nn.model.aggregate_first`) moves the MLP's first linear before the aggregation
when that makes the SpMM narrower, since ``(Â + (1+ε) I)·H·W_1ᵀ = Â·(H·W_1ᵀ) + (1+ε)·(H·W_1ᵀ)``: the SpMM runs at
``d_in`` or at ``d_out``, as for the GCN. Without input dropout the first layer's aggregation is computed once:
with a fixed ε its whole input ``(Â + (1+ε) I)·X`` (:meth:`GIN.whole_input_aggregation`; X is then let go), with a
learnable one ``Â·X``, and the local term is one scaled addition per epoch.

Buffers: per layer, the MLP's hidden ``m × d_out`` (kept by σ and by the second GEMM, its gradient written over it)
besides the GCN's, but ``H·W_1ᵀ`` lies on the layer's output buffer (see :class:`_GINConv`); with a learnable ε,
``H·W_1ᵀ`` is kept per layer (∂ε reads it). As for GraphSAGE, the layer's
input feeds two branches (the SpMM and the local term) and the layer is one autograd node (:class:`_GINConv`) that
gives the input one gradient, on the workspace.

With ``mlp_batch_norm`` (``--gin-mlp-batch-norm``) the MLP is PyG's ``MLP([d_in, d_out, d_out], norm="batch_norm")``: a
batch norm between the linears, ``σ(BN(Z·W_1ᵀ + b_1))``, its statistics over every vertex of every rank
(:mod:`mggcn.nn.batch_norm`), normalized in place on ``mlp {key}`` with ``x̂`` kept on ``bn {key}``.

Parameter names match PyG: ``convs.{l}.eps`` [1], ``convs.{l}.nn.lins.{k}.weight`` and ``.bias`` (k = 0, 1),
``convs.{l}.nn.norms.0.module.*`` for a batch norm: the state dict loads into
``torch_geometric.nn.models.GIN(d_0, hidden, num_layers, d_L)`` (``train_eps=True`` for a learnable ε; with batch
norms, once each conv's ``nn`` is such an ``MLP``).

Legend: m = rows of this rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mggcn.kernels.policy import mask_chunk_rows
from mggcn.nn.batch_norm import BatchNorm, normalize_, normalize_backward_
from mggcn.nn.branched import BranchedStack, check_operator
from mggcn.nn.functional import _linear, input_grad, masked_grad, sigma_, weight_grad
from mggcn.nn.initialization import glorot_linear
from mggcn.nn.model import Adj, aggregate_first, check_order, input_sigma
from mggcn.nn.workspace import BufferWalk, GradSpec, OutSpec, Workspace, grad_destination
from mggcn.utils.autograd import once_differentiable
from mggcn.utils.system import sparse_forward
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["GINLayer", "GIN"]


class _MLP(nn.Module):
    """The two linears of PyG's ``MLP([d_in, d_out, d_out])``, under its parameter names (``lins.{k}``), and with
    ``mlp_batch_norm`` its batch norm between them (``norms.0``, PyG's ``norm="batch_norm"``)."""

    def __init__(self, in_dim: int, out_dim: int, generator: torch.Generator | None = None,
                 mlp_batch_norm: bool = False) -> None:
        super().__init__()
        self.lins = nn.ModuleList([glorot_linear(in_dim, out_dim, True, generator),
                                   glorot_linear(out_dim, out_dim, True, generator)])
        if mlp_batch_norm:
            self.norms = nn.ModuleList([BatchNorm(out_dim)])

    @property
    def norm_module(self) -> nn.BatchNorm1d | None:
        return self.norms[0].module if hasattr(self, "norms") else None


class GINLayer(nn.Module):
    r"""One GIN layer ``MLP((Â + (1+ε) I)·H)`` with ``Â = A`` (PyG ``GINConv`` with a 2-layer MLP).

    Args:
        in_dim: ``d_in``. out_dim: ``d_out`` (the MLP's hidden and output width).
        first: the layer reads the input features (no input gradient needed).
        order: ``auto`` (:func:`~mggcn.nn.model.aggregate_first`), ``aggregate-first`` (aggregate, then the MLP)
            or ``transform-first`` (the MLP's first linear before the aggregation).
        activation: σ between the MLP's two linears (``relu``, ``leaky_relu`` or ``elu``).
        train_eps: ε is a learnable parameter (default False: a buffer fixed at ``eps``).
        eps: the (initial) ε (default 0).
        mlp_batch_norm: batch-normalize the MLP's hidden layer before its σ, with statistics over every vertex
            (:mod:`mggcn.nn.batch_norm`; PyG's ``MLP(..., norm="batch_norm")``).
        generator: draw the MLP's weights from it (:func:`~mggcn.nn.model.glorot_linear`; :class:`GIN` does); None:
            with ``glorot`` from torch's global RNG.

    Shapes: ``h`` [m, d_in] -> [m, d_out].
    """

    def __init__(self, in_dim: int, out_dim: int, first: bool = False, order: str = "auto",
                 activation: str = "relu", train_eps: bool = False, eps: float = 0.0,
                 generator: torch.Generator | None = None, mlp_batch_norm: bool = False) -> None:
        super().__init__()
        check_order(order)
        self.nn = _MLP(in_dim, out_dim, generator, mlp_batch_norm)
        if train_eps:
            self.eps = nn.Parameter(torch.full((1,), float(eps)))
        else:
            self.register_buffer("eps", torch.full((1,), float(eps)))
        self.first, self.activation, self.train_eps, self.initial_eps = first, activation, train_eps, float(eps)
        self.aggregate_first = aggregate_first(in_dim, out_dim, first, order)

    def reset_parameters(self) -> None:
        """New weights from torch's global RNG (PyG's ``glorot``, zero biases) and ε back to its initial value, when
        ``GINConv.reset_parameters`` does so; not the distribution of PyG's MLP (torch's default: docs/api.md)."""
        for module in self.nn.modules():
            if module is not self.nn and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        with torch.no_grad():
            self.eps.fill_(self.initial_eps)

    @sparse_forward
    def forward(self, h: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                h_aggregated: torch.Tensor | None = None, workspace: Workspace | None = None, key: str = "",
                output_in_workspace: bool = False, input_activation: str | None = None) -> torch.Tensor:
        """``h_aggregated`` is a precomputed ``Â·h`` (no SpMM runs; it is not modified) — with ``h`` None and a fixed
        ε, the layer's whole aggregated input ``(Â + (1+ε) I)·h`` (:meth:`GIN.whole_input_aggregation`); ``adj`` an
        operator (:func:`~mggcn.nn.branched.check_operator`); the other arguments as
        :meth:`mggcn.nn.model.GCNLayer.forward`, ``input_activation`` for a layer that multiplies first."""
        if h is None and (h_aggregated is None or self.train_eps):
            raise ValueError("a GIN layer reads h unless given its whole aggregated input (Â + (1+ε) I)·h, with a "
                             "fixed ε")
        ws = workspace
        check_operator(adj)
        agg = h_aggregated is not None or self.aggregate_first
        sigma = input_sigma(input_activation, ws, not (self.first or agg))
        out = (ws, f"out {key}") if ws is not None and output_in_workspace else None
        lin1, lin2 = self.nn.lins
        bn = self.nn.norm_module
        gamma, beta = (None, None) if bn is None else (bn.weight, bn.bias)
        return _GINConv.apply(h, lin1.weight, lin1.bias, lin2.weight, lin2.bias, self.eps, h_aggregated, gamma, beta,
                              bn, adj, agg,
                              self.activation, self.train_eps, timer, ws, key, out,
                              None if self.first else ws, sigma, torch.is_grad_enabled())


class _GINConv(torch.autograd.Function):
    """One GIN layer in one autograd node: its input's two branches (the SpMM and the local term ``(1+ε)·H``) give
    one gradient, computed on the workspace, and every intermediate lives on a workspace buffer:

    * aggregating first (``agg``): ``Z = Â·H + (1+ε)·H`` on the buffer ``A.H {key}`` (from the given ``h_agg``
      when there is one), ``U = σ(Z·W_1ᵀ + b_1)`` on ``mlp {key}``, the output ``U·W_2ᵀ + b_2``;
    * multiplying first: ``H·W_1ᵀ`` on the output's buffer, which the last GEMM overwrites once it is read (on
      ``H.W {key}`` when ε learns: ``∂ε`` reads it back; on the shared ``H.W`` when the output is a new tensor),
      ``U = σ(Â·(H·W_1ᵀ) + (1+ε)·H·W_1ᵀ + b_1)`` on ``mlp {key}``, the output ``U·W_2ᵀ + b_2``.

    With a batch norm (``bn``; ``gamma``, ``beta`` its parameters) ``U``'s input is normalized in place, ``x̂`` on
    ``bn {key}``, and backward turns the gradient over ``U`` into that of the norm's input, in place.

    Backward writes ``∂(U's input) = (∂out·W_2) ⊙ σ'`` over ``U`` (:func:`~mggcn.nn.functional.masked_grad`), then
    ``∂Z`` over ``Z`` (aggregating first) or ``Âᵀ·∂ + (1+ε)·∂`` (multiplying first) over the output's gradient when
    that lies on the output's buffer (the loss and the next layer put it there; read no more), else over
    ``H·W_1ᵀ``'s buffer, and ``∂H`` where ``grad_ws`` says — with ``sigma``, over ``H`` itself, σ's backward
    included. ``∂ε`` is one dot product (no product tensor). Keeps ``H``, ``U``, and ``Z`` or (when ε learns)
    ``H·W_1ᵀ``. ``1 + ε`` is applied as a one-element tensor, never read back to the host.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,  # type: ignore[override]
                b2: torch.Tensor, eps: torch.Tensor, h_agg: torch.Tensor | None, gamma: torch.Tensor | None,
                beta: torch.Tensor | None, bn: nn.BatchNorm1d | None, adj: Adj, agg: bool, act: str,
                train_eps: bool, timer: PhaseTimer, ws: Workspace | None, key: str, out: OutSpec, grad_ws: GradSpec,
                sigma: float | None, records: bool) -> torch.Tensor:
        m, d_out = adj.rows, w1.shape[0]
        like = h_agg if h is None else h
        scale = (eps + 1).to(like.dtype)
        mlp = None if ws is None else ws.take(f"mlp {key}", m, d_out, like)
        if agg:
            if h is None:
                z = h_agg  # the whole input, computed once
            else:
                z_buffer = None if ws is None else ws.take(f"A.H {key}", m, h.shape[1], h)
                if h_agg is None:
                    z = adj.run(h, out=z_buffer).addcmul_(h, scale)
                else:
                    z = torch.addcmul(h_agg, h, scale, out=z_buffer) if z_buffer is not None else h_agg + h * scale
            with timer("gemm"):
                u = _linear(z, w1, b1, mlp)
            kept = z
        else:
            hw_name = f"H.W {key}" if train_eps else "H.W"
            if out is not None and not train_eps:  # on the output's buffer, which the last GEMM then overwrites
                hw_dest = out[0].take(out[1], m, d_out, h)
            else:
                hw_dest = None if ws is None else ws.take(hw_name, m, d_out, h)
            with timer("gemm"):
                hw = _linear(h, w1, None, hw_dest)
            u = adj.run(hw, out=mlp).addcmul_(hw, scale).add_(b1)
            kept = hw if train_eps else None  # the shared buffer H.W is the next layer's: only ∂ε reads it back
        xhat = invstd = None
        if bn is not None:
            # x̂ only for a forward that records a backward (needs_input_grad holds under no_grad too)
            xhat, invstd = normalize_(u, bn, adj, records and any(ctx.needs_input_grad), ws, f"bn {key}")
        u = sigma_(u, act)
        dest = None if out is None else out[0].take(out[1], m, w2.shape[0], like)
        with timer("gemm"):
            result = _linear(u, w2, b2, dest)
        ctx.save_for_backward(h, w1, w2, scale, u, kept, xhat, invstd, gamma)
        ctx.adj, ctx.agg, ctx.cached, ctx.act, ctx.timer = adj, agg, h_agg is not None, act, timer
        ctx.batch_stats = bn is not None and bn.training
        ctx.train_eps = train_eps
        ctx.ws, ctx.key, ctx.hw_name, ctx.grad_ws, ctx.sigma = ws, key, None if agg else hw_name, grad_ws, sigma
        ctx.out_name = None if out is None else out[1]
        return result

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        h, w1, w2, scale, u, kept, xhat, invstd, gamma = ctx.saved_tensors
        needs_h, needs_w1, needs_b1, needs_w2, needs_b2, needs_eps, needs_agg = ctx.needs_input_grad[:7]
        adj, ws, timer = ctx.adj, ctx.ws, ctx.timer
        grad_h = grad_w1 = grad_b1 = grad_eps = grad_agg = None
        with timer("gemm"):
            grad_w2 = weight_grad(grad, u) if needs_w2 else None
            grad_b2 = grad.sum(0) if needs_b2 else None
            grad_u = masked_grad(grad, w2, u, ctx.act, ws)  # ∂ of σ's input, over U
        grad_gamma = grad_beta = None
        if xhat is not None:  # ∂ of the batch norm's input, over U
            grad_gamma, grad_beta = normalize_backward_(grad_u, xhat, invstd, gamma, adj, ctx.batch_stats, ws)
        grad_b1 = grad_u.sum(0) if needs_b1 else None
        if ctx.agg:
            z = kept
            z_on_workspace = ws is not None and h is not None  # else Z is new, or the caller's whole input
            with timer("gemm"):
                grad_w1 = weight_grad(grad_u, z) if needs_w1 else None
                if needs_h or needs_eps or needs_agg:  # ∂Z over Z where Z is on the workspace, read no more
                    grad_z = torch.mm(grad_u, w1, out=z) if z_on_workspace else grad_u @ w1
            if needs_eps:
                grad_eps = _dot(grad_z, h)
            if needs_agg:  # the caller's: not on a workspace buffer
                grad_agg = grad_z.clone() if z_on_workspace else grad_z
            if needs_h:
                dest = grad_destination(ctx.grad_ws, h.shape[0], h.shape[1], like=grad, avoid=grad)
                if ctx.cached:
                    grad_h = torch.mul(grad_z, scale, out=dest) if dest is not None else grad_z * scale
                else:
                    grad_h = adj.run(grad_z, transpose=True, out=dest).addcmul_(grad_z, scale)
            return grad_h, grad_w1, grad_b1, grad_w2, grad_b2, grad_eps, grad_agg, grad_gamma, grad_beta, *[None] * 12
        if needs_eps:
            grad_eps = _dot(grad_u, kept)
        if ws is None:
            over = None
        elif (not ctx.train_eps and ctx.out_name is not None and ws.holds(ctx.out_name, grad)
              and grad.shape == grad_u.shape and grad.is_contiguous()):
            # the gradient of the output written over the output (by the loss, or by the next layer over its
            # input): this layer's own buffer, read no more
            over = grad
        else:  # over H·W_1ᵀ's buffer, read no more
            over = ws.take(ctx.hw_name, grad_u.shape[0], grad_u.shape[1], grad_u)
        grad_hw = adj.run(grad_u, transpose=True, out=over).addcmul_(grad_u, scale)
        with timer("gemm"):
            grad_w1 = weight_grad(grad_hw, h) if needs_w1 else None
            if needs_h:
                grad_h = input_grad([(grad_hw, w1)], h, ctx.sigma, ctx.grad_ws, avoid=grad)
        return grad_h, grad_w1, grad_b1, grad_w2, grad_b2, grad_eps, None, grad_gamma, grad_beta, *[None] * 12


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``Σ a ⊙ b`` as a one-element tensor (``∂ε``), without the product tensor."""
    return torch.dot(a.reshape(-1), b.reshape(-1)).reshape(1)


class GIN(BranchedStack):
    """A stack of :class:`GINLayer`, σ between layers, logits out (PyG's ``GIN`` model).

    ``dims``, ``activation``, ``dropout``, ``input_dropout`` and ``reuse_buffers``: as
    :class:`~mggcn.nn.model.LayerStack`; ``activation`` is also σ inside each MLP (PyG's ``GIN(act=...)``).

    Args:
        order: the order policy, see :func:`~mggcn.nn.model.aggregate_first`.
        train_eps: learn ε (default False: ε = 0 fixed).
        mlp_batch_norm: batch-normalize each MLP's hidden layer (:class:`GINLayer`), over every vertex; the last
            layer's SpMM backward then reads every column of Âᵀ (the norm's gradient reaches every row).
        seed: initialization seed (Glorot weights, zero biases); the same seed gives the same weights on every rank;
            None (default): torch's global generator decides it, as for torch.nn's layers.
    """

    kind = "gin"
    pyg_name = pyg_label = "GIN"
    options = ("gin_train_eps", "gin_mlp_batch_norm", "batch_norm")
    activation_inside_layers = True  # each layer's MLP: Linear, σ, Linear
    layer_weight = "convs.{}.nn.lins.0.weight"

    @classmethod
    def build(cls, dims: Sequence[int], train_eps: bool = False, mlp_batch_norm: bool = False, **common) -> GIN:
        return cls(dims, train_eps=train_eps, mlp_batch_norm=mlp_batch_norm, **common)

    @classmethod
    def state_dims(cls, state: dict[str, torch.Tensor]) -> list[int]:
        """As :meth:`LayerStack.state_dims`, each layer's MLP checked first to be the model's: two linears, the
        hidden width its output width (PyG's ``GIN(in, hidden, L, out)``); another MLP is said as such."""
        layer = 0
        while isinstance(first := state.get(cls.layer_weight.format(layer)), torch.Tensor) and first.dim() == 2:
            if f"convs.{layer}.nn.lins.2.weight" in state:
                raise ValueError(f"layer {layer}'s MLP has more than two linears; mggcn's GIN takes MLPs of two "
                                 "(Linear, σ, Linear), as PyG's GIN(in, hidden, L, out) makes them")
            second = state.get(f"convs.{layer}.nn.lins.1.weight")
            hidden, inputs = first.shape
            if isinstance(second, torch.Tensor) and second.dim() == 2 and tuple(second.shape) != (hidden, hidden):
                raise ValueError(f"layer {layer}'s MLP is [{inputs}, {second.shape[1]}, {second.shape[0]}] (its "
                                 f"linears {list(first.shape)} and {list(second.shape)}); mggcn's GIN takes MLPs "
                                 "whose hidden width is their output width, as PyG's GIN(in, hidden, L, out)")
            layer += 1
        return super().state_dims(state)

    @classmethod
    def state_options(cls, state: dict[str, torch.Tensor]) -> dict:
        mlp = {"mlp_batch_norm": True} if "convs.0.nn.norms.0.module.weight" in state else {}
        return super().state_options(state) | mlp

    @classmethod
    def pyg_convs(cls, dims: Sequence[int], state: dict[str, torch.Tensor], normalize: bool) -> nn.ModuleList:
        if not cls.state_options(state).get("mlp_batch_norm"):
            return super().pyg_convs(dims, state, normalize)
        from torch_geometric.nn import MLP, GINConv

        convs = nn.ModuleList(GINConv(MLP([a, b, b], norm="batch_norm")) for a, b in zip(dims[:-1], dims[1:]))
        convs.load_state_dict({k.removeprefix("convs."): v for k, v in state.items()}, strict=True)
        return convs

    @classmethod
    def keeps_training_columns(cls, mlp_batch_norm: bool = False, **options) -> bool:
        return not mlp_batch_norm

    @property
    def evaluates_differently(self) -> bool:
        return self.evaluates_differently_with(self.dropout, self.input_dropout, hasattr(self, "norms"),
                                               mlp_batch_norm=self.mlp_batch_norm)

    @classmethod
    def evaluates_differently_with(cls, dropout: float = 0.0, input_dropout: float = 0.0, batch_norm: bool = False,
                                   mlp_batch_norm: bool = False, **options) -> bool:
        # the MLPs' norms: their running statistics in eval mode
        return super().evaluates_differently_with(dropout, input_dropout, batch_norm) or mlp_batch_norm

    @classmethod
    def operator(cls, norm: str) -> str:
        return "sum"

    @classmethod
    def linears(cls, d_in: int, d_out: int) -> list[tuple[int, int, bool]]:
        return [(d_in, d_out, False), (d_out, d_out, True)]  # the MLP's second linear always needs ∂H

    @classmethod
    def num_parameters(cls, dims: Sequence[int], train_eps: bool = False, mlp_batch_norm: bool = False) -> int:
        return sum(a * b + b * b + (4 if mlp_batch_norm else 2) * b + int(train_eps)
                   for a, b in zip(dims[:-1], dims[1:], strict=True))

    @classmethod
    def reads_input(cls, train_eps: bool = False) -> bool:
        return train_eps  # the local term (1+ε)·X changes with a learnable ε

    def whole_input_aggregation(self, x_aggregated: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
        """With a fixed ε, ``(Â + (1+ε) I)·X``, over ``x_aggregated``: the first layer's whole input, computed once."""
        if self.train_eps:
            return None
        return x_aggregated.addcmul_(x, (self.convs[0].eps + 1).to(x.dtype))

    @classmethod
    def plan_before_gemm(cls, walk: BufferWalk, i: int, d_in: int, d_out: int, agg: bool, cached: bool,
                         train_eps: bool) -> None:
        if cached and train_eps:  # Â·X + (1+ε)·X from the cached Â·X; with a fixed ε, the trainer's, once
            walk.take(f"A.H {i}", d_in)

    @classmethod
    def plan_transform_buffer(cls, i: int, train_eps: bool) -> str | None:
        # ∂ε reads H·W_1ᵀ: then each layer keeps its own; else it goes on the layer's output buffer
        return f"H.W {i}" if train_eps else None

    @classmethod
    def plan_after_gemm(cls, walk: BufferWalk, i: int, d_out: int, mlp_batch_norm: bool = False, **options) -> None:
        walk.take(f"mlp {i}", d_out)
        if mlp_batch_norm:
            walk.take(f"bn {i}", d_out)  # x̂, read by the norm's backward

    @classmethod
    def plan_output_backward(cls, walk: BufferWalk, i: int, d_out: int, agg: bool, grad: str,
                             train_eps: bool) -> None:
        # the MLP's second GEMM and σ's backward over its hidden layer, a block of rows at a time
        walk.take("sigma block", d_out, rows=mask_chunk_rows(walk.rows, d_out, walk.device))
        if not (agg or train_eps or grad == f"ws:out {i}"):
            walk.take("H.W", d_out)  # Âᵀ·∂ + (1+ε)·∂, where the output's gradient is not on its buffer

    def __init__(self, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
                 input_dropout: float = 0.0, order: str = "auto", train_eps: bool = False, seed: int | None = None,
                 reuse_buffers: bool = True, mlp_batch_norm: bool = False, batch_norm: bool = False) -> None:
        super().__init__(dims, activation, dropout, input_dropout, reuse_buffers, seed=seed, batch_norm=batch_norm)
        self.train_eps, self.mlp_batch_norm = train_eps, mlp_batch_norm
        self.reads_training_columns = self.keeps_training_columns(mlp_batch_norm)
        dims, generator = self.dims, torch.Generator().manual_seed(self.seed)  # the layers' weights from it
        self.convs.extend(GINLayer(dims[i], dims[i + 1], first=(i == 0), order=order, activation=activation,
                                   train_eps=train_eps, generator=generator, mlp_batch_norm=mlp_batch_norm)
                          for i in range(len(dims) - 1))
