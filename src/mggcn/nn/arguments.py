"""The arguments every model and layer checks when built: what torch's modules refuse with a ValueError naming the
argument (``nn.Dropout(p=2)``), refused here the same way before it fails deep inside a forward."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

from mggcn.utils.errors import ConfigError


def check_dims(model: str, dims: Sequence[int]) -> list[int]:
    """A model's layer sizes ``[d_0, ..., d_L]`` as ints (a list, a tuple, or a 1-D array or tensor of integers); a
    ValueError naming what is wrong otherwise (a set has no order, a 0-D tensor no length)."""
    if getattr(dims, "ndim", None) == 1 and hasattr(dims, "tolist"):  # numpy's and torch's
        dims = dims.tolist()
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise ValueError(f"dims must be a sequence of layer sizes [d_0, ..., d_L], got {dims!r}")
    if len(dims) < 2:
        raise ValueError(f"a {model} needs at least input and output dimensions")
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0 for d in dims):
        raise ValueError(f"dims must be positive ints [d_0, ..., d_L], got {list(dims)}")
    return [int(d) for d in dims]


def check_probabilities(**probabilities: float) -> None:
    """Each dropout probability in [0, 1) (1 would drop everything), or a ConfigError naming it."""
    for name, p in probabilities.items():
        if not (isinstance(p, numbers.Real) and not isinstance(p, bool) and 0.0 <= p < 1.0):
            raise ConfigError(f"{name} must be in [0, 1), got {p!r}", name)


def check_layer_sizes(in_dim: int, out_dim: int) -> None:
    """A layer's input and output widths: positive ints (torch's own error for a negative one names no layer)."""
    for name, d in (("in_dim", in_dim), ("out_dim", out_dim)):
        if not (isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0):
            raise ValueError(f"a layer's {name} must be a positive int, got {d!r}")


def as_seed(seed: object) -> int:
    """A model's seed given: an integer a torch generator takes, as an int; a ValueError naming ``seed`` otherwise
    (torch's says ``manual_seed expected a long``)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not -(2**63) <= seed < 2**64:
        raise ValueError(f"seed must be an integer in [-2**63, 2**64), got {seed!r}")
    return int(seed)
