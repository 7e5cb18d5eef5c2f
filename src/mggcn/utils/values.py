"""Arguments as Python's own values: numpy's scalars and 0-d tensors (a seed from ``np.arange``, a count from a
sweep's grid) and a torch device, read as the ints, floats, bools and names the settings are checked as."""

from __future__ import annotations

from typing import Any

__all__ = ["plain"]


def plain(value: Any) -> Any:
    """``value`` as a Python scalar where it is a numpy scalar (or 0-d array or tensor), a torch device as its name
    (``torch.device("cpu")`` -> ``"cpu"``); anything else as it is."""
    kind = type(value)
    if kind.__module__ in ("numpy", "torch") and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()  # a 0-d tensor too: the elements of hidden=torch.tensor([64, 64])
    if kind.__module__ == "torch" and kind.__name__ == "device":
        return str(value)
    return value
