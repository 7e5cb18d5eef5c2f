"""The weights' initialization: PyG's ``glorot``, drawn from a model's seeded generator when it is built (a model is
the same at every rank and every run of a seed, whatever torch's global RNG has drawn) and from torch's global RNG
when a layer's ``reset_parameters`` draws new ones, as PyG's layers do."""

from __future__ import annotations

import math

import torch
from torch import nn

from mggcn.nn.arguments import check_layer_sizes

__all__ = ["glorot_", "glorot_linear"]


def glorot_(weight: torch.Tensor, generator: torch.Generator | None) -> None:
    """PyG's ``glorot``: uniform in ±sqrt(6 / (a + b)) for a tensor [..., a, b] (a layer's weight [d_out, d_in], GAT's
    attention vectors [1, H, C])."""
    bound = math.sqrt(6.0 / (weight.shape[-2] + weight.shape[-1]))
    with torch.no_grad():
        weight.uniform_(-bound, bound, generator=generator)


class _GlorotLinear(nn.Linear):
    """``nn.Linear`` whose weight is drawn with PyG's ``glorot`` and whose bias is 0: by :func:`glorot_linear` from
    a model's seeded generator when built (``nn.Linear``'s own drawing, from torch's global RNG, is skipped; not
    ``device="meta"`` then ``to_empty``: the meta device's first use imports sympy, 32 MiB of every rank's memory),
    and from torch's global RNG by each later :meth:`reset_parameters`, as PyG's layers draw theirs."""

    built = False  # nn.Linear's constructor calls reset_parameters before there is a generator to draw from

    def reset_parameters(self) -> None:
        if not self.built:
            return
        glorot_(self.weight, None)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _get_name(self) -> str:
        return "Linear"  # what it is once drawn; the name shows in a model's repr


def glorot_linear(in_dim: int, out_dim: int, bias: bool = True,
                  generator: torch.Generator | None = None) -> nn.Linear:
    """A linear map with zero bias whose weight is drawn with PyG's ``glorot`` from ``generator`` (a model's seeded
    one: nothing drawn from torch's global RNG); None: from torch's global RNG, as PyG's layers draw theirs when
    built."""
    check_layer_sizes(in_dim, out_dim)
    lin = _GlorotLinear(in_dim, out_dim, bias=bias)
    lin.built = True
    glorot_(lin.weight, generator)
    if bias:
        nn.init.zeros_(lin.bias)
    return lin
