"""The GCN as plain single-device PyTorch; distribution enters only through the ``adj`` operator it is given.

Layer l computes ``H_{l+1} = σ(Â · H_l · W_lᵀ + b_l)``; ``adj`` is any callable ``H -> Â·H`` (a
:class:`~mggcn.spmm.StagedSpMM`, across ranks or in one process).

Order policy (it decides the SpMM width, hence the communication volume): each layer multiplies by W before
aggregating — ``Â·(H·Wᵀ)`` — or after — ``(Â·H)·Wᵀ`` — whichever makes its SpMMs narrower, counting forward and
backward: a hidden layer runs its SpMM in both passes at width ``d_in`` or ``d_out``; the first layer needs no
gradient with respect to its input, so aggregate-first costs it one SpMM at ``d_in`` (forward only) against two at
``d_out``. Without input dropout, ``Â·X`` never changes, so it is computed once before training and the first
layer costs one GEMM per epoch.

Parameter names match PyG: ``convs.{l}.lin.weight`` [d_out, d_in] and ``convs.{l}.bias`` [d_out], so the
state dict loads into ``torch.nn.ModuleList([GCNConv(...), ...])`` (prefix ``convs.`` dropped) or PyG's
``torch_geometric.nn.models.GCN``.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mggcn.timing import NULL_TIMER, PhaseTimer

__all__ = ["ORDERS", "ACTIVATIONS", "GCNLayer", "GCN", "aggregate_first"]

ORDERS = ("auto", "aggregate-first", "transform-first")
ACTIVATIONS = ("relu", "leaky_relu")

Adj = Callable[[torch.Tensor], torch.Tensor]


def aggregate_first(d_in: int, d_out: int, first: bool, order: str = "auto") -> bool:
    """True for ``(Â·H)·Wᵀ``, False for ``Â·(H·Wᵀ)``; see the module docstring."""
    if order != "auto":
        return order == "aggregate-first"
    if first:
        return d_in <= 2 * d_out
    return d_in < d_out


class _TimedLinear(torch.autograd.Function):
    """``H·Wᵀ`` whose forward and backward GEMMs are accounted as the ``gemm`` phase."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, timer: PhaseTimer) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(h, weight)
        ctx.timer = timer
        with timer("gemm"):
            return h @ weight.t()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        h, weight = ctx.saved_tensors
        grad_h = grad_w = None
        with ctx.timer("gemm"):
            if ctx.needs_input_grad[0]:
                grad_h = grad @ weight
            if ctx.needs_input_grad[1]:
                grad_w = grad.t() @ h
        return grad_h, grad_w, None


def glorot_(weight: torch.Tensor, generator: torch.Generator) -> None:
    """PyG's ``glorot``: uniform in ±sqrt(6 / (fan_in + fan_out))."""
    bound = math.sqrt(6.0 / (weight.shape[0] + weight.shape[1]))
    with torch.no_grad():
        weight.uniform_(-bound, bound, generator=generator)


class GCNLayer(nn.Module):
    r"""One graph convolution ``Â · H · Wᵀ + b`` (PyG ``GCNConv`` with a precomputed Â).

    Args:
        in_dim: ``d_in``. out_dim: ``d_out``.
        first: the layer reads the input features (no input gradient needed).
        order: ``auto`` (the policy of the module docstring), ``aggregate-first`` or ``transform-first``.
        bias: add a learnable bias (default True).

    Shapes: ``h`` [m, d_in] -> [m, d_out].
    """

    def __init__(self, in_dim: int, out_dim: int, first: bool = False, order: str = "auto", bias: bool = True) -> None:
        super().__init__()
        if order not in ORDERS:
            raise ValueError(f"--order must be one of {', '.join(ORDERS)}, got '{order}'")
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None
        self.aggregate_first = aggregate_first(in_dim, out_dim, first, order)

    def forward(self, h: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                h_aggregated: torch.Tensor | None = None) -> torch.Tensor:
        """``h_aggregated`` is a precomputed ``Â·h``; when given, no SpMM runs."""
        if h_aggregated is not None:
            z = _TimedLinear.apply(h_aggregated, self.lin.weight, timer)
        elif self.aggregate_first:
            z = _TimedLinear.apply(adj(h), self.lin.weight, timer)
        else:
            z = adj(_TimedLinear.apply(h, self.lin.weight, timer))
        return z if self.bias is None else z + self.bias


class GCN(nn.Module):
    """A stack of :class:`GCNLayer`, σ between layers, logits out.

    Args:
        dims: ``[d_0 (features), d_1, ..., d_L (classes)]``.
        activation: ``relu`` or ``leaky_relu`` (slope 0.01), on every layer but the last.
        dropout: dropout probability on the input of every layer but the first.
        input_dropout: dropout probability on the input features (0 lets ``Â·X`` be computed once).
        order: the order policy, see :func:`aggregate_first`.
        seed: initialization seed; the same seed gives the same weights on every rank.
    """

    def __init__(self, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
                 input_dropout: float = 0.0, order: str = "auto", bias: bool = True, seed: int = 0) -> None:
        super().__init__()
        if len(dims) < 2:
            raise ValueError("a GCN needs at least input and output dimensions")
        if activation not in ACTIVATIONS:
            raise ValueError(f"--activation must be one of {', '.join(ACTIVATIONS)}, got '{activation}'")
        self.dims = list(dims)
        self.activation, self.dropout, self.input_dropout = activation, dropout, input_dropout
        self.convs = nn.ModuleList(
            GCNLayer(dims[i], dims[i + 1], first=(i == 0), order=order, bias=bias) for i in range(len(dims) - 1))
        generator = torch.Generator().manual_seed(seed)
        for conv in self.convs:
            glorot_(conv.lin.weight, generator)

    @property
    def caches_input_aggregation(self) -> bool:
        """Whether ``Â·X`` may be computed once and passed to :meth:`forward`."""
        return self.input_dropout == 0.0

    def forward(self, x: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                x_aggregated: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [m, classes] for the rows ``x`` [m, d_0]; ``x_aggregated`` is a precomputed ``Â·x``."""
        if x_aggregated is not None and not self.caches_input_aggregation:
            raise ValueError("x_aggregated cannot be used with input dropout")
        h = F.dropout(x, self.input_dropout, self.training) if self.input_dropout else x
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            if i > 0 and self.dropout:
                h = F.dropout(h, self.dropout, self.training)
            h = conv(h, adj, timer, h_aggregated=x_aggregated if i == 0 else None)
            if i < last:
                h = F.relu(h) if self.activation == "relu" else F.leaky_relu(h, 0.01)
        return h

    def gcnconv_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under PyG's names (``convs.{l}.lin.weight``, ``convs.{l}.bias``), detached, on CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}

