"""Text files as users keep them: plain, or compressed with gzip, bzip2 or xz whatever their names say."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from mggcn.data.messages import one_line
from mggcn.utils.errors import GraphError

__all__ = ["DECOMPRESS_ERRORS", "decompressor", "numpy_opens", "open_text", "present_prefixes"]

# the compressions numpy's text readers undo by a file's suffix (np.loadtxt's documented .gz and .bz2)
_NUMPY_SUFFIXES = {".gz": gzip.open, ".bz2": bz2.open}
_SCAN_BLOCK = 1 << 24  # bytes of decompressed text read at a time by present_prefixes

# what reading a damaged file raises: a bad gzip or bzip2 stream is an OSError, a bad xz stream an LZMAError
DECOMPRESS_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


def decompressor(path: Path) -> Callable[..., Any] | None:
    """The ``open`` of the compression ``path`` is in, by its magic bytes (not its suffix: users rename files);
    None for a plain file. A zip archive, which may hold many files, is refused in one line."""
    with open(path, "rb") as f:
        head = f.read(10)
    if head.startswith(b"PK\x03\x04"):
        if _numpy_archive(path):
            raise GraphError(one_line(path, "a NumPy .npz archive, not a text file: --format npz reads "
                                            "gnn-benchmark's (PyG's CitationFull, Amazon, Coauthor)"))
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


def _numpy_archive(path: Path) -> bool:
    """Whether the zip archive ``path`` is numpy's ``.npz``: every member an ``.npy``."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return bool(names) and all(name.endswith(".npy") for name in names)


def open_text(path: Path) -> TextIO:
    # errors="replace" turns binary garbage into an unparsable token that the line scanner can point at, instead
    # of a UnicodeDecodeError with no line number. utf-8-sig drops the byte order mark some editors put first,
    # which would otherwise glue onto the first token.
    opener = decompressor(path) or open
    return opener(path, "rt", encoding="utf-8-sig", errors="replace")


def numpy_opens(path: Path) -> bool:
    """Whether ``np.loadtxt`` given the path itself would read the file as :func:`open_text` does: numpy decompresses
    by suffix, mggcn by content, so only where the two agree. Numpy reads a path in blocks, an open file line by
    line (a compressed one several times slower)."""
    opener = decompressor(path)
    return _NUMPY_SUFFIXES.get(path.suffix.lower()) is opener if opener else path.suffix.lower() not in (
        ".gz", ".bz2", ".xz", ".lzma")


def present_prefixes(path: Path, prefixes: Sequence[str]) -> list[str]:
    """Those of ``prefixes`` (comment marks) that occur anywhere in the text of ``path``, in their order. Numpy
    strips one single-character comment mark while it parses, in C, but several line by line in Python (5x
    slower): a reader passes only the marks a file holds, usually one or none."""
    if len(prefixes) <= 1:
        return list(prefixes)
    wanted = [p.encode() for p in prefixes]
    found: set[bytes] = set()
    overlap = max(map(len, wanted)) - 1  # a mark cut by a block's end is whole in the next block with this tail
    tail = b""
    with (decompressor(path) or open)(path, "rb") as f:
        while len(found) < len(wanted) and (block := f.read(_SCAN_BLOCK)):
            text = tail + block
            found.update(w for w in wanted if w in text)
            tail = text[len(text) - overlap:] if overlap else b""
    return [p for p, w in zip(prefixes, wanted) if w in found]
