"""GraphSAGE (mean aggregation, root weight) as plain single-device PyTorch, on the GCN's distributed SpMM.

Layer l computes PyG ``SAGEConv``'s

.. math::
    \\mathbf{h}_i' = \\mathbf{W}_l \\cdot \\mathrm{mean}_{j \\to i} \\mathbf{h}_j + \\mathbf{b}
    + \\mathbf{W}_r \\cdot \\mathbf{h}_i,

that is ``H' = Â·H·W_lᵀ + b + H·W_rᵀ`` with ``Â = D_in^-1 A`` (:func:`mggcn.nn.norm.normalize` with
``"in-mean"``: the mean over the in-edges as given, no self loop added; a vertex without in-edges aggregates to 0).
The aggregation is the one SpMM of the layer (``adj``, as for :class:`~mggcn.nn.model.GCN`); the root term
``H·W_rᵀ`` is a GEMM on this rank's rows, with no communication.

The order policy (:func:`~mggcn.nn.model.aggregate_first`) picks ``(Â·H)·W_lᵀ`` or ``Â·(H·W_lᵀ)`` per layer as for
the GCN, and the first layer's ``Â·X`` is computed once when there is no input dropout (the root term ``X·W_rᵀ``
still costs a GEMM per epoch).

Buffers: the GCN's (:mod:`mggcn.nn.model`), no more. The layer's input feeds two branches (the aggregation and the
root GEMM); the layer is one autograd node (:class:`_SAGEConv`), so that the root GEMM adds ``H·W_rᵀ`` into the
layer's output, and backward computes the input's gradient as one tensor (``Âᵀ``'s branch, then the root GEMM's
added into it) on the workspace — over the input itself, σ's backward included, where the GCN would write it there.
Left to autograd, each branch's gradient would be a new tensor and their sum a third.

Parameter names match PyG: ``convs.{l}.lin_l.weight`` [d_out, d_in], ``convs.{l}.lin_l.bias`` [d_out],
``convs.{l}.lin_r.weight`` [d_out, d_in]: the state dict loads into
``torch_geometric.nn.models.GraphSAGE(d_0, hidden, num_layers, d_L)``.

Legend: m = rows of this rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mggcn.nn.branched import BranchedStack, check_operator
from mggcn.nn.functional import _linear, input_grad, weight_grad
from mggcn.nn.initialization import glorot_linear
from mggcn.nn.model import Adj, aggregate_first, check_order, input_sigma
from mggcn.nn.workspace import GradSpec, OutSpec, Workspace, grad_destination
from mggcn.utils.autograd import once_differentiable
from mggcn.utils.system import sparse_forward
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["SAGELayer", "GraphSAGE"]


class SAGELayer(nn.Module):
    r"""One GraphSAGE layer ``Â·H·W_lᵀ + b + H·W_rᵀ`` with ``Â = D_in^-1 A`` (PyG ``SAGEConv``, mean aggregation,
    root weight, no projection, no normalization).

    Args:
        in_dim: ``d_in``. out_dim: ``d_out``.
        first: the layer reads the input features (no input gradient needed).
        order: ``auto`` (:func:`~mggcn.nn.model.aggregate_first`), ``aggregate-first`` or ``transform-first``.
        bias: ``lin_l`` adds a learnable bias (default True).
        generator: draw ``W_l`` then ``W_r`` from it (:func:`~mggcn.nn.model.glorot_linear`; :class:`GraphSAGE`
            does); None: with ``glorot`` from torch's global RNG.

    Shapes: ``h`` [m, d_in] -> [m, d_out].
    """

    def __init__(self, in_dim: int, out_dim: int, first: bool = False, order: str = "auto", bias: bool = True,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        check_order(order)
        self.lin_l = glorot_linear(in_dim, out_dim, bias, generator)
        self.lin_r = glorot_linear(in_dim, out_dim, False, generator)
        self.first = first
        self.aggregate_first = aggregate_first(in_dim, out_dim, first, order)

    def reset_parameters(self) -> None:
        """New weights from torch's global RNG (PyG's ``glorot``, zero bias), when ``SAGEConv.reset_parameters`` draws
        its own; the distribution is not ``SAGEConv``'s (torch's default: docs/api.md)."""
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()

    @sparse_forward
    def forward(self, h: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                h_aggregated: torch.Tensor | None = None, workspace: Workspace | None = None, key: str = "",
                output_in_workspace: bool = False, input_activation: str | None = None) -> torch.Tensor:
        """``h_aggregated`` is a precomputed ``Â·h`` (no SpMM runs); ``adj`` an operator
        (:func:`~mggcn.nn.branched.check_operator`); the other arguments as :meth:`mggcn.nn.model.GCNLayer.forward`,
        ``input_activation`` for a layer that multiplies first."""
        ws = workspace
        check_operator(adj)
        agg = h_aggregated is not None or self.aggregate_first
        sigma = input_sigma(input_activation, ws, not (self.first or agg))
        out = (ws, f"out {key}") if ws is not None and output_in_workspace else None
        return _SAGEConv.apply(h, self.lin_l.weight, self.lin_l.bias, self.lin_r.weight, h_aggregated, adj, agg,
                               timer, ws, key, out, None if self.first else ws, sigma)


class _SAGEConv(torch.autograd.Function):
    """One GraphSAGE layer, both branches of its input in one autograd node, so that their two gradients are one
    tensor on the workspace (autograd would sum two new ones), and the root term is added by its GEMM into the
    layer's output (no buffer of its own):

    * aggregating first (``agg``): ``A = Â·H`` on the buffer ``A.H {key}`` (or the given ``h_agg``), then
      ``Z = A·W_lᵀ + b`` and ``Z += H·W_rᵀ``; backward writes ``∂A = ∂Z·W_l`` over ``A`` and
      ``∂H = Âᵀ·∂A + ∂Z·W_r`` where ``grad_ws`` says (with ``h_agg``: ``∂H = ∂Z·W_r``, and ``∂h_agg = ∂A``);
    * multiplying first: ``H·W_lᵀ`` on the shared buffer ``H.W``, ``Z = Â·(H·W_lᵀ)``, ``Z += H·W_rᵀ``, ``Z += b``;
      backward writes ``Âᵀ·∂Z`` over ``H.W`` and ``∂H = (Âᵀ·∂Z)·W_l + ∂Z·W_r``, with ``sigma`` over ``H`` itself,
      σ's backward included (:func:`~mggcn.nn.functional.input_grad`).

    Keeps ``H`` and ``A`` (read by ``∂W_r`` and ``∂W_l``). The SpMMs are the operator's own products
    (its ``run``, which times them); the GEMMs are the ``gemm`` phase.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, w_l: torch.Tensor, bias: torch.Tensor | None,  # type: ignore[override]
                w_r: torch.Tensor, h_agg: torch.Tensor | None, adj: Adj, agg: bool, timer: PhaseTimer,
                ws: Workspace | None, key: str, out: OutSpec, grad_ws: GradSpec, sigma: float | None) -> torch.Tensor:
        m = adj.rows
        dest = None if out is None else out[0].take(out[1], m, w_l.shape[0], h)
        if agg:
            a = h_agg
            if a is None:
                a = adj.run(h, out=None if ws is None else ws.take(f"A.H {key}", m, h.shape[1], h))
            with timer("gemm"):
                z = _linear(a, w_l, bias, dest)
                z.addmm_(h, w_r.t())
            ctx.save_for_backward(h, w_l, w_r, a)
        else:
            with timer("gemm"):
                hw = _linear(h, w_l, None, None if ws is None else ws.take("H.W", m, w_l.shape[0], h))
            z = adj.run(hw, out=dest)
            with timer("gemm"):
                z.addmm_(h, w_r.t())
            if bias is not None:
                z.add_(bias)
            ctx.save_for_backward(h, w_l, w_r)
        ctx.adj, ctx.agg, ctx.cached, ctx.timer = adj, agg, h_agg is not None, timer
        ctx.ws, ctx.key, ctx.grad_ws, ctx.sigma = ws, key, grad_ws, sigma
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        h, w_l, w_r, *kept = ctx.saved_tensors
        needs_h, needs_wl, needs_b, needs_wr, needs_agg = ctx.needs_input_grad[:5]
        adj, ws, timer = ctx.adj, ctx.ws, ctx.timer
        grad_h = grad_wl = grad_b = grad_wr = grad_a = None
        with timer("gemm"):
            grad_wr = weight_grad(grad, h) if needs_wr else None
        grad_b = grad.sum(0) if needs_b else None
        if ctx.agg:
            (a,) = kept
            with timer("gemm"):
                grad_wl = weight_grad(grad, a) if needs_wl else None
            if needs_agg or (needs_h and not ctx.cached):
                # over Â·H's buffer, read by nothing any more (a given h_agg is the caller's: a new tensor)
                over = None if ws is None or ctx.cached else ws.take(f"A.H {ctx.key}", a.shape[0], a.shape[1], a)
                with timer("gemm"):
                    grad_a = torch.mm(grad, w_l, out=over) if over is not None else grad @ w_l
            if needs_h:
                if ctx.cached:
                    with timer("gemm"):
                        grad_h = input_grad([(grad, w_r)], h, None, ctx.grad_ws, avoid=grad)
                else:
                    dest = grad_destination(ctx.grad_ws, h.shape[0], h.shape[1], like=grad, avoid=grad)
                    grad_h = adj.run(grad_a, transpose=True, out=dest)
                    with timer("gemm"):
                        grad_h.addmm_(grad, w_r)
            return grad_h, grad_wl, grad_b, grad_wr, grad_a if needs_agg else None, *[None] * 8
        grad_hw = adj.run(grad, transpose=True,
                          out=None if ws is None else ws.take("H.W", h.shape[0], w_l.shape[0], h))
        with timer("gemm"):
            grad_wl = weight_grad(grad_hw, h) if needs_wl else None
            if needs_h:
                grad_h = input_grad([(grad_hw, w_l), (grad, w_r)], h, ctx.sigma, ctx.grad_ws, avoid=grad)
        return grad_h, grad_wl, grad_b, grad_wr, None, *[None] * 8


class GraphSAGE(BranchedStack):
    """A stack of :class:`SAGELayer`, σ between layers, logits out (PyG's ``GraphSAGE`` model).

    ``dims``, ``activation``, ``dropout``, ``input_dropout`` and ``reuse_buffers``: as
    :class:`~mggcn.nn.model.LayerStack`.

    Args:
        order: the order policy, see :func:`~mggcn.nn.model.aggregate_first`.
        bias: every layer adds a learnable bias (default True).
        seed: initialization seed (Glorot weights, zero biases); the same seed gives the same weights on every rank;
            None (default): torch's global generator decides it, as for torch.nn's layers.
    """

    kind = "sage"
    pyg_name = pyg_label = "GraphSAGE"
    layer_weight = "convs.{}.lin_l.weight"
    layer_bias = "convs.{}.lin_l.bias"

    @classmethod
    def operator(cls, norm: str) -> str:
        return "in-mean"

    @classmethod
    def linears(cls, d_in: int, d_out: int) -> list[tuple[int, int, bool]]:
        return [(d_in, d_out, False), (d_in, d_out, False)]  # W_l, W_r

    @classmethod
    def num_parameters(cls, dims: Sequence[int], train_eps: bool = False) -> int:
        return sum(2 * a * b + b for a, b in zip(dims[:-1], dims[1:], strict=True))  # W_l, b, W_r

    def __init__(self, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
                 input_dropout: float = 0.0, order: str = "auto", bias: bool = True, seed: int | None = None,
                 reuse_buffers: bool = True, batch_norm: bool = False) -> None:
        super().__init__(dims, activation, dropout, input_dropout, reuse_buffers, seed=seed, batch_norm=batch_norm)
        dims, generator = self.dims, torch.Generator().manual_seed(self.seed)  # the layers' weights from it
        self.convs.extend(SAGELayer(dims[i], dims[i + 1], first=(i == 0), order=order, bias=bias, generator=generator)
                          for i in range(len(dims) - 1))
