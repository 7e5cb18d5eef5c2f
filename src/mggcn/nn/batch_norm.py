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

__all__ = ["BatchNorm", "normalize_", "normalize_backward_"]


class BatchNorm(nn.Module):
    """PyG's ``torch_geometric.nn.norm.BatchNorm`` layout: a ``torch.nn.BatchNorm1d`` under ``module``, so that the
    state dict's keys (``module.weight``, ``module.running_mean``, ...) are PyG's. The model runs it through
    :func:`normalize_`, with statistics over every rank."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.module = nn.BatchNorm1d(dim)


def column_sums(a: torch.Tensor, rows: int, b: torch.Tensor | None = None,
                ws: Workspace | None = None) -> torch.Tensor:
    """``Σ_i a_i`` (or ``Σ_i a_i ⊙ b_i``, each block's products on the workspace's ``sigma block``) over the first
    ``rows`` rows, float64 [d]: each block summed in float32 (a float32 block by a matrix-vector product with ones,
    which reads the rows as they lie; a column-wise reduction, or a norm, is slower), the blocks added in float64."""
    d = a.shape[1]
    step = mask_chunk_rows(a.shape[0], d, a.device)
    out = torch.zeros(d, dtype=torch.float64, device=a.device)
    ones = torch.ones(min(step, max(rows, 1)), dtype=a.dtype, device=a.device)
    scratch = None if b is None or ws is None else ws.take("sigma block", step, d, a)
    for start in range(0, rows, step):
        end = min(start + step, rows)
        block = a[start:end]
        if b is not None:
            block = torch.mul(block, b[start:end], out=None if scratch is None else scratch[: end - start])
        if a.dtype == torch.float32:
            out += torch.mv(block.t(), ones[: end - start])
        else:  # a bfloat16 product's result would be rounded to bfloat16
            out += block.sum(0, dtype=torch.float32)
    return out


def normalize_(u: torch.Tensor, bn: nn.BatchNorm1d, adj, xhat_out: torch.Tensor | None, keep: bool,
               ws: Workspace | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``u ← γ·x̂ + β`` in place, ``x̂ = (u − μ)/√(σ² + eps)`` with the statistics of every rank's vertices
    (``bn.training``; the running ones move) or the running ones. ``adj``: the layer's operator (its
    ``real_rows``, ``num_vertices`` and ``sum_over_ranks``); ``ws``: the workspace whose ``sigma block`` holds a
    block's squares (None: a new tensor). Returns ``(x̂, 1/√(σ² + eps))``, ``x̂`` on
    ``xhat_out`` (None: a new tensor), or None where ``keep`` is False (no backward) and the statistics are the
    running ones."""
    gamma, beta = bn.weight, bn.bias
    with torch.no_grad():
        if bn.training:
            real, n = adj.real_rows, adj.num_vertices
            if n < 2:
                raise ValueError(f"batch norm needs more than one vertex, got {n}")
            total = adj.sum_over_ranks(column_sums(u, real))
            mean = total / n
            xhat = torch.sub(u, mean.to(u.dtype), out=xhat_out) if xhat_out is not None else u - mean.to(u.dtype)
            var = adj.sum_over_ranks(column_sums(xhat, real, xhat, ws)) / n
            invstd = torch.rsqrt(var + bn.eps)
            xhat.mul_(invstd.to(u.dtype))
            _update_running(bn, mean, var * (n / (n - 1)))
        else:
            mean = bn.running_mean.to(torch.float64)
            invstd = torch.rsqrt(bn.running_var.to(torch.float64) + bn.eps)
            if not keep:
                scale = gamma.detach().to(torch.float64) * invstd
                u.mul_(scale.to(u.dtype)).add_((beta.detach() - mean * scale).to(u.dtype))
                return None, invstd.to(torch.float32)
            xhat = torch.sub(u, mean.to(u.dtype), out=xhat_out) if xhat_out is not None else u - mean.to(u.dtype)
            xhat.mul_(invstd.to(u.dtype))
        torch.addcmul(beta.detach().to(u.dtype), xhat, gamma.detach().to(u.dtype), out=u)
    return xhat, invstd.to(torch.float32)


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
    sums = torch.cat([column_sums(grad, real), column_sums(grad, real, xhat, ws)])
    grad_beta, grad_gamma = sums[:d].to(gamma.dtype), sums[d:].to(gamma.dtype)
    if batch_stats:
        sums = adj.sum_over_ranks(sums) / adj.num_vertices
        grad.sub_(sums[:d].to(grad.dtype)).addcmul_(xhat, sums[d:].neg().to(grad.dtype))
    grad.mul_((gamma.detach() * invstd).to(grad.dtype))
    grad[real:].zero_()
    return grad_gamma, grad_beta
