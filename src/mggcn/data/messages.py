"""The one line an error about a file is: its path, then what is wrong, with the values echoed from the file clipped.

A hostile file may hold a key of 5000 digits or a token of a megabyte; echoed whole, it would bury the one line (and
fill a log of many such lines). No word a message needs (a number, a name, a path) is near :data:`WORD_LIMIT`.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["WORD_LIMIT", "one_line"]

WORD_LIMIT = 200  # characters of one word of a message; a longer word is clipped
MESSAGE_LIMIT = 1000  # characters of a message after the path


def _clip(text: str, limit: int, keep: int) -> str:
    return text if len(text) <= limit else f"{text[:keep]}... ({len(text):,} characters)"


def one_line(path: Any, msg: str) -> str:
    """``path: msg`` on one line (all whitespace runs, newlines included, made one space), each word of ``msg``
    longer than :data:`WORD_LIMIT` and the whole of it beyond :data:`MESSAGE_LIMIT` clipped."""
    words = " ".join(_clip(w, WORD_LIMIT, 40) for w in str(msg).split())
    return " ".join(f"{os.fspath(path)}:".split()) + " " + _clip(words, MESSAGE_LIMIT, MESSAGE_LIMIT - 40)
