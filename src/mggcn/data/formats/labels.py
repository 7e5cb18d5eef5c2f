"""Labels as the readers find them in files, checked where they are read, each bad file named in one line.

Two kinds (:class:`~mggcn.data.graph.Graph`'s ``y``):

* single-label: one class per vertex, ``int64 [n]`` with ``-1`` = unlabelled (:func:`check_labels`);
* multi-label: a 0/1 matrix ``[n, C]`` with ``C`` ≥ 2 columns, 1 where the vertex has that label, as ``uint8``;
  every vertex is labelled (its set of labels may be empty). PPI, Yelp and Amazon (GraphSAINT's one-hot lists) and
  ogbn-proteins (112 label columns) are such datasets (:func:`check_label_matrix`).

:func:`read_labels` takes either from an array whose shape says which: ``[n]`` or ``[n, 1]`` (OGB's column) is one
class per vertex, ``[n, C]`` a label matrix.
"""

from __future__ import annotations

import os

import numpy as np

from mggcn.data.graph import is_label_matrix, multilabel_array, one_hot_classes
from mggcn.data.messages import one_line
from mggcn.utils.errors import GraphError

__all__ = ["check_class_count", "check_label_matrix", "check_label_range", "check_labels", "read_labels"]

PathLike = str | os.PathLike


def _error(path: PathLike, msg: str) -> GraphError:
    return GraphError(one_line(path, msg))


def read_labels(y: np.ndarray, path: PathLike, n: int, n_from: str, *, nan_is_unlabelled: bool) -> np.ndarray:
    """The labels of ``path`` for ``n`` vertices (``n_from``: where ``n`` came from): a label matrix ``[n, C]`` as
    :func:`check_label_matrix` reads it, anything else as :func:`check_labels` does."""
    if y.ndim > 2 or y.ndim == 0 or (y.ndim == 2 and y.shape[1] == 0):
        raise _error(path, f"labels must be a vector [n] (one class per vertex) or a 0/1 matrix [n, C] (a column "
                           f"per label), got shape {list(y.shape)}")
    if is_label_matrix(y):
        return check_label_matrix(y, path, n, n_from)
    return check_labels(y, path, n, n_from, nan_is_unlabelled=nan_is_unlabelled)


def check_label_matrix(y: np.ndarray, path: PathLike, n: int, n_from: str) -> np.ndarray:
    """The labels a 0/1 matrix ``[n, C]`` means (:func:`~mggcn.data.graph.one_hot_classes`: multi-label uint8
    ``[n, C]``, or one class per vertex where it is one-hot), refused unless every entry is 0 or 1 (or a bool): a
    cast would read 2 or 0.5 as a label, and a NaN (no label known) has no meaning where every vertex is
    labelled."""
    if y.shape[0] != n:
        raise _error(path, f"{y.shape[0]} label rows for {n} vertices ({n_from})")
    labels = one_hot_classes(multilabel_array(y, str(path)), str(path))
    if labels.ndim == 1:  # one class per vertex: its class count is bounded as class ids' are
        check_class_count(labels, path)
    return labels


def check_labels(y: np.ndarray, path: PathLike, n: int, n_from: str, *, nan_is_unlabelled: bool) -> np.ndarray:
    """Return int64 ``[n]`` labels with -1 = unlabelled.

    Formats that mark "unlabelled" with NaN (OGB) have no -1 sentinel, so there every negative label is an error;
    elsewhere -1 means unlabelled and anything below it is an error, and a NaN of float labels is unlabelled as well
    (labels saved from PyG's ogbn-papers100M hold NaN so; no format gives NaN another meaning).
    """
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise _error(path, f"labels must be a vector [n] (this format holds one class per vertex, not several "
                           f"labels), got shape {list(y.shape)}")
    if y.shape[0] != n:
        raise _error(path, f"{y.shape[0]} labels for {n} vertices ({n_from})")
    if np.issubdtype(y.dtype, np.floating):
        nan = np.isnan(y)
        values = np.where(nan, 0.0, y)
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            v = int(np.argmax(bad))
            raise _error(path, f"label {float(y[v])!r} of vertex {v} is not an integer")
    elif y.dtype.kind in "biu":  # bool: two classes, as int64_array reads a tensor's
        nan, values = np.zeros(n, dtype=bool), y
        top = np.iinfo(y.dtype).max if y.dtype.kind == "u" else None
        if top is not None and y.size and int(y.max()) == top:
            v = int(np.argmax(y == top))  # -1 (unlabelled) stored unsigned: it would train as a class of its own
            raise _error(path, f"label {top} of vertex {v} is the largest {y.dtype}, as -1 (unlabelled) reads when "
                               f"stored unsigned; store the labels signed (e.g. int64)")
    else:
        raise _error(path, f"labels must be integers, got dtype {y.dtype}")
    # checked as read, before the cast to int64, which would wrap a value beyond it (2^64 - 1 would read as -1)
    negative = values < (0 if nan_is_unlabelled else -1)
    if negative.any():
        v = int(np.argmax(negative))
        raise _error(path, f"label {int(values[v])} of vertex {v} is negative")
    check_class_count(values, path)
    labels = values.astype(np.int64)
    labels[nan] = -1
    return labels


def check_class_count(y: np.ndarray, path: PathLike) -> None:
    """The class count a label implies (largest + 1) may not exceed the vertex count: one stray label must not
    resize the model (a label of 10^9 would make a 10^9-wide output layer)."""
    n = y.shape[0]
    too_big = y >= n
    if too_big.any():
        v = int(np.argmax(too_big))
        raise _error(path, f"label {int(y[v])} of vertex {v} would make {int(y[v]) + 1} classes, more than "
                           f"the {n} vertices")


def check_label_range(y: np.ndarray, num_classes: int | None, path: PathLike) -> int:
    """The class count of labels ``y`` (largest + 1, or the columns of a label matrix), each label checked to lie
    below ``num_classes`` where it is given; a label matrix must have ``num_classes`` columns."""
    if y.ndim == 2:
        if num_classes is not None and num_classes != y.shape[1]:
            raise _error(path, f"{y.shape[1]} label columns (multi-label), but num_classes={num_classes}")
        return int(y.shape[1])
    if num_classes is None:
        return int(y.max()) + 1 if y.size else 0
    too_big = y >= num_classes
    if too_big.any():
        v = int(np.argmax(too_big))
        raise _error(path, f"label {int(y[v])} of vertex {v} is out of range [0, {num_classes})")
    return num_classes
