"""What a rank reads to cut its shard (mggcn.data.rows): rows of the vertex arrays and of a CSR, chunk by chunk, from
a graph in memory and from a prepared directory's memory-mapped files, and the one line naming the array (or file)
when what was read is wrong."""

import numpy as np
import pytest

from mggcn.data import rows
from mggcn.data.datasets import InMemoryDataset, open_dataset
from mggcn.data.prepared.writer import prepare
from mggcn.utils.errors import GraphError
from reference import random_graph

N = 53


def _datasets(tmp_path):
    graph = random_graph(N, 300, features=6, seed=1)
    prepare(graph, str(tmp_path / "g"), progress=False)
    return graph, [InMemoryDataset(graph), open_dataset(str(tmp_path / "g"))]


@pytest.mark.parametrize("per_read", [1, 5, 1 << 14])
def test_copy_rows_reads_the_rows_asked_for_in_chunks(tmp_path, monkeypatch, per_read):
    monkeypatch.setattr(rows, "ROWS_PER_READ", per_read)
    graph, datasets = _datasets(tmp_path)
    ids = np.random.default_rng(2).permutation(N)[:31]
    local = np.sort(np.random.default_rng(3).choice(40, 31, replace=False))  # some runs of consecutive rows
    seen = []  # the rows of each chunk checked
    for dataset in datasets:
        out, counted = np.zeros((40, 6), dtype=np.float32), {"bytes": 0}
        seen.clear()
        rows.copy_rows(dataset, "features", ids, local, out, counted, check=lambda _d, i, r: seen.append(i.size))
        assert np.array_equal(out[local], graph.x[ids]) and not out[np.setdiff1d(np.arange(40), local)].any()
        assert counted["bytes"] == 31 * 6 * 4 and sum(seen) == 31 and len(seen) == -(-31 // per_read)


def test_read_neighbours_concatenates_csr_rows(tmp_path):
    _, datasets = _datasets(tmp_path)
    for dataset in datasets:
        indptr, indices = np.asarray(dataset.arrays["in_indptr"]), np.asarray(dataset.arrays["in_indices"])
        ids = np.array([4, 0, 17, 52])
        starts, counts = rows.read_row_spans(dataset, "in", ids)
        assert np.array_equal(starts, indptr[ids]) and np.array_equal(counts, indptr[ids + 1] - indptr[ids])
        want = np.concatenate([indices[indptr[v]: indptr[v + 1]] for v in ids])
        assert np.array_equal(rows.read_neighbours(dataset, "in", starts, counts), want)


def test_what_is_read_wrong_is_named_by_its_array(tmp_path):
    _, (memory, prepared) = _datasets(tmp_path)
    ids = np.arange(3)
    with pytest.raises(GraphError, match=r"^.*features\.npy: the features of vertex 1 contain NaN or inf$"):
        rows.check_features(prepared, ids, np.array([[0.0], [np.nan], [1.0]]))
    with pytest.raises(GraphError, match=r"\(labels\): label 9 of vertex 2 is out of range \[-1, 3\)"):
        rows.check_vertex_rows(memory, ids, np.ones(3), np.array([0, 1, 9]), np.zeros(3, dtype=np.int8))
    with pytest.raises(GraphError, match=r"\(split\): vertex 0 is in a split but has no label$"):
        rows.check_vertex_rows(memory, ids, np.ones(3), np.array([-1, 1, 2]), np.zeros(3, dtype=np.int8))
    with pytest.raises(GraphError, match=r"\(degree\): degree 0 of vertex 1 is below 1"):
        rows.check_vertex_rows(memory, ids, np.array([1, 0, 1]), np.zeros(3), np.zeros(3, dtype=np.int8))
    with pytest.raises(GraphError, match="manifest.json: says \"symmetric\": true but the edges"):
        rows.check_symmetric_sums(prepared, [np.uint64(1), np.uint64(2)])
    rows.check_symmetric_sums(prepared, [np.uint64(5), np.uint64(5)])
    edges = prepared.num_edges
    for array, at, value in (("in_indices", 0, N), ("out_indptr", 4, edges + 7)):  # damaged files
        damaged = np.load(prepared.source(array), mmap_mode="r+")
        damaged[at] = value
        damaged.flush()
    prepared = open_dataset(str(tmp_path / "g"))
    with pytest.raises(GraphError, match=rf"in_indices\.npy: vertex id {N} is out of range \[0, {N}\)$"):
        rows.read_neighbours(prepared, "in", np.array([0]), np.array([1]))
    with pytest.raises(GraphError, match=rf"out_indptr\.npy: corrupt row offsets: row 3 runs from \d+ to {edges + 7}, "
                                         rf"outside \[0, E = {edges}\]$"):
        rows.read_row_spans(prepared, "out", np.array([1, 3, 4]))


def test_a_label_equal_to_num_classes_and_a_multi_label_2_are_refused():
    """The boundaries of the label checks: label C of C classes (one past the last) and a multi-label entry of 2."""
    memory = InMemoryDataset(random_graph(53, 300, features=6, classes=3, seed=1))
    ids, codes = np.arange(3), np.zeros(3, dtype=np.int8)
    with pytest.raises(GraphError, match=r"label 3 of vertex 2 is out of range \[-1, 3\)"):
        rows.check_vertex_rows(memory, ids, np.ones(3), np.array([0, 2, 3]), codes)
    rows.check_vertex_rows(memory, ids, np.ones(3), np.array([0, 2, -1]), np.array([0, 0, -1], dtype=np.int8))
    with pytest.raises(GraphError, match="vertex 1 has 2 for label 1; multi-label labels are 0 or 1"):
        rows.check_vertex_rows(memory, ids, np.ones(3), np.array([[0, 1], [1, 2], [0, 0]]), codes)


def test_a_split_code_other_than_0_1_2_minus_1_is_refused():
    memory = InMemoryDataset(random_graph(53, 300, features=6, classes=3, seed=1))
    ids = np.arange(4)
    rows.check_vertex_rows(memory, ids, np.ones(4), np.array([0, 1, 2, 0]), np.array([-1, 0, 1, 2], dtype=np.int8))
    with pytest.raises(GraphError, match=r"\(split\): split code 3 of vertex 2 is not one of 0, 1, 2, -1$"):
        rows.check_vertex_rows(memory, ids, np.ones(4), np.array([0, 1, 2, 0]), np.array([0, 1, 3, 2], dtype=np.int8))
