"""The values in the data, the same through every entry point: a file with ``.npy`` side files, a prepared
directory, a :class:`mggcn.Graph`, a PyG ``Data``.

What is decided here, as a PyTorch/PyG user would expect it:

* bool (and any real) features read as float32, as ``x.float()`` reads them; complex or text features are refused;
* bool labels are classes 0/1; NaN in float labels means unlabelled, as -1 does (PyG's ogbn-papers100M holds NaN so),
  and a split may hold no unlabelled vertex; labels below -1 are refused wherever they are;
* a split mask is bool or 0/1, never split codes, vertex ids or NaN cast to True.

Legend: n = vertices, F = features, C = classes.
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest
import torch

from mggcn import Graph
from mggcn.data.formats import from_pyg, read
from mggcn.utils.errors import GraphError

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from cli_util import run_cli  # noqa: E402

N, F, C = 12, 3, 3
SPLIT = np.array([0] * 6 + [1] * 3 + [2] * 3)


def _arrays():
    rng = np.random.default_rng(0)
    ei = rng.integers(0, N, (2, 3 * N))
    x = rng.standard_normal((N, F)).astype(np.float32)
    y = np.arange(N) % C
    return ei, x, y


def _masks(split=SPLIT) -> dict[str, np.ndarray]:
    return {s: split == code for code, s in enumerate(("train", "val", "test"))}


def _files(tmp_path, x=None, y=None, split=SPLIT) -> dict[str, object]:
    ei, x0, y0 = _arrays()
    (tmp_path / "g.txt").write_text("".join(f"{s} {d}\n" for s, d in ei.T))
    for name, arr in (("x", x0 if x is None else x), ("y", y0 if y is None else y), ("split", split)):
        np.save(tmp_path / f"{name}.npy", arr)
    return {"features": tmp_path / "x.npy", "labels": tmp_path / "y.npy", "split": tmp_path / "split.npy"}


def _read(tmp_path, **arrays) -> Graph:
    return read(tmp_path / "g.txt", "edgelist", **_files(tmp_path, **arrays))


def _pyg(x=None, y=None, split=SPLIT):
    from torch_geometric.data import Data

    ei, x0, y0 = _arrays()
    masks = {f"{s}_mask": torch.as_tensor(m) for s, m in _masks(split).items()}
    return Data(edge_index=torch.as_tensor(ei), x=torch.as_tensor(x0 if x is None else x),
                y=torch.as_tensor(y0 if y is None else y), **masks)


def _graph(x=None, y=None, masks=None) -> Graph:
    ei, x0, y0 = _arrays()
    return Graph(N, ei, x0 if x is None else x, y0 if y is None else y, _masks() if masks is None else masks)


# Features --------------------------------------------------------------------------------------------------------

def test_bool_features_read_as_float32_from_a_file_as_from_pyg(tmp_path):
    x = _arrays()[1] > 0
    from_file, from_data = _read(tmp_path, x=x), from_pyg(_pyg(x=torch.as_tensor(x)))
    for g in (from_file, from_data):
        assert g.x.dtype == np.float32 and np.array_equal(g.x, x.astype(np.float32))


@pytest.mark.parametrize("x", [np.ones((N, F), np.complex64), np.full((N, F), "1.5")], ids=["complex", "text"])
def test_features_that_are_not_real_numbers_are_refused_by_a_graph_as_in_a_file(tmp_path, x):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # complex: no ComplexWarning then a graph without the imaginary part
        with pytest.raises(GraphError, match=f"features must be real numbers, got dtype {x.dtype}"):
            _graph(x=x)
    with pytest.raises(GraphError, match="x.npy: features must be real numbers"):
        _read(tmp_path, x=x)


def test_non_finite_features_of_a_graph_name_the_row():
    x = _arrays()[1].astype(np.float64)
    x[7, 1] = 1e300  # beyond float32: inf once cast
    with pytest.raises(GraphError, match=r"graph: the features contain NaN or inf \(first in row 7"):
        _graph(x=x).validate()


# Labels ----------------------------------------------------------------------------------------------------------

def test_bool_labels_are_two_classes_from_a_file_as_from_pyg(tmp_path):
    y = np.arange(N) % 2 == 1
    for g in (_read(tmp_path, y=y), from_pyg(_pyg(y=torch.as_tensor(y)))):
        assert g.y.dtype == np.int64 and np.array_equal(g.y, y.astype(np.int64)) and g.num_classes == 2


def _nan_labels() -> tuple[np.ndarray, np.ndarray]:
    """Float labels with NaN at vertex 10 (a test vertex), and a split that leaves vertex 10 out."""
    y = (np.arange(N) % C).astype(np.float32)
    y[10] = np.nan
    split = SPLIT.copy()
    split[10] = -1
    return y, split


def test_nan_labels_outside_the_splits_are_unlabelled_in_every_entry_point(tmp_path):
    y, split = _nan_labels()
    want = np.where(np.isnan(y), -1, y).astype(np.int64)
    graphs = [_read(tmp_path, y=y, split=split), from_pyg(_pyg(y=torch.as_tensor(y)[:, None], split=split)),
              Graph(N, _arrays()[0], _arrays()[1], y, _masks(split)).validate()]  # [n, 1]: as papers100M's y
    for g in graphs:
        assert np.array_equal(g.y, want) and g.num_classes == C


def test_a_nan_label_in_a_split_names_the_vertex(tmp_path):
    y, _ = _nan_labels()
    with pytest.raises(GraphError, match="split.npy: vertex 10 is in the 'test' split but has no label in .*y.npy"):
        _read(tmp_path, y=y)
    with pytest.raises(GraphError, match=r"pyg: label -1 of a 'test' vertex .*\(vertex 10; -1 and NaN mean unl"):
        from_pyg(_pyg(y=torch.as_tensor(y)))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_unsigned_labels_holding_their_largest_value_are_refused_as_a_minus_one_stored_unsigned(tmp_path, dtype):
    """-1 (unlabelled) saved as uint8 reads 255: on more than 255 vertices it trained as a class of its own (256
    classes, exit 0); uint32 and uint64 exceed any vertex count and were refused as too many classes already."""
    from mggcn.data.formats.labels import check_labels

    top = int(np.iinfo(dtype).max)
    y = np.arange(top + 10) % C
    y[7] = -1
    with pytest.raises(GraphError, match=rf"y.npy: label {top} of vertex 7 is the largest {np.dtype(dtype)}, as -1 "
                                         r"\(unlabelled\) reads when stored unsigned; store the labels signed"):
        check_labels(y.astype(dtype), "y.npy", y.size, "n", nan_is_unlabelled=False)
    np.testing.assert_array_equal(check_labels(y, "y.npy", y.size, "n", nan_is_unlabelled=False), y)
    y[7] = C
    assert check_labels(y.astype(dtype), "y.npy", y.size, "n", nan_is_unlabelled=False).max() == C


def test_a_graph_refuses_labels_below_minus_one_outside_the_splits():
    y, split = _nan_labels()
    y = np.nan_to_num(y, nan=-3).astype(np.int64)  # vertex 10, in no split
    with pytest.raises(GraphError, match=r"graph: label -3 of vertex 10 is out of range \[0, 3\) \(-1 = unl"):
        _graph(y=y, masks=_masks(split)).validate()


def test_nan_labels_train_from_a_file_prepared_at_two_workers(tmp_path):
    y, split = _nan_labels()
    files = _files(tmp_path, y=y, split=split)
    argv = ["--format", "edgelist", "--features", files["features"], "--labels", files["labels"], "--split",
            files["split"]]
    prepared = run_cli("prepare", str(tmp_path / "g.txt"), str(tmp_path / "prep"), *map(str, argv), "--quiet")
    assert prepared.returncode == 0, prepared.stderr
    trained = run_cli("train", str(tmp_path / "prep"), "--nprocs", "2", "--epochs", "2", "--hidden", "4",
                      "--quiet")
    assert trained.returncode == 0 and "trained model" in trained.stdout, trained.stderr
    assert np.array_equal(np.load(tmp_path / "prep" / "labels.npy")[10:11], [-1])


# Split masks -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mask, shown", [(SPLIT, "2"), (np.where(SPLIT == 0, 1.0, np.nan), "nan"),
                                         (np.flatnonzero(SPLIT == 0) + 3, "3")],
                         ids=["split-codes", "nan", "vertex-ids"])
def test_a_graph_mask_that_is_not_bool_or_zero_one_is_refused(mask, shown):
    masks = _masks()
    masks["train"] = mask
    with pytest.raises(GraphError, match=f"graph: the 'train' mask must be bool \\[n\\] \\(or 0/1\\), but holds "
                                         f"{shown}"):
        _graph(masks=masks)


def test_zero_one_masks_of_a_graph_are_still_masks():
    masks = {k: v.astype(np.uint8) for k, v in _masks().items()}
    g = _graph(masks=masks).validate()
    assert all(np.array_equal(g.masks[k], v) for k, v in _masks().items())


def test_patience_without_a_validation_split_is_refused_and_training_without_it_runs():
    """With no validation vertex every epoch's validation accuracy is 0: early stopping would stop after patience
    epochs and restore the first epoch's weights as the best. Refused in one line; without patience it trains."""
    import mggcn
    from mggcn.utils.errors import ConfigError

    ei, x, y = _arrays()
    masks = {"train": SPLIT <= 1, "val": np.zeros(N, dtype=bool), "test": SPLIT == 2}
    graph = Graph(num_nodes=N, edge_index=ei, x=x, y=y, masks=masks, name="noval")
    with pytest.raises(ConfigError, match="patience 2: the dataset's validation split is empty") as err:
        mggcn.train(graph, epochs=6, patience=2, quiet=True)
    assert err.value.option == "patience" and "\n" not in str(err.value)
    assert len(mggcn.train(graph, epochs=6, quiet=True).history) == 6
