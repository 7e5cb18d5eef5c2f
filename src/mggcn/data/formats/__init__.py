"""Readers from the on-disk layouts real datasets ship in to an in-memory :class:`~mggcn.data.graph.Graph`.

Every reader checks its input where it reads it, so a bad dataset fails with ONE line that names the offending file
and what is wrong with it (missing file, truncated or corrupt array, unparsable line and its number, vertex id out of
range, bad label, NaN/inf features, wrong row count, overlapping or empty splits), then calls ``Graph.validate()``.

Formats (``read(source, fmt)`` dispatches on ``fmt``) and their edge direction. A :class:`Graph` edge is
``source -> target``: the target aggregates over it.

==============  =====================================================================================================
``ogb``         OGB node-property directory (``raw/`` + ``split/<name>/``), CSV (``raw/edge.csv.gz`` ...) or binary
                (``raw/data.npz`` + ``raw/node-label.npz``). A line ``src,dst`` / column ``edge_index[:, e]`` is the
                edge ``src -> dst``, kept as stored (ogbn-arxiv is directed; :func:`transform` symmetrizes). A NaN label
                marks an unlabelled vertex, which must be in no split.
``saint``       GraphSAINT: ``adj_full.npz`` (scipy CSR), ``feats.npy``, ``class_map.json``, ``role.json``. A nonzero
                ``adj[i, j]`` is the edge ``i -> j`` (the matrix is symmetric anyway). Multi-label is refused.
``dgl-reddit``  DGL's ``reddit_data.npz`` + ``reddit_graph.npz`` (scipy COO). A nonzero ``A[i, j]`` is ``i -> j``
                (DGL's ``from_scipy``: row = source). ``node_types`` 1/2/3 = train/val/test.
``mtx``         Matrix Market ``coordinate`` file (1-based, ``symmetric`` expands to both directions). A nonzero
                ``A[i, j]`` is ``i -> j`` (row = source, the usual adjacency convention).
``edgelist``    text/CSV edge list, 0-based ids; a line ``u v`` is ``u -> v``.
``mggcn-bin``   the original MG-GCN files; ``graph.bin`` row = TARGET, column = source (MG-GCN aggregates over rows).
==============  =====================================================================================================

One module per format (``ogb``, ``saint``, ``dgl_reddit``, ``mtx``, ``edgelist``, ``mggcn_bin``), graphs from
tensors in ``memory``, and the checks every reader shares in ``checks``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from mggcn.data.formats.checks import PathLike
from mggcn.data.formats.dgl_reddit import read_dgl_reddit
from mggcn.data.formats.edgelist import edgelist_vertex_data, iter_edgelist_chunks, read_edgelist
from mggcn.data.formats.memory import from_pyg, from_tensors, transform
from mggcn.data.formats.mggcn_bin import read_mggcn_bin, write_mggcn_bin
from mggcn.data.formats.mtx import read_mtx
from mggcn.data.formats.ogb import read_ogb
from mggcn.data.formats.saint import read_saint
from mggcn.data.graph import Graph, GraphError

__all__ = [
    "FORMATS",
    "edgelist_vertex_data",
    "from_pyg",
    "from_tensors",
    "iter_edgelist_chunks",
    "read",
    "read_dgl_reddit",
    "read_edgelist",
    "read_mggcn_bin",
    "read_mtx",
    "read_ogb",
    "read_saint",
    "transform",
    "write_mggcn_bin",
]

FORMATS = ("ogb", "saint", "dgl-reddit", "mtx", "edgelist", "mggcn-bin")

_READERS: dict[str, Callable[..., Graph]] = {
    "ogb": read_ogb,
    "saint": read_saint,
    "dgl-reddit": read_dgl_reddit,
    "mtx": read_mtx,
    "edgelist": read_edgelist,
    "mggcn-bin": read_mggcn_bin,
}


def read(source: PathLike, fmt: str, **options: Any) -> Graph:
    """Read ``source`` in format ``fmt`` (one of :data:`FORMATS`); ``options`` go to that format's reader."""
    reader = _READERS.get(fmt)
    if reader is None:
        raise GraphError(f"{os.fspath(source)}: unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return reader(source, **options)
