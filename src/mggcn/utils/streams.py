"""mggcn's lines hold characters beyond ASCII (Â, ε, ×): where the standard streams' encoding lacks them (a C or
Latin-1 locale, ``PYTHONIOENCODING=ascii``), they are written as ``?``, never raised out of a line being printed.

Importing this module loads no torch.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["replace_unwritable_characters", "unwritable_characters_replaced"]

# error handlers that write any character (the others raise on one the encoding lacks)
_WRITES_ANY = {"replace", "backslashreplace", "xmlcharrefreplace", "namereplace", "ignore"}


def _streams_that_cannot_write_everything() -> list:
    """``sys.stdout`` and ``sys.stderr`` where their encoding lacks characters mggcn's lines hold (Â, ε, ×: a C or
    Latin-1 locale, ``PYTHONIOENCODING=ascii``) and their errors handler raises on them."""
    found = []
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("_", "-")
        if isinstance(stream, io.TextIOWrapper) and encoding not in ("utf-8", "utf8") and \
                stream.errors not in _WRITES_ANY:
            found.append(stream)
    return found


def replace_unwritable_characters() -> None:
    """In a process mggcn owns (a rank, the command): a character its streams cannot encode is written as ``?``."""
    for stream in _streams_that_cannot_write_everything():
        stream.reconfigure(errors="replace")


@contextmanager
def unwritable_characters_replaced() -> Iterator[None]:
    """In the ``with`` block a character the caller's streams cannot encode is written as ``?`` by them, not raised
    out of mggcn's line; their error handlers are as they were after it."""
    changed = [(stream, stream.errors) for stream in _streams_that_cannot_write_everything()]
    for stream, _ in changed:
        stream.reconfigure(errors="replace")
    try:
        yield
    finally:
        for stream, errors in changed:
            try:
                stream.reconfigure(errors=errors)
            except (ValueError, OSError):  # closed meanwhile, or its descriptor gone
                pass
