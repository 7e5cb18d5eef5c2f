"""Text files as users keep them: plain, or compressed with gzip, bzip2 or xz whatever their names say."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from mggcn.data.messages import one_line
from mggcn.utils.errors import GraphError

__all__ = ["DECOMPRESS_ERRORS", "decompressor", "open_text"]

# what reading a damaged file raises: a bad gzip or bzip2 stream is an OSError, a bad xz stream an LZMAError
DECOMPRESS_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


def decompressor(path: Path) -> Callable[..., Any] | None:
    """The ``open`` of the compression ``path`` is in, by its magic bytes (not its suffix: users rename files);
    None for a plain file. A zip archive, which may hold many files, is refused in one line."""
    with open(path, "rb") as f:
        head = f.read(10)
    if head.startswith(b"PK\x03\x04"):
        raise GraphError(one_line(path, "a zip archive, not the file itself: extract the file it holds and give "
                                        "that"))
    if head.startswith(b"\x1f\x8b"):
        return gzip.open
    # bzip2: "BZh", the block size 1-9, then the magic of a block (pi) or of the end of an empty stream (sqrt pi)
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[4:] in (b"1AY&SY", b"\x17rE8P\x90"):
        return bz2.open
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.open
    return None


def open_text(path: Path) -> TextIO:
    # errors="replace" turns binary garbage into an unparsable token that the line scanner can point at, instead
    # of a UnicodeDecodeError with no line number. utf-8-sig drops the byte order mark some editors put first,
    # which would otherwise glue onto the first token.
    opener = decompressor(path) or open
    return opener(path, "rt", encoding="utf-8-sig", errors="replace")
