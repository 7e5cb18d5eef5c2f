"""Byte sizes as people write them (``512M``, ``80G``, ``1.5GiB``, ``1e9``) and as mggcn prints them."""

from __future__ import annotations

import math
import re

from mggcn.utils.errors import ConfigError

__all__ = ["format_bytes", "parse_bytes"]

# K, M, G, T are powers of 1024, with or without B / iB
_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40, "TIB": 2**40}


def parse_bytes(text: str | int, option: str | None = None) -> int:
    """``"80G"``, ``"141GiB"``, ``"512m"``, ``"1e9"``, ``65536`` -> bytes (K, M, G, T are powers of 1024).

    Raises:
        ConfigError: (a ValueError) quoting ``text``, and naming ``option`` when given, for text that is not a
            size, a negative one, or one too large for a float (``1e400``: no byte count is infinite).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", str(text))
        unit = match.group(2).upper() if match else None
        try:
            number = float(match.group(1)) * _UNITS[unit] if match and unit in _UNITS else None
        except ValueError:
            number = None
        if number is None:
            raise ConfigError(f"{_named(option)}expected a size such as 80G or 512M, got '{text}'", option)
        if not math.isfinite(number):  # 1e400, or 1e308G: a float's infinity, which no count of bytes is
            raise ConfigError(f"{_named(option)}expected a finite size such as 80G or 512M, got '{text}'", option)
        value = int(number)
    if value < 0:
        raise ConfigError(f"{_named(option)}expected a size of at least 0, got '{text}'", option)
    return value


def _named(option: str | None) -> str:
    return f"{option}: " if option else ""


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.50 KiB"``: two decimals in the largest unit that fits."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"
