"""The Planetoid reader against PyG's own ``read_planetoid_data`` on files in the GCN paper's exact layout, and the
restricted unpickler refusing what a Planetoid file never holds."""

from __future__ import annotations

import os
import pickle
import re

import numpy as np
import pytest
import torch

from mggcn.data.formats import read
from mggcn.data.formats.planetoid import load_pickle, read_planetoid
from mggcn.utils.errors import GraphError
from planetoid_files import citeseer_like, cora_like, make_planetoid, py2_pickle, write_planetoid

pyg_io = pytest.importorskip("torch_geometric.io")


def _pyg(folder, name):
    data = pyg_io.read_planetoid_data(str(folder), name)
    ei = data.edge_index.numpy()
    order = np.lexsort((ei[1], ei[0]))  # PyG coalesces column-major; the edge order carries no meaning
    return data, ei[:, order]


def _assert_same_as_pyg(graph, data, pyg_edges):
    assert graph.num_nodes == data.num_nodes
    np.testing.assert_array_equal(graph.edge_index, pyg_edges)
    np.testing.assert_array_equal(graph.x, data.x.numpy())  # both float32 copies of the same numbers: exact
    np.testing.assert_array_equal(graph.y, data.y.numpy())
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(graph.masks[split], getattr(data, f"{split}_mask").numpy(), err_msg=split)
    assert graph.num_classes == int(data.y.max()) + 1


@pytest.mark.parametrize("write, name", [(cora_like, "cora"), (citeseer_like, "citeseer")])
def test_same_graph_features_labels_and_split_as_pyg(tmp_path, write, name):
    folder = write(tmp_path / name)
    graph = read(folder, "planetoid")
    data, pyg_edges = _pyg(folder, name)
    _assert_same_as_pyg(graph, data, pyg_edges)
    assert graph.name == name
    assert graph.masks["train"].sum() > 0 and graph.masks["val"].sum() == 500
    # the dicts hold a self loop and a duplicate: both dropped, and the graph is undirected
    assert (graph.edge_index[0] != graph.edge_index[1]).all()
    pairs = set(map(tuple, graph.edge_index.T))
    assert len(pairs) == graph.num_edges and pairs == set(map(tuple, graph.edge_index[::-1].T))


def test_citeseer_isolated_test_vertices_are_zero_rows_in_no_split(tmp_path):
    parts = make_planetoid(12, 40, 80, classes=6, features=25, seed=3, isolated=9)
    graph = read_planetoid(write_planetoid(tmp_path, "citeseer", parts))
    num_all = parts["allx"].shape[0]
    assert graph.num_nodes == num_all + 80 + 9
    listed = np.zeros(graph.num_nodes, dtype=bool)
    listed[parts["test.index"]] = True
    isolated = ~listed
    isolated[:num_all] = False
    assert isolated.sum() == 9
    assert not graph.x[isolated].any()
    assert not any(graph.masks[s][isolated].any() for s in graph.masks)
    # a test vertex's features are its row of tx, wherever test.index puts it
    np.testing.assert_array_equal(graph.x[parts["test.index"]], parts["tx"].toarray())
    np.testing.assert_array_equal(graph.y[parts["test.index"]], parts["ty"].argmax(axis=1))


def test_normalize_features_as_pyg(tmp_path):
    """NormalizeFeatures shifts every feature by the minimum of all of them before dividing each row by its sum:
    with a few negative values the shift moves every entry, zeros included, so a reader that only divided would
    differ."""
    from torch_geometric.transforms import NormalizeFeatures

    parts = make_planetoid(14, 60, 90, classes=7, features=30, seed=5)
    parts["allx"] = parts["allx"] * 3.0  # rows summing to more than 1 and less than 1 both occur
    parts["allx"].data[::10] *= -0.005  # a few small negative values
    folder = write_planetoid(tmp_path, "cora", parts)
    graph = read_planetoid(folder, normalize_features=True)
    data = NormalizeFeatures()(pyg_io.read_planetoid_data(str(folder), "cora"))
    sums = data.x.sum(dim=1)
    assert ((sums - 1).abs() < 1e-5).any() and (sums < 0.99).any()
    assert parts["allx"].min() < 0
    # the same float32 operations in numpy and torch; division may round differently in the last bit
    torch.testing.assert_close(torch.from_numpy(graph.x), data.x, rtol=1e-6, atol=0.0)


def test_directory_prefix_and_file_name_name_the_same_dataset(tmp_path):
    folder = cora_like(tmp_path)
    a, b, c = (read_planetoid(p) for p in (folder, folder / "ind.cora", folder / "ind.cora.graph"))
    np.testing.assert_array_equal(a.edge_index, b.edge_index)
    np.testing.assert_array_equal(a.x, c.x)


@pytest.mark.parametrize("protocol", [2, 5])
def test_python3_pickles_read_the_same(tmp_path, protocol):
    parts = make_planetoid(14, 60, 90, classes=7, features=30, seed=0)
    py2 = read_planetoid(write_planetoid(tmp_path / "py2", "cora", parts))
    folder = tmp_path / "py3"
    write_planetoid(folder, "cora", parts)
    for part, obj in parts.items():
        if part != "test.index":
            with open(folder / f"ind.cora.{part}", "wb") as f:
                pickle.dump(obj, f, protocol=protocol)
    py3 = read_planetoid(folder)
    np.testing.assert_array_equal(py2.edge_index, py3.edge_index)
    np.testing.assert_array_equal(py2.x, py3.x)
    np.testing.assert_array_equal(py2.y, py3.y)


class _Mkdir:
    """Unpickles into ``os.mkdir(path)``: a pickle that runs code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.mark.parametrize("part", ["graph", "allx"])
def test_a_pickle_that_runs_code_is_refused_without_running(tmp_path, part):
    marker = tmp_path / "marker"
    crafted = tmp_path / "crafted.pickle"
    py2_pickle({0: [1], 1: [_Mkdir(str(marker))]}, crafted)
    pickle.loads(crafted.read_bytes())  # the plain unpickler runs it: the test can fail
    assert marker.is_dir()
    marker.rmdir()

    folder = cora_like(tmp_path / "data")
    os.replace(crafted, folder / f"ind.cora.{part}")
    with pytest.raises(GraphError) as err:
        read(folder, "planetoid")
    message = str(err.value)
    assert "\n" not in message and f"ind.cora.{part}: refused" in message and "mkdir" in message
    assert not marker.exists()


def test_an_array_of_python_objects_is_refused(tmp_path):
    folder = cora_like(tmp_path)
    py2_pickle(np.array([[1, "a"]], dtype=object), folder / "ind.cora.y")
    with pytest.raises(GraphError, match=r"ind\.cora\.y: refused: .*array of Python objects"):
        read_planetoid(folder)


def test_load_pickle_names_a_truncated_file(tmp_path):
    folder = cora_like(tmp_path)
    path = folder / "ind.cora.allx"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(GraphError, match=r"ind\.cora\.allx: truncated or corrupt pickle"):
        load_pickle(path)


def _bad(tmp_path, change):
    parts = make_planetoid(14, 60, 90, classes=7, features=30, seed=0)
    change(parts)
    return write_planetoid(tmp_path, "cora", parts)


@pytest.mark.parametrize("change, expected", [
    (lambda p: p.update(ty=p["ty"][:-1]), r"ind\.cora\.ty: 89 rows, but ind\.cora\.test\.index has 90"),
    (lambda p: p.update(tx=p["tx"][:, :-1]), r"ind\.cora\.tx: 29 feature columns, but ind\.cora\.allx has 30"),
    (lambda p: p["graph"][3].append(10_000), r"ind\.cora\.graph: vertex 10000 is out of range for the 664"),
    (lambda p: p["graph"].update({"a": [1]}), r"ind\.cora\.graph: vertex 'a': expected an integer id"),
    (lambda p: p.update(graph=[1, 2]), r"ind\.cora\.graph: expected a dict of neighbour lists, found a list"),
    (lambda p: p["test.index"].__setitem__(0, 3), r"ind\.cora\.test\.index: test vertex 3 is among the 574"),
    (lambda p: p["test.index"].__setitem__(0, p["test.index"][1]), r"test\.index: vertex \d+ is listed twice"),
    (lambda p: p["test.index"].__setitem__(0, 10**6),  # PyG's reader fails on it (IndexError); it made 10⁶ vertices
     r"ind\.cora\.test\.index: test vertex 1,000,000 leaves 999,337 vertices after the 574 of ind\.cora\.allx in "
     r"neither file, more than the 90 it lists \(a stray vertex id\?\)"),
    (lambda p: p.update(y=np.zeros(5)), r"ind\.cora\.y: expected one-hot labels as a 2-D array .* 1-D array"),
    (lambda p: p.update(allx=p["allx"][:400], ally=p["ally"][:400]),
     r"ind\.cora\.allx: 400 rows: the public split needs the 14 training and the 500 validation"),
])
def test_inconsistent_files_fail_with_one_line_naming_the_file(tmp_path, change, expected):
    folder = _bad(tmp_path, change)
    with pytest.raises(GraphError, match=expected) as err:
        read_planetoid(folder)
    assert "\n" not in str(err.value)


def test_unparsable_test_index_names_the_line(tmp_path):
    folder = cora_like(tmp_path)
    with open(folder / "ind.cora.test.index", "a") as f:
        f.write("12 13\n")
    with pytest.raises(GraphError, match=r"ind\.cora\.test\.index: line 91: expected one vertex id, found '12 13'"):
        read_planetoid(folder)


def test_paths_that_are_not_one_planetoid_dataset(tmp_path):
    with pytest.raises(GraphError, match=r"nope: no such file or directory; fmt=planetoid takes"):
        read_planetoid(tmp_path / "nope")
    with pytest.raises(GraphError, match=r"no Planetoid files here"):
        read_planetoid(tmp_path)
    cora_like(tmp_path)
    citeseer_like(tmp_path)
    several = r"holds several Planetoid datasets \(citeseer, cora\); give one as .*ind\.citeseer"
    with pytest.raises(GraphError, match=several):
        read_planetoid(tmp_path)
    (tmp_path / "ind.cora.ty").unlink()
    with pytest.raises(GraphError, match=r"ind\.cora\.ty: missing file"):
        read_planetoid(tmp_path / "ind.cora")


@pytest.mark.skipif(not os.environ.get("MGGCN_PLANETOID_DIR"), reason="set MGGCN_PLANETOID_DIR to the GCN paper's "
                    "gcn/data directory to compare the real files")
@pytest.mark.parametrize("name", ["cora", "citeseer", "pubmed"])
def test_the_original_files_as_pyg(name):
    folder = os.environ["MGGCN_PLANETOID_DIR"]
    if not os.path.exists(os.path.join(folder, f"ind.{name}.allx")):
        pytest.skip(f"no ind.{name}.* in {folder}")
    data, pyg_edges = _pyg(folder, name)
    _assert_same_as_pyg(read_planetoid(os.path.join(folder, f"ind.{name}")), data, pyg_edges)


def test_the_neighbour_lists_read_by_numpy_equal_them_walked_vertex_by_vertex():
    """The graph dict is flattened by numpy (its types checked as sets): the edges of walking it vertex by vertex,
    which remains for naming a vertex at fault; numpy ints and tuples among the lists, self loops and repeats."""
    from pathlib import Path

    from mggcn.data.formats import planetoid

    rng = np.random.default_rng(0)
    n = 500
    graph = {int(v): [int(u) for u in rng.integers(0, n, rng.integers(0, 12))] for v in rng.permutation(n)[:450]}
    graph[np.int64(7)] = (np.int32(7), 3, 3, np.int64(499))  # numpy ids, a self loop and a repeat
    fast, walked = planetoid._edges(graph, Path("g"), n), planetoid._walked_edges(graph, Path("g"), n)
    assert fast.dtype == np.int64 and np.array_equal(fast, walked)
    assert not (fast[0] == fast[1]).any() and np.unique(fast[0] * n + fast[1]).size == fast.shape[1]


def test_prepare_says_how_long_a_file_read_whole_took(tmp_path, capsys):
    """A format read whole (Planetoid's pickles, npz) is in memory before prepare's first step: its time was in no
    line prepare printed, on a large graph most of the run."""
    from mggcn.data.prepared.writer import prepare

    folder = cora_like(tmp_path / "data")
    prepare(str(folder / "ind.cora"), tmp_path / "out", fmt="planetoid", progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"mggcn prepare: read ind\.cora \(planetoid\) whole in \d+\.\d s", lines[0]), lines
    assert lines[1].startswith("mggcn prepare: reading ")
