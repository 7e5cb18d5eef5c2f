"""The training loss of one rank: softmax cross-entropy over its training rows, divided by the GLOBAL training count.

``loss = Σ_{r ∈ train} (logsumexp(z_r) − z_{r, y_r}) / N`` with ``N`` the training vertices of all ranks, so that the
all-reduced sum of the ranks' losses is the mean and their all-reduced gradients are its gradients. Its gradient,
``(softmax(z_r) − onehot(y_r)) / N`` on training rows and 0 elsewhere, is computed in the forward pass, from the same
passes over the logits as the loss, straight into a reused ``m × C`` buffer (the model's workspace, or, with
``in_place``, the logits' own buffer, which nothing reads after the loss: MG-GCN's output buffer reused for its
gradient): no gathered
copy of the training rows, no scatter of their gradient into a fresh zero tensor, nothing freed and allocated again
each epoch. The row maxima it needs for a stable ``logsumexp`` come with what the accuracies need, whether each
row's argmax is its label (:func:`label_hits`), from one pass over the logits (torch's ``max`` with indices takes four
times as long as ``amax``).

Multi-label (``y`` a 0/1 matrix [m, C], the loss of PPI, Yelp, ogbn-proteins): :class:`MaskedBinaryCrossEntropy`,
binary cross-entropy with logits averaged over the GLOBAL training rows × C labels, with the same design (the
gradient computed in the forward, over the logits' buffer), and micro-F1's per-row counts (:func:`f1_counts`) in
place of the hits.

Legend: m = rows of this rank, C = classes (labels), t = this rank's training rows.
"""

from __future__ import annotations

import torch

from mggcn.nn.workspace import Workspace
from mggcn.utils.autograd import once_differentiable

__all__ = ["MaskedBinaryCrossEntropy", "MaskedCrossEntropy", "f1_counts", "label_hits", "label_index", "predictions",
           "roc_auc"]


class MaskedCrossEntropy:
    """``loss, hits = MaskedCrossEntropy(...)(logits)``: see the module docstring.

    Args:
        y: labels [m] (any value on rows outside the training set).
        train: bool [m], this rank's training rows.
        num_train: ``N``, the training rows of all ranks (at least 1).
        workspace: where the gradient buffer lives (one of its two gradient buffers, see
            :meth:`~mggcn.nn.workspace.Workspace.take_grad`); ``None``: a buffer of its own.
        in_place: write the gradient over the logits instead (default False; the trainer sets it: the logits
            are on the model's workspace and read by nothing after the loss). Bit for bit the same values.

    Shapes: ``logits`` [m, C] -> ``loss`` [] (float32, this rank's share), ``hits`` [m] (bool: the row's argmax is
    its label, as :func:`label_hits`).
    """

    def __init__(self, y: torch.Tensor, train: torch.Tensor, num_train: int,
                 workspace: Workspace | None = None, in_place: bool = False) -> None:
        self.y = y
        self.rows = train.nonzero().squeeze(1)
        # label_index(y, C) of every row and of the training rows, made at the first call (C: the logits' width)
        self.index = self.train_index = torch.empty(0, dtype=torch.int64)
        self.classes = 0
        self.outside = ~train  # [m]: rows whose gradient is zero
        self.scale = 1.0 / max(1, num_train)
        self.workspace = workspace if workspace is not None else Workspace()
        self.in_place = in_place

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _MaskedCrossEntropyFunction.apply(logits, self)

    def hits(self, logits: torch.Tensor) -> torch.Tensor:
        """bool [m]: whether each row's argmax is its label (:func:`label_hits`), on the workspace buffer the loss
        uses, with the label positions it keeps (the trainer's accuracies of an epoch with dropout, taken in eval
        mode before the training pass)."""
        return self.scores(logits.detach())[2]

    def scores(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every row's maximum, its label's logit and whether its argmax is its label (:func:`label_hits`), on three
        [m] buffers of the workspace."""
        m, classes = z.shape
        if classes != self.classes:
            self.index, self.classes = label_index(self.y, classes), classes
            self.train_index = self.index[self.rows]
        ws = self.workspace
        top = ws.take("row max", m, 1, like=z).squeeze(1)
        picked = ws.take("label logit", m, 1, like=z).squeeze(1)
        hits = ws.take("label hits", m, 1, like=z, dtype=torch.bool).squeeze(1)
        return _scores(z, self.y, self.index, top, picked, hits)


def label_index(y: torch.Tensor, classes: int) -> torch.Tensor:
    """int64 [m]: where ``z[r, y_r]`` lies in a contiguous ``z`` [m, classes] seen flat (column 0 where ``y_r < 0``)."""
    rows = torch.arange(y.shape[0], device=y.device, dtype=torch.int64)
    return rows.mul_(classes).add_(y.clamp(min=0))


def label_hits(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """bool [m]: ``logits.argmax(dim=1) == y`` exactly (torch's argmax: the first largest, NaN largest), and False
    where ``y < 0`` (no label), in about half of ``argmax``'s time on a CPU (see :func:`_scores`)."""
    z = logits.detach()
    m = z.shape[0]
    top, picked = z.new_empty(m), z.new_empty(m)
    hits = torch.empty(m, dtype=torch.bool, device=z.device)
    return _scores(z, y, label_index(y, z.shape[1]), top, picked, hits)[2]


def _scores(z: torch.Tensor, y: torch.Tensor, index: torch.Tensor, top: torch.Tensor, picked: torch.Tensor,
            hits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Into ``top``, ``picked``, ``hits`` [m]: each row's maximum, its label's logit ``z[r, y_r]``, and whether its
    argmax is its label. The label's logit is set aside and masked with -inf, the row maxima of the others taken
    (``amax``, one vectorized pass) and the label's logit put back, bit for bit: the argmax is the label where its
    logit is larger than every other; where it equals the largest other or either is NaN, torch's argmax of that
    row decides (first largest wins, NaN counts as largest). ``z`` must be contiguous for the flat view; its values
    are restored before this returns, and the writes bypass autograd's version counter (``.data``), which they
    leave as it was."""
    if not z.is_contiguous():
        z = z.contiguous()  # a copy: the masking below touches only it
    flat = z.data.view(-1)
    torch.take(flat, index, out=picked)
    flat.index_fill_(0, index, float("-inf"))
    torch.amax(z.data, dim=1, out=top)  # the largest logit of each row but its label's
    flat.index_copy_(0, index, picked)
    torch.gt(picked, top, out=hits)
    unsure = torch.lt(picked, top).logical_or_(hits).logical_not_()  # equal, or a NaN
    if bool(unsure.any()):
        rows = unsure.nonzero().squeeze(1)
        hits[rows] = z[rows].argmax(dim=1) == y[rows]
    hits.logical_and_(y >= 0)
    torch.maximum(top, picked, out=top)  # NaN where the row has one, as torch.max
    return top, picked, hits


class _MaskedCrossEntropyFunction(torch.autograd.Function):
    """Forward computes the loss and its gradient; backward hands the gradient out (scaled when not by 1)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, spec: MaskedCrossEntropy):  # type: ignore[override]
        z = logits.detach()
        top, label_logit, hits = spec.scores(z)
        rows = spec.rows
        picked = label_logit[rows].sum()
        in_place = spec.in_place and z.is_contiguous()  # (the flat positions below need a contiguous gradient)
        grad = z if in_place else spec.workspace.take_grad(z.shape[0], z.shape[1], like=z, avoid=z)
        torch.sub(z, top.unsqueeze(1), out=grad).exp_()
        total = grad.sum(dim=1)
        loss = ((total[rows].log() + top[rows]).sum() - picked) * spec.scale
        # softmax / N on the training rows, 0 elsewhere: one multiply by a per-row factor (0 outside)
        factor = total.reciprocal_().mul_(spec.scale).masked_fill_(spec.outside, 0.0)
        grad.mul_(factor.unsqueeze(1))
        unread = spec.outside & ~torch.isfinite(top)  # 0 · NaN: a row outside with a NaN or inf logit
        if bool(unread.any()):
            grad[unread] = 0.0
        # - 1/N at each training row's label (the flat positions are the rows' own: no two add to one element)
        minus = torch.full((1,), -spec.scale, dtype=z.dtype, device=z.device).expand(rows.shape[0])
        grad.view(-1).index_add_(0, spec.train_index, minus)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(hits)
        ctx.set_materialize_grads(False)  # no zero [m] gradient made up for the hits
        return loss, hits

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: torch.Tensor, _grad_hits):  # type: ignore[override]
        (grad,) = ctx.saved_tensors
        if grad_loss is None:  # the loss took no part in what backward differentiates
            return None, None
        if not bool(grad_loss == 1):
            grad = grad.mul_(grad_loss)
        return grad, None


class MaskedBinaryCrossEntropy:
    """``loss, counts = MaskedBinaryCrossEntropy(...)(logits)``: multi-label binary cross-entropy with logits.

    ``loss = Σ_{r ∈ train} Σ_c ℓ_rc / (N · C)``, ``ℓ = softplus(q)`` with ``q = z`` where ``y = 0`` and ``q = -z``
    where ``y = 1`` (``softplus(q) = softplus(z) - y·z``, torch's ``BCEWithLogitsLoss`` term, taken by
    ``logaddexp(q, 0)``, which never exponentiates a large positive number); ``N`` the training rows of all ranks, so
    that the all-reduced sum of the ranks' losses is torch's ``BCEWithLogitsLoss(reduction="mean")`` over the training
    rows of the whole graph and the all-reduced gradients are its gradients. Its gradient, ``(σ(z) - y) / (N · C)``
    on training rows and 0 elsewhere, is computed in the forward pass from ``ℓ`` itself, in the same buffer:
    ``σ(q) = 1 - exp(-ℓ) = -expm1(-ℓ)``, and ``σ(z) - y`` is ``σ(q)`` where ``y = 0`` and ``-σ(q)`` where ``y = 1``
    (as accurate as σ: expm1 keeps the small gradients of confident rows, and a confidently wrong logit's ``ℓ``,
    about ``|z|``, gives ±1). So the one ``m × C`` buffer is the logits' own with ``in_place`` (as
    :class:`MaskedCrossEntropy`), a gradient buffer of the workspace otherwise: no other ``m × C`` float tensor. An
    infinite logit makes the loss NaN (never finite: the trainer stops).

    Args:
        y: labels uint8 [m, C] of 0 and 1 (padding rows 0).
        train, num_train, workspace, in_place: as :class:`MaskedCrossEntropy`.

    Shapes: ``logits`` [m, C] -> ``loss`` [] (float32, this rank's share), ``counts`` int64 [2, m] (micro-F1's
    per-row numerators and denominators, as :func:`f1_counts`).
    """

    def __init__(self, y: torch.Tensor, train: torch.Tensor, num_train: int,
                 workspace: Workspace | None = None, in_place: bool = False) -> None:
        self.y = y
        self.rows = train.nonzero().squeeze(1)
        self.outside = ~train
        self.scale = 1.0 / (max(1, num_train) * max(1, y.shape[1]))
        self.labels = y.view(torch.bool).sum(dim=1)  # |y_r|, the labels of each row
        self.factor = torch.empty(0)  # -scale on training rows, 0 elsewhere, made at the first call (the logits' dtype)
        self.workspace = workspace if workspace is not None else Workspace()
        self.in_place = in_place

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _MaskedBinaryCrossEntropyFunction.apply(logits, self)

    def hits(self, logits: torch.Tensor) -> torch.Tensor:
        """int64 [2, m]: micro-F1's per-row counts (:func:`f1_counts`) on the workspace (the trainer's accuracies of an
        epoch with dropout, taken in eval mode before the training pass)."""
        return self.scores(logits.detach())

    def scores(self, z: torch.Tensor) -> torch.Tensor:
        """:func:`f1_counts` of ``z`` through two buffers of the workspace (its predictions, bool [m, C], and the
        counts), each row's label count |y_r| computed once."""
        ws = self.workspace
        predicted = ws.take("predicted labels", z.shape[0], z.shape[1], like=z, dtype=torch.bool)
        counts = ws.take("label counts", 2, z.shape[0], like=z, dtype=torch.int64)
        return _f1_counts(z, self.y, self.labels, predicted, counts)


def predictions(logits: torch.Tensor, multilabel: bool) -> torch.Tensor:
    """What the metrics count as predicted: each row's argmax (int64 [m]), or for a ``multilabel`` model a 0/1 per
    label, 1 where the logit is above 0 (uint8 [m, C], as :func:`f1_counts` thresholds)."""
    return logits.gt(0).to(torch.uint8) if multilabel else logits.argmax(dim=1)


def roc_auc(scores: torch.Tensor, y: torch.Tensor) -> float | None:
    """The mean over labels of each label's ROC-AUC, as OGB's evaluator computes ogbn-proteins' metric: ``scores``
    [k, C] (logits, or any increasing function of them), ``y`` [k, C] of 0/1; the labels without both a positive and
    a negative row are left out (None when none has both). Exact: a label's AUC is the Mann-Whitney statistic, the
    positives' rank sum with tied scores given their mean rank, computed in float64."""
    aucs = []
    for c in range(scores.shape[1]):
        s, positive = scores[:, c].double(), y[:, c].bool()
        pos = int(positive.sum())
        neg = positive.numel() - pos
        if pos == 0 or neg == 0:
            continue
        ordered, order = torch.sort(s)
        _, group, counts = torch.unique_consecutive(ordered, return_inverse=True, return_counts=True)
        mean_rank = torch.cumsum(counts, 0).double() - (counts.double() - 1) / 2  # 1-based, ties averaged
        ranks = torch.empty_like(s)
        ranks[order] = mean_rank[group]
        aucs.append((float(ranks[positive].sum()) - pos * (pos + 1) / 2) / (pos * neg))
    return sum(aucs) / len(aucs) if aucs else None


def f1_counts(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """int64 [2, m]: for each row, micro-F1's numerator ``2 · |pred_r ∧ y_r|`` and denominator ``|pred_r| + |y_r|``,
    with ``pred = logits > 0`` (σ > 1/2; a NaN logit predicts nothing) and ``y`` uint8 [m, C] of 0/1. A split's
    micro-F1 is the sum of its rows' numerators over the sum of their denominators."""
    z = logits.detach()
    predicted = torch.empty(z.shape, dtype=torch.bool, device=z.device)
    counts = torch.empty((2, z.shape[0]), dtype=torch.int64, device=z.device)
    return _f1_counts(z, y, y.view(torch.bool).sum(dim=1), predicted, counts)


def _f1_counts(z: torch.Tensor, y: torch.Tensor, labels: torch.Tensor, predicted: torch.Tensor,
               counts: torch.Tensor) -> torch.Tensor:
    """Into ``counts`` [2, m], through ``predicted`` (bool [m, C]): :func:`f1_counts`, ``labels`` being ``|y_r|``."""
    torch.gt(z, 0, out=predicted)
    torch.sum(predicted, dim=1, out=counts[1])
    counts[1].add_(labels)
    predicted.logical_and_(y.view(torch.bool))  # 0/1 bytes read as bool: no copy
    torch.sum(predicted, dim=1, out=counts[0])
    counts[0].mul_(2)
    return counts


class _MaskedBinaryCrossEntropyFunction(_MaskedCrossEntropyFunction):
    """Forward computes the loss and its gradient; backward, the cross-entropy's, hands the gradient out (scaled when
    not by 1)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, spec: MaskedBinaryCrossEntropy):  # type: ignore[override]
        z = logits.detach()
        counts = spec.scores(z)  # before the gradient overwrites the logits
        m, classes = z.shape
        grad = z if spec.in_place else spec.workspace.take_grad(m, classes, like=z, avoid=z)
        # q = z · (1 - 2y), then ℓ = softplus(q), each element's term of the loss, in place
        torch.addcmul(z, z, spec.y, value=-2, out=grad)
        torch.logaddexp(grad, grad.new_zeros(()), out=grad)
        per_row = grad.sum(dim=1)
        loss = per_row[spec.rows].sum() * spec.scale
        if spec.factor.shape[0] != m or spec.factor.dtype != z.dtype or spec.factor.device != z.device:
            spec.factor = torch.full((m,), -spec.scale, dtype=z.dtype, device=z.device).masked_fill_(spec.outside, 0.0)
        # expm1(-ℓ) = -σ(q), times (1 - 2y): y - σ(z); the factor's -scale makes it (σ(z) - y) · scale
        grad.neg_().expm1_()
        torch.addcmul(grad, grad, spec.y, value=-2, out=grad)
        grad.mul_(spec.factor.unsqueeze(1))
        unread = spec.outside & ~torch.isfinite(per_row)  # 0 · NaN: a row outside with a NaN logit
        if bool(unread.any()):
            grad[unread] = 0.0
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(counts)
        ctx.set_materialize_grads(False)
        return loss, counts
