"""Byte sizes as people write them (``4M``, ``80G``, ``141GiB``, ``1e9``) and back."""

from __future__ import annotations

import re

__all__ = ["parse_bytes", "format_bytes"]

_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40, "TIB": 2**40}


def parse_bytes(text: str) -> int:
    """``80G``, ``141GiB``, ``512M``, ``1e9`` -> bytes (K, M, G, T are powers of 1024).

    Raises:
        ValueError: ``text`` is not such a size (the message quotes it).
    """
    match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    try:
        value = float(match.group(1)) if match else None
    except ValueError:
        value = None
    if value is None or unit not in _UNITS:
        raise ValueError(f"expected a size such as 80G or 512M, got '{text}'")
    return int(value * _UNITS[unit])


def format_bytes(n: float) -> str:
    """``1.50 GiB``, ``12.00 MiB``, ``512 B``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"
