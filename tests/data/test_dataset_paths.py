"""A dataset path that cannot be read says what is wrong with it and what to give instead, in one line."""

import numpy as np
import pytest

from mggcn.data.datasets import load_graph, open_dataset
from mggcn.data.prepared.reader import PreparedDataset
from mggcn.data.prepared.writer import prepare
from mggcn.utils.errors import GraphError
from planetoid_files import cora_like


@pytest.fixture
def prepared(tmp_path):
    return prepare("builtin:karate", tmp_path / "karate", progress=False)


@pytest.mark.parametrize("case, expected", [
    ("typo", r"mygrpah: no such file or directory, and not a built-in dataset \(synthetic\[:n=\.\.\.\]"),
    ("directory", r"a directory that is not a prepared dataset \(no manifest\.json\); for files in another layout "
                  r"give fmt= \(ogb, .*\), or write one with `mggcn prepare"),
    ("file", r"edges\.txt: a file: give its layout with fmt= \(ogb, saint, dgl-reddit, mtx, edgelist"),
    ("spec with format", r"synthetic: a built-in dataset, which takes no fmt=; fmt=ogb is for a path"),
    ("prepared with format", r"karate: a prepared dataset directory, which needs no fmt=; drop fmt=edgelist"),
    ("file for a directory format", r"edges\.txt: not a directory, but fmt=saint reads a directory \(holding "
                                    r"adj_full\.npz"),
    ("directory for a file format", r"plain: a directory, but fmt=mtx reads one file; give the file itself"),
    ("missing with format", r"nope\.txt: no such file or directory"),
])
def test_what_is_wrong_with_a_path(tmp_path, prepared, monkeypatch, case, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain").mkdir()
    np.savetxt(tmp_path / "edges.txt", [[0, 1]], fmt="%d")
    spec, fmt = {"typo": ("mygrpah", None), "directory": ("plain", None), "file": ("edges.txt", None),
                 "spec with format": ("synthetic", "ogb"), "prepared with format": (str(prepared), "edgelist"),
                 "file for a directory format": ("edges.txt", "saint"),
                 "directory for a file format": ("plain", "mtx"), "missing with format": ("nope.txt", "edgelist")}[case]
    with pytest.raises(GraphError, match=expected) as err:
        open_dataset(spec, fmt)
    assert "\n" not in str(err.value)


def test_planetoid_prefix_trains_from_memory_and_prepares(tmp_path):
    folder = cora_like(tmp_path / "planetoid")
    graph = load_graph(str(folder / "ind.cora"), "planetoid", read_options={"normalize_features": True})
    out = prepare(str(folder / "ind.cora"), tmp_path / "cora", fmt="planetoid", progress=False,
                  normalize_features=True)
    ds = PreparedDataset(out)
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == \
        (graph.num_nodes, graph.num_edges, graph.num_features, graph.num_classes)
    with pytest.raises(GraphError, match=r"ind\.cite: no such file or directory; .*planetoid holds ind\.cora; "
                                         r"fmt=planetoid takes"):
        load_graph(str(folder / "ind.cite"), "planetoid")
