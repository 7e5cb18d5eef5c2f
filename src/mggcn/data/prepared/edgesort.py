"""Out-of-core building blocks of ``mggcn prepare``: edges in any order in, CSR arrays out, in bounded memory.

* :class:`EdgeSorter` takes edge chunks in any order and appends each edge to a bucket file chosen by its target
  (the in-CSR, rows of A) and by its source (the out-CSR, rows of Aᵀ); a bucket is a range of vertex ids whose edges
  fit the memory budget. :meth:`EdgeSorter.finish` then sorts the buckets one at a time, in vertex order, drops
  duplicates when asked, and streams the CSR arrays out. A bucket that comes out larger than planned (skewed
  degrees) is split again by narrower ranges, on disk, before it is sorted.
* :class:`EdgeSpill` keeps a stream of edges on disk when the vertex count is only known at its end (an edge list
  without ``num_nodes``): the bucket ranges need ``n``.
* :class:`NpyWriter` writes a ``.npy`` file row chunk by row chunk, hashing the data (sha256) as it goes.

Nothing here imports torch: preparation runs in processes with little address space (see tests/data/test_prepared.py).

Memory: about :data:`CHUNK_BYTES_PER_EDGE` per edge of an input chunk and :data:`SORT_BYTES_PER_EDGE` per edge of a
bucket being sorted, plus O(n) per-vertex arrays. Disk: 8 bytes per edge and view in the buckets (16 when n >= 2^31).

Legend: n = vertices, E = edges, k = edges of a chunk, b = edges of a bucket, w = vertex ids per bucket.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from mggcn.data.csr import index_dtype
from mggcn.utils.progress import Progress

__all__ = ["CHUNK_BYTES_PER_EDGE", "SORT_BYTES_PER_EDGE", "EdgeSorter", "EdgeSpill", "NpyWriter",
           "SortedCSR"]

# Peak bytes per edge, measured with tracemalloc (tests/data/test_prepared.py checks the bounds): an input chunk of k
# edges becomes 2k with the reverse edges; each view then needs bucket ids, a sort order and the packed pairs.
CHUNK_BYTES_PER_EDGE = 96
# A bucket of b edges: the packed pairs read back, the int64 sort key, the decoded rows and columns, two masks.
SORT_BYTES_PER_EDGE = 48


# ------------------------------------------------------------------------------------------------------ progress


# ------------------------------------------------------------------------------------------------------ .npy output


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    return buf.getvalue()


class NpyWriter:
    """A C-order ``.npy`` file written in row chunks; the row count goes into the header when it is closed.

    ``sha256`` is over the data bytes (everything after the header), so a reader can check it from a memory map.
    """

    def __init__(self, path: Path, dtype: np.dtype | type, row_shape: tuple[int, ...] = (),
                 checksum: bool = True) -> None:
        self.path, self.dtype, self.row_shape = Path(path), np.dtype(dtype), tuple(row_shape)
        self.rows = 0
        self._hash = hashlib.sha256() if checksum else None
        # numpy pads the header so that the first dimension can grow to 21 digits at the same length.
        self._header_len = len(_npy_header(self.dtype, (0, *self.row_shape)))
        self._file = open(self.path, "wb")
        self._file.write(b"\0" * self._header_len)

    def write(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path.name}: rows of shape {rows.shape[1:]}, expected {self.row_shape}")
        data = memoryview(rows).cast("B")
        if self._hash is not None:
            self._hash.update(data)
        self._file.write(data)
        self.rows += rows.shape[0]

    def close(self) -> dict:
        """Finish the file; returns its manifest record ``{file, dtype, shape, sha256}`` (no ``sha256`` when it was
        written without one)."""
        shape = (self.rows, *self.row_shape)
        header = _npy_header(self.dtype, shape)
        assert len(header) == self._header_len, "the .npy header grew"
        self._file.seek(0)
        self._file.write(header)
        self._file.close()
        record = {"file": self.path.name, "dtype": self.dtype.str, "shape": list(shape)}
        if self._hash is not None:
            record["sha256"] = self._hash.hexdigest()
        return record

    def abort(self) -> None:
        self._file.close()


# ------------------------------------------------------------------------------------------------------ edge spill


class EdgeSpill:
    """Edges kept on disk as int64 pairs while their vertex count is not known yet (O(1) memory)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.count, self.max_id = 0, -1
        self._file = open(self.path, "wb")

    def add(self, ei: np.ndarray) -> None:
        if ei.shape[1]:
            self.max_id = max(self.max_id, int(ei.max()))
            np.ascontiguousarray(ei.T, dtype=np.int64).tofile(self._file)
            self.count += ei.shape[1]

    def chunks(self, chunk_edges: int) -> Iterator[np.ndarray]:
        """The edges again, ``int64 [2, <= chunk_edges]`` at a time, in the order they were added."""
        self._file.close()
        with open(self.path, "rb") as f:
            for _ in range(0, self.count, chunk_edges):
                yield np.fromfile(f, dtype=np.int64, count=2 * chunk_edges).reshape(-1, 2).T

    def close(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------------ edge sorter


@dataclass
class SortedCSR:
    """What :meth:`EdgeSorter.finish` wrote and counted.

    ``hat_nnz_in[v]`` / ``hat_nnz_out[v]`` are the nonzeros of row v of Â / Âᵀ: distinct neighbours other than v,
    plus the unit self loop. ``arrays`` holds the manifest records of the files written.
    """

    num_edges: int
    self_loops: int
    arrays: dict[str, dict]
    hat_nnz_in: np.ndarray
    hat_nnz_out: np.ndarray


class _Buckets:
    """Bucket files of (row vertex, column vertex) pairs, one per range of ``width`` rows of ``[lo, hi)``."""

    def __init__(self, name: str, workdir: Path, lo: int, hi: int, num_buckets: int, dtype: np.dtype) -> None:
        self.name, self.workdir, self.lo, self.hi, self.dtype = name, workdir, lo, hi, dtype
        self.width = max(1, -(-(hi - lo) // num_buckets))
        self.num_buckets = max(1, -(-(hi - lo) // self.width))
        self.sizes = np.zeros(self.num_buckets, dtype=np.int64)

    def path(self, b: int) -> Path:
        return self.workdir / f"{self.name}.{b:06d}"

    def rows(self, b: int) -> tuple[int, int]:
        return self.lo + b * self.width, min(self.hi, self.lo + (b + 1) * self.width)

    def scatter(self, row: np.ndarray, col: np.ndarray) -> None:
        """Append each pair to the bucket of its row."""
        if self.num_buckets == 1:
            self._append(0, np.stack([row, col], axis=1).astype(self.dtype))
            return
        bucket = ((row - self.lo) // self.width).astype(np.int32)
        order = np.argsort(bucket, kind="stable")
        counts = np.bincount(bucket, minlength=self.num_buckets)
        del bucket
        pairs = np.empty((row.shape[0], 2), dtype=self.dtype)
        pairs[:, 0] = row[order]
        pairs[:, 1] = col[order]
        del order
        begin = 0
        for b in np.flatnonzero(counts):
            end = begin + int(counts[b])
            self._append(int(b), pairs[begin:end])
            begin = end

    def _append(self, b: int, pairs: np.ndarray) -> None:
        # Opened per write: the bucket count may exceed the open-file limit, and writes are large anyway.
        with open(self.path(b), "ab") as f:
            pairs.tofile(f)
        self.sizes[b] += pairs.shape[0]


class EdgeSorter:
    """Build the in-CSR (rows = targets) and out-CSR (rows = sources) of a graph from edge chunks in any order.

    Args:
        workdir: where the bucket files go (removed as they are consumed).
        num_nodes: ``n``; every id must be in ``[0, n)`` (callers check).
        num_edges: how many edges :meth:`add` will receive, at most (sizes the buckets; a wrong guess costs time,
            not correctness).
        undirected: every edge in both directions (with ``dedup``, as the writer asks, PyG's ``to_undirected``).
            The graph is then symmetric and only the in-CSR is built (the out-CSR is the same array).
        dedup: keep one copy of each (source, target) pair.
        bucket_edges: the most edges a bucket may hold for sorting in memory.
    """

    def __init__(self, workdir: Path, num_nodes: int, num_edges: int, *, undirected: bool = False,
                 dedup: bool = False, bucket_edges: int = 1 << 24, progress: Progress | None = None) -> None:
        self.workdir, self.n = Path(workdir), num_nodes
        self.undirected, self.dedup = undirected, dedup
        self.bucket_edges = max(1, bucket_edges)
        self.progress = progress or Progress(quiet=True)
        self.dtype = index_dtype(num_nodes)
        emitted = num_edges * (2 if undirected else 1)
        # Planned at 80% of the bound: random fluctuation alone must not push a bucket over it (and into a re-split).
        buckets = max(1, min(num_nodes, math.ceil(1.25 * emitted / self.bucket_edges)))
        self.views = [_Buckets("in", self.workdir, 0, num_nodes, buckets, self.dtype)]
        if not undirected:
            self.views.append(_Buckets("out", self.workdir, 0, num_nodes, buckets, self.dtype))
        self.added = 0

    @property
    def symmetric(self) -> bool:
        return self.undirected

    def add(self, ei: np.ndarray) -> None:
        """Add ``int64 [2, k]`` edges (row 0 source, row 1 target)."""
        src, dst = ei[0], ei[1]
        if self.undirected:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        self.views[0].scatter(dst, src)
        if len(self.views) > 1:
            self.views[1].scatter(src, dst)
        self.added += ei.shape[1]

    def finish(self, outdir: Path) -> SortedCSR:
        """Sort every bucket and write ``in_indptr``, ``in_indices``, ``degree`` (and ``out_indptr``,
        ``out_indices`` unless symmetric) as ``.npy`` files in ``outdir``.

        ``degree[v]`` is what :func:`mggcn.nn.norm.normalize` divides by: v's in-edges other than self loops, parallel
        edges counted, plus one for the unit self loop.
        """
        arrays: dict[str, dict] = {}
        hat: dict[str, np.ndarray] = {}
        num_edges = self_loops = 0
        total = int(sum(int(v.sizes.sum()) for v in self.views))
        with self.progress.step("sorting edge buckets", total) as step:
            for view in self.views:
                writers = {"indptr": NpyWriter(outdir / f"{view.name}_indptr.npy", np.int64),
                           "indices": NpyWriter(outdir / f"{view.name}_indices.npy", self.dtype)}
                if view.name == "in":
                    writers["degree"] = NpyWriter(outdir / "degree.npy", np.int64)
                try:
                    writers["indptr"].write(np.zeros(1, dtype=np.int64))
                    offset = 0
                    hat_nnz = np.empty(self.n, dtype=np.int64)
                    for b in range(view.num_buckets):
                        for lo, hi, rows in self._sorted_ranges(view, b):
                            writers["indptr"].write(offset + np.cumsum(rows.counts))
                            writers["indices"].write(rows.cols)
                            if "degree" in writers:
                                writers["degree"].write(rows.degree)
                            hat_nnz[lo:hi] = rows.hat_nnz
                            offset += int(rows.cols.shape[0])
                            if view.name == "in":
                                self_loops += rows.self_loops
                        step.update(int(view.sizes[b]))
                except BaseException:
                    for w in writers.values():
                        w.abort()
                    raise
                for key, w in writers.items():
                    arrays[key if key == "degree" else f"{view.name}_{key}"] = w.close()
                hat[view.name] = hat_nnz
                if view.name == "in":
                    num_edges = offset
        return SortedCSR(num_edges, self_loops, arrays, hat["in"], hat.get("out", hat["in"]))

    def _sorted_ranges(self, buckets: _Buckets, b: int) -> Iterator[tuple[int, int, _SortedRows]]:
        """``(lo, hi, rows)`` for consecutive row ranges covering bucket ``b``, from its pairs (then deleted)."""
        path, size = buckets.path(b), int(buckets.sizes[b])
        lo, hi = buckets.rows(b)
        if size == 0:
            yield lo, hi, _empty_rows(hi - lo, self.dtype)
            return
        if size <= self.bucket_edges or hi - lo == 1:
            # No other reference to the pairs: _sort_rows frees them once it has built its sort key.
            yield lo, hi, _sort_rows(_read_and_remove(path, self.dtype), lo, hi, self.n, self.dedup, self.dtype)
            return
        # Skewed degrees put more edges here than planned: split by narrower row ranges on disk, then sort each.
        sub = _Buckets(f"{path.name}.", self.workdir, lo, hi, math.ceil(1.25 * size / self.bucket_edges), self.dtype)
        with open(path, "rb") as f:
            while True:
                pairs = np.fromfile(f, dtype=self.dtype, count=2 * self.bucket_edges).reshape(-1, 2)
                if not pairs.shape[0]:
                    break
                sub.scatter(pairs[:, 0].astype(np.int64), pairs[:, 1])
        path.unlink()
        for s in range(sub.num_buckets):
            yield from self._sorted_ranges(sub, s)


def _read_and_remove(path: Path, dtype: np.dtype) -> np.ndarray:
    pairs = np.fromfile(path, dtype=dtype).reshape(-1, 2)
    path.unlink()
    return pairs


class _SortedRows(NamedTuple):
    """A range of CSR rows: per row the stored edges (``counts``), the normalization degree and the nonzeros of
    that row of Â; the columns row by row in increasing order; the number of self loops among them."""

    counts: np.ndarray
    cols: np.ndarray
    degree: np.ndarray
    hat_nnz: np.ndarray
    self_loops: int


def _empty_rows(rows: int, dtype: np.dtype) -> _SortedRows:
    zeros = np.zeros(rows, dtype=np.int64)
    return _SortedRows(zeros, np.empty(0, dtype=dtype), zeros + 1, zeros + 1, 0)


def _sort_rows(pairs: np.ndarray, lo: int, hi: int, n: int, dedup: bool, dtype: np.dtype) -> _SortedRows:
    """Sort the ``(row, col)`` pairs of rows ``[lo, hi)`` (and drop repeated pairs when ``dedup``)."""
    width = hi - lo
    local = pairs[:, 0].astype(np.int64)
    local -= lo
    if width * n < 2**63:
        key = local * n
        key += pairs[:, 1]
        del local, pairs
        key.sort()
        distinct = np.empty(key.shape[0], dtype=bool)
        distinct[:1] = True
        np.not_equal(key[1:], key[:-1], out=distinct[1:])
        if dedup:
            key = key[distinct]
            distinct = None
        row = key // n
        key -= row * n  # key now holds the columns
        col = key
    else:  # ids too large for one int64 key: a (slower) two-key sort
        col = pairs[:, 1].astype(np.int64)
        order = np.lexsort((col, local))
        row, col = local[order], col[order]
        distinct = np.ones(row.shape[0], dtype=bool)
        distinct[1:] = (row[1:] != row[:-1]) | (col[1:] != col[:-1])
        if dedup:
            row, col, distinct = row[distinct], col[distinct], None
    counts = np.bincount(row, minlength=width)
    loop = col == row + lo
    loops = int(np.count_nonzero(loop))
    degree = counts - np.bincount(row[loop], minlength=width) + 1
    keep = ~loop if distinct is None else distinct & ~loop
    hat_nnz = np.bincount(row[keep], minlength=width) + 1
    return _SortedRows(counts, col.astype(dtype), degree, hat_nnz, loops)
