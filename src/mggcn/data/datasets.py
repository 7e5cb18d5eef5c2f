"""Dataset specs on the command line and in the API, and the one interface the trainer reads datasets through.

``DATASET`` may be:

* ``synthetic[:key=value,...]`` — the built-in community graph (the default dataset), ``rmat:...``,
  ``builtin:karate``, ``builtin:digits`` — generated, or read from data shipped inside packages, no file needed;
* a file or directory in a known layout, with ``--format`` (see :mod:`mggcn.data.formats`), read whole;
* a directory written by ``mggcn prepare`` (:mod:`mggcn.data.prepared.reader`), from which each rank reads only its rows.

A :class:`Dataset` tells the launcher its sizes (checked before any worker starts) and gives each rank its
:class:`~mggcn.distributed.partition.Shard`. :class:`InMemoryDataset` starts from a whole :class:`Graph`; a dataset prepared on disk
gives each rank only its rows.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import scipy.sparse as sp

from mggcn.config import DEFAULT_DATASET
from mggcn.data.graph import Graph, GraphError
from mggcn.distributed.partition import Partition, Shard, build_shard, make_partition
from mggcn.nn.norm import normalized_adjacency

__all__ = ["DEFAULT_DATASET", "GENERATED_PREFIXES", "Dataset", "InMemoryDataset", "load_graph", "open_dataset"]

GENERATED_PREFIXES = ("synthetic", "rmat", "builtin")


class Dataset(Protocol):
    """What the trainer needs of a dataset."""

    name: str
    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int

    def partition(self, num_parts: int, seed: int, ordering: str) -> Partition: ...

    def shard(self, part: Partition, rank: int, norm: str, tile_cols: int | None = None) -> Shard: ...


class InMemoryDataset:
    """A whole :class:`Graph` in memory; each rank cuts its shard out of it (Â is normalized once and cached)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.name, self.num_nodes, self.num_edges = graph.name, graph.num_nodes, graph.num_edges
        self.num_features, self.num_classes = graph.num_features, graph.num_classes
        self._adj_hat: dict[str, sp.csr_matrix] = {}

    def partition(self, num_parts: int, seed: int, ordering: str) -> Partition:
        self._check_held()
        if ordering == "metis":
            from mggcn.distributed.metis import metis_partition

            ei = self.graph.edge_index
            return metis_partition(ei[1], ei[0], self.num_nodes, num_parts, seed)  # rows of Â are targets
        return make_partition(self.num_nodes, num_parts, seed, ordering)

    def shard(self, part: Partition, rank: int, norm: str, tile_cols: int | None = None) -> Shard:
        self._check_held()
        if norm not in self._adj_hat:
            self._adj_hat[norm] = normalized_adjacency(self.graph.edge_index, self.num_nodes, norm)
        return build_shard(self.graph, part, rank, norm, adj_hat=self._adj_hat[norm], tile_cols=tile_cols)

    def _check_held(self) -> None:
        if self.graph is None:
            raise RuntimeError(f"{self.name}: released (InMemoryDataset.release); open the dataset again")

    def release(self) -> None:
        """Drop the graph and the cached Â once this process has cut its shard: a rank keeps only its shard.

        The sizes stay; :meth:`partition` and :meth:`shard` raise afterwards. (A :class:`Graph` the caller holds
        stays alive through the caller's reference, not this one.)
        """
        self.graph, self._adj_hat = None, {}


def is_generated(spec: str) -> bool:
    return spec.split(":", 1)[0] in GENERATED_PREFIXES


def load_graph(spec: str = DEFAULT_DATASET, fmt: str | None = None, undirected: bool = False,
               dedup: bool = False, read_options: dict[str, Any] | None = None) -> Graph:
    """Read or generate the dataset ``spec`` whole and check it (raises :class:`GraphError` naming what is wrong)."""
    if is_generated(spec) and fmt is None:
        from mggcn.data.synthetic import parse_spec

        graph = parse_spec(spec)
    else:
        from mggcn.data import formats

        if fmt is None:
            raise GraphError(_not_a_dataset(spec))
        if is_generated(spec) and not os.path.exists(spec):
            raise GraphError(f"{spec}: a built-in dataset, which takes no --format; --format {fmt} is for a path "
                             f"(DATASET --format {fmt})")
        formats.check_path(spec, fmt)
        graph = formats.read(spec, fmt, **(read_options or {}))
    if undirected or dedup:
        from mggcn.data.formats import transform

        graph = transform(graph, undirected=undirected, dedup=dedup)
    return graph.validate()


def _not_a_dataset(spec: str) -> str:
    """What is wrong with ``spec`` given without ``--format``, and what to give instead (one line)."""
    from mggcn.data.formats import FORMATS

    built_in = "synthetic[:n=...], rmat:scale=..., builtin:karate or builtin:digits"
    if not os.path.exists(spec):
        return f"{spec}: no such file or directory, and not a built-in dataset ({built_in})"
    if os.path.isdir(spec):
        return (f"{spec}: a directory that is not a prepared dataset (no manifest.json); for files in another layout "
                f"give --format ({', '.join(FORMATS)}), or write one with `mggcn prepare {spec} OUT_DIR --format F`")
    return f"{spec}: a file: give its layout with --format ({', '.join(FORMATS)})"


def open_dataset(spec: str | Graph = DEFAULT_DATASET, fmt: str | None = None, undirected: bool = False,
                 dedup: bool = False, read_options: dict[str, Any] | None = None) -> Dataset:
    """The :class:`Dataset` behind ``spec`` (a spec string, a path, or a :class:`Graph` already in memory).

    A directory holding a ``manifest.json`` (without ``fmt``, or with ``fmt="prepared"``) is a prepared dataset
    (:class:`mggcn.data.prepared.reader.PreparedDataset`): each rank then reads only its own rows.
    """
    if isinstance(spec, Graph):
        return InMemoryDataset(spec.validate())
    from mggcn.data.prepared.reader import PreparedDataset, is_prepared

    if fmt == "prepared" or (fmt is None and is_prepared(spec)):
        if undirected or dedup or read_options:
            given = ["--undirected"] * undirected + ["--dedup"] * dedup + [f"--{k}" for k in (read_options or {})]
            raise GraphError(f"{spec}: {', '.join(given)} cannot change a prepared dataset; "
                             "pass them to `mggcn prepare` instead")
        return PreparedDataset(spec)
    return InMemoryDataset(load_graph(spec, fmt, undirected, dedup, read_options))
