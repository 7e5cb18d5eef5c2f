"""The training loss (mggcn.nn.loss) against torch's cross-entropy on the training rows: value, gradient, argmax."""

import torch
import torch.nn.functional as F

from mggcn.nn.loss import MaskedCrossEntropy
from mggcn.nn.workspace import Workspace


def _case(m=57, classes=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, classes, generator=gen) * 3
    y = torch.randint(0, classes, (m,), generator=gen)
    train = torch.rand(m, generator=gen) < 0.4
    return logits, y, train


def test_loss_gradient_and_argmax_equal_cross_entropy_over_the_global_training_set():
    logits, y, train = _case()
    num_train = int(train.sum()) + 11  # other ranks hold 11 more training rows: the mean is over all of them
    loss_fn = MaskedCrossEntropy(y, train, num_train)
    ours = logits.clone().requires_grad_()
    for _ in range(2):  # the second call reuses the buffers of the first
        ours.grad = None
        loss, pred = loss_fn(ours)
        (2.5 * loss).backward()  # an upstream gradient other than 1 scales the gradient
        ref = logits.clone().requires_grad_()
        expected = F.cross_entropy(ref[train], y[train], reduction="sum") / num_train
        (2.5 * expected).backward()
        # float32 logsumexp and sums over ~23 rows in another order than torch's: a few ulps
        torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-5, atol=1e-7)
        assert torch.equal(pred, logits.argmax(dim=1))
        assert torch.all(ours.grad[~train] == 0)


def test_the_gradient_lives_on_a_gradient_buffer_of_the_workspace():
    logits, y, train = _case(seed=1)
    ws = Workspace()
    loss_fn = MaskedCrossEntropy(y, train, int(train.sum()), ws)
    z = logits.clone().requires_grad_()
    loss, _ = loss_fn(z)
    loss.backward()
    assert set(ws.sizes) == {"row max", "row argmax", "grad a"}
    # the gradient autograd received was the workspace buffer's (copied into the leaf's .grad)
    buffer = ws.take("grad a", *logits.shape, like=logits)
    torch.testing.assert_close(buffer, z.grad)


def test_a_rank_without_training_rows_contributes_nothing():
    logits, y, _ = _case(seed=2)
    loss_fn = MaskedCrossEntropy(y, torch.zeros(logits.shape[0], dtype=torch.bool), num_train=5)
    z = logits.clone().requires_grad_()
    loss, pred = loss_fn(z)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(z.grad == 0) and torch.equal(pred, logits.argmax(1))


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
    loss, pred = separate(ref)
    loss.backward()
    mine = ws.take("out", *logits.shape, like=logits).copy_(logits).requires_grad_()
    captured = []
    mine.register_hook(lambda g: captured.append(g))
    loss2, pred2 = in_place(mine)
    loss2.backward()
    assert torch.equal(loss2, loss) and torch.equal(pred2, pred)
    assert torch.equal(captured[0], ref.grad)
    assert captured[0].data_ptr() == mine.data_ptr()  # the logits' buffer, no gradient buffer taken
    assert set(ws.sizes) == {"out", "row max", "row argmax"}
