"""The in-memory graph dataset, in the user's ORIGINAL vertex ids.

A :class:`Graph` is what every reader and generator produces and what the partitioner consumes. Edges follow PyG's
convention: ``edge_index[0]`` is the source, ``edge_index[1]`` the target, and a vertex aggregates over its incoming
edges (``Â[target, source]`` is nonzero).

Legend: n = vertices, E = edges, F = feature dimension, C = classes.
"""

from __future__ import annotations

import operator
import warnings
import weakref
from dataclasses import dataclass, field

import numpy as np

from mggcn.utils.errors import ConfigError, GraphError

__all__ = ["Graph", "PYG_FIELDS", "SPLITS", "graph_from_arrays", "graph_from_pyg", "int64_array", "is_pyg",
           "is_label_matrix", "label_array", "multilabel_array", "one_hot_classes", "random_split", "split_mask",
           "tensor_array"]

SPLITS = ("train", "val", "test")


def int64_array(values: np.ndarray, what: str, name: str, kinds: str = "biuf") -> np.ndarray:
    """``values`` as int64, refused, not wrapped or truncated: unsigned beyond int64 (2^64 - 1 would read as
    -1), floats that are not whole numbers (0.5 would read as 0), any dtype kind not in ``kinds`` (numbers and
    booleans by default)."""
    values = np.asarray(values)
    kind = values.dtype.kind
    if values.size and kind not in kinds:
        raise GraphError(f"{name}: {what}s must be integers, got dtype {values.dtype}")
    if kind == "u" and values.size and int(values.max()) > np.iinfo(np.int64).max:
        raise GraphError(f"{name}: {what} {int(values.max())} is beyond the int64 range")
    if kind == "f" and values.size:
        bad = ~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) >= 2.0**63)
        if bad.any():
            raise GraphError(f"{name}: {what} {float(values.flat[int(np.argmax(bad))])!r} is not an integer")
    return np.ascontiguousarray(values, dtype=np.int64)


def label_array(values: np.ndarray, name: str) -> np.ndarray:
    """Labels as int64 with -1 = unlabelled, read as :func:`int64_array` reads them, but that a NaN of float labels
    is -1 too: PyG's ogbn-papers100M (and OGB's own loaders) mark the vertices without a label so."""
    values = np.asarray(values)
    if values.dtype.kind == "f" and values.size:
        nan = np.isnan(values)
        if nan.any():
            values = np.where(nan, -1.0, values)
    return int64_array(values, "label", name)


def _vertex_count(num_nodes: object, name: str) -> int:
    """``num_nodes`` as an int: a Python or numpy integer, or anything that is one as an index (a 0-d integer
    tensor); a float, a string or a bool is refused in one line (arithmetic with them fails deep in the reader)."""
    try:
        n = operator.index(num_nodes)  # type: ignore[arg-type]
    except TypeError:
        n = None
    if n is None or isinstance(num_nodes, (bool, np.bool_)) or n < 0:
        raise GraphError(f"{name}: num_nodes must be a non-negative int, got {num_nodes!r}", "num_nodes")
    return n


def is_label_matrix(y: np.ndarray) -> bool:
    """Whether ``y`` holds labels as a matrix ``[n, C]`` of several columns (multi-label), not one class each."""
    return np.ndim(y) == 2 and np.shape(y)[1] >= 2


def multilabel_array(values: np.ndarray, name: str) -> np.ndarray:
    """Multi-label labels ``[n, C]`` (bool, or numbers that are all 0 or 1: vertex ``v`` has label ``c`` where
    ``[v, c]`` is 1) as uint8, refused in one line otherwise: a cast would read 2 or 0.5 as a label, and a NaN (an
    unknown label) has no meaning where every vertex has its set of labels."""
    values = np.asarray(values)
    if values.dtype.kind == "b":
        return np.ascontiguousarray(values, dtype=np.uint8)
    if values.dtype.kind not in "iuf":
        raise GraphError(f"{name}: multi-label labels [n, C] must be 0/1 numbers or bools, got dtype {values.dtype}")
    other = (values != 0) & (values != 1)  # NaN is neither
    if other.any():
        row, col = np.unravel_index(int(np.argmax(other)), values.shape)
        value = values[row, col].item()
        why = "; NaN (no label) has no meaning here: every vertex has its set of labels" if value != value else ""
        raise GraphError(f"{name}: vertex {row} has {value!r} for label {col}: multi-label labels [n, C] are 0 or "
                         f"1{why}")
    return np.ascontiguousarray(values, dtype=np.uint8)


# The share of rows with exactly one label above which a label matrix that is not one-hot is said to be nearly so:
# multi-label data (PPI, Yelp, ogbn-proteins) gives most vertices several labels or none
_NEARLY_ONE_HOT = 0.9
# The label matrices said to be nearly one-hot, by identity: a reader says it naming its file, then hands the same
# array to Graph, which is not to say it again
_SAID: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def one_hot_classes(y: np.ndarray, name: str | None = None) -> np.ndarray:
    """The labels a 0/1 matrix ``y`` [n, C] (uint8) means: one class per vertex (int64 [n]) where every row holds
    exactly one 1 — a one-hot encoding (``torch.nn.functional.one_hot(y)``), which ``F.cross_entropy`` reads as the
    class it marks — else ``y`` itself, multi-label. A matrix one-hot but for a few rows is multi-label too; with
    ``name`` (where ``y`` came from) a warning names such a row: the loss and the accuracies are not what one-hot
    labels would give."""
    counts = y.sum(axis=1, dtype=np.int64)
    single = counts == 1
    if y.shape[0] and bool(single.all()):
        return y.argmax(axis=1).astype(np.int64)
    if name is not None and y.shape[0] and single.mean() >= _NEARLY_ONE_HOT and _SAID.get(id(y)) is not y:
        _SAID[id(y)] = y
        row = int(np.argmin(single))
        warnings.warn(f"{name}: the labels are read as multi-label (binary cross-entropy, micro-F1): "
                      f"{int(single.sum())} of {y.shape[0]} rows hold exactly one 1, but vertex {row} has "
                      f"{int(counts[row])}; one-hot labels (one class per vertex) need a single 1 in every row",
                      UserWarning, stacklevel=2)
    return y


@dataclass
class Graph:
    """A node-classification dataset held in memory.

    Args:
        num_nodes: number of vertices ``n``.
        edge_index: ``int64 [2, E]`` array, row 0 source, row 1 target, ids in ``[0, n)``.
        x: ``float32 [n, F]`` features.
        y: ``int64 [n]`` labels in ``[0, C)``; ``-1`` marks an unlabeled vertex (allowed only outside the splits).
            Multi-label: ``uint8 [n, C]`` (given as bool or 0/1 numbers, ``C`` ≥ 2 columns), 1 where the vertex has
            that label; every vertex is labelled. A matrix with exactly one 1 in every row is one-hot: one class
            per vertex (:func:`one_hot_classes`).
        masks: ``{"train", "val", "test"} -> bool [n]``; disjoint; train must be non-empty (val and test left out:
            empty).
        num_classes: ``C``; inferred as ``max(y) + 1`` when not given.
        name: where the graph came from, used in error messages.
    """

    num_nodes: int
    edge_index: np.ndarray
    x: np.ndarray
    y: np.ndarray
    masks: dict[str, np.ndarray]
    num_classes: int = -1
    name: str = "graph"
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.num_nodes = _vertex_count(self.num_nodes, self.name)
        unknown = sorted(set(self.masks) - set(SPLITS), key=str) if isinstance(self.masks, dict) else []
        if unknown:  # a misspelt split would be trained without, or the split it meant refused as missing
            raise GraphError(f"{self.name}: masks has {', '.join(map(repr, unknown))}; its splits are "
                             f"{', '.join(SPLITS)}", "masks")
        self.edge_index = self._int64(self.edge_index, "vertex id")
        x = np.asarray(self.x)
        if x.dtype.kind not in "biuf":  # a cast would drop an imaginary part, or parse text: refused, as in files
            raise GraphError(f"{self.name}: the features must be real numbers, got dtype {x.dtype}")
        with np.errstate(over="ignore", invalid="ignore"):  # a value beyond float32 becomes inf: validate refuses it
            self.x = np.ascontiguousarray(x, dtype=np.float32)
        if np.ndim(self.y) == 2 and np.shape(self.y)[1] == 1:  # [n, 1], as OGB stores one class per vertex
            self.y = np.asarray(self.y)[:, 0]
        width = np.shape(self.y)[1] if is_label_matrix(self.y) else 0
        if width:  # a reader's matrix, said there already, is not said again (one_hot_classes knows it)
            self.y = one_hot_classes(multilabel_array(self.y, self.name), self.name)
        else:
            self.y = label_array(self.y, self.name)
        self.masks = {k: self._mask(k, v) for k, v in self.masks.items()}
        if "train" in self.masks:  # validation and test left out: empty, as for a PyG Data with a train mask alone
            self.masks.update({s: np.zeros(self.num_nodes, dtype=bool) for s in SPLITS if s not in self.masks})
        if self.num_classes < 0:
            self.num_classes = width or (int(self.y.max()) + 1 if self.y.size else 0)

    def _mask(self, split: str, values: np.ndarray) -> np.ndarray:
        """A mask as bool, refused unless bool or 0/1: a cast would read split codes, vertex ids or NaN as True."""
        values = np.asarray(values)
        if values.dtype.kind != "b":
            other = ~np.isin(values, (0, 1)) if values.dtype.kind in "iuf" else np.ones(values.shape, dtype=bool)
            if other.any():
                bad = values.reshape(-1)[int(np.argmax(other))].tolist()
                raise GraphError(f"{self.name}: the '{split}' mask must be bool [n] (or 0/1), but holds {bad!r} "
                                 f"({values.dtype}); vertex ids: mggcn.data.formats.from_tensors reads them")
        return np.ascontiguousarray(values, dtype=bool)

    def _int64(self, values: np.ndarray, what: str) -> np.ndarray:
        return int64_array(values, what, self.name)

    @property
    def multilabel(self) -> bool:
        """Whether each vertex has a set of labels (``y`` [n, C] of 0/1) rather than one class (``y`` [n])."""
        return self.y.ndim == 2

    @property
    def num_edges(self) -> int:
        """The number of directed edges (columns of ``edge_index``)."""
        return int(self.edge_index.shape[1])

    @property
    def num_features(self) -> int:
        """The number of features per vertex (columns of ``x``)."""
        return int(self.x.shape[1])

    def _check_ranks(self) -> None:
        """Arrays of the wrong rank, said as such (their row count alone would read "30 rows for 30 vertices")."""
        if self.x.ndim != 2:
            raise GraphError(f"{self.name}: the feature matrix x must be [n, F], got shape {list(self.x.shape)}")
        if self.y.ndim not in (1, 2):
            raise GraphError(f"{self.name}: the labels y must be one class id per vertex ([n]) or a 0/1 matrix of "
                             f"labels ([n, C]), got shape {list(self.y.shape)}")
        for split, mask in self.masks.items():
            if mask.ndim != 1:
                raise GraphError(f"{self.name}: the '{split}' mask must be [n], got shape {list(mask.shape)}")

    def _check_split_labels(self) -> None:
        """Every split present, [n], and labelled in [0, C); the labels outside them in [0, C) or -1."""
        n, name, c = self.num_nodes, self.name, self.num_classes
        for split in SPLITS:
            if split not in self.masks:
                raise GraphError(f"{name}: the '{split}' split is missing")
            mask = self.masks[split]
            if mask.shape != (n,):
                raise GraphError(f"{name}: the '{split}' mask has {mask.shape[0]} entries for {n} vertices")
            if self.multilabel:
                continue  # every vertex has its (possibly empty) set of labels
            bad = mask & ((self.y < 0) | (self.y >= c))
            if bad.any():
                v = int(np.argmax(bad))
                why = "; -1 and NaN mean unlabelled, which no split may hold" if self.y[v] < 0 else ""
                raise GraphError(f"{name}: label {int(self.y[v])} of a '{split}' vertex is out of range [0, {c}) "
                                 f"(vertex {v}{why})")
        bad = np.zeros(0, dtype=bool) if self.multilabel else (self.y < -1) | (self.y >= c)
        if bad.any():
            v = int(np.argmax(bad))
            raise GraphError(f"{name}: label {int(self.y[v])} of vertex {v} is out of range [0, {c}) (-1 = unlabelled)")

    def validate(self) -> Graph:
        """Check every invariant the trainer relies on; raise :class:`GraphError` naming ``self.name`` otherwise."""
        n, name = self.num_nodes, self.name
        if n <= 0:
            raise GraphError(f"{name}: the graph has no vertices")
        if self.edge_index.ndim != 2 or self.edge_index.shape[0] != 2:
            raise GraphError(f"{name}: edge_index must have shape [2, E], got {list(self.edge_index.shape)}")
        if self.edge_index.size:
            lo, hi = int(self.edge_index.min()), int(self.edge_index.max())
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                raise GraphError(f"{name}: edge endpoint {bad} is out of range for {n} vertices")
        self._check_ranks()
        if self.x.shape[0] != n:
            raise GraphError(f"{name}: the feature matrix has {self.x.shape[0] if self.x.ndim else 0} rows "
                             f"but the graph has {n} vertices")
        if self.x.shape[1] == 0:
            raise GraphError(f"{name}: the feature matrix has no column (F = 0)")
        finite = np.isfinite(self.x).all(axis=1)
        if not finite.all():
            raise GraphError(f"{name}: the features contain NaN or inf (first in row {int(np.argmin(finite))}; a value "
                             "beyond float32's range reads as inf)")
        if self.y.shape[:1] != (n,):
            raise GraphError(f"{name}: {self.y.shape[0] if self.y.ndim else 0} labels for {n} vertices")
        if self.multilabel and self.num_classes != self.y.shape[1]:
            raise GraphError(f"{name}: num_classes is {self.num_classes} but the multi-label labels have "
                             f"{self.y.shape[1]} columns")
        if self.num_classes < 1:
            raise GraphError(f"{name}: no labelled vertex, so no classes")
        if self.num_classes > n and not self.multilabel:  # one stray label must not size the output layer
            raise GraphError(f"{name}: {self.num_classes} classes for {n} vertices (largest label "
                             f"{int(self.y.max()) if self.y.size else -1}): more classes than vertices is refused")
        self._check_split_labels()
        if not self.masks["train"].any():
            raise GraphError(f"{name}: the training split is empty")
        for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
            both = self.masks[a] & self.masks[b]
            if both.any():
                raise GraphError(f"{name}: the '{a}' and '{b}' splits overlap (vertex {int(np.argmax(both))})")
        return self


# A PyG ``Data`` (duck-typed: this layer loads no torch) -----------------------------------------------------------

PYG_FIELDS = ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask")


def is_pyg(data: object) -> bool:
    """Whether ``data`` is a PyG ``Data`` or ``HeteroData`` (anything with an ``edge_index`` or node types)."""
    return not isinstance(data, (str, bytes, Graph)) and (hasattr(data, "edge_index") or hasattr(data, "node_types"))


def tensor_array(value: object, key: str, name: str) -> np.ndarray:
    """A tensor (any device, with or without grad) or array as numpy; a meta or sparse tensor is refused in one line
    (``.numpy()`` would raise from inside torch)."""
    if hasattr(value, "detach"):
        if getattr(value, "is_meta", False):
            raise GraphError(f"{name}: {key} is on the 'meta' device (a shape without values); give a tensor with "
                             "data", key)
        if str(getattr(value, "layout", "torch.strided")) != "torch.strided":
            raise GraphError(f"{name}: {key} is a sparse tensor; give a dense one ({key}.to_dense())", key)
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16; float32 holds every value
            value = value.float()
        value = value.numpy()
    array = np.asarray(value)
    if array.dtype == object:
        raise GraphError(f"{name}: {key} is a {type(value).__name__}, not a tensor or an array", key)
    return array


def split_mask(values: np.ndarray, n: int, split: int | None, key: str, name: str) -> np.ndarray:
    """A split as bool [n] from what PyG users give: a bool (or uint8) mask, vertex ids (an integer tensor, as
    torch indexing reads one), or ``[n, k]`` masks, one column per split (WikiCS, the geom-gcn splits), of which
    ``split`` picks one."""
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim == 2:
        k = values.shape[1]
        if split is None:
            raise ConfigError(f"split: {key} has {k} columns, one per split (as WikiCS or the geom-gcn splits "
                              f"give); choose one with split=0..{k - 1}", "split")
        if not 0 <= split < k:
            raise ConfigError(f"split={split}: {key} has {k} columns (0..{k - 1})", "split")
        values = values[:, split]
    if values.ndim != 1:
        raise GraphError(f"{name}: {key} must be a mask [n], masks [n, k] or vertex ids, got shape "
                         f"{list(values.shape)}", key)
    if values.dtype.kind == "b" or values.dtype == np.uint8:
        return values.astype(bool)
    ids = int64_array(values, f"{key} entry", name, kinds="iuf")
    if ids.shape == (n,) and np.isin(ids, (0, 1)).all() and not np.array_equal(np.sort(ids), np.arange(n)):
        # 0/1 for every vertex: a mask, as ids would repeat one; but where n <= 2 they can also list every vertex
        # once ([0, 1], [0]), and then they are ids, as torch indexing reads them
        return ids.astype(bool)
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise GraphError(f"{name}: {key} holds vertex id {bad}, out of range for {n} vertices", key)
    mask = np.zeros(n, dtype=bool)
    mask[ids] = True
    if int(mask.sum()) != ids.size:
        raise GraphError(f"{name}: {key} repeats a vertex id; give each vertex once (or a bool mask)", key)
    return mask


def _check_edge_weight(weight: np.ndarray | None, name: str, num_edges: int | None) -> None:
    """Refuse edge weights other than 1: Â counts each edge once, so training on them would silently ignore them.
    (``edge_attr`` is not read, as PyG's ``GCN``, ``GraphSAGE``, ``GIN`` and ``GAT`` models do not read it by
    default: :func:`graph_from_pyg` warns.)
    Weights that are not one per edge are refused too, as PyG's layers refuse them (``num_edges`` None: the
    edge_index's own check says what is wrong with it)."""
    if weight is not None and num_edges is not None and (weight.ndim != 1 or weight.shape[0] != num_edges):
        raise GraphError(f"{name}: edge_weight has shape {list(weight.shape)}, but edge_index has {num_edges} edges: "
                         "give one weight per edge, or delete data.edge_weight", "edge_weight")
    if weight is not None and weight.size and not (weight == 1).all():
        raise GraphError(f"{name}: edge_weight is not all 1, but mggcn's Â weighs every edge 1; delete "
                         "data.edge_weight to use the unweighted graph", "edge_weight")


def graph_from_pyg(data: object, split: int | None = None, name: str = "pyg", labelled: bool = True) -> Graph:
    """A validated :class:`Graph` from a PyG ``Data``: ``y`` [n] or [n, 1]; masks as in :func:`split_mask`; ``split``
    the column of ``[n, k]`` masks. ``labelled=False`` (prediction): only ``edge_index`` and ``x`` are read, the
    labels and splits are placeholders (every vertex in ``train`` with class 0). An ``edge_attr`` is not read, and a
    warning says so: the weights of a model that reads one (``GINEConv``'s are a GIN's by name) compute other values
    without it."""
    if any(c.__name__ == "Dataset" and c.__module__.startswith("torch_geometric.") for c in type(data).__mro__):
        count = len(data)  # type: ignore[arg-type]
        raise GraphError(f"{name}: a PyG dataset of {count} graph{'s' * (count != 1)} ({type(data).__name__}), not "
                         "one graph; give its graph: dataset[0]")
    if hasattr(data, "node_types") and hasattr(data, "edge_types"):
        raise GraphError(f"{name}: a HeteroData (node types {list(data.node_types)}); mggcn trains on one vertex "
                         "and one edge type: convert it with data.to_homogeneous()")
    if split is not None and (isinstance(split, bool) or not isinstance(split, (int, np.integer))):
        raise ConfigError(f"split must be the column (an int) of a PyG Data's [n, k] masks, got {split!r}", "split")
    fields = PYG_FIELDS if labelled else PYG_FIELDS[:2]
    # a Data with a train mask alone (KarateClub's) has empty validation and test splits, as a split file may give
    missing = [k for k in fields if getattr(data, k, None) is None
               and not (k in ("val_mask", "test_mask") and getattr(data, "train_mask", None) is not None)]
    if missing and missing[0] == "train_mask":
        raise GraphError(f"{name}: the PyG Data has no train_mask; set data.train_mask (and val_mask, test_mask), "
                         "e.g. with torch_geometric.transforms.RandomNodeSplit", "train_mask")
    if missing == ["edge_index"] and getattr(data, "adj_t", None) is not None:
        raise GraphError(f"{name}: the PyG Data holds adj_t (ToSparseTensor), not edge_index; give the Data before "
                         "that transform, or set data.edge_index", "edge_index")
    if missing:
        raise GraphError(f"{name}: the PyG Data has no {', '.join(missing)}; set data.{missing[0]}", missing[0])
    arrays = {k: tensor_array(getattr(data, k), k, name) for k in (*fields, "edge_weight")
              if getattr(data, k, None) is not None}
    if getattr(data, "edge_attr", None) is not None:
        warnings.warn(f"{name}: data.edge_attr is not read: mggcn's models use no edge features, as PyG's GCN, "
                      "GraphSAGE, GIN and GAT models by default (a model that reads them, such as a stack of GINEConv "
                      "layers, computes other values without them)", UserWarning, stacklevel=3)
    shape = np.shape(arrays["edge_index"])
    _check_edge_weight(arrays.get("edge_weight"), name, shape[1] if len(shape) == 2 and shape[0] == 2 else None)
    n = int(data.num_nodes)
    ei = arrays["edge_index"]
    if np.size(ei) and np.issubdtype(ei.dtype, np.integer) and int(ei.max()) >= n:
        raise GraphError(f"{name}: edge endpoint {int(ei.max())} is out of range for data.num_nodes = {n} (PyG counts "
                         "the rows of x unless num_nodes is set): give x a row per vertex, or set data.num_nodes")
    if not labelled:
        masks = {"train": np.ones(n, dtype=bool), "val": np.zeros(n, dtype=bool), "test": np.zeros(n, dtype=bool)}
        return graph_from_arrays(n, arrays["edge_index"], arrays["x"], np.zeros(n, dtype=np.int64), masks, name,
                                 "pyg")
    masks = {s: arrays.get(f"{s}_mask", np.zeros(n, dtype=bool)) for s in SPLITS}
    if split is not None and not any(m.ndim == 2 and m.shape[1] > 1 for m in masks.values()):
        raise ConfigError(f"split={split}: the PyG Data's masks have one column; leave split out", "split")
    return graph_from_arrays(n, arrays["edge_index"], arrays["x"], arrays["y"], masks, name, "pyg", split)


def graph_from_arrays(n: int, edge_index: np.ndarray, x: np.ndarray, y: np.ndarray, masks: dict[str, np.ndarray],
                      name: str, fmt: str, split: int | None = None) -> Graph:
    """A validated :class:`Graph` of ``n`` vertices from arrays as users hold them: ``edge_index`` [2, E] of
    integer ids (empty in any shape), ``y`` [n] or OGB's [n, 1], ``masks`` of :data:`SPLITS` as
    :func:`split_mask` reads them (``split``: the column of ``[n, k]`` masks); ``fmt`` goes in its meta."""
    edge_index = int64_array(edge_index, "vertex id", name, kinds="iuf")
    if edge_index.size == 0:
        edge_index = edge_index.reshape(2, 0)
    masks = {s: split_mask(masks[s], n, split, f"{s}_mask", name) for s in SPLITS}
    return Graph(n, edge_index, x, y, masks, name=name, meta={"format": fmt}).validate()


def random_split(y: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Train/val/test masks of 50/25/25% of the labelled vertices (``y`` -1: unlabelled; a label matrix: all), drawn
    from ``rng``: the split of a dataset whose files give none."""
    n = y.shape[0]
    labelled = rng.permutation(np.flatnonzero(y >= 0) if y.ndim == 1 else np.arange(n))
    k = labelled.size
    cut = (max(1, k // 2), max(1, k // 2) + k // 4) if k else (0, 0)
    masks = {}
    for name, part in zip(SPLITS, np.split(labelled, cut)):
        masks[name] = np.zeros(n, dtype=bool)
        masks[name][part] = True
    return masks
