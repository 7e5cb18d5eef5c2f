"""The in-memory graph (mggcn.data.graph): what validate() accepts, and the one-line error for each thing it refuses."""

import numpy as np
import pytest

from mggcn.data.graph import Graph
from mggcn.utils.errors import GraphError


def _graph(**changes) -> Graph:
    """4 vertices, edges 0->1, 1->2, 2->3, 3->0; vertex 3 unlabelled and in no split."""
    fields = dict(num_nodes=4, edge_index=[[0, 1, 2, 3], [1, 2, 3, 0]], x=np.ones((4, 2)), y=[0, 1, 0, -1],
                  masks={"train": [True, False, False, False], "val": [False, True, False, False],
                         "test": [False, False, True, False]}, name="tiny")
    fields.update(changes)
    return Graph(**fields)


def test_a_valid_graph_with_its_sizes_and_dtypes():
    g = _graph().validate()
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (4, 4, 2, 2)  # classes: max label + 1
    assert g.edge_index.dtype == np.int64 and g.x.dtype == np.float32 and g.y.dtype == np.int64
    assert all(m.dtype == bool for m in g.masks.values())
    assert _graph(num_classes=4).validate().num_classes == 4  # more classes than labels used, at most n


@pytest.mark.parametrize("changes, message", [
    (dict(num_nodes=0, x=np.ones((0, 2)), y=[], edge_index=np.zeros((2, 0)),
          masks={s: [] for s in ("train", "val", "test")}), "tiny: the graph has no vertices"),
    (dict(edge_index=[[0, 1, 2], [1, 2, 3], [0, 0, 0]]), "edge_index must have shape \\[2, E\\], got \\[3, 3\\]"),
    (dict(edge_index=[[0, 1, 2, 4], [1, 2, 3, 0]]), "edge endpoint 4 is out of range for 4 vertices"),
    (dict(edge_index=[[0, -1, 2, 3], [1, 2, 3, 0]]), "edge endpoint -1 is out of range"),
    (dict(x=np.ones((3, 2))), "the feature matrix has 3 rows but the graph has 4 vertices"),
    (dict(x=np.array([[1.0, np.nan]] * 4)), "the features contain NaN or inf"),
    (dict(y=[0, 1, 0]), "3 labels for 4 vertices"),
    (dict(masks={"val": [False] * 4, "test": [True, False, False, False]}), "the 'train' split is missing"),
    (dict(masks={"train": [False] * 4, "val": [False] * 4, "test": [False] * 4}), "the training split is empty"),
    (dict(masks={"train": [True, True, False, False], "val": [False, True, False, False], "test": [False] * 4}),
     "the 'train' and 'val' splits overlap \\(vertex 1\\)"),
    (dict(masks={"train": [True, False, False, True], "val": [False] * 4, "test": [False] * 4}),
     "label -1 of a 'train' vertex is out of range"),
    (dict(num_classes=1), "label 1 of a 'val' vertex is out of range \\[0, 1\\)"),
])
def test_validate_names_the_graph_and_what_is_wrong(changes, message):
    with pytest.raises(GraphError, match=message):
        _graph(**changes).validate()
