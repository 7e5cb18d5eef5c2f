"""Stand-in inputs for the docs' commands that name data the reader has (tests/test_docs.py): a small graph written
in the real on-disk layout of each format, under the name the command uses (``DATA``, ``data/ogbn_products``,
``gcn/gcn/data/ind.cora``), so the command runs here as written but for its size."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from mggcn.data.formats import write_mggcn_bin
from mggcn.data.generators import parse_spec
from mggcn.data.graph import Graph
from planetoid_files import make_planetoid, write_planetoid

# The writers of the formats' tests, imported under the name pytest gives that module (its folder on the path).
sys.path.insert(0, str(Path(__file__).parent / "data"))
from npz_files import write_npz  # noqa: E402
from test_formats import write_ogb_csv, write_reddit, write_saint, write_vertex_files  # noqa: E402


def small_graph() -> Graph:
    """The graph every stand-in holds: 400 vertices in communities, every vertex labelled, in a split."""
    return parse_spec("synthetic:n=400,features=16")


def _edgelist(path: Path, g: Graph) -> None:
    lines = "".join(f"{s} {d}\n" for s, d in g.edge_index.T)
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write(lines.replace(" ", ","))
    else:
        path.write_text(lines)


def _mtx(path: Path, g: Graph) -> None:
    ei = g.edge_index
    scipy.io.mmwrite(path, sp.coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(g.num_nodes,) * 2))


def _planetoid(path: Path, g: Graph) -> None:
    # The GCN paper's files: a prefix ``DIR/ind.NAME``, written as pickles of their own (not from ``g``).
    write_planetoid(path.parent, path.name.removeprefix("ind."), make_planetoid(20, 40, 60, classes=4, features=12,
                                                                                 seed=3))


WRITERS = {
    "ogb": lambda path, g: write_ogb_csv(path, g),
    "saint": write_saint,
    "dgl-reddit": write_reddit,
    "mggcn-bin": lambda path, g: write_mggcn_bin(g, path),
    "mtx": _mtx,
    "edgelist": _edgelist,
    "vertex-files": lambda path, g: write_vertex_files(path, g),  # x.npy, y.npy, split.npy in the folder
    "planetoid": _planetoid,
    "npz": lambda path, g: write_npz(path, g.edge_index, g.x, g.y),
}


def write_standin(kind: str, path: Path) -> None:
    """Write the small graph at ``path`` in the layout ``kind`` (a key of :data:`WRITERS`)."""
    if kind not in WRITERS:
        raise KeyError(f"stand-in kind {kind!r}: one of {sorted(WRITERS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    WRITERS[kind](path, small_graph())
