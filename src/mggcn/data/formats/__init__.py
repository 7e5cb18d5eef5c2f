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
                marks an unlabelled vertex, which must be in no split; labels of several 0/1 columns (ogbn-proteins)
                are multi-label.
``saint``       GraphSAINT: ``adj_full.npz`` (scipy CSR), ``feats.npy``, ``class_map.json``, ``role.json``. A nonzero
                ``adj[i, j]`` is the edge ``i -> j`` (the matrix is symmetric anyway). A class map of 0/1 lists
                (PPI, Yelp, Amazon) is multi-label.
``dgl-reddit``  DGL's ``reddit_data.npz`` + ``reddit_graph.npz`` (scipy COO). A nonzero ``A[i, j]`` is ``i -> j``
                (DGL's ``from_scipy``: row = source). ``node_types`` 1/2/3 = train/val/test.
``mtx``         Matrix Market ``coordinate`` file (1-based, ``symmetric`` expands to both directions). A nonzero
                ``A[i, j]`` is ``i -> j`` (row = source, the usual adjacency convention).
``edgelist``    text/CSV edge list, 0-based ids; a line ``u v`` is ``u -> v``.
``mggcn-bin``   the original MG-GCN files; ``graph.bin`` row = TARGET, column = source (MG-GCN aggregates over rows).
``npz``         gnn-benchmark's ``.npz`` (PyG's CitationFull, Amazon, Coauthor): CSR adjacency and features, labels;
                read as PyG's ``read_npz`` (self loops dropped, made undirected, positive features 1), a random split.
``planetoid``   the GCN paper's ``ind.NAME.*`` pickles (Cora, CiteSeer, PubMed) with their public split; a listed pair
                ``v: [u]`` is ``v -> u`` (the dicts are symmetric). Read by a restricted unpickler.
==============  =====================================================================================================

One module per format (``ogb``, ``saint``, ``dgl_reddit``, ``mtx``, ``edgelist``, ``mggcn_bin``, ``planetoid``,
``npz``),
graphs from tensors in ``memory``, the checks every reader shares in ``checks``, and those of labels (one class per
vertex, or a 0/1 matrix of labels) in ``labels``. The ``labels`` file of ``mtx`` and ``edgelist`` may be either.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mggcn.data.formats.checks import PathLike
from mggcn.data.formats.dgl_reddit import read_dgl_reddit
from mggcn.data.formats.edgelist import edgelist_vertex_data, iter_edgelist_chunks, known_vertex_count, read_edgelist
from mggcn.data.formats.memory import from_pyg, from_tensors, transform
from mggcn.data.formats.mggcn_bin import read_mggcn_bin, write_mggcn_bin
from mggcn.data.formats.mtx import read_mtx
from mggcn.data.formats.npz import read_npz
from mggcn.data.formats.ogb import read_ogb
from mggcn.data.formats.planetoid import read_planetoid
from mggcn.data.formats.saint import read_saint
from mggcn.data.graph import Graph
from mggcn.utils.errors import GraphError
from mggcn.utils.files import link_to_nothing

__all__ = [
    "FORMATS",
    "VERTEX_FILE_FORMATS",
    "random_features",
    "check_path",
    "edgelist_vertex_data",
    "from_pyg",
    "from_tensors",
    "iter_edgelist_chunks",
    "known_vertex_count",
    "read",
    "read_dgl_reddit",
    "read_edgelist",
    "read_mggcn_bin",
    "read_mtx",
    "read_npz",
    "read_ogb",
    "read_planetoid",
    "read_saint",
    "transform",
    "write_mggcn_bin",
]

FORMATS = ("ogb", "saint", "dgl-reddit", "mtx", "edgelist", "mggcn-bin", "planetoid", "npz")
VERTEX_FILE_FORMATS = ("mtx", "edgelist")  # their vertex data come from files beside them, or are synthesized


def random_features(fmt: str | None, read_options: dict) -> bool:
    """Whether a graph of format ``fmt`` read with ``read_options`` has synthesized features (no ``features``
    file given to a format whose features come from one)."""
    return fmt in VERTEX_FILE_FORMATS and not read_options.get("features")

_READERS: dict[str, Callable[..., Graph]] = {
    "ogb": read_ogb,
    "saint": read_saint,
    "dgl-reddit": read_dgl_reddit,
    "mtx": read_mtx,
    "edgelist": read_edgelist,
    "mggcn-bin": read_mggcn_bin,
    "planetoid": read_planetoid,
    "npz": read_npz,
}


# what a format's PATH is; planetoid takes a directory or the prefix DIR/ind.NAME, and says itself what is wrong
_DIRECTORY_FORMATS = {"ogb": "raw/ and split/", "saint": "adj_full.npz, feats.npy, class_map.json, role.json",
                      "dgl-reddit": "reddit_data.npz and reddit_graph.npz",
                      "mggcn-bin": "graph.bin, features.bin, labels.bin, sets.bin"}
_FILE_FORMATS = ("mtx", "edgelist", "npz")


def check_path(source: PathLike, fmt: str) -> None:
    """Raise :class:`GraphError` with one line saying what is wrong with ``source`` as a path of format ``fmt``
    (unknown format, no such path, a directory for a one-file format, a file for a directory format, a prepared
    dataset given a format) and what to give instead; return when it may be read."""
    text = os.fspath(source)
    if fmt not in _READERS:
        raise GraphError(f"{text}: unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    if fmt == "planetoid":
        return
    path = Path(text)
    if not path.exists():
        raise GraphError(link_to_nothing(path) or f"{text}: no such file or directory")  # a link: where it leads
    if path.is_dir() and (path / "manifest.json").is_file():
        raise GraphError(f"{text}: a prepared dataset directory, which needs no fmt=; drop fmt={fmt}", "fmt")
    if path.is_dir() and fmt in _FILE_FORMATS:
        raise GraphError(f"{text}: a directory, but fmt={fmt} reads one file; give the file itself", "fmt")
    if not path.is_dir() and fmt in _DIRECTORY_FORMATS:
        raise GraphError(f"{text}: not a directory, but fmt={fmt} reads a directory (holding "
                         f"{_DIRECTORY_FORMATS[fmt]}); give that directory", "fmt")


def read(source: PathLike, fmt: str, **options: Any) -> Graph:
    """Read ``source`` in format ``fmt`` (one of :data:`FORMATS`); ``options`` go to that format's reader."""
    reader = _READERS.get(fmt)
    if reader is None:
        raise GraphError(f"{os.fspath(source)}: unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return reader(source, **options)
