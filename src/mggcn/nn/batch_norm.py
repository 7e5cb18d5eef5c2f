"""Batch normalization over every vertex of the graph, whichever rank holds it: a full-batch model's batch is the
whole vertex set, so a layer's statistics are sums over all ranks' rows (one all-reduce of ``2·d`` numbers in
forward, one in backward), and the result is the same as one process's ``torch.nn.BatchNorm1d`` on all the rows.

Training normalizes with the batch's mean and biased variance and moves the running estimates by ``momentum``
(the unbiased variance, as torch does); evaluation normalizes with the running estimates. Padding rows (a rank's
rows past its :attr:`~mggcn.distributed.spmm.SpMMOperator.real_rows`) are normalized but enter no statistic, and
get no gradient.

The normalization is applied in place on the layer's buffer; ``x̂`` (the normalized rows, before ``γ`` and ``β``)
is kept for backward in a buffer of its own, which backward reads and does not write. The column sums run a block
of rows at a time (the rows of σ's block buffer, ``sigma block``, which holds backward's products), so that no
temporary of the buffer's size is made.

Legend: m = rows of this rank, r = its vertices (real rows), n = vertices of all ranks, d = width.
"""

from __future__ import annotations

import torch
from torch import nn

from mggcn.kernels.policy import mask_chunk_rows
from mggcn.nn.workspace import Workspace
from mggcn.utils.autograd import once_differentiable

__all__ = ["BatchNorm", "batch_norm_", "normalize_", "normalize_backward_"]


class BatchNorm(nn.Module):
    """PyG's ``torch_geometric.nn.norm.BatchNorm`` layout: a ``torch.nn.BatchNorm1d`` under ``module``, so that the
    state dict's keys (``module.weight``, ``module.running_mean``, ...) are PyG's. The model runs it through
    :func:`normalize_`, with statistics over every rank."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.module = nn.BatchNorm1d(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One process's batch norm of ``x`` (all the rows at hand), as PyG's ``BatchNorm`` computes it."""
        return self.module(x)


def column_sums(a: torch.Tensor, rows: int, ws: Workspace | None = None, *, times: torch.Tensor | None = None,
                centered: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Column sums over the first ``rows`` rows of ``a`` [m, d], float64 [d] each, a block of rows at a time: ``Σ a``,
    and ``Σ a ⊙ times`` where ``times`` is given, or ``Σ (a − centered)²`` where ``centered`` (a [d] vector) is.
    A block's products go on the workspace's ``sigma block`` (None: a new tensor) and are summed while it is in
    cache; a float32 block is summed by a matrix-vector product with ones, which reads the rows as they lie (a
    column-wise reduction, or a norm, is slower), in float32, and the blocks add up in float64."""
    d = a.shape[1]
    step = mask_chunk_rows(a.shape[0], d, a.device)
    second = times is not None or centered is not None
    sums = [torch.zeros(d, dtype=torch.float64, device=a.device) for _ in range(1 + second)]
    ones = torch.ones(min(step, max(rows, 1)), dtype=a.dtype, device=a.device)
    scratch = ws.take("sigma block", step, d, a) if second and ws is not None else None
    shift = None if centered is None else centered.to(a.dtype)

    def add(out: torch.Tensor, block: torch.Tensor) -> None:
        if block.dtype == torch.float32:
            out += torch.mv(block.t(), ones[: block.shape[0]])
        elif block.dtype == torch.float64:  # a float64 model's statistics carry no float32 rounding
            out += block.sum(0)
        else:  # a bfloat16 product's result would be rounded to bfloat16
            out += block.sum(0, dtype=torch.float32)

    for start in range(0, rows, step):
        end = min(start + step, rows)
        block, into = a[start:end], None if scratch is None else scratch[: end - start]
        if shift is None:
            add(sums[0], block)
        if times is not None:
            add(sums[1], torch.mul(block, times[start:end], out=into))
        elif shift is not None:
            add(sums[1], torch.sub(block, shift, out=into).square_())
    return sums


def normalize_(u: torch.Tensor, bn: nn.BatchNorm1d, adj, keep: bool, ws: Workspace | None = None,
               name: str = "") -> tuple[torch.Tensor | None, torch.Tensor]:
    """``u ← γ·x̂ + β`` in place, ``x̂ = (u − μ)/√(σ² + eps)`` with the statistics of every rank's vertices
    (``bn.training``; the running ones move) or the running ones. ``adj``: the layer's operator (its
    ``real_rows``, ``num_vertices`` and ``sum_over_ranks``); ``ws``: the workspace whose ``sigma block`` holds a
    block's squares and whose buffer ``name`` holds ``x̂`` (None: new tensors). Returns ``(x̂, 1/√(σ² + eps))``,
    ``x̂`` None where ``keep`` is False (no backward) and the statistics are the running ones.

    The variance is the mean of the centered squares (two passes over ``u``, the second's squares in cache), never
    ``E[u²] − μ²``; ``x̂ = u·(1/σ) − μ/σ`` is one pass, as torch's own kernel computes it."""
    gamma, beta = bn.weight.detach(), bn.bias.detach()
    with torch.no_grad():
        if bn.training:
            real, n = adj.real_rows, adj.num_vertices
            if n < 2:
                raise ValueError(f"batch norm needs more than one vertex, got {n}")
            mean = adj.sum_over_ranks(column_sums(u, real)[0]) / n
            var = adj.sum_over_ranks(column_sums(u, real, ws, centered=mean)[1]) / n
            _update_running(bn, mean, var * (n / (n - 1)))
        else:
            mean, var = bn.running_mean.to(torch.float64), bn.running_var.to(torch.float64)
        invstd = torch.rsqrt(var + bn.eps)
        if not (keep or bn.training):  # y = u·(γ/σ) + (β − μ·γ/σ), in place
            scale = gamma.to(torch.float64) * invstd
            torch.addcmul((beta - mean * scale).to(u.dtype), u, scale.to(u.dtype), out=u)
            return None, invstd.to(_stats_dtype(u))
        shift = (-mean * invstd).to(u.dtype)
        xhat_out = ws.take(name, u.shape[0], u.shape[1], u) if ws is not None else torch.empty_like(u)
        xhat = torch.addcmul(shift, u, invstd.to(u.dtype), out=xhat_out)
        torch.addcmul(beta.to(u.dtype), xhat, gamma.to(u.dtype), out=u)
    return xhat, invstd.to(_stats_dtype(u))


def _stats_dtype(u: torch.Tensor) -> torch.dtype:
    """What ``1/σ`` is kept in for backward: float64 for a float64 model, else float32 (bfloat16 layers too)."""
    return torch.float64 if u.dtype == torch.float64 else torch.float32


def _update_running(bn: nn.BatchNorm1d, mean: torch.Tensor, unbiased_var: torch.Tensor) -> None:
    """The running estimates after one batch, as ``torch.nn.BatchNorm1d`` moves them (``momentum`` None: the
    cumulative average)."""
    bn.num_batches_tracked.add_(1)
    factor = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
    bn.running_mean.mul_(1 - factor).add_(mean.to(bn.running_mean.dtype), alpha=factor)
    bn.running_var.mul_(1 - factor).add_(unbiased_var.to(bn.running_var.dtype), alpha=factor)


def normalize_backward_(grad: torch.Tensor, xhat: torch.Tensor, invstd: torch.Tensor, gamma: torch.Tensor, adj,
                        batch_stats: bool, ws: Workspace | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``∂u`` over ``grad`` (``∂`` of :func:`normalize_`'s output) and this rank's shares of ``∂γ`` and ``∂β`` (the
    trainer sums parameter gradients over ranks). With the batch's statistics (``batch_stats``) ``∂u = γ/σ ·
    (∂ − mean(∂) − x̂ ⊙ mean(∂ ⊙ x̂))``, the means over every rank's vertices; with the running ones ``γ/σ · ∂``.
    Padding rows get zeros."""
    real, d = adj.real_rows, grad.shape[1]
    sums = torch.cat(column_sums(grad, real, ws, times=xhat))
    grad_beta, grad_gamma = sums[:d].to(gamma.dtype), sums[d:].to(gamma.dtype)
    scale = gamma.detach().to(torch.float64) * invstd
    if batch_stats:  # ∂u = ∂·(γ/σ) − (γ/σ)·mean(∂) − x̂ ⊙ (γ/σ)·mean(∂ ⊙ x̂): two passes
        means = adj.sum_over_ranks(sums) / adj.num_vertices
        torch.addcmul((-scale * means[:d]).to(grad.dtype), grad, scale.to(grad.dtype), out=grad)
        grad.addcmul_(xhat, (-scale * means[d:]).to(grad.dtype))
    else:
        grad.mul_(scale.to(grad.dtype))
    grad[real:].zero_()
    return grad_gamma, grad_beta


class _NormInPlace(torch.autograd.Function):
    """A layer's output normalized in place (:func:`normalize_`; ``x̂`` on the workspace buffer ``norm {key}``), and
    in backward its gradient turned in place into that of the layer's output (:func:`normalize_backward_`): the
    layer and σ around it see their buffers where they would without the norm."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,  # type: ignore[override]
                bn: nn.BatchNorm1d, adj, ws: Workspace | None, key: str, records: bool) -> torch.Tensor:
        xhat, invstd = normalize_(h, bn, adj, records and any(ctx.needs_input_grad), ws, f"norm {key}")
        ctx.mark_dirty(h)
        ctx.save_for_backward(xhat, invstd, gamma)
        ctx.adj, ctx.ws, ctx.batch_stats = adj, ws, bn.training
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        xhat, invstd, gamma = ctx.saved_tensors
        if ctx.ws is None:
            grad = grad.clone()  # autograd's own tensor, which another node may read
        grad_gamma, grad_beta = normalize_backward_(grad, xhat, invstd, gamma, ctx.adj, ctx.batch_stats, ctx.ws)
        return grad, grad_gamma, grad_beta, None, None, None, None, None


def batch_norm_(h: torch.Tensor, norm: BatchNorm, adj, ws: Workspace | None, key: str) -> torch.Tensor:
    """A hidden layer's output ``h`` batch-normalized in place over every rank's vertices (PyG's ``BasicGNN`` with
    ``norm="batch_norm"``: conv, norm, σ); ``adj`` the layer's operator, ``key`` the layer."""
    if not hasattr(adj, "sum_over_ranks"):
        raise TypeError(f"a batch norm sums its statistics over the ranks: adj must be an SpMMOperator, got "
                        f"{type(adj).__name__}")
    bn = norm.module
    # needs_input_grad says what the inputs require, under no_grad too: only a forward that records a backward
    # keeps x̂
    return _NormInPlace.apply(h, bn.weight, bn.bias, bn, adj, ws, key, torch.is_grad_enabled())
