"""mggcn.data.datasets: the arrays a rank reads its shard from, built from a graph in memory."""

import numpy as np
import pytest

from mggcn.data.datasets import InMemoryDataset, _csr, open_dataset
from mggcn.data.formats.saint import write_saint
from mggcn.data.graph import Graph
from reference import random_graph


def _lexsorted_csr(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((values, keys))
    return np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=n))]), values[order]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_csr_groups_each_row_sorted_as_lexsort_does(monkeypatch, dtype):
    """_csr sorts one int64 key·n + value per edge (converting a few at a time here): the CSR that lexsort gives,
    parallel edges and self loops kept, indices int32."""
    from mggcn.data import datasets

    monkeypatch.setattr(datasets, "_CHUNK", 5)
    rng = np.random.default_rng(1)
    n = 37
    keys, values = rng.integers(0, n, 400).astype(dtype), rng.integers(0, n, 400).astype(dtype)
    keys[:10], values[:10] = 4, 4  # parallel self loops
    indptr, indices = _csr(keys, values, n)
    want_ptr, want_idx = _lexsorted_csr(keys, values, n)
    assert indices.dtype == np.int32 and indptr.dtype == np.int64
    assert np.array_equal(indptr, want_ptr) and np.array_equal(indices, want_idx)


@pytest.mark.parametrize("directed", [True, False])
def test_a_dataset_that_owns_its_graph_lets_it_go_with_the_same_arrays(directed):
    """open_dataset's datasets own the graph they read: building the arrays drops the graph (its int64 edges)
    after taking its fingerprint, and gives the arrays, symmetry and fingerprint of a dataset that does not."""
    graph = random_graph(45, 300, directed=directed, seed=4)
    if not directed:  # both directions of every edge, a parallel pair among them
        ei = np.concatenate([graph.edge_index, graph.edge_index[::-1]], axis=1)
        graph = Graph(graph.num_nodes, ei, graph.x, graph.y, graph.masks, name="undirected")
    kept = InMemoryDataset(graph)
    owned = InMemoryDataset(Graph(graph.num_nodes, graph.edge_index.copy(), graph.x, graph.y, graph.masks,
                                  name=graph.name), owned=True)
    assert owned.symmetric == kept.symmetric == (not directed)
    assert owned.graph is None and kept.graph is graph
    assert set(owned.arrays) == set(kept.arrays)
    for name, array in kept.arrays.items():
        assert np.array_equal(owned.arrays[name], array), name
        assert owned.arrays[name].dtype == array.dtype, name
    assert owned.fingerprint == kept.fingerprint
    owned.release()
    with pytest.raises(RuntimeError, match="released"):
        owned.arrays  # noqa: B018


def test_a_directed_graph_whose_rows_have_the_lengths_of_its_columns_is_not_symmetric():
    """A directed cycle: every vertex has one in-edge and one out-edge, so both CSRs have the same row lengths, yet
    Aᵀ is not A (its out-CSR holds the true targets); the same cycle made undirected is symmetric."""
    from mggcn.data.datasets import edge_arrays

    src, dst = np.array([0, 1, 2]), np.array([1, 2, 0])
    arrays, symmetric = edge_arrays(src, dst, 3)
    assert not symmetric and arrays["out_indices"].tolist() == [1, 2, 0] and arrays["in_indices"].tolist() == [2, 0, 1]
    assert edge_arrays(np.concatenate([src, dst]), np.concatenate([dst, src]), 3)[1]


def test_a_file_read_whole_is_owned(tmp_path):
    graph = random_graph(30, 120, seed=2)
    write_saint(graph, tmp_path / "s")
    dataset = open_dataset(str(tmp_path / "s"), "saint")
    fingerprint = InMemoryDataset(dataset.graph).fingerprint
    assert dataset.symmetric in (True, False) and dataset.graph is None
    assert dataset.fingerprint == fingerprint
