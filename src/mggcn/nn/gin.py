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
``d_in`` or at ``d_out``, as for the GCN. The first layer's ``Â·X`` is computed once when there is no input
dropout; the local term is then one scaled addition per epoch.

Buffers: per layer, the MLP's hidden ``m × d_out`` (kept by σ and by the second GEMM) besides the GCN's; with a
learnable ε, ``H·W_1ᵀ`` is kept per layer too (∂ε reads it). As for GraphSAGE, the layer's input feeds two branches
(the SpMM and the local term), so the gradients reaching it are fresh tensors summed by autograd.

Parameter names match PyG: ``convs.{l}.eps`` [1], ``convs.{l}.nn.lins.{k}.weight`` and ``.bias`` (k = 0, 1): the
state dict loads into ``torch_geometric.nn.models.GIN(d_0, hidden, num_layers, d_L)`` (``train_eps=True`` for a
learnable ε).

Legend: m = rows of this rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mggcn.nn.functional import _TimedLinear, activate
from mggcn.nn.model import (
    Adj,
    BranchedStack,
    aggregate_first,
    check_order,
    glorot_linear,
    plan_branched_backward,
)
from mggcn.nn.workspace import BufferWalk, Workspace
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["GINLayer", "GIN"]


class _MLP(nn.Module):
    """The two linears of PyG's ``MLP([d_in, d_out, d_out])``, under its parameter names (``lins.{k}``)."""

    def __init__(self, in_dim: int, out_dim: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.lins = nn.ModuleList([glorot_linear(in_dim, out_dim, True, generator),
                                   glorot_linear(out_dim, out_dim, True, generator)])


class GINLayer(nn.Module):
    r"""One GIN layer ``MLP((Â + (1+ε) I)·H)`` with ``Â = A`` (PyG ``GINConv`` with a 2-layer MLP).

    Args:
        in_dim: ``d_in``. out_dim: ``d_out`` (the MLP's hidden and output width).
        first: the layer reads the input features (no input gradient needed).
        order: ``auto`` (:func:`~mggcn.nn.model.aggregate_first`), ``aggregate-first`` (aggregate, then the MLP)
            or ``transform-first`` (the MLP's first linear before the aggregation).
        activation: σ between the MLP's two linears (``relu`` or ``leaky_relu``).
        train_eps: ε is a learnable parameter (default False: a buffer fixed at ``eps``).
        eps: the (initial) ε (default 0).
        generator: draw the MLP's weights from it (:func:`~mggcn.nn.model.glorot_linear`; :class:`GIN` does); None:
            as ``torch.nn.Linear`` does.

    Shapes: ``h`` [m, d_in] -> [m, d_out].
    """

    def __init__(self, in_dim: int, out_dim: int, first: bool = False, order: str = "auto",
                 activation: str = "relu", train_eps: bool = False, eps: float = 0.0,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        check_order(order)
        self.nn = _MLP(in_dim, out_dim, generator)
        if train_eps:
            self.eps = nn.Parameter(torch.full((1,), float(eps)))
        else:
            self.register_buffer("eps", torch.full((1,), float(eps)))
        self.first, self.activation, self.train_eps = first, activation, train_eps
        self.aggregate_first = aggregate_first(in_dim, out_dim, first, order)

    def forward(self, h: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                h_aggregated: torch.Tensor | None = None, workspace: Workspace | None = None, key: str = "",
                output_in_workspace: bool = False) -> torch.Tensor:
        """``h_aggregated`` is a precomputed ``Â·h`` (no SpMM runs; it is not modified); the other arguments as
        :meth:`mggcn.nn.model.GCNLayer.forward`."""
        ws = workspace
        out = (ws, f"out {key}") if ws is not None and output_in_workspace else None
        lin1, lin2 = self.nn.lins
        scale = 1 + self.eps
        if h_aggregated is not None:
            z = self._cached_sum(h_aggregated, h, scale, ws, key)
            u = _TimedLinear.apply(z, lin1.weight, lin1.bias, timer, None if ws is None else (ws, f"mlp {key}"), ws)
        elif self.aggregate_first:
            z = adj(h, out=None if ws is None else (ws, f"A.H {key}"), grad_ws=None).add_(scale * h)
            u = _TimedLinear.apply(z, lin1.weight, lin1.bias, timer, None if ws is None else (ws, f"mlp {key}"), ws)
        else:
            hw_name = f"H.W {key}" if self.train_eps else "H.W"  # ∂ε reads H·W_1ᵀ: then each layer keeps its own
            hw = _TimedLinear.apply(h, lin1.weight, None, timer, None if ws is None else (ws, hw_name), None)
            u = adj(hw, out=None if ws is None else (ws, f"mlp {key}"), grad_ws=ws).add_(scale * hw).add_(lin1.bias)
        u = activate(u, self.activation)
        return _TimedLinear.apply(u, lin2.weight, lin2.bias, timer, out, ws)

    def _cached_sum(self, h_agg: torch.Tensor, h: torch.Tensor, scale: torch.Tensor, ws: Workspace | None,
                    key: str) -> torch.Tensor:
        """``Â·h + (1+ε)·h`` without touching the cached ``Â·h``: on a workspace buffer when nothing can need its
        gradient (fixed ε, first layer), else a new tensor (in eval too, so that the workspace is the same)."""
        if ws is None or self.train_eps or h.requires_grad:  # (under no_grad, scale.requires_grad is False)
            return h_agg + scale * h
        z = ws.take(f"A.H {key}", h.shape[0], h.shape[1], h)
        torch.mul(h, scale, out=z)
        return z.add_(h_agg)


class GIN(BranchedStack):
    """A stack of :class:`GINLayer`, σ between layers, logits out (PyG's ``GIN`` model).

    ``dims``, ``activation``, ``dropout``, ``input_dropout`` and ``reuse_buffers``: as
    :class:`~mggcn.nn.model.LayerStack`; ``activation`` is also σ inside each MLP (PyG's ``GIN(act=...)``).

    Args:
        order: the order policy, see :func:`~mggcn.nn.model.aggregate_first`.
        train_eps: learn ε (default False: ε = 0 fixed).
        seed: initialization seed (Glorot weights, zero biases); the same seed gives the same weights on every rank.
    """

    kind = "gin"
    pyg_name = pyg_label = "GIN"
    options = ("gin_train_eps",)
    layer_weight = "convs.{}.nn.lins.0.weight"

    @classmethod
    def build(cls, dims: Sequence[int], train_eps: bool = False, **common) -> GIN:
        return cls(dims, train_eps=train_eps, **common)

    @classmethod
    def operator(cls, norm: str) -> str:
        return "sum"

    @classmethod
    def linears(cls, d_in: int, d_out: int) -> list[tuple[int, int, bool]]:
        return [(d_in, d_out, False), (d_out, d_out, True)]  # the MLP's second linear always needs ∂H

    @classmethod
    def num_parameters(cls, dims: Sequence[int], train_eps: bool = False) -> int:
        return sum(a * b + b * b + 2 * b + int(train_eps) for a, b in zip(dims[:-1], dims[1:], strict=True))

    @classmethod
    def plan_before_gemm(cls, walk: BufferWalk, i: int, d_in: int, d_out: int, agg: bool, cached: bool,
                         train_eps: bool) -> None:
        walk.alloc(f"(1+eps) H {i}", d_in if agg else d_out)  # added to the SpMM's result (or to the cached Â·X)
        if cached and train_eps:  # ε needs a gradient: Â·X + (1+ε)·X is a new tensor, kept by the GEMM
            walk.alloc("A.X + (1+eps) X", d_in)
        elif cached:
            walk.take("A.H 0", d_in)
        walk.free(f"(1+eps) H {i}")

    @classmethod
    def plan_transform_buffer(cls, i: int, train_eps: bool) -> str:
        return f"H.W {i}" if train_eps else "H.W"

    @classmethod
    def plan_after_gemm(cls, walk: BufferWalk, i: int, d_out: int) -> None:
        walk.take(f"mlp {i}", d_out)

    @classmethod
    def plan_backward(cls, walk: BufferWalk, i: int, d_in: int, d_out: int, agg: bool, grad: str,
                      train_eps: bool) -> str:
        return plan_branched_backward(walk, i, d_in, d_out, agg, grad, mlp=True, local=True, eps=train_eps)

    def __init__(self, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
                 input_dropout: float = 0.0, order: str = "auto", train_eps: bool = False, seed: int = 0,
                 reuse_buffers: bool = True) -> None:
        super().__init__(dims, activation, dropout, input_dropout, reuse_buffers, seed=seed)
        self.train_eps = train_eps
        generator = torch.Generator().manual_seed(seed)  # the layers draw their weights from it in turn
        self.convs.extend(GINLayer(dims[i], dims[i + 1], first=(i == 0), order=order, activation=activation,
                                   train_eps=train_eps, generator=generator) for i in range(len(dims) - 1))
