"""gnn-benchmark's ``.npz`` files (``--format npz``) read as PyG's ``read_npz`` reads them: the same edges (self loops
dropped, undirected, each pair once per direction, in PyG's order), features (positive values read as 1) and
labels; a random split; bad archives refused in one line naming the file."""

from __future__ import annotations

import numpy as np
import pytest
from npz_files import write_npz
from torch_geometric.io import read_npz as pyg_read_npz

from mggcn.data.formats import read
from mggcn.utils.errors import GraphError


def _graph(seed: int = 0):
    """A directed graph with a self loop, a duplicate and a pair given both ways; counts, fractions and negative
    values in x."""
    rng = np.random.default_rng(seed)
    n = 30
    ei = rng.integers(0, n, (2, 80))
    ei = np.concatenate([ei, [[3, 4, 4, 7], [3, 5, 5, 4]]], axis=1)  # 3 -> 3, 4 -> 5 twice, 7 -> 4 and 4 -> 7
    x = rng.integers(-1, 3, (n, 6)).astype(np.float32)
    x[::3, 0], x[1::3, 0] = 0.5, 0.25  # below 1 but positive: read as present (1), as PyG reads them
    y = rng.integers(0, 2, n)
    return ei, x, y


@pytest.mark.parametrize("dense", [False, True], ids=["attr-csr", "attr-matrix"])
def test_read_as_pyg_reads_it(tmp_path, dense):
    path = write_npz(tmp_path / "g.npz", *_graph(), dense=dense)
    graph = read(path, "npz")
    if not dense:  # PyG reads only the CSR attributes
        data = pyg_read_npz(str(path))
        np.testing.assert_array_equal(graph.edge_index, data.edge_index.numpy())
        np.testing.assert_array_equal(graph.x, data.x.numpy())
        np.testing.assert_array_equal(graph.y, data.y.numpy())
    ei, x, y = _graph()
    pairs = {(a, b) for a, b in ei.T.tolist() if a != b}
    assert {tuple(e) for e in graph.edge_index.T.tolist()} == pairs | {(b, a) for a, b in pairs}
    assert graph.num_edges == len(pairs | {(b, a) for a, b in pairs})
    np.testing.assert_array_equal(graph.x, np.where(x > 0, 1, x))
    masks = graph.masks
    assert sum(int(m.sum()) for m in masks.values()) == 30 and not (masks["train"] & masks["test"]).any()
    assert int(masks["train"].sum()) == 15


def test_the_split_follows_the_seed(tmp_path):
    path = write_npz(tmp_path / "g.npz", *_graph())
    a, b, c = read(path, "npz"), read(path, "npz"), read(path, "npz", seed=1)
    assert all(np.array_equal(a.masks[s], b.masks[s]) for s in a.masks)
    assert not all(np.array_equal(a.masks[s], c.masks[s]) for s in a.masks)


def _rewritten(tmp_path, change):
    """``g.npz`` of :func:`_graph`, its arrays then changed in place by ``change`` and saved again."""
    path = write_npz(tmp_path / "g.npz", *_graph())
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    change(arrays)
    np.savez(path, **arrays)
    return path


def _without(key):
    def change(arrays):
        del arrays[key]
    return change


@pytest.mark.parametrize("change, expected", [
    (_without("adj_indptr"), r"missing array\(s\) \['adj_indptr'\]"),
    (_without("labels"), r"missing array\(s\) \['labels'\]"),
    (lambda a: [a.pop(k) for k in ("attr_data", "attr_indices", "attr_indptr", "attr_shape")],
     "no features: neither attr_data, attr_indices, attr_indptr, attr_shape nor attr_matrix"),
    (lambda a: a.update(adj_shape=np.array([30, 31])), "the adjacency matrix is 30 x 31, not square"),
    (lambda a: a.update(adj_indices=a["adj_indices"] + 100), "adj|indices"),
    (lambda a: a.update(attr_shape=np.array([29, 6])), "attr_shape has 29 rows for 30 vertices"),
    (lambda a: a.update(labels=a["labels"][:-1]), "29 labels for 30 vertices"),
])
def test_a_bad_archive_is_refused_in_one_line_naming_the_file(tmp_path, change, expected):
    path = _rewritten(tmp_path, change)
    with pytest.raises(GraphError, match=expected) as err:
        read(path, "npz")
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_an_npz_given_as_a_text_format_names_the_format_that_reads_it(tmp_path):
    path = write_npz(tmp_path / "g.npz", *_graph())
    with pytest.raises(GraphError, match=r"g\.npz: a NumPy \.npz archive, not a text file: --format npz reads "):
        read(path, "edgelist")


def test_an_archive_member_of_python_objects_is_named_as_such(tmp_path):
    """np.load refuses a pickled member (allow_pickle=False): that was reported as a truncated or corrupt file."""
    path = _rewritten(tmp_path, lambda a: a.update(labels=np.array([None] * 30, dtype=object)))
    with pytest.raises(GraphError, match=r"g\.npz: 'labels' holds Python objects \(a pickle\), not numbers"):
        read(path, "npz")


def test_a_stored_zero_is_an_edge_and_a_repeated_attribute_adds_up_as_in_pyg(tmp_path):
    """scipy's tocoo keeps a stored zero of the adjacency (an edge for PyG), and todense adds an entry stored twice."""
    def change(arrays):
        arrays["adj_data"] = arrays["adj_data"].copy()
        arrays["adj_data"][0] = 0
        indptr, indices = arrays["attr_indptr"], arrays["attr_indices"]
        first = int(np.argmax(np.diff(indptr) >= 2))  # a row with two entries: store its first column twice
        arrays["attr_indices"] = indices.copy()
        arrays["attr_indices"][indptr[first] + 1] = indices[indptr[first]]
        arrays["attr_data"] = np.full_like(arrays["attr_data"], -0.5)  # -0.5 + -0.5 = -1, one alone -0.5

    path = _rewritten(tmp_path, change)
    graph, data = read(path, "npz"), pyg_read_npz(str(path))
    np.testing.assert_array_equal(graph.edge_index, data.edge_index.numpy())
    np.testing.assert_array_equal(graph.x, data.x.numpy())


@pytest.mark.parametrize("content, says", [(b"hello\n", "it begins as text"), (b"\x00\x01binary", "it begins as data"),
                                           (b"", "it is empty")])
def test_a_file_that_is_no_archive_says_what_it_begins_as(tmp_path, content, says):
    """np.load takes any file that is neither a zip nor an array for a pickle, and says it could load one unsafely:
    the file is named as what it is instead."""
    path = tmp_path / "g.npz"
    path.write_bytes(content)
    with pytest.raises(GraphError, match=f"g\\.npz: not an .npz archive: {says}, not a zip archive") as err:
        read(path, "npz")
    assert "pickle" not in str(err.value) and "\n" not in str(err.value)
