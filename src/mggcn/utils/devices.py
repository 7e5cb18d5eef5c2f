"""A job's device setting, read as text: what the command line and the Python API accept.

Importing this module loads no torch.
"""

from __future__ import annotations

import re
from typing import Any

from mggcn.utils.errors import ConfigError

__all__ = ["parse_device", "gpu_index"]

_DEVICE = re.compile(r"(cpu|cuda)(?::([0-9]+))?|auto")


def parse_device(kind: Any) -> str:
    """A job's device in mggcn's words: ``cpu``, ``cuda`` (each rank the GPU of its local rank), ``cuda:K`` (GPU
    ``K``, for a job of one rank per host) or ``auto``. Torch's spellings of them (``torch.device("cuda", 0)``,
    ``"cpu:0"``) are taken as they are meant."""
    match = _DEVICE.fullmatch(str(kind)) if isinstance(kind, str) or "torch" in type(kind).__module__ else None
    if match is None:
        raise ConfigError(f"device must be cpu, cuda, cuda:K (GPU K) or auto, got {str(kind)!r}", "device")
    if match[1] == "cuda" and match[2] is not None:
        return f"cuda:{int(match[2])}"
    return match[1] or "auto"


def gpu_index(device: str) -> int | None:
    """The GPU that a device ``cuda:K`` names (None for ``cuda``, ``cpu`` or ``auto``)."""
    return int(device[5:]) if device.startswith("cuda:") else None
