"""The prepared dataset: a directory of ``.npy`` arrays that each rank memory-maps, reading only its own rows.

``mggcn prepare`` (:func:`mggcn.data.prepared.writer.prepare`) writes it once from any source; ``mggcn train DIR --nprocs P`` then
works for every P from the same directory, and a rank's host memory grows with its share of the graph, not with the
whole graph. Layout, format version :data:`FORMAT_VERSION` (n vertices, E edges, F features; ids are original ids):

================  =================  ================================================================================
file              dtype, shape       content
================  =================  ================================================================================
manifest.json                        sizes, split sizes, how it was built, the arrays with their sha256 (written last)
in_indptr.npy     int64 [n+1]        CSR of A by TARGET: the sources of v's in-edges are
in_indices.npy    int32|int64 [E]    ``in_indices[in_indptr[v]:in_indptr[v+1]]``, sorted; parallel edges repeated,
                                     self loops kept as given (int64 ids only when n >= 2^31)
out_indptr.npy    int64 [n+1]        CSR of A by SOURCE (rows of Aᵀ, for the backward pass); absent when the graph
out_indices.npy   int32|int64 [E]    is symmetric (``"symmetric": true``): the in_ files then serve both
degree.npy        int64 [n]          in-edges of v other than self loops, parallel edges counted, plus one: the row
                                     sums of A + I that :func:`mggcn.nn.norm.normalize` divides by
features.npy      float32 [n, F]
labels.npy        int64 [n]          ``-1`` = unlabelled
split.npy         int8 [n]           0 train, 1 val, 2 test, -1 none
================  =================  ================================================================================

Checksums are the sha256 of each array's data bytes (after the ``.npy`` header), computed while writing. Nothing in
the directory is trusted, but only the cheap things are checked always: opening checks every manifest field (typed,
in range, array paths relative and inside the directory), every file there of the size its header and the manifest
say, the CSR end points, and the split sizes against the split codes (one byte per vertex); building a rank's shard
checks what that rank reads (its rows' labels, split codes, features, degrees against their in-edges, row offsets
and neighbour ids, and under ``"symmetric": true`` that its diagonal block equals its transpose), so that together
the ranks check every row. ``verify=True`` (``mggcn info --verify``) also checks the checksums, every value, and a
symmetric claim over every edge.

A rank's shard (:meth:`PreparedDataset.shard`) reads, by memory map: its rows of both CSRs, the degree of those rows
and of their neighbours, and its rows of features, labels and split; it equals, entry for entry and bit for bit,
what :func:`mggcn.distributed.partition.build_shard` cuts from the whole graph in memory.

This module does not import torch until a shard is built (the writer runs under tight memory limits).

Legend: n = vertices, E = edges, F = features, m = rows of a rank, P = ranks.
"""

from __future__ import annotations

import hashlib
import json
import mmap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mggcn.data.graph import SPLITS, GraphError
from mggcn.data.prepared.edgesort import index_dtype

if TYPE_CHECKING:
    from mggcn.distributed.partition import Partition, Shard

__all__ = ["FORMAT_VERSION", "MANIFEST", "BALANCE_PARTS", "PreparedDataset", "is_prepared", "nnz_per_rank",
           "describe"]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
FORMAT_NAME = "mggcn-prepared"
BALANCE_PARTS = (1, 2, 4, 8)
_VERIFY_ROWS = 1 << 22  # rows (or edges) checked per step by verify
_SHARD_CHUNK_EDGES = 1 << 20  # edges a rank reads at a time while building its shard


def is_prepared(path: Any) -> bool:
    """Whether ``path`` is a directory holding a ``manifest.json`` (a prepared dataset, or a damaged one)."""
    try:
        return (Path(path) / MANIFEST).is_file()
    except (TypeError, OSError):
        return False


def nnz_per_rank(row_nnz: np.ndarray, num_parts: int, seed: int = 0) -> np.ndarray:
    """Nonzeros of each rank's row block under :func:`mggcn.distributed.partition.make_partition`'s random permutation.

    Rank i holds positions ``[i·m, (i+1)·m)`` of ``permutation(n)`` (padding rows are empty).
    """
    n = row_nnz.shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    m = -(-n // num_parts)
    return np.bincount(np.arange(n) // m, weights=row_nnz[perm], minlength=num_parts).astype(np.int64)


def _err(path: Path, msg: str) -> GraphError:
    return GraphError(" ".join(f"{path}: {msg}".split()))


def _read_manifest(path: Path) -> dict:
    file = path / MANIFEST
    if not path.is_dir():
        raise _err(path, "no such directory" if not path.exists() else "not a directory")
    if not file.is_file():
        raise _err(file, "missing file: not a prepared dataset (make one with `mggcn prepare`)")
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise _err(file, f"line {exc.lineno}: invalid JSON ({exc.msg}); the directory is damaged, prepare it again") \
            from None
    except RecursionError:
        raise _err(file, "invalid JSON (nested too deep); the directory is damaged, prepare it again") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _err(file, f"unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise _err(file, f"not a manifest of a prepared mggcn dataset (no \"format\": \"{FORMAT_NAME}\")")
    version = manifest.get("format_version")
    if not _is_int(version) or version < 1:
        raise _err(file, f"format_version {version!r} is not a positive integer")
    if version > FORMAT_VERSION:
        raise _err(file, f"format version {version} is newer than this mggcn reads (up to {FORMAT_VERSION}); "
                         "upgrade mggcn, or prepare the dataset again with this version")
    _check_manifest(file, manifest)
    return manifest


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_manifest(file: Path, m: dict) -> None:
    """Every field the reader and ``mggcn info`` use: typed and in range, before anything trusts it."""
    for key, low in (("num_nodes", 1), ("num_edges", 0), ("num_features", 1), ("num_classes", 1)):
        if not _is_int(m.get(key)) or m[key] < low:
            raise _err(file, f"{key} {m.get(key)!r} is not an integer of at least {low}")
    n = m["num_nodes"]
    if m["num_classes"] > n:
        raise _err(file, f"num_classes {m['num_classes']} exceeds the {n} vertices")
    for key in ("self_loops", "nnz_hat", "num_labelled"):
        if key in m and (not _is_int(m[key]) or m[key] < 0):
            raise _err(file, f"{key} {m[key]!r} is not a non-negative integer")
    for key, kind in (("symmetric", bool), ("name", str), ("built", dict)):
        if key in m and not isinstance(m[key], kind):
            raise _err(file, f"{key} {m[key]!r} is not a JSON {'boolean' if kind is bool else kind.__name__}")
    sizes = m.get("split_sizes")
    if not isinstance(sizes, dict) or not all(_is_int(sizes.get(s)) and 0 <= sizes[s] <= n for s in SPLITS):
        raise _err(file, f"split_sizes {sizes!r} are not integers in [0, {n}] for {', '.join(SPLITS)}")
    if sum(sizes[s] for s in SPLITS) > n:
        raise _err(file, f"split_sizes {sizes} add up to more than the {n} vertices")
    arrays = m.get("arrays")
    if not isinstance(arrays, dict):
        raise _err(file, "no \"arrays\" record")
    for name, record in arrays.items():
        if not isinstance(record, dict) or not isinstance(record.get("file"), str):
            raise _err(file, f"the record of the array {name!r} has no \"file\"")
        rel = Path(record["file"])
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise _err(file, f"the array {name!r} is at {record['file']!r}: array files must be named relative to "
                             "the directory and inside it")
        if "sha256" in record and not isinstance(record["sha256"], str):
            raise _err(file, f"the checksum of the array {name!r} is not a string")
    balance = m.get("balance", {})
    ok = isinstance(balance, dict) and all(
        isinstance(p, str) and p.isdigit() and int(p) >= 1 and isinstance(r, dict)
        and all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) and r[k] >= 0
                for k in ("adj_max", "adj_t_max", "mean"))
        for p, r in balance.items())
    if not ok:
        raise _err(file, "the \"balance\" record is not {P: {adj_max, adj_t_max, mean}} with numbers")


def _sha256(arr: np.ndarray) -> str:
    h = hashlib.sha256()
    flat = arr.reshape(-1).view(np.uint8) if arr.size else np.empty(0, np.uint8)
    step = 1 << 26
    for begin in range(0, flat.shape[0], step):
        h.update(flat[begin:begin + step])
    return h.hexdigest()


def _drop_pages(arr: np.ndarray) -> None:
    """Take the pages of a memory-mapped array read so far out of this process's resident set (they stay in the
    page cache, and a later read maps them again): a rank's RSS then holds what it copied out of the files, not the
    files. A no-op for arrays that are not mapped, and where ``madvise`` is missing."""
    while arr is not None and not isinstance(getattr(arr, "_mmap", None), mmap.mmap):
        arr = getattr(arr, "base", None)
    if arr is not None and hasattr(mmap, "MADV_DONTNEED"):
        arr._mmap.madvise(mmap.MADV_DONTNEED)


_ROWS_PER_READ = 1 << 14  # vertex rows copied out of a mapped array between two _drop_pages


def _gather(indices: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The CSR rows starting at ``starts`` (``counts`` long), concatenated, read from the memory map ``indices``."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    offsets += np.arange(total, dtype=np.int64)
    return np.asarray(indices[offsets]).astype(np.int64, copy=False)


def _pair_hash(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A 64-bit mix (splitmix64's finalizer) of the pairs ``(a, b)``; sums of it compare multisets of pairs."""
    with np.errstate(over="ignore"):
        z = a * np.uint64(0x9E3779B97F4A7C15) + b * np.uint64(0xC2B2AE3D27D4EB4F) + np.uint64(0x165667B19E3779F9)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class PreparedDataset:
    """A prepared dataset directory, implementing :class:`mggcn.data.datasets.Dataset`.

    Args:
        path: the directory ``mggcn prepare`` wrote.
        verify: also check the sha256 of every array and every value (reads everything once); by default only the
            cheap checks run (manifest fields, files present, sizes, CSR end points, split sizes).

    Raises:
        GraphError: naming the file and what is wrong (missing, truncated, wrong shape, checksum mismatch, a manifest
            from a newer format version, ...).

    ``last_shard_reads`` records what the last :meth:`shard` read from the files: ``rows``, ``edges`` (CSR entries
    of both views) and ``bytes`` (all arrays it gathered from the memory maps).
    """

    def __init__(self, path: Any, verify: bool = False) -> None:
        self.path = Path(path)
        self.manifest = m = _read_manifest(self.path)
        self.name = str(m.get("name") or self.path)
        self.num_nodes, self.num_edges = m["num_nodes"], m["num_edges"]
        self.num_features, self.num_classes = m["num_features"], m["num_classes"]
        self.symmetric = m.get("symmetric", False)
        self.split_sizes = {s: m["split_sizes"][s] for s in SPLITS}
        self.last_shard_reads: dict[str, int] = {}
        n, e, f = self.num_nodes, self.num_edges, self.num_features
        ids = index_dtype(n)
        expected = {"in_indptr": (np.int64, (n + 1,)), "in_indices": (ids, (e,)), "degree": (np.int64, (n,)),
                    "features": (np.float32, (n, f)), "labels": (np.int64, (n,)), "split": (np.int8, (n,))}
        if not self.symmetric:
            expected.update(out_indptr=(np.int64, (n + 1,)), out_indices=(ids, (e,)))
        self.arrays = {name: self._open(name, np.dtype(dt), shape) for name, (dt, shape) in expected.items()}
        if self.symmetric:
            self.arrays["out_indptr"], self.arrays["out_indices"] = self.arrays["in_indptr"], self.arrays["in_indices"]
        for view in ("in", "out"):
            indptr = self.arrays[f"{view}_indptr"]
            if int(indptr[0]) != 0 or int(indptr[-1]) != e:
                raise _err(self._file(f"{view}_indptr"), f"corrupt row offsets: they run from {int(indptr[0])} to "
                                                         f"{int(indptr[-1])}, not from 0 to E = {e}")
        self._check_split_sizes()
        if verify:
            self.verify()

    # ------------------------------------------------------------------------------------------------ checks

    def _file(self, name: str) -> Path:
        record = self.manifest["arrays"].get(name)
        if record is None:
            raise _err(self.path / MANIFEST, f"no record of the array '{name}'")
        file = self.path / record["file"]  # relative, without '..' (_check_manifest)
        if not file.resolve().is_relative_to(self.path.resolve()):
            raise _err(file, f"a link to {file.resolve()}, outside the dataset directory {self.path}")
        return file

    def _check_split_sizes(self) -> None:
        """The split sizes divide the loss and the accuracies: count them (one byte per vertex, each code checked)
        instead of trusting the manifest."""
        counts = {s: 0 for s in SPLITS}
        codes = self.arrays["split"]
        for b in range(0, self.num_nodes, _VERIFY_ROWS):
            chunk = np.asarray(codes[b:b + _VERIFY_ROWS]).astype(np.int64)
            bad = (chunk < -1) | (chunk > 2)
            if bad.any():
                raise _err(self._file("split"), f"split code {int(chunk[np.argmax(bad)])} of vertex "
                                                f"{b + int(np.argmax(bad))} is not one of 0, 1, 2, -1")
            found = np.bincount(chunk + 1, minlength=4)
            for k, s in enumerate(SPLITS):
                counts[s] += int(found[k + 1])
        if counts != self.split_sizes:
            raise _err(self.path / MANIFEST, f"split_sizes {self.split_sizes} differ from what "
                                             f"{self._file('split').name} holds: {counts}")

    def _open(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        file = self._file(name)
        if not file.is_file():
            raise _err(file, "missing file" if not file.exists() else "not a regular file")
        try:
            arr = np.load(file, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise _err(file, f"truncated or corrupt .npy file ({' '.join(str(exc).split())[:100]})") from None
        if arr.dtype != dtype or arr.shape != shape:
            raise _err(file, f"holds {arr.dtype} {list(arr.shape)}, expected {dtype} {list(shape)} for the "
                             f"{self.num_nodes} vertices and {self.num_edges} edges of {MANIFEST}")
        size, want = file.stat().st_size, getattr(arr, "offset", 0) + arr.nbytes
        if size != want:
            raise _err(file, f"{'truncated' if size < want else 'too long'}: {size} bytes, the header implies {want}")
        return arr

    def verify(self) -> None:
        """Check every array against its sha256 in the manifest, then every value against the invariants."""
        for name in sorted(set(self.manifest["arrays"]) & set(self.arrays)):
            want = self.manifest["arrays"][name].get("sha256")
            if want != _sha256(self.arrays[name]):
                raise _err(self._file(name), "checksum mismatch (sha256 of the data differs from the manifest): "
                                             "the file is corrupt, prepare the dataset again")
        n, step = self.num_nodes, _VERIFY_ROWS
        for view in ("in", "out"):
            indptr, indices = self.arrays[f"{view}_indptr"], self.arrays[f"{view}_indices"]
            for b in range(0, n, step):
                if (np.diff(indptr[b:b + step + 1]) < 0).any():
                    raise _err(self._file(f"{view}_indptr"), "corrupt row offsets (they decrease)")
            for b in range(0, self.num_edges, step):
                part = indices[b:b + step]
                if part.size and (int(part.min()) < 0 or int(part.max()) >= n):
                    raise _err(self._file(f"{view}_indices"), f"vertex id out of range [0, {n})")
        for b in range(0, n, step):
            rows = slice(b, b + step)
            if not np.isfinite(self.arrays["features"][rows]).all():
                raise _err(self._file("features"), "features contain NaN or inf")
            y, codes = self.arrays["labels"][rows], self.arrays["split"][rows]
            if y.size and (int(y.min()) < -1 or int(y.max()) >= self.num_classes):
                raise _err(self._file("labels"), f"a label is out of range [-1, {self.num_classes})")
            if not np.isin(codes, (-1, 0, 1, 2)).all():
                raise _err(self._file("split"), "a split code is not one of 0, 1, 2, -1")
            if ((codes >= 0) & (y < 0)).any():
                raise _err(self._file("split"), "a vertex in a split has no label")
            if (self.arrays["degree"][rows] < 1).any():
                raise _err(self._file("degree"), "a degree below 1 (the self loop counts one)")
        if self.symmetric:
            self._verify_symmetric()

    def _verify_symmetric(self) -> None:
        """A ``"symmetric": true`` claim, checked over every edge: the multiset of pairs ``(t, s)`` equals that of
        ``(s, t)``, compared by a sum of 64-bit hashes of the pairs (order-free, so it streams)."""
        indptr, indices, step = self.arrays["in_indptr"], self.arrays["in_indices"], _VERIFY_ROWS
        forward = backward = np.uint64(0)
        for b in range(0, self.num_nodes, step):
            ptr = np.asarray(indptr[b:b + step + 1])
            targets = np.repeat(np.arange(b, b + ptr.shape[0] - 1, dtype=np.uint64), np.diff(ptr))
            sources = np.asarray(indices[int(ptr[0]):int(ptr[-1])]).astype(np.uint64)
            forward += _pair_hash(targets, sources).sum(dtype=np.uint64)
            backward += _pair_hash(sources, targets).sum(dtype=np.uint64)
        if forward != backward:
            raise _err(self.path / MANIFEST, "says \"symmetric\": true but the edges of in_indices are not "
                                             "symmetric: prepare the dataset again")

    # ------------------------------------------------------------------------------------------- Dataset API

    def partition(self, num_parts: int, seed: int, ordering: str) -> Partition:
        """The renumbering for ``num_parts`` ranks. ``metis`` reads the whole in-edge CSR (every rank, the same
        result): unlike the shards, it needs the whole graph in memory, ~12 bytes per edge while METIS runs."""
        from mggcn.distributed.partition import make_partition

        if ordering == "metis":
            from mggcn.distributed.metis import metis_partition

            indptr = np.asarray(self.arrays["in_indptr"])
            targets = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(indptr))
            sources = np.asarray(self.arrays["in_indices"]).astype(np.int64)
            return metis_partition(targets, sources, self.num_nodes, num_parts, seed)
        return make_partition(self.num_nodes, num_parts, seed, ordering)

    def shard(self, part: Partition, rank: int, norm: str, tile_cols: int | None = None) -> Shard:
        """Rank ``rank``'s :class:`~mggcn.distributed.partition.Shard`, reading only its rows (and its rows' edges);
        ``tile_cols`` as in :func:`mggcn.distributed.partition.build_shard`."""
        import torch

        from mggcn.config import NORMS

        if norm not in NORMS:
            raise ValueError(f"--norm must be one of {', '.join(NORMS)}, got '{norm}'")
        if part.num_nodes != self.num_nodes:
            raise GraphError(f"{self.path}: a partition of {part.num_nodes} vertices for {self.num_nodes}")
        reads = {"rows": 0, "edges": 0, "bytes": 0}
        first = part.rows(rank).start
        orig = part.order[part.rows(rank)]
        local = np.flatnonzero(orig >= 0)
        ids = orig[local]
        reads["rows"] = int(ids.size)
        m = orig.shape[0]
        degree = np.zeros(m, dtype=np.int64)  # of this rank's rows; padding rows have none
        degree[local] = self.arrays["degree"][ids]
        reads["bytes"] += 8 * ids.size
        x = np.zeros((m, self.num_features), dtype=np.float32)
        y = np.full(m, -1, dtype=np.int64)
        codes = np.full(m, -1, dtype=np.int8)
        for out, name in ((x, "features"), (y, "labels"), (codes, "split")):
            for start in range(0, ids.size, _ROWS_PER_READ):  # copied a chunk at a time, the pages read dropped
                rows = np.asarray(self.arrays[name][ids[start: start + _ROWS_PER_READ]])
                out[local[start: start + _ROWS_PER_READ]] = rows
                reads["bytes"] += rows.nbytes
                _drop_pages(self.arrays[name])
        self._check_rows(ids, degree[local], x[local], y[local], codes[local])
        if self.symmetric:  # the rows of Aᵀ are the rows of A: read once, weighted twice
            row, col, (values, values_t) = self._entries("in", part, first, local, ids, degree, norm, reads,
                                                       both=True)
            adj, adj_t = (self._blocks(row, col, values, part, tile_cols),
                          self._blocks(row, col, values_t, part, tile_cols))
            del row, col, values, values_t
        else:
            row, col, (values,) = self._entries("in", part, first, local, ids, degree, norm, reads)
            adj = self._blocks(row, col, values, part, tile_cols)
            del row, col, values
            row, col, (values,) = self._entries("out", part, first, local, ids, degree, norm, reads)
            adj_t = self._blocks(row, col, values, part, tile_cols)
            del row, col, values
        self.last_shard_reads = reads
        masks = {s: torch.from_numpy(codes == k) for k, s in enumerate(SPLITS)}
        from mggcn.distributed.partition import Shard

        return Shard(rank=rank, partition=part, adj=adj, adj_t=adj_t, x=torch.from_numpy(x),
                     y=torch.from_numpy(y), masks=masks, num_classes=self.num_classes,
                     split_sizes=dict(self.split_sizes))

    def _check_rows(self, ids: np.ndarray, degree: np.ndarray, x: np.ndarray, y: np.ndarray,
                    codes: np.ndarray) -> None:
        """The vertex data of the rows a rank loads, checked as :meth:`verify` checks all of it (together, the
        ranks check every row once)."""
        bad = (y < -1) | (y >= self.num_classes)
        if bad.any():
            v = int(ids[np.argmax(bad)])
            raise _err(self._file("labels"), f"label {int(y[np.argmax(bad)])} of vertex {v} is out of range "
                                             f"[-1, {self.num_classes}) (num_classes of {MANIFEST})")
        bad = ~np.isin(codes, (-1, 0, 1, 2))
        if bad.any():
            raise _err(self._file("split"), f"split code {int(codes[np.argmax(bad)])} of vertex "
                                            f"{int(ids[np.argmax(bad)])} is not one of 0, 1, 2, -1")
        bad = (codes >= 0) & (y < 0)
        if bad.any():
            raise _err(self._file("split"), f"vertex {int(ids[np.argmax(bad)])} is in a split but has no label")
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            raise _err(self._file("features"), f"the features of vertex {int(ids[np.argmax(bad)])} contain NaN or inf")
        bad = degree < 1
        if bad.any():
            raise _err(self._file("degree"), f"degree {int(degree[np.argmax(bad)])} of vertex "
                                             f"{int(ids[np.argmax(bad)])} is below 1 (the self loop counts one)")

    def _entries(self, view: str, part: Partition, first_row: int, local: np.ndarray, ids: np.ndarray,
                 degree: np.ndarray, norm: str, reads: dict[str, int],
                 both: bool = False) -> tuple[np.ndarray, np.ndarray, list]:
        """The entries ``(row, col, [values])`` of this rank's rows of Â (``view="in"``) or of Âᵀ (``"out"``):
        rows local (local row i is new id ``first_row + i``), columns in new ids, the unit diagonal included;
        ``both`` adds the values of Âᵀ at the same entries (a symmetric graph).

        As :func:`mggcn.nn.norm.normalize` builds Â: self loops dropped for one unit loop, parallel edges summed into
        one entry, values from :func:`mggcn.nn.norm.entry_values` with the stored degrees (``Â[t, s]``: t is the row
        of Â, the column of Âᵀ). The rows are read :data:`_SHARD_CHUNK_EDGES` edges at a time, so temporaries stay
        small; the result is preallocated at its upper bound (stored edges + diagonal).
        """
        from mggcn.nn.norm import entry_values

        indptr, indices = self.arrays[f"{view}_indptr"], self.arrays[f"{view}_indices"]
        starts = np.asarray(indptr[ids])
        counts = np.asarray(indptr[ids + 1]) - starts
        reads["bytes"] += 2 * counts.nbytes
        bad = (counts < 0) | (starts < 0) | (starts + counts > self.num_edges)
        if bad.any():
            v = int(ids[np.argmax(bad)])
            raise _err(self._file(f"{view}_indptr"), f"corrupt row offsets: row {v} runs from {int(indptr[v])} to "
                                                     f"{int(indptr[v + 1])}, outside [0, E = {self.num_edges}]")
        n_nodes = self.num_nodes
        diagonal = []  # both: the entries of the diagonal block, (local row, local column, multiplicity)
        ends = np.cumsum(counts)
        n_pad = part.padded_nodes
        bound = int(counts.sum()) + ids.size
        ids_dtype = np.int32 if n_pad < 2**31 else np.int64
        row, col = np.empty(bound, dtype=ids_dtype), np.empty(bound, dtype=ids_dtype)
        values = [np.empty(bound, dtype=np.float32) for _ in range(1 + both)]
        filled, begin = 0, 0
        while begin < ids.size:
            done = int(ends[begin - 1]) if begin else 0
            end = max(begin + 1, int(np.searchsorted(ends, done + _SHARD_CHUNK_EDGES, side="right")))
            nbr = _gather(indices, starts[begin:end], counts[begin:end])
            _drop_pages(indices)
            reads["edges"] += nbr.size
            reads["bytes"] += nbr.nbytes
            if nbr.size and (int(nbr.min()) < 0 or int(nbr.max()) >= n_nodes):
                bad = int(nbr.min()) if int(nbr.min()) < 0 else int(nbr.max())
                raise _err(self._file(f"{view}_indices"), f"vertex id {bad} is out of range [0, {n_nodes})")
            keep = nbr != np.repeat(ids[begin:end], counts[begin:end])
            if view == "in":  # the stored degree is what normalizes: it must count these edges
                kept = np.bincount(np.repeat(np.arange(end - begin), counts[begin:end])[keep], minlength=end - begin)
                wrong = kept + 1 != degree[local[begin:end]]
                if wrong.any():
                    k = int(np.argmax(wrong))
                    raise _err(self._file("degree"), f"degree {int(degree[local[begin + k]])} of vertex "
                                                     f"{int(ids[begin + k])}, which has {int(kept[k])} in-edges "
                                                     "besides self loops (expected that plus one)")
            key = np.repeat(local[begin:end], counts[begin:end])[keep] * n_pad + part.position[nbr[keep]]
            del nbr, keep
            key, mult = np.unique(key, return_counts=True)
            diag = local[begin:end]
            r = np.concatenate([key // n_pad, diag])
            c = np.concatenate([key % n_pad, first_row + diag])
            del key
            if both:
                own = (c[:mult.size] >= first_row) & (c[:mult.size] < first_row + part.rows_per_part)
                diagonal.append((r[:mult.size][own], c[:mult.size][own] - first_row, mult[own]))
            deg_nbr = np.asarray(self.arrays["degree"][part.order[c[:mult.size]]])
            if deg_nbr.size and int(deg_nbr.min()) < 1:  # its own rank says more; this one must not divide by it
                v = int(part.order[c[:mult.size]][np.argmax(deg_nbr < 1)])
                raise _err(self._file("degree"), f"degree {int(deg_nbr.min())} of vertex {v} is below 1 (the self "
                                                 "loop counts one)")
            reads["bytes"] += deg_nbr.nbytes
            mult = np.concatenate([mult, np.ones(diag.size, dtype=mult.dtype)])
            here, there = degree[r], np.concatenate([deg_nbr, degree[diag]])
            k = r.size
            row[filled:filled + k], col[filled:filled + k] = r, c
            # Â[t, s] with t = here for rows of Â, t = there for rows of Âᵀ
            orders = [(here, there)] if view == "in" else [(there, here)]
            if both:
                orders.append((there, here))
            for out, (deg_t, deg_s) in zip(values, orders):
                out[filled:filled + k] = entry_values(mult, deg_t, deg_s if norm == "sym" else None, norm)
            filled += k
            begin = end
        if both:
            self._check_symmetric_block(diagonal, part.rows_per_part)
        return row[:filled], col[:filled], [v[:filled] for v in values]

    def _check_symmetric_block(self, diagonal: list, m: int) -> None:
        """``"symmetric": true`` lets a rank use its rows of A as its rows of Aᵀ: check it where a rank can, on its
        diagonal block (i, i), which must equal its transpose (with P = 1, the whole graph; with P > 1, each
        rank checks the edges among its own rows, so an asymmetric graph is caught unless every asymmetric edge
        crosses ranks). :meth:`verify` checks every edge."""
        r, c, mult = (np.concatenate([d[k] for d in diagonal]) for k in range(3))
        fwd, bwd = r.astype(np.int64) * m + c, c.astype(np.int64) * m + r
        o_f, o_b = np.argsort(fwd, kind="stable"), np.argsort(bwd, kind="stable")
        if not (np.array_equal(fwd[o_f], bwd[o_b]) and np.array_equal(mult[o_f], mult[o_b])):
            raise _err(self.path / MANIFEST, "says \"symmetric\": true but the edges of in_indices are not "
                                             "symmetric: prepare the dataset again")

    def _blocks(self, row: np.ndarray, col: np.ndarray, values: np.ndarray, part: Partition,
                tile_cols: int | None) -> list:
        """The P column blocks (:class:`~mggcn.distributed.tiled.TiledCSR`, ``m × m``) of the rows given as COO entries."""
        import scipy.sparse as sp

        from mggcn.distributed.partition import to_blocks

        block = sp.coo_matrix((values, (row, col)), shape=(part.rows_per_part, part.padded_nodes))
        return to_blocks(block, part.num_parts, tile_cols)

    @property
    def fingerprint(self) -> str:
        """Identifies the content (from the checksums in the manifest): a checkpoint refuses another dataset."""
        sums = sorted((k, str(r.get("sha256"))) for k, r in self.manifest["arrays"].items() if isinstance(r, dict))
        return hashlib.sha256(json.dumps(sums).encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"PreparedDataset({str(self.path)!r}: {self.num_nodes} vertices, {self.num_edges} edges, "
                f"{self.num_features} features, {self.num_classes} classes)")


# ------------------------------------------------------------------------------------------------------ mggcn info


def _degree_line(label: str, indptr: np.ndarray) -> str:
    deg = np.diff(np.asarray(indptr))
    if deg.size == 0:
        return f"{label:<11} -"
    return f"{label:<11} min {int(deg.min()):,}  mean {deg.mean():,.2f}  max {int(deg.max()):,}"


def describe(dataset: PreparedDataset) -> str:
    """What ``mggcn info DIR`` prints: sizes, degree statistics, split sizes, per-P nonzero balance."""
    m, arrays = dataset.manifest, dataset.arrays
    built = m.get("built", {})
    on_disk = sum((dataset.path / r["file"]).stat().st_size for r in m["arrays"].values()
                  if (dataset.path / r["file"]).is_file())
    how = ", ".join(k for k in ("undirected", "dedup") if built.get(k)) or "as given"
    lines = [
        f"dataset     {dataset.name}",
        f"directory   {dataset.path} (format version {m['format_version']}, {on_disk / 2**20:,.1f} MiB of arrays)",
        f"built from  {built.get('source', '?')} (format {built.get('format', '?')}; edges {how}) "
        f"by mggcn {built.get('mggcn_version', '?')}",
        f"vertices    {dataset.num_nodes:,}",
        f"edges       {dataset.num_edges:,}" + (" (symmetric)" if dataset.symmetric else "")
        + f", {m.get('self_loops', 0):,} self loops; nonzeros of Â {m.get('nnz_hat', 0):,}",
        f"features    {dataset.num_features:,}",
        f"classes     {dataset.num_classes:,}",
        _degree_line("in-degree", arrays["in_indptr"]),
        _degree_line("out-degree", arrays["out_indptr"]),
        "splits      " + "  ".join(f"{s} {dataset.split_sizes[s]:,}" for s in SPLITS)
        + f"  (labelled {m.get('num_labelled', 0):,})",
        "balance     nonzeros per rank of Â and Âᵀ, max / mean, under the random permutation (seed 0):",
    ]
    for p, record in sorted(m.get("balance", {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"  P={int(p):<3} Â {record['adj_max'] / max(record['mean'], 1e-12):.4f}  "
                     f"Âᵀ {record['adj_t_max'] / max(record['mean'], 1e-12):.4f}  "
                     f"(mean {record['mean']:,.0f} per rank)")
    return "\n".join(lines)
