"""Adam for the replicated weights of a GCN, without ``torch.optim``.

The algorithm and its floating-point steps are those of ``torch.optim.Adam`` (Kingma & Ba, with the L2 weight decay
added to the gradient, PyTorch's single-tensor CPU path)::

    g = ∇θ + λ·θ;   m ← m + (1 − β₁)·(g − m);   v ← β₂·v + (1 − β₂)·g²
    θ ← θ − lr / (1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)

Why not ``torch.optim.Adam``: its first use imports ``torch._dynamo`` and with it sympy (about 68 MiB of Python
objects per process, measured with torch 2.13), more than the whole training state of a rank of a mid-size graph;
a GCN has a few small weight matrices, which this loop updates in microseconds. Its state dict has the layout of
``torch.optim.Adam``'s (``state[i]`` with ``step``, ``exp_avg``, ``exp_avg_sq``; one param group), so checkpoints
load into either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

__all__ = ["Adam"]


def _held(value: float, like: torch.Tensor) -> float:
    """``value`` as a scalar of ``like``'s dtype can be: itself, or the infinity of its sign where it is beyond the
    dtype's largest value. torch refuses such a scalar (a RuntimeError, not a result); infinite, the step makes the
    weights and so the loss non-finite, which the trainer reports as such."""
    largest = torch.finfo(like.dtype).max
    return value if -largest <= value <= largest else math.copysign(math.inf, value)


class Adam:
    """``torch.optim.Adam`` (no amsgrad, no maximize) over ``params``, bit for bit on CPU.

    Args:
        params: the tensors to update (their ``.grad`` is read by :meth:`step`).
        lr: learning rate (default 1e-3). betas: ``(β₁, β₂)`` (default (0.9, 0.999)).
        eps: added to the denominator (default 1e-8). weight_decay: ``λ`` of the L2 term (default 0).
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = float(lr), tuple(betas), float(eps), float(weight_decay)
        self.state: dict[int, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            state = self.state.get(i)
            if state is None:
                state = self.state[i] = {"step": torch.tensor(0.0),
                                         "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                         "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
            state["step"] += 1
            grad = p.grad if self.weight_decay == 0 else p.grad.add(p, alpha=_held(self.weight_decay, p))
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step = state["step"].item()
            step_size = self.lr / (1 - beta1**step)
            denom = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(self.eps)
            p.addcdiv_(exp_avg, denom, value=_held(-step_size, p))

    def state_dict(self) -> dict:
        """``torch.optim.Adam``'s layout: ``{"state": {i: {...}}, "param_groups": [{..., "params": [0, 1, ...]}]}``."""
        group = {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": self.weight_decay,
                 "amsgrad": False, "maximize": False, "foreach": None, "capturable": False, "differentiable": False,
                 "fused": None, "decoupled_weight_decay": False, "params": list(range(len(self.params)))}
        return {"state": {i: {k: v.clone() for k, v in s.items()} for i, s in self.state.items()},
                "param_groups": [group]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state dict of this class or of ``torch.optim.Adam`` over the same parameters."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(f"optimizer state: {sum(len(g['params']) for g in groups)} parameters in "
                             f"{len(groups)} group(s), expected {len(self.params)} in one")
        group = groups[0]
        self.lr, self.betas, self.eps = float(group["lr"]), tuple(group["betas"]), float(group["eps"])
        self.weight_decay = float(group["weight_decay"])
        position = {pid: i for i, pid in enumerate(group["params"])}
        self.state = {}
        for pid, s in state_dict["state"].items():
            p = self.params[position[pid]]
            self.state[position[pid]] = {"step": s["step"].detach().to("cpu", torch.float32).clone(),
                                         "exp_avg": s["exp_avg"].detach().to(p.device, p.dtype).clone(),
                                         "exp_avg_sq": s["exp_avg_sq"].detach().to(p.device, p.dtype).clone()}
