"""A GPU run rehearsed on the CPU: which tensors would sit on the host, and collectives that must not get them.

On a CUDA run a tensor made without a ``device`` lands on the CPU (PyTorch's default device) while the rank
computes on ``cuda:i``, and NCCL rejects a CPU tensor in a collective. On gloo the two are the same device, so such
a tensor goes unnoticed. :class:`HostTracker` tells them apart on the CPU by following where every tensor would be
on a GPU run:

* on the host: what a factory (``torch.tensor``, ``torch.empty``, ``torch.arange``, ...) makes without a
  ``device`` or with ``device="cpu"`` given as a string, and what ``.cpu()`` or ``.to("cpu")`` returns;
* on the device: what a factory makes with a ``device`` object (``ctx.device``, ``t.device``), what
  ``.to(device)`` / ``.cuda()`` returns, and every tensor the tracker never saw made (autograd's gradients,
  tensors made before it started);
* any other operation's result is on the host when one of its tensor inputs is (as on a GPU, where a CPU input
  keeps the result on the CPU); an in-place operation leaves its tensor where it was (``copy_`` crosses devices).

:func:`check_collectives` wraps the tensor collectives of ``torch.distributed`` (as the library calls them,
``dist.all_reduce`` ...) so that each records the host tensors it is given, with the library line that passed
them, and then runs as usual (every rank keeps going, so a bad call does not hang the others).
"""

from __future__ import annotations

import contextlib
import functools
import traceback

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

__all__ = ["HostTracker", "check_collectives", "on_host", "TENSOR_COLLECTIVES"]

_HOST = "_mggcn_test_on_host"
_FACTORIES = {torch.tensor, torch.as_tensor, torch.empty, torch.zeros, torch.ones, torch.full, torch.arange,
              torch.eye, torch.linspace, torch.rand, torch.randn, torch.randint, torch.randperm,
              torch.empty_strided, torch.scalar_tensor}
TENSOR_COLLECTIVES = ("all_reduce", "all_to_all_single", "all_to_all", "broadcast", "all_gather",
                      "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "reduce", "gather",
                      "scatter", "send", "recv", "isend", "irecv")


def on_host(t: torch.Tensor) -> bool:
    """Whether ``t`` would be a CPU tensor on a GPU run (as far as the tracker followed it)."""
    return bool(getattr(t, _HOST, False))


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _is_host_device(device) -> bool:
    """``device`` as given to a factory or ``.to``: the host when it is the string ``"cpu"``; a device object
    stands for the rank's device (``ctx.device``, ``t.device``)."""
    return isinstance(device, str) and device.split(":")[0] == "cpu"


def _device_argument(args, kwargs):
    """The device a ``.to(...)`` call names, or None when it names none (only a dtype)."""
    if "device" in kwargs:
        return kwargs["device"]
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            return a
        if isinstance(a, torch.Tensor):  # .to(other): other's place
            return "cpu" if on_host(a) else torch.device("cpu")
    return None


def _mark(out, host: bool) -> None:
    for t in _tensors(out):
        try:
            setattr(t, _HOST, host)
        except (AttributeError, RuntimeError):  # a tensor that takes no attributes: left unfollowed
            pass


class HostTracker(TorchFunctionMode):
    """A torch-function mode that marks the tensors a GPU run would hold on the host (see the module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if func in _FACTORIES:
            _mark(out, "device" not in kwargs or _is_host_device(kwargs["device"]))
        elif name in ("cpu", "cuda", "to"):
            device = "cpu" if name == "cpu" else torch.device("cpu") if name == "cuda" else \
                _device_argument(args, kwargs)
            host = on_host(args[0]) if device is None else _is_host_device(device)
            if out is args[0] and host != on_host(args[0]):
                out = out.clone()  # a move between devices copies: the tensor moved from stays where it was
            _mark(out, host)
        elif name.endswith("_like"):
            _mark(out, _is_host_device(kwargs["device"]) if "device" in kwargs else on_host(args[0]))
        elif name.endswith("_") and not name.endswith("__"):
            pass  # in place: the tensor stays where it is
        elif isinstance(out, (torch.Tensor, list, tuple)) and any(on_host(t) for t in _tensors((args, kwargs))):
            _mark(out, True)
        return out


def _library_line() -> str:
    """The two innermost mggcn lines on the stack (the helper that called the collective, and its caller)."""
    found = []
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = frame.filename.replace("\\", "/")
        if "/mggcn/" in path and "/tests/" not in path:
            found.append(f"{path.rsplit('/mggcn/', 1)[-1]}:{frame.lineno} ({frame.line})")
            if len(found) == 2:
                break
    return " called from ".join(found) or "outside mggcn"


@contextlib.contextmanager
def check_collectives(device: torch.device):
    """Within this block, ``torch.distributed``'s tensor collectives check that each tensor they get is on
    ``device`` and not on the host (:class:`HostTracker`). Yields the list the violations are appended to (one line
    each: collective, argument, the library line) and the count of tensors each collective checked."""
    problems: list[str] = []
    checked: dict[str, int] = {}

    def wrap(name, fn):
        @functools.wraps(fn)
        def checking(*args, **kwargs):
            for i, t in enumerate(_tensors((args, kwargs))):
                checked[name] = checked.get(name, 0) + 1
                if on_host(t) or t.device != device:
                    where = "host" if on_host(t) else str(t.device)
                    line = (f"{name}: tensor argument {i} ({t.dtype}) is on the {where}, not on {device}, "
                            f"passed at {_library_line()}")
                    if line not in problems:
                        problems.append(line)
            return fn(*args, **kwargs)
        return checking

    originals = {name: getattr(dist, name) for name in TENSOR_COLLECTIVES if hasattr(dist, name)}
    for name, fn in originals.items():
        setattr(dist, name, wrap(name, fn))
    try:
        yield problems, checked
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
