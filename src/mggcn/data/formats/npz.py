"""The ``.npz`` files of Shchur et al.'s gnn-benchmark (``cora.npz``, ``amazon_electronics_computers.npz``, ...), the
files PyG's ``CitationFull``, ``Amazon`` and ``Coauthor`` datasets read, read as PyG's ``read_npz`` reads them.

One archive: the adjacency as CSR arrays (``adj_data``, ``adj_indices``, ``adj_indptr``, ``adj_shape``), the
features as CSR arrays (``attr_data``, ``attr_indices``, ``attr_indptr``, ``attr_shape``) or a dense
``attr_matrix``, and ``labels`` (one class per vertex). As PyG: a stored ``A[i, j]`` is the edge ``i -> j``, self
loops are dropped and the graph made undirected (each edge once per direction), and positive feature values read
as 1. The files hold no split: a random 50/25/25 split of the vertices, drawn from ``seed``, as for an edge list
without one. Names and other members (``node_names``, ``class_names``, ...) are not read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from mggcn.data.formats.checks import (
    PathLike,
    check_features,
    check_splits,
    check_vertex_memory,
    file_error,
    load_npz,
    require_file,
)
from mggcn.data.formats.labels import check_labels
from mggcn.data.formats.memory import undirected_edges
from mggcn.data.formats.sparse import check_csr, matrix_shape, square_shape
from mggcn.data.graph import SPLITS, Graph, random_split

__all__ = ["read_npz"]

_ADJ = ("adj_data", "adj_indices", "adj_indptr", "adj_shape")
_ATTR = ("attr_data", "attr_indices", "attr_indptr", "attr_shape")


def read_npz(path: PathLike, seed: int = 0) -> Graph:
    """Read a gnn-benchmark ``.npz`` as PyG's ``torch_geometric.io.read_npz`` does (see the module docstring)."""
    path = require_file(path)
    arrays = load_npz(path, [*_ADJ, "labels"], optional=(*_ATTR, "attr_matrix"))
    n = square_shape(arrays["adj_shape"], path, "adj_shape")
    indptr, indices = check_csr(arrays["adj_indptr"], arrays["adj_indices"], n, n, path)
    data = arrays["adj_data"].reshape(-1)
    if data.shape[0] != indices.shape[0]:
        raise file_error(path, f"adj_data has {data.shape[0]} entries for {indices.shape[0]} adj_indices")
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    keep = src != indices  # self loops dropped, as PyG drops them; a stored zero is an edge there too (tocoo)
    edge_index = undirected_edges(np.stack([src[keep], indices[keep]]), n)
    n_from = f"adj_shape of {path.name}"
    x = check_features(_features(arrays, path, n, n_from), path, n, n_from)
    y = check_labels(arrays["labels"], path, n, n_from, nan_is_unlabelled=False)
    masks = random_split(y, np.random.default_rng([seed, 2]))
    check_splits(masks, y, dict.fromkeys(SPLITS, f"the random split (from {path.name})"), str(path))
    return Graph(n, edge_index, x, y, masks, name=str(path),
                 meta={"format": "npz", "source": str(path), "split": "random", "seed": seed}).validate()


def _features(arrays: dict[str, np.ndarray], path: Path, n: int, n_from: str) -> np.ndarray:
    """``[n, F]`` float32 of the CSR ``attr_*`` arrays (or the dense ``attr_matrix``), positive values read as 1."""
    if all(k in arrays for k in _ATTR):
        rows, cols = matrix_shape(arrays["attr_shape"], path, "attr_shape")
        if rows != n:
            raise file_error(path, f"attr_shape has {rows} rows for {n} vertices ({n_from})")
        check_vertex_memory(path, n, n_from, cols)
        indptr, indices = check_csr(arrays["attr_indptr"], arrays["attr_indices"], rows, cols, path)
        values = arrays["attr_data"].reshape(-1)
        if values.shape[0] != indices.shape[0] or not np.issubdtype(values.dtype, np.number):
            raise file_error(path, f"attr_data must be {indices.shape[0]} numbers (one per attr_indices), got "
                                   f"{values.dtype} {list(values.shape)}")
        # checked above, so scipy may index with them; an entry stored twice adds up, as PyG's todense() adds it
        x = sp.csr_matrix((values.astype(np.float32, copy=False), indices, indptr), shape=(rows, cols)).toarray()
    elif "attr_matrix" in arrays:
        x = np.asarray(arrays["attr_matrix"])
        if x.dtype.kind not in "biuf":
            raise file_error(path, f"attr_matrix must hold numbers, got dtype {x.dtype}")
        x = x.astype(np.float32, copy=False)
    else:
        raise file_error(path, f"no features: neither {', '.join(_ATTR)} nor attr_matrix")
    x[x > 0] = 1  # as PyG's read_npz: the attributes are presence flags
    return x

