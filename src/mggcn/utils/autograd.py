"""The backward of mggcn's autograd functions: first order only, and said so when a second order is asked for.

torch's ``once_differentiable`` runs a backward without building its graph, and marks its results as not
differentiable only when a gradient it was given requires grad. Under ``create_graph=True`` (a gradient penalty,
a Hessian-vector product) a gradient of a layer then comes back detached from the weights it depends on, and the
second-order terms are silently missing (a penalty's gradient off by a factor of 3 on a GCN); the layers reuse
their buffers in place, so a second order cannot be built on them. A backward run while a graph is being built
refuses instead, in one line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.function import once_differentiable as _once_differentiable

__all__ = ["SECOND_ORDER", "once_differentiable"]

SECOND_ORDER = ("mggcn's layers and losses have first derivatives only: a backward with create_graph=True (a "
                "gradient penalty, double backward) is not supported")


def once_differentiable(backward: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.autograd.function.once_differentiable``, refusing a backward run under ``create_graph=True``."""
    inner = _once_differentiable(backward)

    @functools.wraps(backward)
    def first_order(ctx: Any, *grads: Any) -> Any:
        if torch.is_grad_enabled():  # the engine builds the backward's graph: create_graph=True
            raise RuntimeError(SECOND_ORDER)
        return inner(ctx, *grads)

    return first_order
