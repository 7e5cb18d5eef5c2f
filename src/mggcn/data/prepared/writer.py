"""``mggcn prepare``: write any graph mggcn reads, once, as a prepared dataset directory
(:mod:`mggcn.data.prepared.reader`).

Sources:

* a file or directory in one of :data:`mggcn.data.formats.FORMATS`, with ``fmt`` (reader options such as ``features=``,
  ``labels=``, ``split=``, ``num_nodes=`` go through ``read_options``). ``edgelist`` files are streamed in chunks;
  the other formats are read whole by their reader, then written out like an in-memory graph;
* a generated spec: ``rmat:...`` is streamed (the same dataset as ``mggcn train rmat:...``, at any scale);
  ``synthetic:...`` is built in memory like ``mggcn train synthetic:...`` up to :data:`STREAM_MIN_EDGES` edges and
  streamed beyond (:func:`mggcn.data.generators.community_stream`); ``builtin:karate|digits`` in memory;
* a :class:`~mggcn.data.graph.Graph`, or a PyG ``Data`` with ``edge_index``, ``x``, ``y`` and the three masks.

Out of core: edges pass through in chunks into bucket files on disk, which are then sorted one at a time
(:mod:`mggcn.data.prepared.edgesort`), so the memory needed is set by ``memory_limit``, not by the edge count; only
per-vertex arrays (O(n·F) for features read from a file or generated) are held whole. Everything is written to a
temporary sibling directory, renamed to ``out_dir`` at the end: a failure never leaves a half-written ``out_dir``.

This module never imports torch (a process preparing a big graph under a tight memory limit cannot afford it).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mggcn.data import formats
from mggcn.data.generators import GENERATED_PREFIXES, GraphStream, is_generated, parse_spec, stream_spec
from mggcn.data.graph import SPLITS, Graph
from mggcn.data.prepared.edgesort import (
    CHUNK_BYTES_PER_EDGE,
    SORT_BYTES_PER_EDGE,
    EdgeSorter,
    EdgeSpill,
    NpyWriter,
)
from mggcn.data.prepared.outdir import PartialDir, output_dir
from mggcn.data.prepared.reader import (
    BALANCE_PARTS,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    is_prepared,
    layout_arrays,
    nnz_per_rank,
)
from mggcn.utils.errors import ConfigError, GraphError
from mggcn.utils.files import write_failure
from mggcn.utils.outputs import follow_umask
from mggcn.utils.progress import Progress
from mggcn.utils.units import parse_bytes

__all__ = ["prepare", "write_dataset", "parse_memory", "DEFAULT_MEMORY_LIMIT", "DEFAULT_CHUNK_EDGES",
           "STREAM_MIN_EDGES"]

DEFAULT_MEMORY_LIMIT = 2 << 30  # bytes for edge chunks and bucket sorts when no limit is given
DEFAULT_CHUNK_EDGES = 1 << 22
# synthetic: specs with more directed edges than this are streamed (community_stream) instead of built whole.
STREAM_MIN_EDGES = 1 << 24
_VERTEX_CHUNK_BYTES = 64 << 20


def parse_memory(text: str | int) -> int:
    """``"2G"``, ``"512M"``, ``"1.5g"``, ``"65536"`` -> bytes (:func:`~mggcn.utils.units.parse_bytes`), >= 1 MiB."""
    value = parse_bytes(text, "memory_limit")
    if value < 1 << 20:
        raise ConfigError(f"memory_limit: {value} bytes is below the 1 MiB minimum", "memory_limit")
    return value


# ----------------------------------------------------------------------------------------------------- sources


@dataclass
class _VertexData:
    y: np.ndarray  # int64 [n], or multi-label uint8 [n, C]
    masks: dict[str, np.ndarray]
    num_classes: int
    num_features: int
    x_chunks: Callable[[int], Iterator[np.ndarray]]  # rows per chunk -> float32 [<= rows, F] chunks


def _row_chunks(x: np.ndarray) -> Callable[[int], Iterator[np.ndarray]]:
    return lambda rows: (x[b:b + rows] for b in range(0, x.shape[0], rows))


@dataclass
class _Source:
    """One way of producing a graph: its edges as a stream of chunks, then its vertex data.

    ``num_nodes`` is ``None`` when only the edges tell it (an edge list without ``num_nodes``), ``max_edges`` is
    an upper bound of the edges ``edges`` yields. ``closure``: the graph is the symmetric, deduplicated closure of
    the streamed edges (generators). ``vertex_data(in_degree)`` runs once the CSRs are written (``in_degree()``
    reads their in-degrees); ``check(max_id) -> n`` runs before them, so bad vertex files fail before the long part.
    """

    name: str
    built: dict
    num_nodes: int | None
    max_edges: int | None
    edges: Callable[[int], Iterator[np.ndarray]]
    vertex_data: Callable[[Callable[[], np.ndarray]], _VertexData]
    closure: bool = False
    check: Callable[[int, int], int] = field(default=lambda max_id, num_edges: -1)


def _graph_source(graph: Graph, built: dict) -> _Source:
    graph.validate()

    def edges(chunk: int) -> Iterator[np.ndarray]:
        for begin in range(0, graph.num_edges, chunk):
            yield graph.edge_index[:, begin:begin + chunk]

    def vertex_data(in_degree: Callable[[], np.ndarray]) -> _VertexData:
        return _VertexData(graph.y, graph.masks, graph.num_classes, graph.num_features, _row_chunks(graph.x))

    return _Source(graph.name, built, graph.num_nodes, graph.num_edges, edges, vertex_data)


def _edgelist_source(path: Path, options: dict[str, Any], built: dict) -> _Source:
    layout = {k: options.pop(k) for k in ("delimiter", "comment") if k in options}
    num_nodes = options.get("num_nodes")
    unknown = set(options) - {"features", "labels", "split", "num_nodes", "num_classes", "seed", "num_features"}
    if unknown:
        raise GraphError(f"{path}: unknown edgelist option(s) {sorted(unknown)}")
    loaded: dict[str, Any] = {}

    def check(max_id: int, num_edges: int) -> int:
        n, x, y, masks, classes = formats.edgelist_vertex_data(path, max_id, num_edges=num_edges, **options)
        loaded.update(x=x, y=y, masks=masks, classes=classes)
        return n

    def vertex_data(in_degree: Callable[[], np.ndarray]) -> _VertexData:
        x = loaded["x"]
        return _VertexData(loaded["y"], loaded["masks"], loaded["classes"], x.shape[1], _row_chunks(x))

    # an id beyond the vertex files' rows is refused as the edges stream, naming its line
    bound, n_from = formats.known_vertex_count(num_nodes, options.get("features"), options.get("labels")) or (None, "")
    return _Source(str(path), built, num_nodes, None,
                   lambda chunk: formats.iter_edgelist_chunks(path, chunk, num_nodes=bound, n_from=n_from, **layout),
                   vertex_data, check=check)


def _stream_source(stream: GraphStream, built: dict) -> _Source:
    def vertex_data(in_degree: Callable[[], np.ndarray]) -> _VertexData:
        y, masks, x_chunks = stream.vertex_data(in_degree())
        return _VertexData(y, masks, stream.num_classes, stream.num_features, x_chunks)

    built = dict(built, generator={k: v for k, v in stream.meta.items() if isinstance(v, (int, float, str))})
    return _Source(stream.name, built, stream.num_nodes, stream.max_edges, stream.edges, vertex_data, closure=True)


def _open_source(source: Any, fmt: str | None, read_options: dict[str, Any], report: Progress | None = None
                 ) -> _Source:
    built: dict[str, Any] = {"format": fmt, "options": {k: str(v) if isinstance(v, os.PathLike) else v
                                                        for k, v in read_options.items()}}
    if isinstance(source, Graph):
        return _graph_source(source, dict(built, source=f"Graph {source.name}", format="graph"))
    if not isinstance(source, (str, os.PathLike)):
        if hasattr(source, "edge_index"):
            graph = formats.from_pyg(source, name=type(source).__name__)
            return _graph_source(graph, dict(built, source=f"PyG {type(source).__name__}", format="pyg"))
        raise GraphError(f"prepare: cannot read a {type(source).__name__}; give a path, a spec, a Graph or PyG Data")
    text = os.fspath(source)
    if fmt is None and is_generated(text):
        if read_options:
            raise GraphError(f"{text}: reader options {sorted(read_options)} are for files; a spec carries its own")
        built.update(source=text, format="spec")
        if not text.startswith("builtin"):
            stream = stream_spec(text)
            if text.startswith("rmat") or 2 * stream.max_edges > STREAM_MIN_EDGES:
                return _stream_source(stream, built)
        return _graph_source(parse_spec(text), built)
    if fmt is None and is_prepared(text):
        raise GraphError(f"{text}: already a prepared dataset: train on it as it is (mggcn train {text}), or copy "
                         "the directory for another")
    if fmt is None:
        raise ConfigError(f"{text}: not a generated dataset ({', '.join(GENERATED_PREFIXES)}); give the format "
                          f"of the file, one of {', '.join(formats.FORMATS)}", "format")
    formats.check_path(text, fmt)
    path = Path(text)
    built["source"] = str(path.resolve())
    if fmt == "edgelist":
        return _edgelist_source(path, dict(read_options), built)
    started = time.monotonic()
    graph = formats.read(path, fmt, **read_options)
    if report is not None:  # a whole file in memory before the first step: said, or its time is in none of them
        report.note(f"mggcn prepare: read {path.name} ({fmt}) whole in {time.monotonic() - started:.1f} s")
    return _graph_source(graph, built)


# ------------------------------------------------------------------------------------------------------ writer


def prepare(source: Any, out_dir: Any, fmt: str | None = None, undirected: bool = False, dedup: bool = False,
            memory_limit: int | str | None = None, chunk_edges: int = DEFAULT_CHUNK_EDGES, progress: bool = True,
            overwrite: bool = False, **read_options: Any) -> Path:
    """Write ``source`` as a prepared dataset directory ``out_dir``; returns its path.

    Args:
        source: a path (with ``fmt``), a spec string (``rmat:scale=20``, ``synthetic:n=...``, ``builtin:karate``),
            a :class:`~mggcn.data.graph.Graph`, or a PyG ``Data``.
        fmt: the layout of a path, one of :data:`mggcn.data.formats.FORMATS`.
        undirected: every edge in both directions, once each, as PyG's ``to_undirected`` makes it (the stored graph
            is then symmetric and one CSR serves A and Aᵀ; duplicates are dropped, as ``dedup`` drops them). A graph
            whose edges are already symmetric (GraphSAINT's ``adj_full``) is found so and stored once too.
        dedup: keep one copy of each (source, target) pair.
        memory_limit: bytes (or ``"2G"``) for edge chunks and bucket sorts; default :data:`DEFAULT_MEMORY_LIMIT`.
            Per-vertex arrays and the interpreter come on top.
        chunk_edges: edges read per chunk, at most (lowered to fit ``memory_limit``).
        progress: report progress on stderr (a tqdm bar on a terminal, plain lines otherwise).
        overwrite: replace an existing ``out_dir``.
        read_options: the reader's keyword arguments (e.g. ``features=``, ``labels=``, ``split=``, ``num_nodes=``).

    Raises:
        GraphError: bad input, naming the file and what is wrong; ``out_dir`` is then left as it was.
    """
    start = time.monotonic()
    out = output_dir(out_dir, source, overwrite)
    parent = out.parent
    budget = DEFAULT_MEMORY_LIMIT if memory_limit is None else parse_memory(memory_limit)
    chunk = max(1 << 10, min(chunk_edges, budget // CHUNK_BYTES_PER_EDGE))
    report = Progress(quiet=not progress, prefix="mggcn prepare", stream=sys.stderr)
    src = _open_source(source, fmt, read_options, report)
    try:
        partial = PartialDir(out)
    except OSError as exc:
        raise GraphError(f"{out}: cannot create it in {parent} ({exc.strerror or exc})") from None
    for stale in partial.removed:
        report.note(f"mggcn prepare: removed {stale}, left by a prepare that was stopped before it finished")
    tmp = partial.path
    try:
        undirected = undirected or src.closure
        dedup = dedup or undirected  # PyG's to_undirected: each edge once per direction (see formats.transform)
        manifest = _write(src, tmp, undirected, dedup, budget, chunk, report)
        manifest["built"].update(undirected=undirected, dedup=dedup,
                                 memory_limit=budget, chunk_edges=chunk,
                                 seconds=round(time.monotonic() - start, 3))
        with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
        partial.install(source, overwrite)
    except OSError as exc:
        why = write_failure(exc, parent)  # before the partial files are removed: a full disk looks full
        partial.discard()
        raise GraphError(f"{exc.filename or out}: cannot write the prepared dataset ({why})") from None
    except BaseException:
        partial.discard()
        raise
    return out


def _spill_edges(src: _Source, spill: EdgeSpill, chunk: int, report: Progress) -> None:
    with report.step(f"reading {src.name}") as step:
        for ei in src.edges(chunk):
            spill.add(ei)
            step.update(ei.shape[1])


def _write(src: _Source, tmp: Path, undirected: bool, dedup: bool, budget: int, chunk: int,
           report: Progress) -> dict:
    work = tmp / "work"
    work.mkdir()
    n, max_edges, max_id = src.num_nodes, src.max_edges, -1
    spill = None
    try:
        if n is None or max_edges is None:
            # The bucket ranges need n, and their number E: keep the edges on disk until the stream has told both.
            spill = EdgeSpill(work / "edges.spill")
            _spill_edges(src, spill, chunk, report)
            max_id, max_edges = spill.max_id, spill.count
        checked = src.check(max_id, max_edges)  # vertex files are read (and refused) before the long part
        n = checked if n is None else n
        sorter = EdgeSorter(work, n, max_edges, undirected=undirected, dedup=dedup,
                            bucket_edges=max(1 << 10, budget // SORT_BYTES_PER_EDGE), progress=report)
        if spill is not None:
            with report.step("bucketing edges", spill.count) as step:
                for ei in spill.chunks(chunk):
                    sorter.add(ei)
                    step.update(ei.shape[1])
        else:
            with report.step(f"reading {src.name}", max_edges) as step:
                for ei in src.edges(chunk):
                    _check_ids(ei, n, src.name)
                    sorter.add(ei)
                    step.update(ei.shape[1])
    finally:  # also when the source fails partway: the spill's file is closed and removed
        if spill is not None:
            spill.close()
    csr = sorter.finish(tmp)
    shutil.rmtree(work)
    symmetric = sorter.symmetric or _same_csrs(csr.arrays, tmp)

    def in_degree() -> np.ndarray:
        return np.diff(np.load(tmp / "in_indptr.npy", mmap_mode="r"))

    vd = src.vertex_data(in_degree)
    arrays = dict(csr.arrays)
    arrays.update(_write_vertex_data(vd, n, tmp, report))

    codes = np.load(tmp / "split.npy", mmap_mode="r")
    split_sizes = {s: int(np.count_nonzero(codes == k)) for k, s in enumerate(SPLITS)}
    balance = {}
    for p in BALANCE_PARTS:
        if p <= n:
            a, at = nnz_per_rank(csr.hat_nnz_in, p), nnz_per_rank(csr.hat_nnz_out, p)
            balance[str(p)] = {"adj_max": int(a.max()), "adj_t_max": int(at.max()), "mean": float(a.sum()) / p}
    return {
        "format": FORMAT_NAME, "format_version": 1, "name": src.name,
        "num_nodes": n, "num_edges": csr.num_edges, "num_features": vd.num_features, "num_classes": vd.num_classes,
        "split_sizes": split_sizes, **_label_fields(vd.y),
        "symmetric": symmetric, "self_loops": csr.self_loops, "nnz_hat": int(csr.hat_nnz_in.sum()),
        "balance": balance,
        "built": dict(src.built, mggcn_version=_mggcn_version(),
                      created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")),
        "arrays": arrays,
    }


def _same_csrs(arrays: dict[str, dict], tmp: Path) -> bool:
    """Whether the out-CSR came out byte for byte the in-CSR (a symmetric graph read as directed edges, as GraphSAINT's
    ``adj_full`` is): then its files are dropped and the dataset says ``"symmetric": true``, so that a rank stores
    one set of blocks for Â and Âᵀ. The files' sha256 decide (both CSRs list each row's neighbours in order)."""
    def record(name: str) -> tuple:
        r = arrays[name]
        return r["dtype"], tuple(r["shape"]), r["sha256"]

    if "out_indices" not in arrays or any(record(f"in_{k}") != record(f"out_{k}") for k in ("indptr", "indices")):
        return False
    for k in ("indptr", "indices"):
        (tmp / arrays.pop(f"out_{k}")["file"]).unlink()
    return True


def _mggcn_version() -> str:
    # From the package metadata, not mggcn.__version__: importing the package would import the trainer (torch).
    try:
        return importlib.metadata.version("mggcn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _check_ids(ei: np.ndarray, n: int, name: str) -> None:
    if ei.size and (int(ei.min()) < 0 or int(ei.max()) >= n):
        bad = int(ei.min()) if int(ei.min()) < 0 else int(ei.max())
        raise GraphError(f"{name}: edge endpoint {bad} is out of range for {n} vertices")


def _label_fields(labels: np.ndarray) -> dict[str, Any]:
    """What the manifest says of the labels: ``num_labelled``, and ``"multilabel": true`` for a label matrix
    ``[n, C]`` (every vertex labelled), absent for one class per vertex, so that such a manifest reads as before;
    the format version they need (2 for a matrix, so that an older mggcn says it is too old for it)."""
    if labels.ndim == 2:
        return {"format_version": FORMAT_VERSION, "num_labelled": int(labels.shape[0]), "multilabel": True}
    return {"format_version": 1, "num_labelled": int(np.count_nonzero(np.asarray(labels) >= 0))}


def _write_vertex_data(vd: _VertexData, n: int, tmp: Path, report: Progress) -> dict[str, dict]:
    if vd.y.shape[:1] != (n,):
        raise GraphError(f"{len(vd.y)} labels for {n} vertices")
    arrays = {}
    x = NpyWriter(tmp / "features.npy", np.float32, (vd.num_features,))
    try:
        with report.step("writing features", n, unit="rows") as step:
            for rows in vd.x_chunks(max(1, _VERTEX_CHUNK_BYTES // (4 * max(1, vd.num_features)))):
                if not np.isfinite(rows).all():
                    raise GraphError(f"the features contain NaN or inf (first in row "
                                     f"{x.rows + int(np.argmax(~np.isfinite(rows).all(axis=1)))})")
                x.write(rows)
                step.update(rows.shape[0])
    except BaseException:
        x.abort()
        raise
    if x.rows != n:
        x.abort()
        raise GraphError(f"{x.rows} feature rows for {n} vertices")
    arrays["features"] = x.close()
    codes = np.full(n, -1, dtype=np.int8)
    for k, s in enumerate(SPLITS):
        codes[vd.masks[s]] = k
    labels = vd.y.astype(np.uint8 if vd.y.ndim == 2 else np.int64, copy=False)
    for name, arr in (("labels", labels), ("split", codes)):
        w = NpyWriter(tmp / f"{name}.npy", arr.dtype, arr.shape[1:])
        w.write(arr)
        arrays[name] = w.close()
    return arrays


# ------------------------------------------------------------------------------------------ a dataset in memory

_WRITE_ROWS = 1 << 22  # CSR rows (or vertex rows) examined at a time when counting distinct neighbours


def _hat_nnz(indptr: np.ndarray, indices: np.ndarray, loops: np.ndarray) -> np.ndarray:
    """Nonzeros of each row of Â (distinct neighbours other than the row itself, plus one) of a CSR whose rows are
    sorted, given how many self loops each row holds: the runs of equal columns, counted through a running sum."""
    n = indptr.size - 1
    starts = np.ones(indices.size, dtype=bool)
    if indices.size:
        np.not_equal(indices[1:], indices[:-1], out=starts[1:])
        starts[indptr[:-1][np.diff(indptr) > 0]] = True  # every row starts a run
    runs = np.zeros(indices.size + 1, dtype=np.int64)
    np.cumsum(starts, out=runs[1:])
    del starts
    distinct = runs[indptr[1:]] - runs[indptr[:-1]]
    return distinct - (loops > 0) + 1 if n else distinct


def write_dataset(dataset: Any, out_dir: Any, checksums: bool = True, built: dict | None = None,
                  fingerprint: str | None = None) -> Path:
    """Write a dataset that is in memory (:class:`~mggcn.data.datasets.GeneratedDataset`, ``InMemoryDataset``: any
    :class:`~mggcn.data.datasets.Dataset` with sorted CSR rows) as a prepared directory ``out_dir``, array by array:
    no sort, the speed of the disk (or of memory, under ``/dev/shm``). ``checksums=False`` leaves out the sha256
    of each array (a directory that only this job's workers read); ``fingerprint``, the dataset's own identity
    (:attr:`~mggcn.data.datasets.InMemoryDataset.fingerprint`), is then recorded for checkpoints to compare.

    ``out_dir`` must not exist; it is written in a sibling and renamed at the end, as :func:`prepare` does.
    """
    out = Path(out_dir).absolute()
    if out.exists():
        raise ConfigError(f"{out}: already exists", "out_dir")
    if not out.parent.is_dir():
        raise GraphError(f"{out}: the parent directory {out.parent} does not exist")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        arrays, n = dataset.arrays, dataset.num_nodes
        records = {}
        for name in layout_arrays(dataset.symmetric):
            array = np.asarray(arrays[name])
            writer = NpyWriter(tmp / f"{name}.npy", array.dtype, array.shape[1:], checksum=checksums)
            for begin in range(0, max(1, array.shape[0]), _WRITE_ROWS):
                writer.write(array[begin:begin + _WRITE_ROWS])
            records[name] = writer.close()
        # a vertex's self loops: its in-edges but those the stored degree counts (all but self loops, plus one)
        loops = np.diff(arrays["in_indptr"]) + 1 - np.asarray(arrays["degree"])
        hat_in = _hat_nnz(arrays["in_indptr"], arrays["in_indices"], loops)
        hat_out = hat_in if dataset.symmetric else _hat_nnz(arrays["out_indptr"], arrays["out_indices"], loops)
        balance = {}
        for p in BALANCE_PARTS:
            if p <= n:
                a, at = nnz_per_rank(hat_in, p), nnz_per_rank(hat_out, p)
                balance[str(p)] = {"adj_max": int(a.max()), "adj_t_max": int(at.max()), "mean": float(a.sum()) / p}
        manifest = {
            "format": FORMAT_NAME, "format_version": 1, "name": dataset.name,
            "num_nodes": n, "num_edges": dataset.num_edges, "num_features": dataset.num_features,
            "num_classes": dataset.num_classes, "split_sizes": dict(dataset.split_sizes),
            **_label_fields(arrays["labels"]),
            "symmetric": bool(dataset.symmetric), "self_loops": int(loops.sum()), "nnz_hat": int(hat_in.sum()),
            "balance": balance, "arrays": records,
            "built": dict(built or {}, mggcn_version=_mggcn_version(), source=dataset.name, format="memory",
                          created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")),
        }
        if fingerprint is not None:
            manifest["fingerprint"] = fingerprint
        with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
        follow_umask(tmp, directory=True)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
