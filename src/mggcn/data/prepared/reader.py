"""The prepared dataset: a directory of ``.npy`` arrays that each rank memory-maps, reading only its own rows.

``mggcn prepare`` (:func:`mggcn.data.prepared.writer.prepare`) writes it once from any source; ``mggcn train DIR
--nprocs P`` then works for every P from the same directory, and a rank's host memory grows with its share of the graph,
not with the whole graph. Layout, format version :data:`FORMAT_VERSION` (n vertices, E edges, F features; ids are
original ids):

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
labels.npy        int64 [n]          ``-1`` = unlabelled; multi-label (``"multilabel": true``): uint8 [n, C] of 0/1,
                                     1 where the vertex has that label, every vertex labelled
split.npy         int8 [n]           0 train, 1 val, 2 test, -1 none
================  =================  ================================================================================

Checksums are the sha256 of each array's data bytes (after the ``.npy`` header), computed while writing. Nothing in
the directory is trusted, but only the cheap things are checked always: opening checks every manifest field (typed,
in range, array paths relative and inside the directory), every file there of the size its header and the manifest
say, the CSR end points, and the split sizes against the split codes (one byte per vertex), a training split among
them; building a rank's shard checks what that rank reads (its rows' labels, split codes, features, degrees against
their in-edges, row offsets and neighbour ids, and under ``"symmetric": true`` that its diagonal block equals its
transpose), so that together the ranks check every row. ``verify=True`` (``mggcn info --verify``) also checks the
checksums, every value, and a symmetric claim over every edge.

These arrays are the :data:`mggcn.data.datasets.ROW_ARRAYS` every dataset holds: a rank's shard
(:func:`mggcn.distributed.sharding.build_shard`) reads, by memory map, only its rows of both CSRs, the degree of
those rows and of their neighbours, and its rows of features, labels and split.

This module does not import torch (the writer runs under tight memory limits).

Legend: n = vertices, E = edges, F = features, m = rows of a rank, P = ranks.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from mggcn.data.csr import index_dtype
from mggcn.data.formats.checks import NPY_HEADER_ERRORS, npy_header_problem, why
from mggcn.data.graph import SPLITS
from mggcn.data.messages import one_line
from mggcn.utils.errors import GraphError
from mggcn.utils.files import LINK_LOOP, resolve_links

__all__ = ["FORMAT_VERSION", "MANIFEST", "BALANCE_PARTS", "PreparedDataset", "is_prepared", "nnz_per_rank",
           "describe"]

# 2: the labels may be a 0/1 matrix (``"multilabel": true``), which a reader of version 1 would refuse as labels of
# another dtype and shape; a single-label dataset is still written as version 1, which every mggcn reads
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
FORMAT_NAME = "mggcn-prepared"
BALANCE_PARTS = (1, 2, 4, 8)
_VERIFY_ROWS = 1 << 22  # rows (or edges) checked per step by verify
_MAX_COUNT = 1 << 62  # a size or count in the manifest: far beyond any graph, and n + 1 or a sum of sizes fits int64


def is_prepared(path: Any) -> bool:
    """Whether ``path`` is a directory holding a ``manifest.json`` (a prepared dataset, or a damaged one); also a
    directory whose permissions hide whether it holds one: opening it then says so."""
    try:
        file = Path(path) / MANIFEST
        os.stat(file)
    except PermissionError:
        return Path(path).is_dir()
    except (TypeError, ValueError, OSError):
        return False
    return file.is_file()


def nnz_per_rank(row_nnz: np.ndarray, num_parts: int, seed: int = 0) -> np.ndarray:
    """Nonzeros of each rank's row block under :func:`mggcn.distributed.partition.make_partition`'s random permutation.

    Rank i holds positions ``[i·m, (i+1)·m)`` of ``permutation(n)`` (padding rows are empty).
    """
    n = row_nnz.shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    m = -(-n // num_parts)
    return np.bincount(np.arange(n) // m, weights=row_nnz[perm], minlength=num_parts).astype(np.int64)


_REPLACED_TRIES = 5  # readings of a directory replaced while read, before giving up


def _identity(path: Path) -> bytes | None:
    """What ``path``'s manifest says, which names its arrays' checksums (None where it cannot be read): another
    version has another, whatever inode numbers a file system gives (FUSE, CIFS may give new ones at every look)."""
    try:
        return (path / MANIFEST).read_bytes()
    except OSError:
        return None


def _err(path: Path, msg: str) -> GraphError:
    return GraphError(one_line(path, msg))


def _read_manifest(path: Path) -> dict:
    file = path / MANIFEST
    if not path.is_dir():
        raise _err(path, "no such directory" if not path.exists() else "not a directory")
    try:
        file.stat()
    except PermissionError as exc:  # is_file() would say False, and the error "not a prepared dataset"
        raise _err(file, f"unreadable ({exc.strerror}): the directory's permissions keep this user out") from None
    except OSError:
        pass
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
    except ValueError as exc:  # what the parser lets through: an integer of more digits than Python converts
        raise _err(file, f"invalid JSON ({exc}); the directory is damaged, prepare it again") from None
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


def _is_count_key(key: Any) -> bool:
    """A key that is a rank count: ASCII digits only (``"²".isdigit()`` holds, yet ``int`` refuses it), short."""
    return isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 6 and int(key) >= 1


def _is_amount(value: Any) -> bool:
    """A non-negative JSON number ``mggcn info`` can divide: neither NaN nor inf nor an integer beyond a float."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT


def _check_manifest(file: Path, m: dict) -> None:
    """Every field the reader and ``mggcn info`` use: typed and in range, before anything trusts it."""
    for key, low in (("num_nodes", 1), ("num_edges", 0), ("num_features", 1), ("num_classes", 1)):
        if not _is_int(m.get(key)) or not low <= m[key] < _MAX_COUNT:
            raise _err(file, f"{key} {m.get(key)!r} is not an integer in [{low}, 2^62)")
    n = m["num_nodes"]
    if "multilabel" in m and not isinstance(m["multilabel"], bool):
        raise _err(file, f"multilabel {m['multilabel']!r} is not a JSON boolean")
    if m.get("multilabel") and m["num_classes"] < 2:
        raise _err(file, f"num_classes {m['num_classes']} of a multi-label dataset is below 2 (a column per label)")
    if m["num_classes"] > n and not m.get("multilabel"):  # a label matrix may have more columns than rows
        raise _err(file, f"num_classes {m['num_classes']} exceeds the {n} vertices")
    for key in ("self_loops", "nnz_hat", "num_labelled"):
        if key in m and (not _is_int(m[key]) or not 0 <= m[key] < _MAX_COUNT):
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
        if "\0" in record["file"]:  # no file system takes it; os calls would raise
            raise _err(file, f"the array {name!r} is at {record['file']!r}, a name with a NUL character")
        rel = Path(record["file"])
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise _err(file, f"the array {name!r} is at {record['file']!r}: array files must be named relative to "
                             "the directory and inside it")
        if "sha256" in record and not isinstance(record["sha256"], str):
            raise _err(file, f"the checksum of the array {name!r} is not a string")
    balance = m.get("balance", {})
    ok = isinstance(balance, dict) and all(
        _is_count_key(p) and isinstance(r, dict) and all(_is_amount(r.get(k)) for k in ("adj_max", "adj_t_max", "mean"))
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


def pair_hash(a: np.ndarray, b: np.ndarray) -> np.ndarray:
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
    """

    def __init__(self, path: Any, verify: bool = False) -> None:
        self.path = Path(path)
        # `mggcn prepare --overwrite` swaps in another directory under the same name: arrays opened by name across
        # the swap would mix the two versions, the manifest of one with the data of the other. The manifest says the
        # same after every array is mapped, or the whole is read again.
        for _ in range(_REPLACED_TRIES):
            before = _identity(self.path)
            try:
                self._open_arrays()
            except GraphError:
                if _identity(self.path) == before:
                    raise
                continue  # replaced while read: what failed was the swap, not the data
            if before is not None and _identity(self.path) == before:
                break
        else:
            raise _err(self.path, f"replaced {_REPLACED_TRIES} times while it was read (`mggcn prepare --overwrite` "
                                  "of it in a loop?); read it once it stays")
        if verify:
            self.verify()

    def _open_arrays(self) -> None:
        """Read the manifest, then map every array it names and run the cheap checks."""
        self.manifest = m = _read_manifest(self.path)
        # said in the run's lines and errors: a crafted name's newlines or terminal escapes are shown as "?"
        self.name = "".join(c if c.isprintable() else "?" for c in str(m.get("name") or self.path))
        self.num_nodes, self.num_edges = m["num_nodes"], m["num_edges"]
        self.num_features, self.num_classes = m["num_features"], m["num_classes"]
        self.multilabel = m.get("multilabel", False)  # labels uint8 [n, C] of 0/1, not int64 [n]
        self.symmetric = m.get("symmetric", False)
        self.split_sizes = {s: m["split_sizes"][s] for s in SPLITS}
        n, e, f = self.num_nodes, self.num_edges, self.num_features
        ids = index_dtype(n)
        labels = (np.uint8, (n, self.num_classes)) if self.multilabel else (np.int64, (n,))
        expected = {"in_indptr": (np.int64, (n + 1,)), "in_indices": (ids, (e,)), "degree": (np.int64, (n,)),
                    "features": (np.float32, (n, f)), "labels": labels, "split": (np.int8, (n,))}
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
        if self.split_sizes["train"] == 0:  # a run on it would train on nothing and report a loss of 0
            raise _err(self.path, "no training vertices (every split code is 1, 2 or -1); nothing to train on")

    # ------------------------------------------------------------------------------------------------ checks

    def _file(self, name: str) -> Path:
        record = self.manifest["arrays"].get(name)
        if record is None:
            raise _err(self.path / MANIFEST, f"no record of the array '{name}'")
        file = self.path / record["file"]  # relative, without '..' (_check_manifest)
        resolved = resolve_links(file, self.path)
        if resolved is None:
            raise _err(file, LINK_LOOP)
        target, home = resolved
        if not target.is_relative_to(home):
            raise _err(file, f"a link to {target}, outside the dataset directory {self.path}")
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
        problem = npy_header_problem(file)
        if problem:
            raise _err(file, problem)
        try:
            arr = np.load(file, mmap_mode="r", allow_pickle=False)
        except PermissionError as exc:
            raise _err(file, f"unreadable ({exc.strerror}): this user may not read it") from None
        except (*NPY_HEADER_ERRORS, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise _err(file, f"truncated or corrupt .npy file ({why(exc)})") from None
        if not isinstance(arr, np.ndarray):  # np.load opens an .npz archive under any name
            arr.close()
            raise _err(file, "an .npz archive, not an .npy array (the prepared arrays are .npy files)")
        if name == "labels" and arr.ndim != len(shape):
            says, holds = ("multi-label", "one class per vertex") if self.multilabel else ("one class per vertex",
                                                                                            "a matrix of labels")
            raise _err(file, f"holds {arr.dtype} {list(arr.shape)}, {holds}, but {MANIFEST} says {says} (expected "
                             f"{dtype} {list(shape)}): the directory is damaged, prepare it again")
        if arr.dtype != dtype or arr.shape != shape:
            raise _err(file, f"holds {arr.dtype} {list(arr.shape)}, expected {dtype} {list(shape)} for the "
                             f"{self.num_nodes} vertices and {self.num_edges} edges of {MANIFEST}")
        size, want = file.stat().st_size, getattr(arr, "offset", 0) + arr.nbytes
        if size != want:
            raise _err(file, f"{'truncated' if size < want else 'too long'}: {size} bytes, the header implies {want}")
        return arr

    def verify(self) -> None:
        """Check every array against its sha256 in the manifest (where it has one), then every value against the
        invariants."""
        for name in sorted(set(self.manifest["arrays"]) & set(self.arrays)):
            want = self.manifest["arrays"][name].get("sha256")  # absent in a directory a job wrote for its workers
            if want is not None and want != _sha256(self.arrays[name]):
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
        labelled = 0
        for b in range(0, n, step):
            rows = slice(b, b + step)
            if not np.isfinite(self.arrays["features"][rows]).all():
                raise _err(self._file("features"), "features contain NaN or inf")
            y, codes = self._verified_labels(rows), self.arrays["split"][rows]
            labelled += int(np.count_nonzero(y >= 0))
            if not np.isin(codes, (-1, 0, 1, 2)).all():
                raise _err(self._file("split"), "a split code is not one of 0, 1, 2, -1")
            if ((codes >= 0) & (y < 0)).any():
                raise _err(self._file("split"), "a vertex in a split has no label")
            if (self.arrays["degree"][rows] < 1).any():
                raise _err(self._file("degree"), "a degree below 1 (the self loop counts one)")
        self._verify_totals({"num_labelled": labelled, **self._verify_rows()})
        if self.symmetric:
            self._verify_symmetric()
        else:
            self._verify_transpose()

    def _verify_totals(self, counted: dict[str, int]) -> None:
        """The manifest's totals (what ``info`` says of the dataset) against those counted in its arrays."""
        for key, value in counted.items():
            if key in self.manifest and self.manifest[key] != value:
                raise _err(self.path / MANIFEST, f"{key} {self.manifest[key]!r} disagrees with the arrays, which "
                                                 f"hold {value:,}")

    def _verify_rows(self) -> dict[str, int]:
        """Each row of the CSRs sorted (parallel edges are runs of equal ids), and ``degree`` each vertex's in-edges
        other than self loops, plus one: what building a shard checks of a rank's rows, over every row. Returns the
        totals counted on the way: ``self_loops`` (every self-loop entry) and ``nnz_hat`` (per row, its distinct
        columns other than itself, plus one)."""
        n, step, degree = self.num_nodes, _VERIFY_ROWS, self.arrays["degree"]
        totals = {"self_loops": 0, "nnz_hat": 0}
        for view in ("in",) if self.symmetric else ("in", "out"):
            indptr, indices = self.arrays[f"{view}_indptr"], self.arrays[f"{view}_indices"]
            for b in range(0, n, step):
                ptr = np.asarray(indptr[b:b + step + 1])
                counts = np.diff(ptr)
                rows = np.repeat(np.arange(b, b + counts.shape[0]), counts)
                ids = np.asarray(indices[int(ptr[0]):int(ptr[-1])])
                down = np.flatnonzero((ids[1:] < ids[:-1]) & (rows[1:] == rows[:-1]))
                if down.size:
                    raise _err(self._file(f"{view}_indices"), f"the ids of row {int(rows[down[0]])} are not sorted")
                if view == "in":
                    loop = ids == rows
                    first = np.ones(ids.shape[0], dtype=bool)  # a column's first entry in its row
                    first[1:] = (ids[1:] != ids[:-1]) | (rows[1:] != rows[:-1])
                    totals["self_loops"] += int(np.count_nonzero(loop))
                    totals["nnz_hat"] += int(np.count_nonzero(first & ~loop)) + counts.shape[0]
                    kept = counts - np.bincount(rows[loop] - b, minlength=counts.shape[0])
                    wrong = np.flatnonzero(kept + 1 != np.asarray(degree[b:b + step]))
                    if wrong.size:
                        v = b + int(wrong[0])
                        raise _err(self._file("degree"), f"degree {int(degree[v])} of vertex {v}, which has "
                                                         f"{int(kept[wrong[0]])} in-edges besides self loops "
                                                         "(expected that plus one)")
        return totals

    def _verified_labels(self, rows: slice) -> np.ndarray:
        """The labels of ``rows`` checked (one class in [-1, C) each, or 0/1 per label), as a class per vertex for
        the checks that follow (0 for a vertex of a label matrix: every vertex is labelled)."""
        y = np.asarray(self.arrays["labels"][rows])
        if self.multilabel:
            if y.size and int(y.max()) > 1:
                row, col = np.unravel_index(int(np.argmax(y > 1)), y.shape)
                raise _err(self._file("labels"), f"vertex {rows.start + int(row)} has {int(y[row, col])} for label "
                                                 f"{int(col)}; multi-label labels are 0 or 1")
            return np.zeros(y.shape[0], dtype=np.int64)
        if y.size and (int(y.min()) < -1 or int(y.max()) >= self.num_classes):
            raise _err(self._file("labels"), f"a label is out of range [-1, {self.num_classes})")
        return y

    def _pair_sums(self, view: str) -> tuple[np.uint64, np.uint64]:
        """Over every entry of the ``view`` CSR (row r, id c): the sums of the 64-bit hashes of the pairs ``(r, c)``
        and ``(c, r)``, which compare multisets of pairs order-free, so that they stream."""
        indptr, indices, step = self.arrays[f"{view}_indptr"], self.arrays[f"{view}_indices"], _VERIFY_ROWS
        forward = backward = np.uint64(0)
        for b in range(0, self.num_nodes, step):
            ptr = np.asarray(indptr[b:b + step + 1])
            rows = np.repeat(np.arange(b, b + ptr.shape[0] - 1, dtype=np.uint64), np.diff(ptr))
            ids = np.asarray(indices[int(ptr[0]):int(ptr[-1])]).astype(np.uint64)
            with np.errstate(over="ignore"):
                forward += pair_hash(rows, ids).sum(dtype=np.uint64)
                backward += pair_hash(ids, rows).sum(dtype=np.uint64)
        return forward, backward

    def _verify_symmetric(self) -> None:
        """A ``"symmetric": true`` claim, checked over every edge: the multiset of pairs ``(t, s)`` equals that of
        ``(s, t)``."""
        forward, backward = self._pair_sums("in")
        if forward != backward:
            raise _err(self.path / MANIFEST, "says \"symmetric\": true but the edges of in_indices are not "
                                             "symmetric: prepare the dataset again")

    def _verify_transpose(self) -> None:
        """The out-CSR (the backward pass's Aᵀ, each vertex's out-edges) holds the in-CSR's edges, each once per
        multiplicity: the pairs (target, source) of one equal those of the other, read the other way round."""
        if self._pair_sums("in")[0] != self._pair_sums("out")[1]:
            raise _err(self._file("out_indices"), "the out-edges (out_indptr, out_indices) are not the in-edges "
                                                  "(in_indptr, in_indices) reversed: the backward pass would use "
                                                  "another graph; prepare the dataset again")

    def source(self, array: str) -> str:
        """The file of ``array`` (``manifest`` for the manifest), for the errors that name it."""
        return str(self.path / MANIFEST if array == "manifest" else self._file(array))

    @property
    def fingerprint(self) -> str:
        """Identifies the content (from the checksums in the manifest, or the fingerprint of the dataset a job wrote
        for its workers without checksums): a checkpoint refuses another dataset."""
        if isinstance(self.manifest.get("fingerprint"), str):
            return self.manifest["fingerprint"]
        return arrays_fingerprint({k: str(r.get("sha256")) for k, r in self.manifest["arrays"].items()
                                   if isinstance(r, dict)})

    def __repr__(self) -> str:
        return (f"PreparedDataset({str(self.path)!r}: {self.num_nodes} vertices, {self.num_edges} edges, "
                f"{self.num_features} features, {self.num_classes} classes)")


def layout_arrays(symmetric: bool) -> list[str]:
    """The arrays of a prepared directory, in the order they are written (the out_ CSR only where Â ≠ Âᵀ)."""
    return ["in_indptr", "in_indices", "degree", "features", "labels", "split"] if symmetric else \
        ["in_indptr", "in_indices", "out_indptr", "out_indices", "degree", "features", "labels", "split"]


def arrays_fingerprint(sums: dict[str, str]) -> str:
    """A dataset's fingerprint from the sha256 of each of its arrays (as a manifest lists them): the same content
    has the same fingerprint, prepared or in memory, wherever it was read from."""
    return hashlib.sha256(json.dumps(sorted(sums.items())).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------------ mggcn info


def _degree_line(label: str, dataset: PreparedDataset, view: str) -> str:
    """The degree statistics of one CSR, its row offsets checked on the way (opening checked only their end points):
    offsets that decrease anywhere are refused, naming the file, instead of printing a negative degree. Read
    :data:`_VERIFY_ROWS` rows at a time, so memory stays bounded."""
    indptr, n = dataset.arrays[f"{view}_indptr"], dataset.num_nodes
    low, high, total = None, None, 0
    for b in range(0, n, _VERIFY_ROWS):
        deg = np.diff(np.asarray(indptr[b:b + _VERIFY_ROWS + 1]))
        if deg.size == 0:
            continue
        if int(deg.min()) < 0:
            v = b + int(np.argmax(deg < 0))
            raise _err(dataset._file(f"{view}_indptr"), f"corrupt row offsets: they decrease at vertex {v} "
                                                       f"({int(indptr[v])} to {int(indptr[v + 1])}); the directory "
                                                       "is damaged, prepare it again")
        low = int(deg.min()) if low is None else min(low, int(deg.min()))
        high = int(deg.max()) if high is None else max(high, int(deg.max()))
        total += int(deg.sum())
    if low is None:
        return f"{label:<11} -"
    return f"{label:<11} min {low:,}  mean {total / n:,.2f}  max {high:,}"


def describe(dataset: PreparedDataset) -> str:
    """What ``mggcn info DIR`` prints: sizes, degree statistics, split sizes, per-P nonzero balance."""
    m = dataset.manifest
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
        f"classes     multi-label, {dataset.num_classes:,} labels" if dataset.multilabel
        else f"classes     {dataset.num_classes:,}",
        _degree_line("in-degree", dataset, "in"),
        _degree_line("out-degree", dataset, "out"),
        "splits      " + "  ".join(f"{s} {dataset.split_sizes[s]:,}" for s in SPLITS)
        + f"  (labelled {m.get('num_labelled', 0):,})",
        "balance     nonzeros per rank of Â and Âᵀ, max / mean, under the random permutation (seed 0):",
    ]
    for p, record in sorted(m.get("balance", {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"  P={int(p):<3} Â {record['adj_max'] / max(record['mean'], 1e-12):.4f}  "
                     f"Âᵀ {record['adj_t_max'] / max(record['mean'], 1e-12):.4f}  "
                     f"(mean {record['mean']:,.0f} per rank)")
    return "\n".join(lines)
