"""Buffers reused every epoch (mggcn.nn.workspace): one allocation per name, grown when needed, two alternating
gradient buffers, and autograd refusing to read a buffer overwritten since it was saved."""

import pytest
import torch

from mggcn.nn.workspace import Workspace, grad_destination


def test_take_reuses_a_buffer_and_grows_it():
    ws, like = Workspace(), torch.empty(0)
    a = ws.take("h", 4, 3, like)
    b = ws.take("h", 2, 5, like)  # fewer elements: the same storage
    assert a.shape == (4, 3) and b.shape == (2, 5)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    c = ws.take("h", 5, 5, like)  # more: a larger buffer
    assert c.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
    assert ws.sizes == {"h": 25 * 4}
    assert ws.take("h", 1, 1, torch.empty(0, dtype=torch.float64)).dtype == torch.float64  # another dtype: new one


def test_take_grad_alternates_between_two_buffers():
    ws, like = Workspace(), torch.empty(0)
    first = ws.take_grad(3, 2, like, avoid=like)
    second = ws.take_grad(3, 2, like, avoid=first)
    third = ws.take_grad(3, 2, like, avoid=second)
    assert first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr()
    assert third.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    assert set(ws.sizes) == set(Workspace.GRAD)


def test_backward_refuses_a_buffer_overwritten_after_it_was_saved():
    ws = Workspace()
    w = torch.ones(2, 2, requires_grad=True)
    h = ws.take("h", 3, 2, w)
    h.fill_(1.0)
    out = (h @ w).sum()  # autograd keeps h for ∂W
    ws.take("h", 3, 2, w).fill_(2.0)  # a second forward overwrites it
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_grad_destination_names_where_a_gradient_goes():
    ws, like = Workspace(), torch.empty(0)
    h = ws.take("H.W", 3, 2, like)
    assert grad_destination(None, 3, 2, like, avoid=like) is None  # a new tensor
    assert grad_destination(ws, 3, 2, like, avoid=like).data_ptr() == ws.take_grad(3, 2, like, like).data_ptr()
    assert grad_destination((ws, "H.W"), 3, 2, like, avoid=like).data_ptr() == h.data_ptr()  # the input's own
    with pytest.raises(RuntimeError, match="holds the gradient it is computed from"):
        grad_destination((ws, "H.W"), 3, 2, like, avoid=h)
