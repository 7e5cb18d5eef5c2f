"""The per-vertex arrays of an edge list (issue 31): a split array of more than one dimension is refused naming the
file, not flattened; a vertex count whose arrays would not fit in memory (``prepare --num-nodes 10^14``) is refused
naming the file and the count, before anything is allocated."""

import numpy as np
import pytest

from mggcn.data.formats import read_edgelist
from mggcn.tools.cli import main
from mggcn.utils.errors import GraphError


@pytest.fixture
def edges(tmp_path):
    path = tmp_path / "edges.txt"
    path.write_text("0 1\n1 2\n2 3\n3 0\n")
    return path


@pytest.mark.parametrize("shape", [(2, 2), (4, 1), ()])
def test_a_split_code_array_of_another_shape_is_refused(tmp_path, edges, shape):
    split = tmp_path / "split.npy"
    np.save(split, np.zeros(shape, dtype=np.int64))
    with pytest.raises(GraphError) as info:
        read_edgelist(edges, split=split)
    assert str(info.value) == (f"{split}: the split codes must be a one-dimensional vector of codes (one entry per "
                               f"vertex), got shape {list(shape)}")


def test_a_split_mask_of_another_shape_is_refused(tmp_path, edges):
    split = tmp_path / "split.npz"
    masks = {"train": np.array([True, False, False, False]), "val": np.array([[False, True], [False, False]]),
             "test": np.array([False, False, True, True])}
    np.savez(split, **masks)
    with pytest.raises(GraphError, match=r"'val' must be a one-dimensional mask \(one entry per vertex\), got shape "
                                         r"\[2, 2\]"):
        read_edgelist(edges, split=split)
    masks["val"] = masks["val"].reshape(-1)
    np.savez(split, **masks)
    graph = read_edgelist(edges, split=split)  # the same masks as vectors are read
    assert graph.masks["val"].tolist() == [False, True, False, False]


def _memory_refusal(edges) -> str:
    return (f"{edges}: 100,000,000,000,000 vertices (the count given): their arrays would take about "
            "15,273,690.2 GiB, more than this machine's ")


def test_a_vertex_count_beyond_memory_is_refused_before_allocating(edges):
    with pytest.raises(GraphError) as info:
        read_edgelist(edges, num_nodes=10**14)
    assert str(info.value).startswith(_memory_refusal(edges)) and str(info.value).endswith(" GiB of memory")


def test_prepare_with_a_vertex_count_beyond_memory_is_one_line(tmp_path, capsys, edges):
    code = main(["prepare", str(edges), str(tmp_path / "out"), "--format", "edgelist", "--num-nodes",
                 "100000000000000"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"mggcn prepare: error: {_memory_refusal(edges)}")
    assert not (tmp_path / "out").exists()
