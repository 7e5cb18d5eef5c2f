"""The errors library code raises for what a user gave: a setting that cannot be used (:class:`ConfigError`) and a
dataset that cannot be trained on (:class:`GraphError`). The command line prints either as one line and exits 2."""

from __future__ import annotations

import re

__all__ = ["InputError", "ConfigError", "GraphError", "says_out_of_memory", "unpickling_reason",
           "without_source_locations"]


class InputError(ValueError):
    """What a user gave that cannot be used; ``option``, when given, the setting the message concerns, by its library
    name (``fmt``, ``num_nodes``), which the command line names by its flag instead
    (:func:`mggcn.tools.cli.common.flag_message`)."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class ConfigError(InputError):
    """A setting that cannot be used (a norm, an order, a count out of range, a size that does not parse, ...).

    The message starts with the setting's library name, ``option`` (``norm``, ``nprocs``, ``memory_limit``); the
    command line names it by its flag instead (``--norm``, ``--nprocs``, ``--memory-limit``) and exits with status 2.
    """


class GraphError(InputError):
    """A dataset that cannot be trained on; the message names the source and what is wrong, and ``option``, when
    given, the setting that would mean it otherwise (``fmt``, ``num_nodes``)."""


def unpickling_reason(err: BaseException) -> str:
    """What torch's weights-only unpickler refused, in a few words (its message wraps that in advice to load the
    file with ``weights_only=False``, which is exactly what must not be done with a file of unknown origin)."""
    text = str(err)
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return f"it calls {found.group(1)}"
    found = re.search(r"but got <class '([\w.]+)'>", text)
    if found:
        return f"it builds a {found.group(1)}"
    found = re.search(r"Unsupported operand (\d+)", text)
    if found:
        return f"unsupported pickle operation {found.group(1)}"
    text = text.split("WeightsUnpickler error:", 1)[-1]  # what the unpickler said, after torch's advice
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first and "weights_only" not in first.lower() and len(first) < 200:
        return f"{type(err).__name__}: {first}"
    return type(err).__name__


# where in its C++ sources gloo or c10d raised ("[/path/to/pytorch/.../unbound_buffer.cc:78] "), or which check of
# its own failed ("[enforce fail at alloc_cpu.cpp:127] err == 0. "): no help to a user
_SOURCE_LOCATION = re.compile(r"\[(?:enforce fail at )?[^\]\s]*\.(?:cc|cpp|cxx|h|hpp):\d+\]\s*"
                              r"(?:(?<=\] )(?:[\w.>-]+ [=!<>]=? [\w.-]+)?\. )?")

# torch's allocators, CUDA, C++'s std::bad_alloc, MKL's sparse routines (SPARSE_STATUS_ALLOC_FAILED); a thread whose
# stack cannot be mapped is an allocation that failed too (Python's words for it)
_ALLOCATION_FAILED = re.compile(r"can't allocate memory|cannot allocate memory|out of memory|bad_alloc|_ALLOC_FAILED"
                                r"|can't start new thread", re.I)
_RUNTIME_ERRORS = ("RuntimeError", "AcceleratorError", "OSError")


def says_out_of_memory(kind: str, message: str) -> bool:
    """Whether an error of type ``kind`` (its name, as ``torch.cuda.OutOfMemoryError``) with ``message`` says that
    the host or the GPU had no memory left: a ``MemoryError`` of any kind (numpy's, CUDA's), or a ``RuntimeError``
    (or ``OSError``) whose message says an allocation (or a thread's stack) failed: torch's CPU allocator raises a
    plain ``RuntimeError``."""
    kind = kind.rpartition(".")[2]
    return kind.endswith("MemoryError") or (kind in _RUNTIME_ERRORS and bool(_ALLOCATION_FAILED.search(message)))


def without_source_locations(message: str) -> str:
    """``message`` without the C++ source locations torch's distributed backends put before their words."""
    return _SOURCE_LOCATION.sub("", message)
