"""The bench's graph: generated once (a degree-corrected block model on every core), written where every
configuration reads it, and described for the report.

The graph is a prepared directory (:mod:`mggcn.data.prepared`: int32 CSR and float32 features), which mggcn's ranks
open by memory map (each reads its share) and PyG's process reads whole; with ``--saint-graph`` a GraphSAINT
directory instead, prepared once for mggcn.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from mggcn.data.datasets import GeneratedDataset, InMemoryDataset
from mggcn.data.generators.common import GeneratedGraph
from mggcn.data.graph import Graph
from mggcn.data.prepared.outdir import PartialDir, remove_stale
from mggcn.tools.bench.memory import peak_rss
from mggcn.tools.bench.options import BenchOptions
from mggcn.utils.errors import ConfigError
from mggcn.utils.parallel import set_threads

__all__ = ["bench_graph", "generate_worker", "prepare_worker", "info_worker", "cached_info", "open_dataset",
           "read_graph", "graph_info", "check_cached", "saint_made", "remove_stale_partials", "GENERATED_WITH",
           "SAINT_MADE"]

GENERATED_WITH = ("nodes", "degree", "features", "classes", "seed", "ids")  # the options that make the graph
SIZES = ("nodes", "features", "classes")  # what a cached graph the bench did not write is compared by
SAINT_MADE = "mggcn-bench.json"  # in a GraphSAINT directory the bench wrote: its GENERATED_WITH (read_saint skips it)


def bench_graph(opts: BenchOptions) -> GeneratedGraph:
    """The benchmark's graph (its CSR, no edge list): :func:`mggcn.data.generators.community.community_generated`
    with ``nodes · degree`` nonzeros of A; ``ids == "clustered"`` numbers the vertices community by community."""
    from mggcn.data.generators.community import community_generated

    return community_generated(opts.nodes, opts.classes, opts.features, opts.degree, seed=opts.seed,
                               clustered=opts.ids == "clustered")


def generate_worker(opts: BenchOptions, path: str, threads: int) -> dict:
    """Generate the graph on ``threads`` cores and write it at ``path`` (a prepared directory, or with
    ``saint_graph`` a GraphSAINT one); its description, with the seconds spent generating and writing it."""
    set_threads(threads)
    start = time.perf_counter()
    generated = bench_graph(opts)
    generate_s = time.perf_counter() - start
    if opts.saint_graph:
        graph = generated.to_graph()
        del generated
        _write_cache(path, lambda out: _write_saint(graph, out, opts))
        info = graph_info(graph)
    else:
        from mggcn.data.prepared.writer import write_dataset

        built = {"bench": {key: getattr(opts, key) for key in GENERATED_WITH}}
        _write_cache(path, lambda out: write_dataset(GeneratedDataset(generated), out, checksums=False, built=built))
        del generated
        info = cached_info(path)
    info.update(generate_s=generate_s, write_s=time.perf_counter() - start - generate_s, cached=False,
                nnz_per_s=info["nnz"] / generate_s if generate_s > 0 else None)
    return info


def _write_cache(path: str, write: Callable[[str], object]) -> None:
    """The graph written at ``path`` by ``write(directory)``, which makes that directory: inside a partial directory
    beside ``path``, then renamed into place. A bench killed while writing leaves no directory that a later one
    would take for its graph; the partial one it leaves is locked only while its writer lives
    (:class:`~mggcn.data.prepared.outdir.PartialDir`), so that the next bench using ``path`` removes it
    (:func:`remove_stale_partials`) and never one that another bench is still writing."""
    partial = PartialDir(Path(os.path.abspath(path)))
    try:
        inner = os.path.join(partial.path, "graph")  # under the lock, with the mode of any new directory
        write(inner)
        os.rename(inner, path)
    finally:
        partial.discard()


def remove_stale_partials(path: str) -> list[Path]:
    """Remove the partial directories beside the graph cache ``path`` that no live process holds (those of a bench
    killed while writing it); the paths removed."""
    return remove_stale(Path(os.path.abspath(path)))


def _write_saint(graph: Graph, path: str, opts: BenchOptions) -> None:
    """The GraphSAINT directory ``path`` (made), with the options that made it (:data:`SAINT_MADE`)."""
    from mggcn.data.formats.saint import write_saint

    write_saint(graph, path)
    with open(os.path.join(path, SAINT_MADE), "w", encoding="utf-8") as f:
        json.dump({key: getattr(opts, key) for key in GENERATED_WITH}, f)


def saint_made(path: str) -> dict | None:
    """The options that made a cached GraphSAINT directory (None: not written by the bench)."""
    try:
        with open(os.path.join(path, SAINT_MADE), encoding="utf-8") as f:
            made = json.load(f)
    except (OSError, ValueError):
        return None
    return made if isinstance(made, dict) else None


def check_cached(path: str, made: dict, opts: BenchOptions) -> None:
    """Refuse a cached graph that other options made (``made``: those options, or for a directory the bench did
    not write, its sizes) than ``opts`` ask for."""
    wanted = {k: getattr(opts, k) for k in made if k in GENERATED_WITH}
    if any(made[k] != v for k, v in wanted.items()):
        holds = ", ".join(f"{k} {made[k]}" for k in wanted)
        asked = ", ".join(f"{k} {v}" for k, v in wanted.items())
        raise ConfigError(f"graph_cache: {path} holds the graph of {holds}; the options ask for {asked} "
                          "(give those options, or another graph_cache=)", "graph_cache")


def graph_info(graph: Graph) -> dict:
    """A graph in memory, described for the report."""
    self_loops = int((graph.edge_index[0] == graph.edge_index[1]).sum())
    return {"nodes": graph.num_nodes, "edges": graph.num_edges, "features": graph.num_features,
            "classes": graph.num_classes, "nnz": graph.num_edges - self_loops + graph.num_nodes,
            "train": float(graph.masks["train"].mean()), "name": graph.name}


def cached_info(path: str, opts: BenchOptions | None = None) -> dict:
    """A prepared directory, described for the report from its manifest. With ``opts``: refuse a directory that
    holds another graph than the options make."""
    from mggcn.data.prepared.reader import PreparedDataset, is_prepared

    if not is_prepared(path):
        raise ConfigError(f"graph_cache: {path} is not a prepared directory (give a new path: the bench writes "
                          "its graph there)", "graph_cache")
    dataset = PreparedDataset(path)
    m = dataset.manifest
    info = {"nodes": dataset.num_nodes, "edges": dataset.num_edges, "features": dataset.num_features,
            "classes": dataset.num_classes, "nnz": int(m["nnz_hat"]),
            "train": dataset.split_sizes["train"] / dataset.num_nodes, "name": dataset.name}
    if opts is not None:
        check_cached(path, m.get("built", {}).get("bench") or {k: info[k] for k in SIZES}, opts)
    return info


def info_worker(path: str) -> dict:
    """A cached GraphSAINT directory, read whole and described."""
    return graph_info(read_graph(path))


def read_graph(path: str) -> Graph:
    """The GraphSAINT graph (``--saint-graph``), read whole as ``mggcn train DIR --format saint`` reads it."""
    from mggcn.data.datasets import load_graph

    return load_graph(path, "saint")


def open_dataset(path: str):
    """The dataset an mggcn configuration trains on: a prepared directory (each rank reads its share), or the
    GraphSAINT files read whole."""
    from mggcn.data.prepared.reader import PreparedDataset, is_prepared

    if os.path.isdir(path) and is_prepared(path):
        return PreparedDataset(path)
    return InMemoryDataset(read_graph(path), owned=True)  # as open_dataset reads a file


def prepare_worker(source: str, out: str) -> dict:
    """``mggcn prepare SOURCE OUT --format saint``; its peak RSS."""
    from mggcn.data.prepared.writer import prepare

    prepare(source, out, fmt="saint", progress=False)
    return {"peak": peak_rss()}

