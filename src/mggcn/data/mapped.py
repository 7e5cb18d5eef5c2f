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

from mggcn.utils.errors import GraphError

__all__ = ["MERGE_GAP_BYTES", "SCRATCH_BYTES", "drop_pages", "file_of", "gather", "pread", "read_rows"]

# two ranges at most this far apart in a file are read by one call: copying a gap this size through the page cache
# costs about what a system call does
MERGE_GAP_BYTES = 1 << 14
SCRATCH_BYTES = 1 << 18  # read into scratch memory at a time: under the allocator's mmap threshold, so it is reused


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
    None for an array in memory, or a view of a map (``mm[10:]``: numpy gives it its parent's ``offset``, and it is
    read as any array)."""
    if (isinstance(arr, np.memmap) and isinstance(arr.base, mmap.mmap) and arr.filename and arr.flags.c_contiguous
            and hasattr(os, "preadv")):
        return arr.filename, int(arr.offset)
    return None


def _read_into(fd: int, path: str, view: memoryview, position: int) -> None:
    """All of ``view`` from byte ``position`` of the open file (a call may return less than asked)."""
    at = 0
    while at < len(view):
        got = os.preadv(fd, [view[at:]], position + at)
        if got <= 0:
            raise GraphError(f"{path}: shorter than its header says")
        at += got


def _read_scattered(fd: int, path: str, offset: int, out: np.ndarray, ranges: tuple[np.ndarray, ...],
                    runs: tuple[np.ndarray, ...], unit: int) -> None:
    """The runs of :func:`pread` read into scratch memory :data:`SCRATCH_BYTES` at a time, each range then copied
    to its place in ``out``. ``ranges``: start, size and place in ``out`` of each range, in file order; ``runs``:
    the first range of each run, its first and its last byte."""
    s, z, d = ranges
    heads, lo, hi = runs
    unit_t = np.dtype((np.void, unit))
    out_u = out.reshape(-1).view(np.uint8).view(unit_t)
    size = hi - lo
    cuts = np.flatnonzero(np.diff((np.cumsum(size) - size) // SCRATCH_BYTES)) + 1
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), heads.size]):
        scratch = np.empty(int(size[a:b].sum()), dtype=np.uint8)
        view, at = memoryview(scratch), 0
        for first, last in zip(lo[a:b].tolist(), hi[a:b].tolist()):
            _read_into(fd, path, view[at:at + last - first], offset + first)
            at += last - first
        p0, p1 = int(heads[a]), int(heads[b]) if b < heads.size else s.size
        run_at = np.cumsum(size[a:b]) - size[a:b]
        src = np.repeat(run_at - lo[a:b], np.diff(np.append(heads[a:b], p1))) + s[p0:p1]  # in the scratch
        n = z[p0:p1] // unit
        step = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        out_u[np.repeat(d[p0:p1] // unit, n) + step] = scratch.view(unit_t)[np.repeat(src // unit, n) + step]


def pread(path: str, offset: int, out: np.ndarray, starts: np.ndarray, sizes: np.ndarray, unit: int) -> None:
    """Fill ``out`` with the byte ranges ``[offset + start, + size)`` of ``path``, one after the other.

    ``unit`` divides every start and size (an item or a row). The ranges are read in file order, in runs: ranges
    that touch, or lie at most :data:`MERGE_GAP_BYTES` apart, are read by one call. A run lands straight in
    ``out`` when it holds no gap and the ranges come in file order, else in scratch memory, from which its ranges
    are copied to their places.
    """
    starts, sizes = np.asarray(starts, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
    if starts.size == 0:
        return
    order = None if bool((starts[1:] >= starts[:-1]).all()) else np.argsort(starts, kind="stable")
    place = np.cumsum(sizes) - sizes
    s, z, d = (starts, sizes, place) if order is None else (starts[order], sizes[order], place[order])
    ends = s + z
    gaps = s[1:] - ends[:-1]
    joined = (gaps >= 0) & (gaps <= MERGE_GAP_BYTES)
    heads = np.flatnonzero(np.concatenate(([True], ~joined)))
    lo, hi = s[heads], ends[np.append(heads[1:] - 1, s.size - 1)]
    fd = os.open(path, os.O_RDONLY)
    try:
        if order is None and not bool(gaps[joined].any()):
            view = memoryview(out.reshape(-1).view(np.uint8))
            for first, last, at in zip(lo.tolist(), hi.tolist(), d[heads].tolist()):
                _read_into(fd, path, view[at:at + last - first], offset + first)
        else:
            _read_scattered(fd, path, offset, out, (s, z, d), (heads, lo, hi), unit)
    finally:
        os.close(fd)


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
