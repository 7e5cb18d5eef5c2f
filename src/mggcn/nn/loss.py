"""The training loss of one rank: softmax cross-entropy over its training rows, divided by the GLOBAL training count.

``loss = Σ_{r ∈ train} (logsumexp(z_r) − z_{r, y_r}) / N`` with ``N`` the training vertices of all ranks, so that the
all-reduced sum of the ranks' losses is the mean and their all-reduced gradients are its gradients. Its gradient,
``(softmax(z_r) − onehot(y_r)) / N`` on training rows and 0 elsewhere, is computed in the forward pass, from the same
passes over the logits as the loss, straight into a reused ``m × C`` buffer (the model's workspace, or, with
``in_place``, the logits' own buffer, which nothing reads after the loss: MG-GCN's output buffer reused for its
gradient): no gathered
copy of the training rows, no scatter of their gradient into a fresh zero tensor, nothing freed and allocated again
each epoch. The row maxima it needs for a stable ``logsumexp`` come with the argmax of every row, which is what the
accuracies need: one pass gives both.

Legend: m = rows of this rank, C = classes, t = this rank's training rows.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from mggcn.nn.workspace import Workspace

__all__ = ["MaskedCrossEntropy"]


class MaskedCrossEntropy:
    """``loss, predictions = MaskedCrossEntropy(...)(logits)``: see the module docstring.

    Args:
        y: labels [m] (any value on rows outside the training set).
        train: bool [m], this rank's training rows.
        num_train: ``N``, the training rows of all ranks (at least 1).
        workspace: where the gradient buffer lives (one of its two gradient buffers, see
            :meth:`~mggcn.nn.workspace.Workspace.take_grad`); ``None``: a buffer of its own.
        in_place: write the gradient over the logits instead (default False; the trainer sets it: the logits
            are on the model's workspace and read by nothing after the loss). Bit for bit the same values.

    Shapes: ``logits`` [m, C] -> ``loss`` [] (float32, this rank's share), ``predictions`` [m] (int64 argmax).
    """

    def __init__(self, y: torch.Tensor, train: torch.Tensor, num_train: int,
                 workspace: Workspace | None = None, in_place: bool = False) -> None:
        self.rows = train.nonzero().squeeze(1)
        self.labels = y[self.rows]
        self.outside = ~train  # [m]: rows whose gradient is zero
        self.scale = 1.0 / max(1, num_train)
        self.workspace = workspace if workspace is not None else Workspace()
        self.in_place = in_place

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _MaskedCrossEntropyFunction.apply(logits, self)

    def row_max(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The maximum and argmax of every row of ``z``, into two [m] buffers of the workspace."""
        m = z.shape[0]
        top = self.workspace.take("row max", m, 1, like=z).squeeze(1)
        arg = self.workspace.take("row argmax", m, 1, like=self.rows).squeeze(1)
        return torch.max(z, dim=1, out=(top, arg))


class _MaskedCrossEntropyFunction(torch.autograd.Function):
    """Forward computes the loss and its gradient; backward hands the gradient out (scaled when not by 1)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, spec: MaskedCrossEntropy):  # type: ignore[override]
        z = logits.detach()
        top, pred = spec.row_max(z)
        rows = spec.rows
        picked = z[rows, spec.labels].sum()  # read before the gradient may overwrite z
        grad = z if spec.in_place else spec.workspace.take_grad(z.shape[0], z.shape[1], like=z, avoid=z)
        torch.sub(z, top.unsqueeze(1), out=grad).exp_()
        total = grad.sum(dim=1)
        loss = ((total[rows].log() + top[rows]).sum() - picked) * spec.scale
        # softmax / N on the training rows, 0 elsewhere: one multiply by a per-row factor (0 outside)
        factor = total.reciprocal_().mul_(spec.scale).masked_fill_(spec.outside, 0.0)
        grad.mul_(factor.unsqueeze(1))
        unread = spec.outside & ~torch.isfinite(top)  # 0 · NaN: a row outside with a NaN or inf logit
        if bool(unread.any()):
            grad[unread] = 0.0
        grad.index_put_((rows, spec.labels), torch.tensor(-spec.scale, dtype=z.dtype, device=z.device),
                        accumulate=True)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(pred)
        ctx.set_materialize_grads(False)  # no zero [m] gradient made up for the predictions
        return loss, pred

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: torch.Tensor, _grad_pred):  # type: ignore[override]
        (grad,) = ctx.saved_tensors
        if grad_loss is None:  # the loss took no part in what backward differentiates
            return None, None
        if not bool(grad_loss == 1):
            grad = grad.mul_(grad_loss)
        return grad, None
