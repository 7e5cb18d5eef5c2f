"""What every reader shares: one-line errors naming the file, tolerant text tables, checked binary loads,
and the checks of features, labels, splits and edges; the vertex data of the formats that take it from side files.

Every check raises :class:`~mggcn.utils.errors.GraphError` with ONE line that names the offending file and what is
wrong with it.

Legend: n = vertices, E = edges, F = feature dimension.

``mtx`` and ``edgelist`` take their vertex data from optional files; what is absent is synthesized from ``seed``:

* ``features``: ``.npy`` ``float [n, F]``; absent: standard normal ``[n, num_features]``.
* ``labels``: ``.npy`` integer ``[n]`` (``-1`` = unlabelled, as is NaN in float labels), or a 0/1 matrix ``[n, C]``
  of ``C`` ≥ 2 columns for multi-label (:mod:`mggcn.data.formats.labels`); absent: uniform in ``[0, num_classes or
  2)``.
* ``split``: ``.npy`` integer ``[n]`` with 0 = train, 1 = val, 2 = test, -1 = none (the ``sets.bin`` code), or
  ``.npz`` with bool ``train``/``val``/``test`` arrays of length n; absent: a random 50/25/25 split of the labelled
  vertices.
"""

from __future__ import annotations

import json
import math
import os
import re
import tokenize
import warnings
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mggcn.data.formats.compressed import DECOMPRESS_ERRORS, numpy_opens, open_text, present_prefixes
from mggcn.data.formats.labels import check_label_range, read_labels
from mggcn.data.generators.spec import physical_memory
from mggcn.data.graph import SPLITS, Graph, random_split
from mggcn.data.messages import one_line
from mggcn.utils.errors import GraphError
from mggcn.utils.files import link_to_nothing

PathLike = str | os.PathLike


# what a damaged file makes a loader raise; OverflowError: an integer beyond 64 bits (scipy's Matrix Market reader)
# tokenize.TokenError: an .npy header (a Python literal, which numpy tokenizes) cut or damaged
CORRUPT = (*DECOMPRESS_ERRORS, ValueError, KeyError, OverflowError, zipfile.BadZipFile, tokenize.TokenError)
# what numpy's reading of an .npy header raises where the header is damaged (its literal, its dtype, its shape)
NPY_HEADER_ERRORS = (ValueError, SyntaxError, TypeError, OverflowError, MemoryError, RecursionError,
                     tokenize.TokenError)
MAX_LINE = 1 << 20  # characters of a header or comment line before the data of a text table; a longer one is refused


def file_error(path: PathLike, msg: str, option: str | None = None) -> GraphError:
    # One line, always: the caller may log it next to thousands of others. ``option``: the setting the message names.
    return GraphError(one_line(path, msg), option)


def why(exc: BaseException, limit: int = 100) -> str:
    text = re.sub(r" (object )?at 0x[0-9a-fA-F]+", "", " ".join(str(exc).split())) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


_DECIMAL = re.compile(r"[+-]?[0-9]+")


_BEYOND_IDS = 10**30  # what an id of more digits than any index holds reads as (int() refuses 4,300 and more)


def decimal_int(text: str) -> int | None:
    """``text`` as the integer it writes in ASCII decimal digits (a sign allowed), else None: Python's ``int`` also
    reads ``1_0`` as 10, other scripts' digits and surrounding spaces, which would turn a damaged id into another
    vertex's. One of more than 30 digits reads as ±10^30, beyond every range an id is checked against."""
    if not _DECIMAL.fullmatch(text):
        return None
    if len(text.lstrip("+-").lstrip("0")) > 30:
        return -_BEYOND_IDS if text.startswith("-") else _BEYOND_IDS
    return int(text)


def require_file(path: PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        if path.exists():
            raise file_error(path, "not a regular file")
        nothing = link_to_nothing(path)  # a link on the way that loops or leads nowhere: "missing" would mislead
        raise GraphError(one_line(path, "missing file") if nothing is None else nothing)
    return path


def short_repr(line: str, limit: int = 60) -> str:
    line = line.rstrip("\r\n")
    return repr(line if len(line) <= limit else line[:limit] + "...")


def data_lines(path: Path, comments: Sequence[str], skiprows: int,
               max_line: int | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, text without comment)`` for each non-blank data line. A file that does not
    decompress is refused, naming it; so is a line over ``max_line`` characters, read no further than that (a file
    of one endless line, binary zeros say, is not a text table)."""
    try:
        with open_text(path) as f:
            lineno = 0
            while line := f.readline(-1 if max_line is None else max_line + 1):
                lineno += 1
                if max_line is not None and len(line) > max_line:
                    raise file_error(path, f"line {lineno} is longer than {max_line:,} characters: not a text table")
                if lineno <= skiprows:
                    continue
                text = line
                for c in comments:
                    text = text.split(c, 1)[0]
                if text.strip():
                    yield lineno, text
    except DECOMPRESS_ERRORS as exc:
        raise file_error(path, f"truncated or corrupt file ({why(exc)})") from None


def locate_bad_line(path: Path, dtype: type, ncols: int | None, exact: bool, delimiter: str | None,
                    comments: Sequence[str], skiprows: int) -> str | None:
    """Re-scan a table numpy refused and describe its first bad line; only ever run on the error path."""
    parse: Callable[[str], Any] = int if np.issubdtype(dtype, np.integer) else float
    kind = "an integer" if parse is int else "a number"
    for lineno, text in data_lines(path, comments, skiprows):
        tokens = [t.strip() for t in text.strip().split(delimiter)]
        if ncols is None:
            ncols = len(tokens)  # a feature table: the first line decides the width
        if len(tokens) != ncols if exact else len(tokens) < ncols:
            want = f"{ncols}" if exact else f"at least {ncols}"
            return f"line {lineno}: expected {want} value(s), found {len(tokens)}: {short_repr(text)}"
        for tok in tokens[:ncols]:
            try:
                value = parse(tok)
            except ValueError:
                return f"line {lineno}: cannot parse {short_repr(tok, 30)} as {kind}"
            if parse is int and not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
                return f"line {lineno}: {short_repr(tok, 30)} is beyond the range of {np.dtype(dtype).name}"
    return None


def read_table(path: Path, dtype: type, *, ncols: int | None, exact: bool = True, delimiter: str | None = ",",
               comments: Sequence[str] = (), skiprows: int = 0) -> np.ndarray:
    """Parse a (possibly compressed) text table into ``[rows, cols]``; ``ncols=None`` means any consistent width."""
    path = require_file(path)
    usecols = None if exact or ncols is None else tuple(range(ncols))
    try:
        table = _loadtxt(path, dtype=dtype, delimiter=delimiter, comments=comments, skiprows=skiprows,
                         usecols=usecols)
    except GraphError:  # a file that is no text table at all (a zip archive)
        raise
    except ValueError as exc:
        where = locate_bad_line(path, dtype, ncols, exact, delimiter, comments, skiprows)
        raise file_error(path, where or f"unparsable ({why(exc)})") from None
    except DECOMPRESS_ERRORS as exc:
        raise file_error(path, f"truncated or corrupt file ({why(exc)})") from None
    if table.size == 0:
        return np.empty((0, ncols or 0), dtype=dtype)
    if ncols is not None and exact and table.shape[1] != ncols:
        # loadtxt accepts any width that is consistent; the scanner names the first line (all are wrong).
        raise file_error(path, locate_bad_line(path, dtype, ncols, exact, delimiter, comments, skiprows) or
                         f"expected {ncols} value(s) per line, found {table.shape[1]}")
    return table


def _loadtxt(path: Path, comments: Sequence[str], **options: Any) -> np.ndarray:
    """``np.loadtxt`` of ``path`` with ``options``, given the path itself where numpy opens it as mggcn does (it
    reads a path in blocks, an open file line by line) and only the comment marks the file holds. A file that fails
    that way is read again as :func:`~mggcn.data.formats.compressed.open_text` opens it (undecodable bytes
    replaced), whose error the caller explains."""
    comments = present_prefixes(path, comments) or None
    if numpy_opens(path):
        try:
            return loadtxt(str(path), comments=comments, encoding="utf-8-sig", ndmin=2, **options)
        except (ValueError, *DECOMPRESS_ERRORS):  # UnicodeDecodeError is a ValueError
            pass
    with open_text(path) as f:
        return loadtxt(f, comments=comments, ndmin=2, **options)


def loadtxt(source: Any, **options: Any) -> np.ndarray:
    """``np.loadtxt(source, **options)``, with a token that is no integer in an integer table a ``ValueError`` on
    every numpy: numpy 1.23 to 2.2 read ``1.5`` as 1 and ``1e2`` as 100, with only a DeprecationWarning. A table
    with no data (its "input contained no data" warning) is left to the caller to judge."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("error", DeprecationWarning)
        try:
            return np.loadtxt(source, **options)
        except DeprecationWarning as exc:
            raise ValueError(" ".join(str(exc).split())) from None


def line_of_row(path: Path, row: int, comments: Sequence[str] = (), skiprows: int = 0) -> int:
    for i, (lineno, _) in enumerate(data_lines(path, comments, skiprows)):
        if i == row:
            return lineno
    return -1


def load_npy(path: PathLike, mmap: bool = False) -> np.ndarray:
    """An ``.npy`` array (``mmap``: the read-only map), memory-mapped first: the header is checked against the file's
    size (a header may claim any shape) and a file of Python objects is refused before a byte of data is read."""
    path = require_file(path)
    problem = npy_header_problem(path)
    if problem:
        raise file_error(path, problem)
    try:
        arr = np.load(path, allow_pickle=False, mmap_mode="r")
    except CORRUPT as exc:
        raise file_error(path, f"truncated or corrupt .npy file ({why(exc)})") from None
    if not isinstance(arr, np.ndarray):  # np.load opens an .npz archive as well
        arr.close()
        raise file_error(path, "an .npz archive where an .npy array is expected (np.save writes one)")
    if mmap:
        return arr
    del arr  # read, not copied out of the map: a map's pages would count in the process's memory beside the copy
    try:
        return np.load(path, allow_pickle=False)
    except CORRUPT as exc:  # changed since it was checked
        raise file_error(path, f"truncated or corrupt .npy file ({why(exc)})") from None


def _start(path: Path) -> str | None:
    """What ``path`` begins as: ``zip`` (an ``.npz``), ``npy`` (numpy's header), or else in words for an error
    (``is empty``, ``begins as text``, ``begins as data``); None where it cannot be read (the loader says why)."""
    try:
        with open(path, "rb") as f:
            start = f.read(6)
    except OSError:
        return None
    if start[:2] == b"PK":
        return "zip"
    if start == b"\x93NUMPY":
        return "npy"
    if not start:
        return "is empty"
    text = all(32 <= c < 127 or c in b"\t\r\n" for c in start)
    return f"begins as {'text' if text else 'data'}"


def npy_header_problem(path: Path) -> str | None:
    """What the start of ``path`` says is wrong with it as an ``.npy`` array (np.load takes any file without
    numpy's header for a pickle, and says so): not an array at all, a header numpy cannot read (damaged, or cut),
    one of Python objects, or a shape that claims more bytes than the file holds (counted in Python's integers: a
    shape whose size overflows 64 bits would make numpy warn and then say something else). None: np.load may read
    it (an array, or an ``.npz`` archive, which the caller refuses by name)."""
    start = _start(path)
    if start == "zip" or start is None:
        return None
    if start != "npy":
        return f"not an .npy file: it {start}, without numpy's header (np.save writes one)"
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in reader:
                return None
            shape, _, dtype = reader[version](f)
            data_bytes = os.fstat(f.fileno()).st_size - f.tell()
    except OSError:  # np.load says why it cannot read the file
        return None
    except (*NPY_HEADER_ERRORS, *DECOMPRESS_ERRORS) as exc:
        return f"truncated or corrupt .npy file (its header cannot be read: {why(exc, 60)})"
    if dtype.hasobject:
        return f"holds Python objects (dtype {dtype}), not numbers; save the numbers (np.save with a numeric dtype)"
    claimed = math.prod(int(d) for d in shape) * dtype.itemsize
    if claimed > data_bytes:
        return (f"truncated or corrupt .npy file (its header says {dtype} {list(shape)}, "
                f"{claimed:,} bytes, and the file holds {data_bytes:,} after it)")
    return None


def open_npz(path: Path, what: str = "an .npz archive") -> np.lib.npyio.NpzFile:
    """``path`` opened as an ``.npz`` archive, or a one-line error: np.load opens an ``.npy`` array under any
    name too, as a plain array, and takes anything else for a pickle."""
    start = _start(path)
    if start not in ("zip", "npy", None):  # neither an archive nor an array
        raise file_error(path, f"not {what}: it {start}, not a zip archive (np.savez writes one)")
    try:
        npz = np.load(path, allow_pickle=False, mmap_mode="r")  # an .npy is mapped, not read, to be refused
    except CORRUPT as exc:
        raise file_error(path, f"truncated or corrupt .npz file ({why(exc)})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        del npz
        raise file_error(path, f"an .npy array, not {what} (np.savez writes one)")
    return npz


def load_npz(path: PathLike, keys: Sequence[str], optional: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Load ``keys`` (and whichever of ``optional`` exist) eagerly, so a damaged member fails here, named."""
    path = require_file(path)
    try:
        with open_npz(path) as npz:
            missing = [k for k in keys if k not in npz.files]
            if missing:
                raise file_error(path, f"missing array(s) {missing}; the file has {sorted(npz.files)}")
            arrays = {}
            for k in (*keys, *optional):
                if k in npz.files:
                    try:
                        arrays[k] = npz[k]
                    except ValueError as exc:
                        if "allow_pickle" not in str(exc):
                            raise
                        raise file_error(path, f"'{k}' holds Python objects (a pickle), not numbers; mggcn reads "
                                               "no pickled array (save the numbers)") from None
            return arrays
    except GraphError:
        raise
    except MemoryError:  # a member's header claims more than it holds
        raise file_error(path, "truncated or corrupt .npz file (an array header claims more data than "
                               "the file holds)") from None
    except CORRUPT as exc:
        raise file_error(path, f"truncated or corrupt .npz file ({why(exc)})") from None


def _distinct_keys(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object, refused where it repeats a key (json keeps the last: a vertex's label or a split would be
    silently replaced)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {short_repr(key, 30)} appears twice in one object")
    return obj


def load_json(path: Path) -> Any:
    path = require_file(path)
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f, object_pairs_hook=_distinct_keys)
    except json.JSONDecodeError as exc:
        raise file_error(path, f"line {exc.lineno}: invalid JSON ({exc.msg})") from None
    except RecursionError:  # nesting deeper than the parser's recursion
        raise file_error(path, "invalid JSON (nested too deep)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise file_error(path, f"unreadable ({why(exc)})") from None
    except ValueError as exc:  # what the parser lets through: an integer of more digits than Python converts
        raise file_error(path, f"invalid JSON ({why(exc)})") from None


def check_features(x: np.ndarray, path: PathLike, n: int, n_from: str) -> np.ndarray:
    if x.ndim != 2:
        raise file_error(path, f"features must be a 2-D [n, F] array, got shape {list(x.shape)}")
    if x.shape[0] != n:
        raise file_error(path, f"{x.shape[0]} feature rows for {n} vertices ({n_from})")
    if x.shape[1] == 0:
        raise file_error(path, f"features of shape {list(x.shape)}: no feature column (F = 0)")
    if x.dtype.kind not in "biuf":  # bool 0/1 features read as a tensor's .float() reads them
        raise file_error(path, f"features must be real numbers, got dtype {x.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):  # a value beyond float32 becomes inf, refused just below
        x = np.asarray(x, dtype=np.float32)
    finite = np.isfinite(x)
    if not finite.all():
        row = int(np.argmax(~finite.all(axis=1)))
        raise file_error(path, f"features contain NaN or inf (first in row {row})")
    return x


def mask_from_ids(ids: np.ndarray, n: int, path: PathLike, where: Callable[[int], str]) -> np.ndarray:
    ids = np.asarray(ids).reshape(-1)
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise file_error(path, f"vertex ids must be integers, got dtype {ids.dtype}")
    bad = (ids < 0) | (ids >= n)
    if bad.any():
        i = int(np.argmax(bad))
        raise file_error(path, f"{where(i)}: vertex id {int(ids[i])} is out of range [0, {n})")
    mask = np.zeros(n, dtype=bool)
    mask[ids] = True
    return mask


def check_splits(masks: dict[str, np.ndarray], y: np.ndarray, sources: dict[str, str], labels_src: str) -> None:
    """Overlap, empty train, unlabelled split vertices, each named by the file(s) that define them (multi-label
    ``y`` [n, C] labels every vertex)."""
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        both = masks[a] & masks[b]
        if both.any():
            files = sources[a] if sources[a] == sources[b] else f"{sources[a]} and {sources[b]}"
            raise GraphError(f"{files}: the '{a}' and '{b}' splits overlap (vertex {int(np.argmax(both))})")
    if not masks["train"].any():
        raise GraphError(f"{sources['train']}: the training split is empty")
    for split in SPLITS if y.ndim == 1 else ():
        unlabelled = masks[split] & (y < 0)
        if unlabelled.any():
            raise GraphError(f"{sources[split]}: vertex {int(np.argmax(unlabelled))} is in the '{split}' split but "
                             f"has no label in {labels_src}")


ISOLATED_SLACK = 1 << 16  # vertices without an edge accepted beyond the 2E endpoints, when no file says n


def check_vertex_count(path: PathLike, n: int, num_edges: int, hint: str, option: str | None = None) -> None:
    """Refuse an ``n`` that only the largest id or a header says, when it leaves more than :data:`ISOLATED_SLACK`
    vertices beyond the ``2 · num_edges`` the edges can touch: one stray id would otherwise make millions of
    vertices (and their synthesized features) silently. ``hint`` says how to mean it, through the setting
    ``option``."""
    if n > 2 * num_edges + ISOLATED_SLACK:
        raise file_error(path, f"{n} vertices for {num_edges} edges: at least {n - 2 * num_edges} of them would "
                               f"have no edge (a stray vertex id or size?); {hint}", option)


def check_edges(ei: np.ndarray, n: int, path: PathLike, where: Callable[[int], str],
                n_from: str = "") -> np.ndarray:
    """``ei`` is ``[2, E]``; ``where(e)`` says where edge ``e`` sits in the file, ``n_from`` where ``n`` came from."""
    if ei.size:
        bad = ((ei < 0) | (ei >= n)).any(axis=0)
        if bad.any():
            e = int(np.argmax(bad))
            v = int(ei[0, e]) if not 0 <= ei[0, e] < n else int(ei[1, e])
            source = f" ({n_from})" if n_from else ""
            raise file_error(path, f"{where(e)}: vertex id {v} is out of range [0, {n}){source}")
    return ei.astype(np.int64, copy=False)


def with_vertex_data(path: Path, ei: np.ndarray, n: int, n_from: str, fmt: str, features: PathLike | None,
                     labels: PathLike | None, split: PathLike | None, num_classes: int | None, seed: int,
                     num_features: int) -> Graph:
    x, y, masks, num_classes = vertex_data(path, n, n_from, features, labels, split, num_classes, seed,
                                           num_features)
    return Graph(n, ei, x, y, masks, num_classes=num_classes, name=str(path),
                 meta={"format": fmt, "source": str(path)}).validate()


# Bytes per vertex of the arrays vertex_data makes besides synthetic features: labels, the split's permutation, codes
# and masks.
_VERTEX_BYTES = 36


def check_memory(path: PathLike, nbytes: int, what: str) -> None:
    """Refuse, naming ``path``, ``what`` of ``nbytes`` that would not fit in this machine's memory (before
    allocating)."""
    memory = physical_memory()
    if memory is not None and nbytes > memory:
        raise file_error(path, f"{what} would take about {nbytes / 2**30:,.1f} GiB, more than this machine's "
                               f"{memory / 2**30:,.1f} GiB of memory")


def check_vertex_memory(path: PathLike, n: int, n_from: str, synthetic_features: int = 0) -> None:
    """Refuse, before allocating, ``n`` vertices whose arrays (and ``synthetic_features`` float32 features each)
    would not fit in this machine's memory, naming the file and where ``n`` came from (``--num-nodes``)."""
    check_memory(path, n * (_VERTEX_BYTES + 4 * synthetic_features), f"{n:,} vertices ({n_from}): their arrays")


def vertex_data(path: Path, n: int, n_from: str, features: PathLike | None, labels: PathLike | None,
                split: PathLike | None, num_classes: int | None, seed: int,
                num_features: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], int]:
    """Features, labels, split masks and class count from the optional files, the rest synthesized from ``seed``."""
    if n <= 0:
        raise file_error(path, "the graph has no vertices")
    check_vertex_memory(path, n, n_from, 0 if features is not None else num_features)
    # One independent stream per kind, so supplying (say) real labels does not change the synthetic features.
    rng_x, rng_y, rng_split = (np.random.default_rng([seed, k]) for k in range(3))
    if features is not None:
        x = check_features(load_npy(features), features, n, n_from)
    else:
        x = rng_x.standard_normal((n, num_features), dtype=np.float32)

    if labels is not None:
        y = read_labels(load_npy(labels), labels, n, n_from, nan_is_unlabelled=False)
        num_classes = check_label_range(y, num_classes, labels)
        labels_src = str(labels)
    else:
        num_classes = num_classes or 2
        if num_classes > n:  # as Graph.validate refuses it; prepare's streamed path writes without a Graph
            raise file_error(path, f"{n} vertex(es) ({n_from}) for the {num_classes} classes of random labels: "
                                   "more classes than vertices is refused; give the labels (--labels)")
        y = rng_y.integers(0, num_classes, n, dtype=np.int64)
        labels_src = "the synthetic labels"

    if split is None:
        masks, split_src = random_split(y, rng_split), f"the random split (from {labels_src})"
    else:
        masks, split_src = load_split(Path(split), n, n_from), str(split)
    check_splits(masks, y, dict.fromkeys(SPLITS, split_src), labels_src)
    return x, y, masks, num_classes


def _vector(a: np.ndarray, path: Path, what: str, kind: str) -> np.ndarray:
    """A split's array must be one-dimensional: one entry per vertex, never a table read row by row."""
    if a.ndim != 1:
        raise file_error(path, f"{what} must be a one-dimensional {kind} (one entry per vertex), got shape "
                               f"{list(a.shape)}")
    return a


def load_split(path: Path, n: int, n_from: str) -> dict[str, np.ndarray]:
    """A ``.npz`` of bool train/val/test masks, or an ``.npy`` code vector 0/1/2 (-1 = none)."""
    if path.suffix == ".npz":
        arrays = load_npz(path, list(SPLITS))
        masks = {}
        for name in SPLITS:
            m = _vector(arrays[name], path, f"'{name}'", "mask")
            if m.shape[0] != n:
                raise file_error(path, f"'{name}' has {m.shape[0]} entries for {n} vertices ({n_from})")
            if m.dtype != bool and not (np.issubdtype(m.dtype, np.integer) and np.isin(m, (0, 1)).all()):
                raise file_error(path, f"'{name}' must be a bool mask, got {m.dtype}")
            masks[name] = m.astype(bool)
        return masks
    codes = _vector(load_npy(path), path, "the split codes", "vector of codes")
    if not np.issubdtype(codes.dtype, np.integer):
        raise file_error(path, f"split codes must be integers (0 train, 1 val, 2 test, -1 none), got {codes.dtype}")
    if codes.shape[0] != n:
        raise file_error(path, f"{codes.shape[0]} split codes for {n} vertices ({n_from})")
    bad = ~np.isin(codes, (-1, 0, 1, 2))
    if bad.any():
        v = int(np.argmax(bad))
        raise file_error(path, f"split code {int(codes[v])} of vertex {v} is not one of 0, 1, 2, -1")
    return {name: codes == code for code, name in enumerate(SPLITS)}
