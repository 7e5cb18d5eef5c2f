"""gnn-benchmark ``.npz`` files (test helper): a graph written in the layout of Shchur et al.'s ``data/npz/*.npz``
(CSR adjacency and attributes, int8 labels, names as unicode arrays), the files PyG's ``read_npz`` reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp


def write_npz(path: Path, edge_index: np.ndarray, x: np.ndarray, y: np.ndarray, dense: bool = False) -> Path:
    """``path`` holding the graph: adjacency ``A[i, j] = 1`` per edge ``i -> j`` (duplicates summed, as scipy
    does), the attributes as CSR (or a dense ``attr_matrix``), ``labels`` int8."""
    n = x.shape[0]
    adj = sp.csr_matrix((np.ones(edge_index.shape[1], dtype=np.float32), (edge_index[0], edge_index[1])),
                        shape=(n, n))
    arrays = {"adj_data": adj.data, "adj_indices": adj.indices, "adj_indptr": adj.indptr,
              "adj_shape": np.array(adj.shape), "labels": y.astype(np.int8),
              "node_names": np.array([f"v{i}" for i in range(n)]), "class_names": np.array(["a", "b"])}
    if dense:
        arrays["attr_matrix"] = x.astype(np.float32)
    else:
        attr = sp.csr_matrix(x.astype(np.float32))
        arrays.update(attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
                      attr_shape=np.array(attr.shape))
    np.savez(path, **arrays)
    return path
