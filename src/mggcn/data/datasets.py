"""Dataset specs on the command line and in the API, and the one interface the trainer reads datasets through.

``DATASET`` may be:

* ``synthetic[:key=value,...]`` — the built-in community graph (the default dataset), ``rmat:...``,
  ``builtin:karate``, ``builtin:digits`` — generated, or read from data shipped inside packages, no file needed;
* a file or directory in a known layout, with ``--format`` (see :mod:`mggcn.data.formats`), read whole;
* a directory written by ``mggcn prepare`` (:mod:`mggcn.data.prepared.reader`), from which each rank reads only its
rows;
* a name of :data:`mggcn.data.catalog.CATALOG` (``cora``, ``ogbn-products``, ``reddit``, ...) that is no path here:
  downloaded, checked and prepared once into the cache (:func:`named_dataset_dir`), then read as a prepared directory.

A :class:`Dataset` tells the launcher its sizes (checked before any worker starts) and holds the graph as arrays
that a rank reads only its rows of: :func:`mggcn.distributed.sharding.build_shard` cuts each rank's shard from them,
the same way for every dataset. :class:`InMemoryDataset` builds them from a whole :class:`Graph`; a dataset prepared
on disk (:class:`mggcn.data.prepared.reader.PreparedDataset`) memory-maps them, so a rank reads only its share.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mggcn.config import DEFAULT_DATASET
from mggcn.data.catalog import CATALOG, NamedDataset, cache_dir, find, named
from mggcn.data.csr import MAX_KEY_NODES, directed_csr
from mggcn.data.generators.common import GeneratedGraph
from mggcn.data.generators.spec import generate_spec, is_generated
from mggcn.data.graph import SPLITS, Graph
from mggcn.utils.errors import ConfigError, GraphError
from mggcn.utils.files import link_to_nothing

__all__ = ["ROW_ARRAYS", "Dataset", "GeneratedDataset", "InMemoryDataset", "cache_copy_error", "cached_state",
           "check_not_named", "graph_arrays", "layout_fingerprint", "load_graph", "named_dataset_dir", "open_dataset",
           "split_codes"]

# The arrays a dataset holds (n vertices, E edges, F features; original ids), the layout of a prepared directory:
ROW_ARRAYS = {
    "in_indptr": "int64 [n+1]: CSR of A by target (in-edges)",
    "in_indices": "int32|int64 [E]: the sources of each target's in-edges, parallel edges repeated, self loops kept",
    "out_indptr": "int64 [n+1]: CSR of A by source (rows of Aᵀ); the in_ arrays themselves when A is symmetric",
    "out_indices": "int32|int64 [E]: the targets of each source's out-edges",
    "degree": "int64 [n]: in-edges other than self loops plus one, the row sums of A + I",
    "features": "float32 [n, F]",
    "labels": "int64 [n]: -1 = unlabelled; multi-label: uint8 [n, C] of 0/1, every vertex labelled",
    "split": "int8 [n]: 0 train, 1 val, 2 test, -1 none",
}


class Dataset(Protocol):
    """What the trainer needs of a dataset: its sizes, and the :data:`ROW_ARRAYS` a rank reads its rows of.

    ``arrays`` maps each name of :data:`ROW_ARRAYS` to an array (or a read-only memory map) indexed by original
    vertex id; ``symmetric`` says that A = Aᵀ (the ``out_`` arrays are then the ``in_`` arrays); ``split_sizes``
    counts the vertices of each split in the whole graph; ``multilabel`` says that the labels are a 0/1 matrix
    ``[n, C]`` (``num_classes`` = C), not one class per vertex.
    """

    name: str
    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    multilabel: bool
    symmetric: bool
    split_sizes: dict[str, int]
    arrays: dict[str, np.ndarray]

    def source(self, array: str) -> str:
        """Where ``array`` comes from (a file of a prepared dataset), for the errors that name it."""
        ...


_CHUNK = 1 << 16  # edges converted at a time by the lexsort path (temporaries of 512 KiB)


def _csr(keys: np.ndarray, values: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)``: the ``values`` grouped by ``keys``, each group in increasing order; the indices int32
    when the ids fit (as a prepared dataset stores them). Sorted as int64 keys ``key · n + value`` on every core
    (:func:`mggcn.data.csr.directed_csr`); where those would overflow, by ``np.lexsort``."""
    if num_nodes <= MAX_KEY_NODES:
        csr = directed_csr(keys, values, num_nodes)
        return csr.indptr, csr.indices
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=num_nodes), out=indptr[1:])
    indices = np.empty(values.shape[0], dtype=np.int64)
    order = np.lexsort((values, keys))
    for start in range(0, values.shape[0], _CHUNK):
        indices[start:start + _CHUNK] = values[order[start:start + _CHUNK]]
    return indptr, indices


def edge_arrays(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[dict[str, np.ndarray], bool]:
    """The CSRs and degrees of :data:`ROW_ARRAYS` of the edges ``src -> dst``, and whether A = Aᵀ (same edges both
    ways, multiplicity too). One CSR at a time is being sorted; a symmetric graph keeps one."""
    n = num_nodes
    in_indptr, in_indices = _csr(dst, src, n)
    out_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=out_indptr[1:])
    symmetric = bool(np.array_equal(in_indptr, out_indptr))
    if symmetric:  # the same row lengths: compare the rows themselves
        out_indptr, out_indices = _csr(src, dst, n)
        symmetric = bool(np.array_equal(in_indices, out_indices))
        if symmetric:
            out_indptr, out_indices = in_indptr, in_indices
    else:
        out_indptr, out_indices = _csr(src, dst, n)
    loops = src == dst
    degree = np.bincount(dst, minlength=n) - np.bincount(dst[loops], minlength=n) + 1  # in-edges but self loops, + 1
    return {"in_indptr": in_indptr, "in_indices": in_indices, "out_indptr": out_indptr, "out_indices": out_indices,
            "degree": degree.astype(np.int64, copy=False)}, symmetric


def split_codes(masks: dict[str, np.ndarray], num_nodes: int) -> np.ndarray:
    """The ``split`` array of :data:`ROW_ARRAYS`: int8, 0 train, 1 val, 2 test, -1 none."""
    split = np.full(num_nodes, -1, dtype=np.int8)
    for code, s in enumerate(SPLITS):
        split[masks[s]] = code
    return split


def vertex_arrays(graph: Graph) -> dict[str, np.ndarray]:
    """The features, labels and split codes of :data:`ROW_ARRAYS` (the graph's own arrays, but the split)."""
    return {"features": graph.x, "labels": graph.y, "split": split_codes(graph.masks, graph.num_nodes)}


def graph_arrays(graph: Graph) -> tuple[dict[str, np.ndarray], bool]:
    """The :data:`ROW_ARRAYS` of an in-memory graph, and whether A = Aᵀ (:func:`edge_arrays`)."""
    src, dst = graph.edge_index
    arrays, symmetric = edge_arrays(src, dst, graph.num_nodes)
    return {**arrays, **vertex_arrays(graph)}, symmetric


def _narrow(ids: np.ndarray, num_nodes: int) -> np.ndarray:
    """``ids`` as int32 when every vertex id fits (a copy of half the bytes), else as they are."""
    return ids.astype(np.int32) if num_nodes < 2**31 else ids


def layout_fingerprint(dataset: Dataset) -> str:
    """The fingerprint of a dataset in memory: that of its prepared directory
    (:func:`~mggcn.data.prepared.reader.arrays_fingerprint` of the sha256 of each array it would write, in the layout
    it writes them), so that a checkpoint knows a graph read from its files and its prepared directory as one."""
    from mggcn.data.prepared.reader import arrays_fingerprint, layout_arrays

    return arrays_fingerprint({name: hashlib.sha256(np.ascontiguousarray(dataset.arrays[name]).reshape(-1)
                                                    .view(np.uint8)).hexdigest()  # C order; empty arrays too
                               for name in layout_arrays(dataset.symmetric)})


class GeneratedDataset:
    """A generated dataset in memory (:class:`~mggcn.data.generators.common.GeneratedGraph`), implementing
    :class:`Dataset` on the generator's own CSR: the graph is undirected and simple, so that CSR is A's and Aᵀ's, and
    nothing is sorted again."""

    symmetric = True
    multilabel = False  # the generators label each vertex with one class

    def __init__(self, generated: GeneratedGraph) -> None:
        g = generated
        self.name, self.num_nodes, self.num_edges = g.name, g.num_nodes, g.csr.nnz
        self.num_features, self.num_classes = int(g.x.shape[1]), g.num_classes
        self.split_sizes = {s: int(g.masks[s].sum()) for s in SPLITS}
        indptr, indices = g.csr.indptr, g.csr.indices
        degree = np.diff(indptr)
        degree += 1  # no self loop: every in-edge counts, and the unit loop of Â
        self._arrays: dict[str, np.ndarray] | None = {
            "in_indptr": indptr, "in_indices": indices, "out_indptr": indptr, "out_indices": indices,
            "degree": degree, "features": g.x, "labels": g.y, "split": split_codes(g.masks, g.num_nodes)}
        self._generated: GeneratedGraph | None = generated
        self._fingerprint: str | None = None

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            raise RuntimeError(f"{self.name}: released (GeneratedDataset.release); generate the dataset again")
        return self._arrays

    @property
    def fingerprint(self) -> str:
        """As :attr:`InMemoryDataset.fingerprint` (:func:`layout_fingerprint`)."""
        if self._fingerprint is None:
            self._fingerprint = layout_fingerprint(self)
        return self._fingerprint

    def to_graph(self) -> Graph:
        if self._generated is None:
            raise RuntimeError(f"{self.name}: released (GeneratedDataset.release); generate the dataset again")
        return self._generated.to_graph()

    def release(self) -> None:
        self._arrays, self._generated = None, None

    def source(self, array: str) -> str:
        return f"{self.name} ({array})"


class InMemoryDataset:
    """A whole :class:`Graph` in memory, implementing :class:`Dataset` (its arrays are built on first use).

    ``owned``: nothing else holds ``graph`` (:func:`open_dataset` read it): building the arrays then lets go of the
    graph, its int64 edges narrowed to int32 first and dropped before the CSRs are sorted, so that the process holds
    the arrays a rank reads its shard from, not the graph besides. The fingerprint hashes those arrays when asked
    (about 1 GB/s, a fraction of reading them).
    """

    def __init__(self, graph: Graph, owned: bool = False) -> None:
        self.graph: Graph | None = graph
        self.name, self.num_nodes, self.num_edges = graph.name, graph.num_nodes, graph.num_edges
        self.num_features, self.num_classes = graph.num_features, graph.num_classes
        self.multilabel = graph.multilabel
        self.split_sizes = {s: int(graph.masks[s].sum()) for s in SPLITS}
        self._owned = owned
        self._arrays: tuple[dict[str, np.ndarray], bool] | None = None
        self._fingerprint: str | None = None

    @property
    def fingerprint(self) -> str:
        """Identifies the content (edges, features, labels, splits; not where they were read from): a checkpoint
        refuses another dataset, and accepts this one however its path is spelled, and its prepared directory
        (:func:`layout_fingerprint`). Hashed once, when asked."""
        if self._fingerprint is None:
            self._fingerprint = layout_fingerprint(self)
        return self._fingerprint

    def _graph(self) -> Graph:
        if self.graph is None:
            raise RuntimeError(f"{self.name}: released (InMemoryDataset.release); open the dataset again")
        return self.graph

    def _built(self) -> tuple[dict[str, np.ndarray], bool]:
        if self._arrays is None:
            if not self._owned:
                self._arrays = graph_arrays(self._graph())
            else:
                graph, self.graph = self._graph(), None
                vertex, n = vertex_arrays(graph), graph.num_nodes
                src, dst = _narrow(graph.edge_index[0], n), _narrow(graph.edge_index[1], n)
                del graph  # the int64 edges go
                arrays, symmetric = edge_arrays(src, dst, n)
                self._arrays = {**arrays, **vertex}, symmetric
        return self._arrays

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        return self._built()[0]

    @property
    def symmetric(self) -> bool:
        return self._built()[1]

    def release(self) -> None:
        """Drop the graph and its arrays once this process has cut its shard: a rank keeps only its shard.

        The sizes stay; reading the arrays raises afterwards. (A :class:`Graph` the caller holds stays alive through
        the caller's reference, not this one.)
        """
        self.graph, self._arrays = None, None

    def source(self, array: str) -> str:
        return f"{self.name} ({array})"


def load_graph(spec: str = DEFAULT_DATASET, fmt: str | None = None, undirected: bool = False,
               dedup: bool = False, read_options: dict[str, Any] | None = None) -> Graph:
    """Read or generate the dataset ``spec`` whole and check it (raises :class:`GraphError` naming what is wrong)."""
    entry = named(spec) if fmt is None else None
    if entry is not None:
        from mggcn.data import formats
        from mggcn.data.download import dataset_lock, fetch

        options = _named_options(entry, read_options)  # before the download: an option it refuses costs nothing
        with dataset_lock(entry):
            path = fetch(entry)
        graph = formats.read(path, entry.fmt, **options)
        undirected = undirected or entry.undirected
    elif is_generated(spec) and fmt is None:
        from mggcn.data.generators.spec import parse_spec

        given = list(_given(read_options))
        if given:  # the command line refuses these too: ignored, they would train on data the caller did not mean
            raise ConfigError(f"{spec}: a built-in or generated dataset takes no {given[0]} (it makes its own "
                              "vertex data); to train on your files, give their path", given[0])
        graph = parse_spec(spec)
    else:
        from mggcn.data import formats

        if fmt is None:
            raise _not_a_dataset(spec)
        if is_generated(spec) and not os.path.exists(spec):
            raise GraphError(f"{spec}: a built-in dataset, which takes no fmt=; fmt={fmt} is for a path", "fmt")
        check_not_named(spec, fmt)
        formats.check_path(spec, fmt)
        graph = formats.read(spec, fmt, **(read_options or {}))
    if undirected or dedup:
        from mggcn.data.formats import transform

        graph = transform(graph, undirected=undirected, dedup=dedup)
    return graph.validate()


def check_not_named(spec: str, fmt: str | None) -> None:
    """Raise :class:`GraphError` when ``spec``, given a format, is no path but a name of the catalog."""
    if fmt is not None and find(spec) is not None and not os.path.exists(spec):
        raise GraphError(f"{spec}: a dataset known by name (`mggcn datasets`), which takes no fmt=; fmt={fmt} is for "
                         "a path", "fmt")


def _not_a_dataset(spec: str) -> GraphError:
    """What is wrong with ``spec`` given without a format (``fmt``), and what to give instead (one line)."""
    from mggcn.data.formats import FORMATS

    built_in = "synthetic[:n=...], rmat:scale=..., builtin:karate or builtin:digits"
    nothing = link_to_nothing(spec)  # a link on the way that loops or leads nowhere
    if nothing is not None:
        return GraphError(nothing)
    if not os.path.exists(spec):
        return GraphError(f"{spec}: no such file or directory, and not a built-in dataset ({built_in}) nor a named one "
                          f"({', '.join(CATALOG)}; `mggcn datasets` lists them)")
    if os.path.isdir(spec):
        return GraphError(f"{spec}: a directory that is not a prepared dataset (no manifest.json); for files in "
                          f"another layout give fmt= ({', '.join(FORMATS)}), or write one with `mggcn prepare {spec} "
                          "OUT_DIR --format F`", "fmt")
    return GraphError(f"{spec}: a file: give its layout with fmt= ({', '.join(FORMATS)})", "fmt")


def cache_copy_error(exc: GraphError, name: str, path: str) -> GraphError:
    """``exc``, raised on the cache's prepared copy of the named dataset ``name`` at ``path``, with what "prepare it
    again" means for that copy: delete it, and run again."""
    return GraphError(f"{exc}; it is the cache's copy of {name}: delete {path}, and run again to prepare it again",
                      exc.option)


def open_dataset(spec: str | Graph = DEFAULT_DATASET, fmt: str | None = None, undirected: bool = False,
                 dedup: bool = False, read_options: dict[str, Any] | None = None, progress: bool = True) -> Dataset:
    """The :class:`Dataset` behind ``spec`` (a spec string, a path, or a :class:`Graph` already in memory).

    A directory holding a ``manifest.json`` (without ``fmt``, or with ``fmt="prepared"``) is a prepared dataset
    (:class:`mggcn.data.prepared.reader.PreparedDataset`): each rank then reads only its own rows. A dataset known
    by name (``cora``, ``ogbn-products``, ...) is downloaded and prepared in the cache the first time, with progress
    on stderr unless ``progress`` is False.
    """
    if isinstance(spec, Graph):
        return InMemoryDataset(_in_memory(spec, fmt, undirected, dedup, read_options))
    from mggcn.data.prepared.reader import PreparedDataset, is_prepared

    entry = named(spec) if fmt is None else None
    if entry is not None:
        path = named_dataset_dir(entry, undirected, dedup, read_options, progress)
        try:
            return PreparedDataset(path)
        except GraphError as exc:
            raise cache_copy_error(exc, entry.name, path) from None
    if fmt == "prepared" or (fmt is None and is_prepared(spec)):
        if undirected or dedup or read_options:
            given = ["undirected"] * undirected + ["dedup"] * dedup + list(read_options or {})
            raise ConfigError(f"{spec}: {', '.join(given)} cannot change a prepared dataset; "
                              "give them when preparing it instead", given[0])
        return PreparedDataset(spec)
    if fmt is None and is_generated(spec) and not read_options:
        return GeneratedDataset(generate_spec(spec))  # symmetric and simple: undirected and dedup change nothing
    return InMemoryDataset(load_graph(spec, fmt, undirected, dedup, read_options), owned=True)


def _in_memory(graph: Graph, fmt: str | None, undirected: bool, dedup: bool,
               read_options: dict[str, Any] | None) -> Graph:
    """A graph given in memory, with ``undirected`` and ``dedup`` applied as to one read from a file; the options
    that read files (``fmt``, ``features``, ``normalize_features``, ...) are refused rather than ignored."""
    given = ([f"fmt={fmt}"] if fmt is not None else []) + list(read_options or {})
    if given:
        raise ConfigError(f"{', '.join(given)}: a graph in memory is read from no file; give its data on the graph "
                          "itself (x, y, the masks)", "fmt" if fmt is not None else given[0])
    graph = graph.validate()
    if undirected or dedup:
        from mggcn.data.formats import transform

        graph = transform(graph, undirected=undirected, dedup=dedup).validate()
    return graph


def _given(read_options: dict[str, Any] | None) -> dict[str, Any]:
    """The reader options given: None, and False (a switch left off, ``normalize_features=False``), are none."""
    return {k: v for k, v in (read_options or {}).items() if v is not None and v is not False}


def _named_options(entry: NamedDataset, read_options: dict[str, Any] | None) -> dict[str, bool]:
    """The reader options a named dataset takes: ``normalize_features`` of a Planetoid one; its files carry the
    rest (features, labels, split)."""
    options = _given(read_options)
    for key in options:
        if not (key == "normalize_features" and entry.fmt == "planetoid"):
            raise ConfigError(f"{entry.name}: a named dataset takes no {key} (its files carry their vertex data)", key)
    return {k: True for k, v in options.items() if v}


def named_dataset_dir(entry: NamedDataset, undirected: bool = False, dedup: bool = False,
                      read_options: dict[str, Any] | None = None, progress: bool = True) -> Path:
    """The prepared directory of a named dataset in the cache (``CACHE/prepared/NAME``, ``+undirected+dedup``,
    ``+dedup``, ``+normalize_features`` after the name for those variants), downloaded and prepared the first time.

    Raises:
        DownloadError: (a :class:`GraphError`) its files could not be fetched; the message says which URLs to
            download by hand and the directory to put them in.
    """
    from mggcn.data.download import dataset_lock, fetch
    from mggcn.data.prepared.reader import is_prepared
    from mggcn.data.prepared.writer import prepare

    options = _named_options(entry, read_options)
    undirected = undirected and not entry.undirected  # already added: the same dataset
    dedup = dedup or undirected  # as prepare makes an undirected graph (PyG's to_undirected): one copy for both
    suffix = "".join(f"+{key}" for key, on in (("undirected", undirected), ("dedup", dedup), *options.items()) if on)
    out = cache_dir() / "prepared" / f"{entry.name}{suffix}"
    if is_prepared(out):
        return out
    with dataset_lock(entry, progress):
        if not is_prepared(out):  # another process may have prepared it while this one waited
            _check_not_in_the_way(out)
            source = fetch(entry, progress)
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise GraphError(f"{out.parent}: cannot create it ({exc.strerror or exc}); set MGGCN_DATA to a "
                                 "writable directory") from None
            if progress:
                print(f"mggcn: {entry.name}: preparing {out} once; later runs read it", file=sys.stderr, flush=True)
            prepare(source, out, fmt=entry.fmt, undirected=undirected or entry.undirected, dedup=dedup,
                    progress=progress, overwrite=out.exists(), **options)
    return out


def _check_not_in_the_way(out: Path) -> None:
    """Raise :class:`GraphError` when something that is no prepared dataset (a file, a directory holding files) is
    where the cache's prepared copy goes: it is not ours to replace, and ``prepare``'s own refusal would point at an
    ``--overwrite`` that ``train NAME`` does not have."""
    from mggcn.data.prepared.outdir import replaceable

    if (out.exists() or out.is_symlink()) and not replaceable(out):
        raise GraphError(f"{out}: in the cache, but not a prepared dataset (no manifest.json); delete it, and run "
                         "again to prepare it there")


def cached_state(entry: NamedDataset) -> str:
    """How much of a named dataset the cache holds: ``prepared``, ``downloaded`` (its files, checked or extracted,
    not yet prepared), ``partial`` (a download to continue), or ``no``."""
    from mggcn.data.catalog import download_dir
    from mggcn.data.download import raw_dir
    from mggcn.data.prepared.reader import is_prepared

    folder = download_dir(entry)
    try:
        if is_prepared(cache_dir() / "prepared" / entry.name):
            return "prepared"
        if (entry.archive and raw_dir(entry).is_dir()) or all((folder / f.name).is_file() for f in entry.files):
            return "downloaded"
        if any((folder / f"{f.name}.part").is_file() or (folder / f.name).is_file() for f in entry.files):
            return "partial"
    except OSError as exc:  # a name too long, a folder without permission: the cache's place is at fault
        raise GraphError(f"{exc.filename or folder}: cannot read the dataset cache ({exc.strerror or exc}); set "
                         "MGGCN_DATA to a readable directory") from None
    return "no"


def as_dataset(dataset: Any) -> str | Graph:
    """A dataset spec or path (``str`` or ``os.PathLike``), a :class:`Graph`, or a PyG ``Data`` (converted)."""
    if isinstance(dataset, (str, Graph)):
        return dataset
    if isinstance(dataset, os.PathLike):
        return os.fspath(dataset)
    if hasattr(dataset, "edge_index"):
        from mggcn.data.formats import from_pyg

        return from_pyg(dataset)
    raise TypeError(f"dataset must be a spec string, a path, a mggcn.Graph or a PyG Data, got {type(dataset).__name__}")
