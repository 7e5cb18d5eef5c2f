"""The Planetoid citation graphs (Cora, CiteSeer, PubMed) in the layout the GCN paper shipped them.

A dataset ``NAME`` is eight files in one directory, as Kipf & Welling's ``gcn/utils.py:load_data`` and PyG's
``Planetoid(split="public")`` read them:

================  ===================================================================================================
``ind.NAME.x``     features of the labelled training vertices (only its shape is used: they are rows of ``allx``)
``ind.NAME.y``     one-hot labels of the training vertices ``[n_train, C]``: the vertices ``0 .. n_train - 1``
``ind.NAME.allx``  features of the vertices ``0 .. N_all - 1`` (labelled and unlabelled), ``[N_all, F]``
``ind.NAME.ally``  their one-hot labels ``[N_all, C]``
``ind.NAME.tx``    features of the test vertices, row ``i`` belonging to vertex ``test.index[i]``
``ind.NAME.ty``    their one-hot labels
``ind.NAME.graph`` ``{vertex: [neighbours]}`` (a ``defaultdict(list)``)
``ind.NAME.test.index``  text, one vertex id per line
================  ===================================================================================================

All but ``test.index`` are Python 2 pickles (protocol 2, byte strings read as latin-1) of numpy arrays, scipy CSR
matrices and a dict of lists. A pickle can run any code while it loads, so they are read by
:class:`PlanetoidUnpickler`, which admits only those types: a pickle naming anything else is refused with one line.

The public split: train = the first ``n_train`` vertices, val = the next 500, test = the ``test.index`` vertices.
The graph has ``N = max(test.index) + 1`` vertices; vertices in the test range that ``test.index`` does not list
(CiteSeer's isolated vertices) get zero features and a zero label row, and belong to no split. A label is the argmax
of its one-hot row (0 for a zero row, as PyG). Every listed pair ``v: [u, ...]`` is the edge ``v -> u``; self loops and
duplicates are dropped, nothing is added (the original dicts are symmetric, so the graph is undirected).
``normalize_features=True`` divides every feature row by its sum after shifting all features by their minimum, as
PyG's ``NormalizeFeatures`` (rows summing to less than 1 are only shifted).

Legend: n = vertices, F = feature dimension, C = classes.
"""

from __future__ import annotations

import io
import itertools
import operator
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from mggcn.data.csr import MAX_KEY_NODES, distinct_keys
from mggcn.data.formats.checks import PathLike, check_memory, decimal_int, file_error, require_file
from mggcn.data.graph import Graph
from mggcn.utils.errors import GraphError

__all__ = ["PARTS", "PickledSparse", "PlanetoidUnpickler", "RefusedPickle", "load_pickle", "normalize_rows",
           "planetoid_files", "read_planetoid"]

PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
NUM_VAL = 500  # the public split's validation vertices, right after the training ones

_NAME = re.compile(r"^ind\.(.+)\.(" + "|".join(re.escape(p) for p in PARTS) + r")$")


# ------------------------------------------------------------------------------------------ the restricted unpickler


class RefusedPickle(pickle.UnpicklingError):
    """A pickle names something a Planetoid file never holds; raised before that thing is called."""


def _numpy_core(module: str) -> Any:
    """numpy's ``_core.<module>`` (numpy >= 2; ``core.<module>`` before), whichever name a pickle used."""
    import importlib

    try:
        return importlib.import_module(f"numpy._core.{module}")
    except ImportError:  # numpy 1.x
        return importlib.import_module(f"numpy.core.{module}")


def _numpy_reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    if subtype is not np.ndarray:
        raise RefusedPickle(f"an array of type {getattr(subtype, '__name__', subtype)!r}")
    # numpy pickles an array as an empty placeholder, _reconstruct(ndarray, (0,), b'b'), then sets its state (whose
    # data numpy checks against the shape): a placeholder of many elements would only allocate memory
    if not isinstance(shape, tuple) or len(shape) > 32 or not all(_is_int(d) and 0 <= d <= 1 for d in shape):
        raise RefusedPickle(f"an array placeholder of shape {str(shape)[:40]}, not numpy's (0,)")
    return _numpy_core("multiarray")._reconstruct(np.ndarray, shape, dtype)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _numpy_dtype(spec: Any, align: bool = False, copy: bool = False) -> np.dtype:
    dtype = np.dtype(spec, align=align, copy=copy)
    if dtype.hasobject:  # an object array unpickles Python objects of its own choosing
        raise RefusedPickle("an array of Python objects")
    return dtype


def _numpy_scalar(dtype: np.dtype, data: Any = None) -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise RefusedPickle("a numpy scalar that is not a number")
    return _numpy_core("multiarray").scalar(dtype, data)


def _numpy_frombuffer(buffer: Any, dtype: Any, shape: Any, order: str) -> np.ndarray:
    # Protocol 5 (Python 3's default) writes arrays as numpy._core.numeric._frombuffer(bytes, dtype, shape, order).
    if not isinstance(buffer, (bytes, bytearray)) or not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise RefusedPickle("an array that is not numbers from bytes")
    return _numpy_core("numeric")._frombuffer(buffer, dtype, shape, order)


def _latin1_bytes(text: str, encoding: str = "utf-8") -> bytes:
    # Python 3 writes bytes into protocol-2 pickles as _codecs.encode(str, "latin1").
    if encoding not in ("latin1", "latin-1"):
        raise RefusedPickle(f"_codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


def _defaultdict(factory: Any = None, *args: Any) -> dict:
    from collections import defaultdict

    if factory not in (None, list) or args:
        raise RefusedPickle("a defaultdict whose default is not a list")
    return defaultdict(factory)


_SPARSE_MODULES = ("scipy.sparse", "scipy.sparse.csr", "scipy.sparse._csr", "scipy.sparse.csc", "scipy.sparse._csc",
                   "scipy.sparse.coo", "scipy.sparse._coo")
_SPARSE_CLASSES = ("csr_matrix", "csc_matrix", "coo_matrix", "csr_array", "csc_array", "coo_array")
_NUMPY_CORE = ("numpy.core.multiarray", "numpy._core.multiarray")
_ADMITTED = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _numpy_dtype,
    **{(m, "_reconstruct"): _numpy_reconstruct for m in _NUMPY_CORE},
    **{(m, "scalar"): _numpy_scalar for m in _NUMPY_CORE},
    **{(m, "_frombuffer"): _numpy_frombuffer for m in ("numpy.core.numeric", "numpy._core.numeric")},
    ("_codecs", "encode"): _latin1_bytes,
    ("builtins", "list"): list,
    ("builtins", "dict"): dict,
    ("collections", "defaultdict"): _defaultdict,
}


# ------------------------------------------------------------------------------------------ sparse matrices, checked


class PickledSparse:
    """The attributes a pickle restores into a scipy sparse matrix, held as they are until :meth:`build` has checked
    them: a crafted ``indptr`` or index would make scipy's C code read or write out of bounds."""

    format = ""

    def __new__(cls, *args: Any) -> PickledSparse:
        if args:  # NEWOBJ with arguments: scipy pickles none
            raise RefusedPickle(f"a {cls.__name__} created with arguments")
        obj = super().__new__(cls)
        obj.state = {}
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # only a REDUCE of the class itself calls it
        raise RefusedPickle(f"a {type(self).__name__} built by calling its constructor")

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (__dict__, slots)
            parts = [p for p in state if p is not None]
        else:
            parts = [state]
        for part in parts:
            if not isinstance(part, dict) or not all(isinstance(k, str) for k in part):
                raise RefusedPickle(f"a {type(self).__name__} whose state is not a dict of attributes")
            self.state.update(part)

    def build(self, path: PathLike) -> sp.spmatrix:
        """The scipy matrix, built from arrays checked here (one line naming ``path`` if any is wrong)."""
        def bad(msg: str) -> GraphError:
            return file_error(path, f"corrupt sparse matrix ({self.format}): {msg}")

        state = self.state
        shape = state.get("_shape", state.get("shape"))
        if (not isinstance(shape, (tuple, list)) or len(shape) != 2 or not all(_is_int(d) for d in shape)):
            raise bad(f"shape {str(shape)[:60]} is not two integers")
        rows, cols = int(shape[0]), int(shape[1])
        if rows < 0 or cols < 0 or rows > MAX_DIM or cols > MAX_DIM:
            raise bad(f"shape ({rows}, {cols}) is not two integers in [0, {MAX_DIM}]")
        data = _vector(state, "data", bad, numbers=True)
        if self.format == "coo":
            coords = state.get("coords")
            if coords is not None:
                if not isinstance(coords, (tuple, list)) or len(coords) != 2:
                    raise bad("coords is not a pair of index arrays (row, col)")
                state = {**state, "row": coords[0], "col": coords[1]}
            row, col = (_vector(state, k, bad) for k in ("row", "col"))
            if not row.size == col.size == data.size:
                raise bad(f"row, col and data have {row.size}, {col.size} and {data.size} entries, not one length")
            _in_range(row, rows, "row", bad)
            _in_range(col, cols, "col", bad)
            return sp.coo_matrix((data, (row, col)), shape=(rows, cols))
        major, minor = (rows, cols) if self.format == "csr" else (cols, rows)
        indptr, indices = _vector(state, "indptr", bad), _vector(state, "indices", bad)
        if indptr.size != major + 1:
            raise bad(f"indptr has {indptr.size} entries, expected {major + 1} for shape ({rows}, {cols})")
        if indices.size != data.size:
            raise bad(f"indices and data have {indices.size} and {data.size} entries, not one length")
        if indptr[0] != 0 or indptr[-1] > indices.size:
            raise bad(f"indptr runs from {int(indptr[0])} to {int(indptr[-1])}, not from 0 to at most "
                      f"{indices.size} (the entries of indices)")
        falls = np.flatnonzero(indptr[1:] < indptr[:-1])
        if falls.size:
            raise bad(f"indptr decreases after entry {int(falls[0])} ({int(indptr[falls[0]])} to "
                      f"{int(indptr[falls[0] + 1])})")
        nnz = int(indptr[-1])
        indices, data = indices[:nnz], data[:nnz]
        _in_range(indices, minor, "indices", bad)
        kind = sp.csr_matrix if self.format == "csr" else sp.csc_matrix
        return kind((data, indices, indptr), shape=(rows, cols))


MAX_DIM = 2**40  # rows or columns of a sparse matrix: far beyond any Planetoid file, and its products fit int64


def _vector(state: dict, key: str, bad: Any, numbers: bool = False) -> np.ndarray:
    """``state[key]`` as a 1-D array: int64 indices (every value checked to fit), or ``data`` of numbers."""
    arr = state.get(key)
    if not isinstance(arr, np.ndarray):
        raise bad(f"{key} is {'missing' if arr is None else 'a ' + type(arr).__name__}, not an array")
    if arr.ndim != 1:
        raise bad(f"{key} is a {arr.ndim}-D array, not 1-D")
    if numbers:
        if arr.dtype.kind not in "biuf":
            raise bad(f"{key} holds {arr.dtype}, not real numbers")
        return arr
    if arr.dtype.kind not in "iu":
        raise bad(f"{key} holds {arr.dtype}, not integers")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise bad(f"{key} holds {int(arr.max())}, beyond int64")
    return arr.astype(np.int64)


def _in_range(ids: np.ndarray, bound: int, key: str, bad: Any) -> None:
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= bound):
        worst = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise bad(f"{key} holds {worst}, outside [0, {bound})")


def _pickled(name: str) -> type[PickledSparse]:
    return type(name, (PickledSparse,), {"format": name[:3], "__module__": __name__})


_PICKLED_SPARSE = {name: _pickled(name) for name in _SPARSE_CLASSES}


class PlanetoidUnpickler(pickle.Unpickler):
    """An unpickler that builds only numpy arrays (of numbers), scipy CSR/CSC/COO matrices, dicts, lists and
    ``defaultdict(list)``, the types of the Planetoid files (and the functions numpy and Python use to pickle
    them). Any other class or function a pickle names raises :class:`RefusedPickle` before it is
    called; so does an array of Python objects. Python 2 byte strings are read as latin-1, as PyG reads them.

    A sparse matrix is not built by scipy while unpickling: the pickle restores its attributes (``indptr``,
    ``indices``, ``data``, ``_shape``; ``row``, ``col`` or ``coords`` of a COO) into a :class:`PickledSparse`,
    which :func:`load_pickle` checks with numpy and only then builds the scipy matrix from (scipy's C code reads
    crafted offsets or indices out of bounds, and crashes the process).
    """

    def __init__(self, file: Any) -> None:
        super().__init__(file, encoding="latin1")

    def find_class(self, module: str, name: str) -> Any:
        if module == "__builtin__":  # Python 2's name (pickle's fix_imports renames it only in its own find_class)
            module = "builtins"
        admitted = _ADMITTED.get((module, name))
        if admitted is not None:
            return admitted
        if module in _SPARSE_MODULES and name in _SPARSE_CLASSES:
            return _PICKLED_SPARSE[name]
        raise RefusedPickle(f"it names {module}.{name}, which a Planetoid file never holds")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("it refers to a persistent object, which a Planetoid file never holds")


def load_pickle(path: PathLike) -> Any:
    """Unpickle ``path`` with :class:`PlanetoidUnpickler`; raises :class:`GraphError` (one line naming the file)
    for a pickle that names anything else, or that is truncated or corrupt."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise file_error(path, f"cannot read ({exc.strerror or exc})") from None
    try:
        obj = PlanetoidUnpickler(io.BytesIO(data)).load()
    except RefusedPickle as exc:
        raise file_error(path, f"refused: not a Planetoid pickle ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - a damaged pickle fails in any of the constructors it calls
        raise file_error(path, f"truncated or corrupt pickle ({type(exc).__name__}: {exc})"[:200]) from None
    return obj.build(path) if isinstance(obj, PickledSparse) else obj


# ------------------------------------------------------------------------------------------------------ the reader


def planetoid_files(source: PathLike) -> tuple[str, dict[str, Path]]:
    """The dataset name and its eight files, from a directory holding one dataset's ``ind.NAME.*`` files or from
    the prefix ``DIR/ind.NAME`` (a path to one of the files works too)."""
    path = Path(source)
    if path.is_dir():
        names = sorted({m.group(1) for f in path.iterdir() if (m := _NAME.match(f.name))})
        if not names:
            raise file_error(path, "no Planetoid files here (ind.NAME.x, ind.NAME.graph, ...); give the directory that "
                             "holds them, or DIR/ind.NAME")
        if len(names) > 1:
            raise file_error(path, f"holds several Planetoid datasets ({', '.join(names)}); give one as "
                             f"{path / ('ind.' + names[0])}")
        folder, name = path, names[0]
    else:
        m = _NAME.match(path.name)
        if m is not None:  # one of the files
            folder, name = path.parent, m.group(1)
        elif path.name.startswith("ind.") and len(path.name) > 4:
            folder, name = path.parent, path.name[4:]
        else:
            what = "no such file or directory" if not path.exists() else "not a Planetoid directory or DIR/ind.NAME"
            raise file_error(path, f"{what}; fmt=planetoid takes a directory with ind.NAME.* files, or "
                                   "DIR/ind.NAME", "fmt")
    files = {part: folder / f"ind.{name}.{part}" for part in PARTS}
    if not any(f.exists() for f in files.values()):
        held = sorted({m.group(1) for f in folder.iterdir() if (m := _NAME.match(f.name))}) if folder.is_dir() else []
        there = f"; {folder} holds {', '.join('ind.' + h for h in held)}" if held else ""
        raise file_error(path, f"no such file or directory{there}; fmt=planetoid takes a directory with "
                               "ind.NAME.* files, or DIR/ind.NAME", "fmt")
    for f in files.values():
        require_file(f)
    return name, files


def _matrix(obj: Any, path: Path, what: str) -> np.ndarray:
    """A dense 2-D float array from an unpickled array or sparse matrix (checking a sparse one's structure)."""
    if sp.issparse(obj):  # built by load_pickle from checked arrays (PickledSparse.build)
        check_memory(path, obj.shape[0] * obj.shape[1] * (obj.dtype.itemsize + 4), f"{what} {obj.shape} as dense")
        try:
            obj = obj.tocsr()
            obj.check_format(full_check=True)
            obj = obj.toarray()
        except Exception as exc:  # noqa: BLE001 - a crafted matrix fails in whichever scipy check it reaches
            raise file_error(path, f"corrupt sparse matrix ({exc})"[:200]) from None
    if not isinstance(obj, np.ndarray) or obj.ndim != 2:
        kind = f"a {obj.ndim}-D array" if isinstance(obj, np.ndarray) else f"a {type(obj).__name__}"
        raise file_error(path, f"expected {what} as a 2-D array or sparse matrix, found {kind}")
    if obj.dtype.kind not in "biuf":
        raise file_error(path, f"expected real numbers, found dtype {obj.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):  # a value beyond float32 becomes inf, refused just below
        out = obj.astype(np.float32)
    if not np.isfinite(out).all():
        raise file_error(path, "contains NaN or inf")
    return out


def _test_index(path: Path) -> np.ndarray:
    ids = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            text = line.strip()
            if not text:
                continue
            vertex = decimal_int(text)
            if vertex is None:
                raise file_error(path, f"line {lineno}: expected one vertex id, found {text[:40]!r}")
            if vertex < 0:
                raise file_error(path, f"line {lineno}: negative vertex id {vertex}")
            if vertex >= MAX_KEY_NODES:
                raise file_error(path, f"line {lineno}: vertex id {vertex} is beyond the {MAX_KEY_NODES:,} vertices "
                                       "mggcn can index")
            ids.append(vertex)
    index = np.asarray(ids, dtype=np.int64)
    if index.size == 0:
        raise file_error(path, "no test vertex")
    if index.min() < 0:
        raise file_error(path, f"negative vertex id {int(index.min())}")
    unique, counts = np.unique(index, return_counts=True)
    if (counts > 1).any():
        raise file_error(path, f"vertex {int(unique[np.argmax(counts > 1)])} is listed twice")
    return index


def _edges(graph: Any, path: Path, n: int) -> np.ndarray:
    """``[2, E]`` edges ``v -> u`` for every ``u`` listed under ``v``, self loops and duplicates dropped, sorted by
    (source, target). The lists are checked by the types they hold and flattened by numpy, not vertex by vertex
    (a graph of millions of neighbours); only a graph that fails a check is walked, to name the vertex at fault."""
    if not isinstance(graph, dict):
        raise file_error(path, f"expected a dict of neighbour lists, found a {type(graph).__name__}")
    lists = list(graph.values())
    if not (all(map(_int_type, set(map(type, graph)))) and set(map(type, lists)) <= {list, tuple}
            and all(map(_int_type, set(map(type, itertools.chain.from_iterable(lists)))))):
        return _walked_edges(graph, path, n)
    counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    try:
        keys = np.fromiter(graph, dtype=np.int64, count=len(lists))
        ids = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(counts.sum()))
    except OverflowError:  # an id beyond int64: out of range, which the walk names
        return _walked_edges(graph, path, n)
    if any(a.size and not 0 <= a.min() <= a.max() < n for a in (keys, ids)):
        return _walked_edges(graph, path, n)
    return _distinct_without_loops(np.stack([np.repeat(keys, counts), ids]), n)


def _distinct_without_loops(ei: np.ndarray, n: int) -> np.ndarray:
    """``ei`` without self loops, each edge once, sorted by (source, target)."""
    ei = ei[:, ei[0] != ei[1]]
    key = distinct_keys(ei[0], ei[1], n) if ei.size else np.empty(0, dtype=np.int64)
    return np.stack([key // n, key % n])


def _int_type(kind: type) -> bool:
    """Whether values of ``kind`` are integer ids (:func:`_is_int`)."""
    return issubclass(kind, (int, np.integer)) and not issubclass(kind, (bool, np.bool_))


def _walked_edges(graph: dict, path: Path, n: int) -> np.ndarray:
    """:func:`_edges` vertex by vertex: the first vertex whose id or list is at fault is named."""
    def out_of_range(vertex: int) -> GraphError:
        return file_error(path, f"vertex {vertex} is out of range for the {n} vertices of the features and labels")

    src, dst = [], []
    for key, neighbours in graph.items():
        try:
            if not _is_int(key) or not isinstance(neighbours, (list, tuple)) or not all(map(_is_int, neighbours)):
                raise TypeError
            v = operator.index(key)
            targets = [operator.index(u) for u in neighbours]
        except TypeError:
            raise file_error(path, f"vertex {repr(key)[:40]}: expected an integer id and a list of integer "
                                   "ids") from None
        if not 0 <= v < n:
            raise out_of_range(v)
        if targets and not 0 <= min(targets) <= max(targets) < n:  # Python ints: checked before numpy holds them
            raise out_of_range(min(targets) if min(targets) < 0 else max(targets))
        src.append(np.full(len(targets), v, dtype=np.int64))
        dst.append(np.asarray(targets, dtype=np.int64))
    ei = np.stack([np.concatenate(src or [np.empty(0, np.int64)]), np.concatenate(dst or [np.empty(0, np.int64)])])
    return _distinct_without_loops(ei, n)


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """PyG's ``NormalizeFeatures``: ``x - min(x)``, each row divided by its sum when that sum is at least 1.

    Shapes: ``[n, F] -> [n, F]``.
    """
    if x.size == 0:
        return x
    x = x - x.min()
    return x / np.maximum(x.sum(axis=1, keepdims=True), 1.0)


def _vertex_count(test: np.ndarray, num_all: int, files: dict[str, Path]) -> int:
    """``N``: the vertices of ``allx`` (``num_all``), then those up to the largest of ``test.index``, which lists the
    test vertices after ``allx``'s and leaves out at most as many as it lists (CiteSeer's 15 isolated ones of 1,015):
    one stray id must not make a million padding vertices (PyG's reader fails on it too)."""
    if test.min() < num_all:
        raise file_error(files["test.index"], f"test vertex {int(test.min())} is among the {num_all} vertices of "
                                              f"{files['allx'].name}")
    n = int(test.max()) + 1
    unlisted = n - num_all - test.size  # _test_index refused repeated ids
    if unlisted > test.size:
        raise file_error(files["test.index"], f"test vertex {n - 1:,} leaves {unlisted:,} vertices after the "
                                              f"{num_all:,} of {files['allx'].name} in neither file, more than the "
                                              f"{test.size:,} it lists (a stray vertex id?)")
    return n


def read_planetoid(source: PathLike, normalize_features: bool = False) -> Graph:
    """Read one Planetoid dataset with the public split of the GCN paper (see the module's description).

    Args:
        source: a directory holding one dataset's ``ind.NAME.*`` files, or the prefix ``DIR/ind.NAME``.
        normalize_features: row-normalize the features as PyG's ``NormalizeFeatures`` (default: as stored).
    Returns:
        a :class:`Graph` of ``N`` vertices (``max(test.index) + 1``), features ``[N, F]``, labels ``[N]`` in
        ``[0, C)``, and the train/val/test masks of the public split.
    """
    name, files = planetoid_files(source)
    loaded = {part: load_pickle(f) for part, f in files.items() if part != "test.index"}
    feats = {p: _matrix(loaded[p], files[p], "features") for p in ("x", "tx", "allx")}
    labels = {p: _matrix(loaded[p], files[p], "one-hot labels") for p in ("y", "ty", "ally")}
    test = _test_index(files["test.index"])
    num_train, num_all = labels["y"].shape[0], feats["allx"].shape[0]
    num_features, num_classes = feats["allx"].shape[1], labels["ally"].shape[1]
    if num_classes == 0:
        raise file_error(files["ally"], "no label column: one-hot labels need one column per class")
    for part, rows in (("x", num_train), ("ally", num_all), ("tx", test.size), ("ty", test.size)):
        arr = feats.get(part, labels.get(part))
        if arr.shape[0] != rows:
            src = {"x": "y", "ally": "allx", "tx": "test.index", "ty": "test.index"}[part]
            raise file_error(files[part], f"{arr.shape[0]} rows, but {files[src].name} has {rows}")
    for part in ("x", "tx"):
        if feats[part].shape[1] != num_features:
            raise file_error(files[part], f"{feats[part].shape[1]} feature columns, but {files['allx'].name} has "
                                    f"{num_features}")
    for part in ("y", "ty"):
        if labels[part].shape[1] != num_classes:
            raise file_error(files[part], f"{labels[part].shape[1]} label columns, but {files['ally'].name} has "
                                    f"{num_classes}")
    if num_train + NUM_VAL > num_all:
        raise file_error(files["allx"], f"{num_all} rows: the public split needs the {num_train} training and the "
                                  f"{NUM_VAL} validation vertices among them")
    n = _vertex_count(test, num_all, files)
    check_memory(files["test.index"], n * (num_features + num_classes) * 4 * 2,
                  f"the features and labels of its {n:,} vertices ({num_features:,} features, {num_classes:,} classes)")
    x = np.zeros((n, num_features), dtype=np.float32)
    x[:num_all], x[test] = feats["allx"], feats["tx"]
    onehot = np.zeros((n, num_classes), dtype=np.float32)
    onehot[:num_all], onehot[test] = labels["ally"], labels["ty"]
    y = onehot.argmax(axis=1).astype(np.int64)
    masks = {s: np.zeros(n, dtype=bool) for s in ("train", "val", "test")}
    masks["train"][:num_train] = True
    masks["val"][num_train:num_train + NUM_VAL] = True
    masks["test"][test] = True
    edge_index = _edges(loaded["graph"], files["graph"], n)
    if normalize_features:
        x = normalize_rows(x)
    graph = Graph(num_nodes=n, edge_index=edge_index, x=x, y=y, masks=masks, num_classes=num_classes, name=name,
                  meta={"format": "planetoid", "split": "public", "normalize_features": bool(normalize_features)})
    return graph.validate()
