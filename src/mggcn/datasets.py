"""Dataset specs on the command line and in the API: what ``DATASET`` may be, and how it becomes a :class:`Graph`.

* ``synthetic[:key=value,...]`` — the built-in community graph (the default dataset), ``rmat:...``,
  ``builtin:karate``, ``builtin:digits`` — generated or read from data shipped inside packages, no file needed;
* a file or directory in a known layout, with ``--format`` (see :mod:`mggcn.formats`).
"""

from __future__ import annotations

import os

from mggcn.graph import Graph, GraphError

__all__ = ["DEFAULT_DATASET", "GENERATED_PREFIXES", "load_graph"]

DEFAULT_DATASET = "synthetic"
GENERATED_PREFIXES = ("synthetic", "rmat", "builtin")


def is_generated(spec: str) -> bool:
    return spec.split(":", 1)[0] in GENERATED_PREFIXES


def load_graph(spec: str = DEFAULT_DATASET, fmt: str | None = None, undirected: bool = False,
               dedup: bool = False) -> Graph:
    """Read or generate the dataset ``spec`` and check it (raises :class:`GraphError` naming what is wrong)."""
    if is_generated(spec) and fmt is None:
        from mggcn.synthetic import parse_spec

        graph = parse_spec(spec)
    else:
        if fmt is None:
            raise GraphError(f"{spec}: not a built-in dataset ({', '.join(GENERATED_PREFIXES)}); "
                             "give --format for a file or directory")
        if not os.path.exists(spec):
            raise GraphError(f"{spec}: no such file or directory")
        from mggcn import formats

        graph = formats.read(spec, fmt)
    if undirected or dedup:
        from mggcn.formats import transform

        graph = transform(graph, undirected=undirected, dedup=dedup)
    return graph.validate()
