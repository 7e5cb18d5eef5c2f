"""mggcn.nn.adam.Adam against torch.optim.Adam: the same parameters bit for bit, interchangeable state dicts."""

import pytest
import torch

from mggcn.nn.adam import Adam


@pytest.mark.parametrize("weight_decay", [0.0, 5e-4])
def test_same_bits_as_torch_adam_and_state_dicts_load_both_ways(weight_decay):
    gen = torch.Generator().manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(20, 7, generator=gen)), torch.nn.Parameter(torch.randn(7, generator=gen))]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opts = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)
    a, b = Adam(ours, **opts), torch.optim.Adam(theirs, **opts)
    for step in range(40):
        for p, q in zip(ours, theirs, strict=True):
            grad = torch.randn(p.shape, generator=gen)
            p.grad, q.grad = grad.clone(), grad.clone()
        a.step()
        b.step()
        for p, q in zip(ours, theirs, strict=True):  # the same float operations in the same order: exact
            torch.testing.assert_close(p, q, rtol=0, atol=0)
        if step == 15:  # swap state through each other's state dicts, as a checkpoint would
            a2, b2 = Adam(ours, lr=1.0), torch.optim.Adam(theirs, lr=1.0)
            a2.load_state_dict(b.state_dict())
            b2.load_state_dict(a.state_dict())
            a, b = a2, b2
    assert a.state_dict()["param_groups"][0]["params"] == [0, 1]
    a.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in ours)


def test_refuses_a_state_of_other_parameters():
    params = [torch.nn.Parameter(torch.zeros(3))]
    other = torch.optim.Adam([torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))]).state_dict()
    with pytest.raises(ValueError, match="2 parameters in 1 group"):
        Adam(params).load_state_dict(other)
