"""The GCN as plain single-device PyTorch; distribution enters only through the ``adj`` operator it is given.

Layer l computes ``H_{l+1} = σ(Â · H_l · W_lᵀ + b_l)``; ``adj`` is a callable ``H -> Â·H`` (a
:class:`~mggcn.distributed.spmm.StagedSpMM`, across ranks or in one process) that takes two keywords: ``out``, a workspace
buffer for its result, and ``grad_ws``, the workspace whose gradient buffers receive its backward's result.

Order policy (it decides the SpMM width, hence the communication volume): each layer multiplies by W before
aggregating — ``Â·(H·Wᵀ)`` — or after — ``(Â·H)·Wᵀ`` — whichever makes its SpMMs narrower, counting forward and
backward: a hidden layer runs its SpMM in both passes at width ``d_in`` or ``d_out``; the first layer needs no
gradient with respect to its input, so aggregate-first costs it one SpMM at ``d_in`` (forward only) against two at
``d_out``. Without input dropout, ``Â·X`` never changes, so it is computed once before training and the first
layer costs one GEMM per epoch.

Memory (MG-GCN's discipline, in PyTorch terms): autograd keeps only what backward reads — a layer's GEMM keeps
its input (for ``∂W``), the SpMM keeps nothing (its backward needs only Âᵀ), σ keeps its output, which is also the
next layer's input, so each hidden activation is held once. The bias is added inside the GEMM (``addmm``) when the
GEMM is the layer's last step, σ overwrites the layer's fresh output in place, and σ's backward overwrites the
incoming gradient in place: a hidden layer holds one ``m × d_out`` buffer for its output and one for its gradient,
and no ``E × d`` tensor exists anywhere. Those buffers are a :class:`~mggcn.nn.workspace.Workspace`, allocated at the
first epoch and reused by every later one: every layer's output (whether a GEMM or an SpMM produces it), the
``Â·H`` an aggregate-first layer's GEMM keeps, the ``H·Wᵀ`` an SpMM reads, and two gradient buffers used
alternately by every GEMM and SpMM of the backward pass. The logits are a new tensor unless the caller asks for
them on the workspace too (the trainer does). :mod:`mggcn.tools.plan` counts these bytes.

Parameter names match PyG: ``convs.{l}.lin.weight`` [d_out, d_in] and ``convs.{l}.bias`` [d_out], so the
state dict loads into ``torch.nn.ModuleList([GCNConv(...), ...])`` (prefix ``convs.`` dropped) or PyG's
``torch_geometric.nn.models.GCN``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from mggcn.config import ACTIVATIONS, ORDERS
from mggcn.nn.workspace import OutSpec, Workspace
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["ORDERS", "ACTIVATIONS", "GCNLayer", "GCN", "Workspace", "aggregate_first", "activate"]


Adj = Callable[..., torch.Tensor]  # adj(H, out=OutSpec, grad_ws=Workspace | None) -> Â·H (σ may overwrite it)


def aggregate_first(d_in: int, d_out: int, first: bool, order: str = "auto") -> bool:
    """True for ``(Â·H)·Wᵀ``, False for ``Â·(H·Wᵀ)``; see the module docstring."""
    if order != "auto":
        return order == "aggregate-first"
    if first:
        return d_in <= 2 * d_out
    return d_in < d_out


class _TimedLinear(torch.autograd.Function):
    """``H·Wᵀ (+ b)`` whose forward and backward GEMMs are accounted as the ``gemm`` phase.

    Keeps ``H`` (read by ``∂W``) and ``W`` (a parameter, no extra memory); the bias is fused into the GEMM.
    ``out`` puts the result on a workspace buffer; ``grad_ws`` puts ``∂H`` on its gradient buffers.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,  # type: ignore[override]
                timer: PhaseTimer, out: OutSpec, grad_ws: Workspace | None) -> torch.Tensor:
        ctx.save_for_backward(h, weight)
        ctx.timer, ctx.grad_ws = timer, grad_ws
        dest = None if out is None else out[0].take(out[1], h.shape[0], weight.shape[0], h)
        with timer("gemm"):
            if dest is None:
                return h @ weight.t() if bias is None else torch.addmm(bias, h, weight.t())
            return torch.mm(h, weight.t(), out=dest) if bias is None else torch.addmm(bias, h, weight.t(), out=dest)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        h, weight = ctx.saved_tensors
        grad_h = grad_w = grad_b = None
        with ctx.timer("gemm"):
            if ctx.needs_input_grad[0]:
                if ctx.grad_ws is None:
                    grad_h = grad @ weight
                else:
                    dest = ctx.grad_ws.take_grad(grad.shape[0], weight.shape[1], like=grad, avoid=grad)
                    grad_h = torch.mm(grad, weight, out=dest)
            if ctx.needs_input_grad[1]:
                grad_w = grad.t() @ h
            if ctx.needs_input_grad[2]:
                grad_b = grad.sum(0)
        return grad_h, grad_w, grad_b, None, None, None


class _InplaceActivation(torch.autograd.Function):
    """σ (ReLU, or LeakyReLU with ``slope``) overwriting a layer's fresh output; backward overwrites the gradient.

    Keeps only the output (its sign is all backward reads). The incoming gradient is always a fresh tensor made by
    the next layer's backward (its GEMM, SpMM or dropout), read by nothing else, so it is reused for σ's gradient.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, slope: float) -> torch.Tensor:  # type: ignore[override]
        ctx.mark_dirty(z)
        ctx.slope = slope
        out = z.relu_() if slope == 0.0 else F.leaky_relu_(z, slope)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (out,) = ctx.saved_tensors
        grad = grad.contiguous()
        if ctx.slope == 0.0:
            return torch.ops.aten.threshold_backward.grad_input(grad, out, 0.0, grad_input=grad), None
        return torch.ops.aten.leaky_relu_backward.grad_input(grad, out, ctx.slope, True, grad_input=grad), None


def activate(z: torch.Tensor, activation: str) -> torch.Tensor:
    """σ of a layer's output ``z``, in place (``z`` must be a fresh tensor that nothing else reads)."""
    slope = 0.0 if activation == "relu" else 0.01
    if torch.is_grad_enabled() and z.requires_grad:
        return _InplaceActivation.apply(z, slope)
    return z.relu_() if slope == 0.0 else F.leaky_relu_(z, slope)


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
        self.first = first
        self.aggregate_first = aggregate_first(in_dim, out_dim, first, order)

    def forward(self, h: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                h_aggregated: torch.Tensor | None = None, workspace: Workspace | None = None, key: str = "",
                output_in_workspace: bool = False) -> torch.Tensor:
        """``h_aggregated`` is a precomputed ``Â·h``; when given, no SpMM runs.

        With ``workspace``, what the GEMMs and SpMMs produce lives on its buffers: ``H·Wᵀ`` before an SpMM, ``Â·H``
        before a GEMM (named after ``key``), the gradients (except that of the first layer's input, which may be a
        leaf that keeps it), and with ``output_in_workspace`` the layer's output (``out {key}``; the next forward
        overwrites it). The bias is added inside the GEMM, or in place to the SpMM's result.
        """
        ws, weight, bias = workspace, self.lin.weight, self.bias
        out = (ws, f"out {key}") if ws is not None and output_in_workspace else None
        input_grad_ws = None if self.first else ws
        if h_aggregated is not None:
            return _TimedLinear.apply(h_aggregated, weight, bias, timer, out, None)
        if self.aggregate_first:
            h_agg = adj(h, out=None if ws is None else (ws, f"A.H {key}"), grad_ws=input_grad_ws)
            return _TimedLinear.apply(h_agg, weight, bias, timer, out, ws)
        hw = _TimedLinear.apply(h, weight, None, timer, None if ws is None else (ws, "H.W"), input_grad_ws)
        z = adj(hw, out=out, grad_ws=ws)
        return z if bias is None else z.add_(bias)


class GCN(nn.Module):
    """A stack of :class:`GCNLayer`, σ between layers, logits out.

    Args:
        dims: ``[d_0 (features), d_1, ..., d_L (classes)]``.
        activation: ``relu`` or ``leaky_relu`` (slope 0.01), on every layer but the last.
        dropout: dropout probability on the input of every layer but the first.
        input_dropout: dropout probability on the input features (0 lets ``Â·X`` be computed once).
        order: the order policy, see :func:`aggregate_first`.
        seed: initialization seed; the same seed gives the same weights on every rank.
        reuse_buffers: keep hidden activations, intermediates and their gradients on a
            :class:`~mggcn.nn.workspace.Workspace` reused by every forward and backward (default True). The logits
            are a new tensor unless :meth:`forward` is asked otherwise; a second forward before the backward of the
            first makes that backward raise (it would read overwritten activations), so set False to run several
            forward passes into one backward.
    """

    def __init__(self, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
                 input_dropout: float = 0.0, order: str = "auto", bias: bool = True, seed: int = 0,
                 reuse_buffers: bool = True) -> None:
        super().__init__()
        if len(dims) < 2:
            raise ValueError("a GCN needs at least input and output dimensions")
        if activation not in ACTIVATIONS:
            raise ValueError(f"--activation must be one of {', '.join(ACTIVATIONS)}, got '{activation}'")
        self.dims = list(dims)
        self.activation, self.dropout, self.input_dropout = activation, dropout, input_dropout
        self.convs = nn.ModuleList(
            GCNLayer(dims[i], dims[i + 1], first=(i == 0), order=order, bias=bias) for i in range(len(dims) - 1))
        self.workspace = Workspace() if reuse_buffers else None
        generator = torch.Generator().manual_seed(seed)
        for conv in self.convs:
            glorot_(conv.lin.weight, generator)

    @property
    def caches_input_aggregation(self) -> bool:
        """Whether ``Â·X`` may be computed once and passed to :meth:`forward`."""
        return self.input_dropout == 0.0

    def forward(self, x: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                x_aggregated: torch.Tensor | None = None, logits_in_workspace: bool = False) -> torch.Tensor:
        """Logits [m, classes] for the rows ``x`` [m, d_0]; ``x_aggregated`` is a precomputed ``Â·x``.

        ``logits_in_workspace``: return the logits on the workspace buffer ``out {L-1}`` (overwritten by the next
        forward) instead of a new tensor, so that an epoch allocates nothing of their size."""
        if x_aggregated is not None and not self.caches_input_aggregation:
            raise ValueError("x_aggregated cannot be used with input dropout")
        h = F.dropout(x, self.input_dropout, self.training) if self.input_dropout else x
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            if i > 0 and self.dropout:
                h = F.dropout(h, self.dropout, self.training)
            h = conv(h, adj, timer, h_aggregated=x_aggregated if i == 0 else None, workspace=self.workspace,
                     key=str(i), output_in_workspace=i < last or logits_in_workspace)
            if i < last:
                h = activate(h, self.activation)
        return h

    def gcnconv_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under PyG's names (``convs.{l}.lin.weight``, ``convs.{l}.bias``), detached, on CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}

