"""The training loss (mggcn.nn.loss) against torch's cross-entropy on the training rows: value, gradient, and whether
each row's argmax is its label against torch's argmax."""

import torch
import torch.nn.functional as F

from mggcn.nn.loss import MaskedCrossEntropy, label_hits
from mggcn.nn.workspace import Workspace


def _case(m=57, classes=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, classes, generator=gen) * 3
    y = torch.randint(0, classes, (m,), generator=gen)
    train = torch.rand(m, generator=gen) < 0.4
    return logits, y, train


def _argmax_hits(logits, y):
    return (logits.argmax(dim=1) == y) & (y >= 0)


def test_loss_gradient_and_hits_equal_cross_entropy_over_the_global_training_set():
    logits, y, train = _case()
    num_train = int(train.sum()) + 11  # other ranks hold 11 more training rows: the mean is over all of them
    loss_fn = MaskedCrossEntropy(y, train, num_train)
    ours = logits.clone().requires_grad_()
    for _ in range(2):  # the second call reuses the buffers of the first
        ours.grad = None
        loss, hits = loss_fn(ours)
        (2.5 * loss).backward()  # an upstream gradient other than 1 scales the gradient
        ref = logits.clone().requires_grad_()
        expected = F.cross_entropy(ref[train], y[train], reduction="sum") / num_train
        (2.5 * expected).backward()
        # float32 logsumexp and sums over ~23 rows in another order than torch's: a few ulps
        torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-5, atol=1e-7)
        assert torch.equal(hits, _argmax_hits(logits, y))
        assert torch.all(ours.grad[~train] == 0)


def test_the_gradient_lives_on_a_gradient_buffer_of_the_workspace():
    logits, y, train = _case(seed=1)
    ws = Workspace()
    loss_fn = MaskedCrossEntropy(y, train, int(train.sum()), ws)
    z = logits.clone().requires_grad_()
    loss, _ = loss_fn(z)
    loss.backward()
    assert set(ws.sizes) == {"row max", "label logit", "label hits", "grad a"}
    # the gradient autograd received was the workspace buffer's (copied into the leaf's .grad)
    buffer = ws.take("grad a", *logits.shape, like=logits)
    torch.testing.assert_close(buffer, z.grad)


def test_a_rank_without_training_rows_contributes_nothing():
    logits, y, _ = _case(seed=2)
    loss_fn = MaskedCrossEntropy(y, torch.zeros(logits.shape[0], dtype=torch.bool), num_train=5)
    z = logits.clone().requires_grad_()
    loss, hits = loss_fn(z)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(z.grad == 0) and torch.equal(hits, _argmax_hits(logits, y))


def test_non_finite_logits_outside_the_training_rows_do_not_reach_the_gradient():
    logits, y, train = _case(seed=3)
    logits[~train] = float("nan")
    z = logits.clone().requires_grad_()
    loss, _ = MaskedCrossEntropy(y, train, int(train.sum()))(z)
    loss.backward()
    assert torch.isfinite(loss) and torch.all(z.grad[~train] == 0) and torch.all(torch.isfinite(z.grad))


def test_in_place_writes_the_gradient_over_the_logits_bit_for_bit():
    logits, y, train = _case(seed=4)
    ws = Workspace()
    separate = MaskedCrossEntropy(y, train, int(train.sum()) + 3)
    in_place = MaskedCrossEntropy(y, train, int(train.sum()) + 3, ws, in_place=True)
    ref = logits.clone().requires_grad_()
    loss, hits = separate(ref)
    loss.backward()
    mine = ws.take("out", *logits.shape, like=logits).copy_(logits).requires_grad_()
    captured = []
    mine.register_hook(lambda g: captured.append(g))
    loss2, hits2 = in_place(mine)
    loss2.backward()
    assert torch.equal(loss2, loss) and torch.equal(hits2, hits)
    assert torch.equal(captured[0], ref.grad)
    assert captured[0].data_ptr() == mine.data_ptr()  # the logits' buffer, no gradient buffer taken
    assert set(ws.sizes) == {"out", "row max", "label logit", "label hits"}


def _hard_logits():
    """Rows where torch's argmax is decided by ties, NaN, infinities; labels on and off those columns; unlabeled."""
    nan, inf = float("nan"), float("inf")
    rows = [  # (logits, label)
        ([1.0, 3.0, 2.0], 1), ([1.0, 3.0, 2.0], 2),  # a unique maximum, on and off the label
        ([3.0, 3.0, 1.0], 0), ([3.0, 3.0, 1.0], 1),  # a tie: the first wins
        ([0.0, 0.0, 0.0], 0), ([0.0, 0.0, 0.0], 2), ([0.0, -0.0, 0.0], 1),  # all equal (signed zeros equal)
        ([1.0, nan, 2.0], 1), ([1.0, nan, 2.0], 2), ([nan, nan, 2.0], 1),  # NaN counts as the largest, first wins
        ([inf, 1.0, inf], 0), ([inf, 1.0, inf], 2), ([-inf, -inf, -inf], 0), ([-inf, -inf, -inf], 1),
        ([1.0, inf, nan], 1), ([2.0, 1.0, 0.0], -1), ([5.0, 1.0, 0.0], -1),  # no label: never a hit
    ]
    return torch.tensor([r for r, _ in rows]), torch.tensor([y for _, y in rows])


def test_label_hits_equal_argmax_on_ties_nan_and_infinities():
    logits, y = _hard_logits()
    assert torch.equal(label_hits(logits, y), _argmax_hits(logits, y))
    gen = torch.Generator().manual_seed(5)
    for classes in (1, 2, 7, 40):  # random logits rounded to few values: many ties, some NaN
        z = torch.randint(-2, 3, (500, classes), generator=gen).float()
        z[torch.rand(500, classes, generator=gen) < 0.01] = float("nan")
        labels = torch.randint(-1, classes, (500,), generator=gen)
        assert torch.equal(label_hits(z, labels), _argmax_hits(z, labels))


def _same_bits(a, b):
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def test_label_hits_leave_the_logits_and_their_autograd_state_as_they_were():
    logits, y = _hard_logits()
    z = logits.clone().requires_grad_()
    out = z * z  # autograd keeps z for this product's backward: a change to z would make backward raise
    version = z._version
    hits = label_hits(z, y)
    assert z._version == version and _same_bits(z.detach(), logits)
    out.sum().backward()  # would raise had z been modified in a way autograd saw
    assert torch.equal(hits, _argmax_hits(logits, y))
    strided = torch.stack([logits, logits], dim=2)[:, :, 0]  # not contiguous: label_hits works on a copy
    assert not strided.is_contiguous()
    assert torch.equal(label_hits(strided, y), _argmax_hits(strided, y))
    assert _same_bits(strided, logits)


def test_the_loss_on_non_contiguous_logits_in_place_uses_a_gradient_buffer():
    logits, y, train = _case(seed=6)
    strided = logits.t().contiguous().t()  # the same values, column-major
    ws = Workspace()
    z = strided.clone().t().contiguous().t().requires_grad_()
    loss, hits = MaskedCrossEntropy(y, train, int(train.sum()), ws, in_place=True)(z)
    loss.backward()
    ref = logits.clone().requires_grad_()
    F.cross_entropy(ref[train], y[train], reduction="sum").div(int(train.sum())).backward()
    torch.testing.assert_close(z.grad, ref.grad, rtol=1e-5, atol=1e-7)
    assert torch.equal(hits, _argmax_hits(logits, y)) and "grad a" in ws.sizes
