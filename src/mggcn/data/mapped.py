"""Rows of memory-mapped ``.npy`` arrays, copied out through the page cache without mapping the file's pages.

A rank reads its rows of a prepared dataset's arrays (:mod:`mggcn.distributed.sharding`): scattered byte ranges of
files far larger than its share. Touching a memory map at those places would make most of each file resident in
the process (every fault maps its neighbours too); ``preadv`` copies only the ranges. Ranges that lie next to each
other in the file, or a small gap apart, are read by one call (the gap into scratch memory and dropped): a rank's
rows in increasing vertex id (the ``random-local`` and ``none`` orderings) then take a handful of calls per chunk,
not one per row.

Arrays in memory (and maps ``preadv`` cannot read) are indexed instead, and :func:`drop_pages` takes a map's
pages read so far back out of the process's resident set.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np

from mggcn.data.graph import GraphError

__all__ = ["MERGE_GAP_BYTES", "drop_pages", "file_of", "gather", "pread", "read_rows"]

# two ranges at most this far apart in a file are read by one call: copying a gap this size through the page cache
# costs about what a system call does
MERGE_GAP_BYTES = 1 << 14


def drop_pages(arr: Any) -> None:
    """Take the pages of a memory-mapped array read so far out of this process's resident set (they stay in the
    page cache, and a later read maps them again): a rank's RSS then holds what it copied out of the files, not the
    files. A no-op for arrays that are not mapped, and where ``madvise`` is missing."""
    while arr is not None and not isinstance(getattr(arr, "_mmap", None), mmap.mmap):
        arr = getattr(arr, "base", None)
    if arr is not None and hasattr(mmap, "MADV_DONTNEED"):
        arr._mmap.madvise(mmap.MADV_DONTNEED)


def file_of(arr: Any) -> tuple[str, int] | None:
    """``(path, byte offset)`` of a C-contiguous memory-mapped ``.npy`` array (``np.load(..., mmap_mode="r")``),
    None for an array in memory."""
    if isinstance(arr, np.memmap) and arr.filename and arr.flags.c_contiguous and hasattr(os, "preadv"):
        return arr.filename, int(arr.offset)
    return None


def _joined(gaps: np.ndarray, budget: int) -> np.ndarray:
    """Which gaps between consecutive ranges (in file order) one read spans: those of 0 to :data:`MERGE_GAP_BYTES`
    bytes, the smallest first, while the bytes read for nothing stay within ``budget``."""
    joined = (gaps >= 0) & (gaps <= MERGE_GAP_BYTES)
    if int(gaps[joined].sum()) > budget:
        cand = np.flatnonzero(joined)
        cand = cand[np.argsort(gaps[cand], kind="stable")]
        joined[cand[np.cumsum(gaps[cand]) > budget]] = False
    return joined


def _read_into(fd: int, path: str, view: memoryview, position: int) -> None:
    """All of ``view`` from byte ``position`` of the open file (a call may return less than asked)."""
    at = 0
    while at < len(view):
        got = os.preadv(fd, [view[at:]], position + at)
        if got <= 0:
            raise GraphError(f"{path}: shorter than its header says")
        at += got


def pread(path: str, offset: int, out: np.ndarray, starts: np.ndarray, sizes: np.ndarray, unit: int) -> None:
    """Fill ``out`` with the byte ranges ``[offset + start, + size)`` of ``path``, one after the other.

    ``unit`` divides every start and size (an item or a row). Ranges are read in file order, neighbours and those
    a small gap apart by one call (:func:`_joined`, at most as many bytes of gaps as of ranges); straight into
    ``out`` when that keeps their order and no gap is read, else into scratch memory and gathered from it.
    """
    starts, sizes = np.asarray(starts, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
    if starts.size == 0:
        return
    order = None if bool((starts[1:] >= starts[:-1]).all()) else np.argsort(starts, kind="stable")
    s, z = (starts, sizes) if order is None else (starts[order], sizes[order])
    ends = s + z
    gaps = s[1:] - ends[:-1]
    joined = _joined(gaps, int(z.sum()))
    heads = np.flatnonzero(np.concatenate(([True], ~joined)))
    lo, hi = s[heads], ends[np.append(heads[1:] - 1, s.size - 1)]
    direct = order is None and not bool(gaps[joined].any())
    dest = out.reshape(-1).view(np.uint8) if direct else np.empty(int((hi - lo).sum()), dtype=np.uint8)
    view, at = memoryview(dest), 0
    fd = os.open(path, os.O_RDONLY)
    try:
        for first, last in zip(lo.tolist(), hi.tolist()):
            _read_into(fd, path, view[at:at + last - first], offset + first)
            at += last - first
    finally:
        os.close(fd)
    if direct:
        return
    run_at = np.cumsum(hi - lo) - (hi - lo)  # where each run begins in the scratch
    src = np.repeat(run_at - lo, np.diff(np.append(heads, s.size))) + s  # where each range begins there, file order
    if order is not None:
        src[order] = src.copy()
    unit_t = np.dtype((np.void, unit))
    index = np.repeat((src - (np.cumsum(sizes) - sizes)) // unit, sizes // unit)
    index += np.arange(index.size, dtype=np.int64)
    out.reshape(-1).view(np.uint8).view(unit_t)[:] = dest.view(unit_t)[index]


def read_rows(arr: Any, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Rows ``ids`` of a vertex array (``arr[ids]``, into ``out`` if given, C-contiguous), read without mapping
    the file's pages when it is mapped."""
    where = file_of(arr)
    if where is None or arr.ndim != 2:
        if out is None:
            return np.asarray(arr[ids])
        out[...] = arr[ids]
        return out
    if out is None:
        out = np.empty((ids.size, *arr.shape[1:]), dtype=arr.dtype)
    row = arr.strides[0]
    pread(*where, out, ids.astype(np.int64) * row, np.full(ids.size, row, dtype=np.int64), row)
    return out


def gather(indices: Any, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The CSR rows starting at ``starts`` (``counts`` long), concatenated, read from ``indices`` (a memory map, read
    with :func:`pread`, or an array), in ``indices``' own dtype."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=indices.dtype)
    where = file_of(indices)
    if where is not None:
        out = np.empty(total, dtype=indices.dtype)
        item = indices.dtype.itemsize
        pread(*where, out, starts.astype(np.int64) * item, counts.astype(np.int64) * item, item)
        return out
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    offsets += np.arange(total, dtype=np.int64)
    return np.asarray(indices[offsets])
