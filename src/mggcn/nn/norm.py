"""The aggregation operator Â of each model, as pure functions on scipy CSR matrices.

Â has a row per TARGET vertex and a column per SOURCE vertex, so that ``Â @ H`` aggregates incoming messages
(PyG's ``flow="source_to_target"``). The GCN's two normalizations (``--norm``):

* ``sym``  — ``Â = D^-1/2 (A + I) D^-1/2`` (Kipf & Welling; PyG ``gcn_norm``; DGL ``norm="both"``),
* ``mean`` — ``Â = D^-1 (A + I)`` (what the original MG-GCN code does),

with ``D`` the in-degree of ``A + I`` (row sums), as PyG computes it, which matters on directed graphs.
Self loops are added once: an input self loop is replaced by a single loop of weight 1 (PyG's
``add_remaining_self_loops`` with unit weights). Parallel edges are kept and add up, as in PyG's message passing.

The other models aggregate over the edges exactly as given (no self loop added or removed, as PyG's
``SAGEConv`` and ``GINConv`` do with the same ``edge_index``):

* ``in-mean`` — ``Â = D_in^-1 A`` (GraphSAGE's mean; ``D_in`` the row sums of ``A``; a vertex without in-edges
  aggregates to 0),
* ``sum``     — ``Â = A`` (GIN's sum; its ``(1 + ε)·h_i`` is a local term of the model, not part of Â).

GAT's ``gat`` is the pattern its attention runs on: ``A`` with its self loops replaced by one unit loop per vertex
(PyG ``GATConv``'s ``remove_self_loops`` then ``add_self_loops``), the values the edge multiplicities (two parallel
edges ``j -> i`` give 2: two PyG edges with the same attention score), 1 on the diagonal. The attention weights are
computed from it at run time (:mod:`mggcn.distributed.attention`).

:func:`mggcn.nn.models.operator_for` names the operator a model trains with.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mggcn.config import NORMS, OPERATORS
from mggcn.utils.errors import ConfigError

__all__ = ["adds_self_loops", "adjacency", "entry_values", "normalize", "normalized_adjacency", "row_sums"]


# the operators whose Â replaces the input's self loops by one unit loop per vertex
_SELF_LOOPS = NORMS + ("gat",)
# the operators whose values are the edge counts, no degree involved
_COUNTS = ("sum", "gat")


def adds_self_loops(operator: str) -> bool:
    """Whether Â replaces the input's self loops by one unit loop per vertex (the GCN's, GAT's) or keeps the edges
    as given."""
    return operator in _SELF_LOOPS


def _check(operator: str) -> None:
    if operator not in OPERATORS:
        raise ConfigError(f"norm must be one of {', '.join(OPERATORS)}, got '{operator}'", "norm")


def adjacency(edge_index: np.ndarray, num_nodes: int) -> sp.csr_matrix:
    """``A[target, source]`` = number of edges ``source -> target``, as float32 CSR of shape ``[n, n]``."""
    src, dst = edge_index
    ones = np.ones(src.shape[0], dtype=np.float32)
    adj = sp.csr_matrix((ones, (dst, src)), shape=(num_nodes, num_nodes), dtype=np.float32)
    adj.sum_duplicates()
    return adj


def normalize(adj: sp.csr_matrix, norm: str = "sym", dtype: type = np.float32) -> sp.csr_matrix:
    """Return ``Â`` for the adjacency ``A`` (``A[target, source]``, entries = edge counts).

    Args:
        adj: ``[n, n]`` CSR, rows are targets.
        norm: the operator, one of :data:`OPERATORS` (``"sym"``, ``"mean"``, ``"gat"``: with unit self loops;
            ``"in-mean"``, ``"sum"``: the edges as given).
        dtype: the values' (float64 for a float64 operator: its values then carry no float32 rounding).
    """
    _check(norm)
    n = adj.shape[0]
    adj = adj.tocsr(copy=True)
    if adds_self_loops(norm):  # the diagonal's entries zeroed in place: scipy's setdiag warns of a CSR's new ones
        adj.data[np.repeat(np.arange(n), np.diff(adj.indptr)) == adj.indices] = 0
        adj.eliminate_zeros()
        adj = (adj + sp.identity(n, dtype=np.float32, format="csr")).tocsr()
    adj.sort_indices()
    deg = row_sums(adj)  # >= 1 with the self loop; in-mean: may be 0
    rows = np.repeat(np.arange(n), np.diff(adj.indptr))
    values = entry_values(adj.data, deg[rows], deg[adj.indices] if norm == "sym" else None, norm, dtype)
    return sp.csr_matrix((values, adj.indices, adj.indptr), shape=adj.shape)


_CHUNK = 1 << 20  # edges or nonzeros per step of normalized_adjacency: its temporaries stay a few MiB


def normalized_adjacency(edge_index: np.ndarray, num_nodes: int, norm: str = "sym") -> sp.csr_matrix:
    """``normalize(adjacency(edge_index, num_nodes), norm)``, the same float32 bits, in bounded extra memory.

    The edges (for the GCN's operators: other than self loops, plus one unit self loop per vertex) go into one
    int32 (row, column) list, a chunk of edges at a time, which becomes Â's CSR (duplicates added up); the values
    are then normalized in place, a chunk of nonzeros at a time. Besides ``edge_index`` and the result, it holds
    that list and float32 ones (12 bytes per nonzero) while the CSR is built, never ``E``-sized int64 or float64
    temporaries.

    Args:
        edge_index: ``int [2, E]``, row 0 source, row 1 target.
        num_nodes: ``n``.
        norm: the operator, one of :data:`OPERATORS`.

    Shapes: ``[2, E]`` -> ``[n, n]`` CSR (rows are targets), sorted columns.
    """
    _check(norm)
    loops = adds_self_loops(norm)
    n = num_nodes
    src, dst = edge_index
    keep = (src != dst) if loops else None
    total = (int(keep.sum()) + n) if loops else int(src.shape[0])
    idx = np.int32 if total < 2**31 and n < 2**31 else np.int64
    rows, cols = np.empty(total, dtype=idx), np.empty(total, dtype=idx)
    at = 0
    for start in range(0, src.shape[0], _CHUNK):
        s_chunk, d_chunk = src[start: start + _CHUNK], dst[start: start + _CHUNK]
        if keep is not None:
            k = keep[start: start + _CHUNK]
            s_chunk, d_chunk = s_chunk[k], d_chunk[k]
        count = int(s_chunk.shape[0])
        rows[at: at + count] = d_chunk
        cols[at: at + count] = s_chunk
        at += count
    del keep
    if loops:
        rows[at:] = cols[at:] = np.arange(n, dtype=idx)
    adj = sp.coo_matrix((np.ones(total, dtype=np.float32), (rows, cols)), shape=(n, n)).tocsr()
    del rows, cols
    adj.sum_duplicates()
    adj.sort_indices()
    if norm in _COUNTS:
        return adj
    deg = row_sums(adj)
    for start in range(0, adj.nnz, _CHUNK):
        end = min(start + _CHUNK, adj.nnz)
        row = np.searchsorted(adj.indptr, np.arange(start, end), side="right") - 1
        cols_here = adj.indices[start:end]
        adj.data[start:end] = entry_values(adj.data[start:end], deg[row],
                                           deg[cols_here] if norm == "sym" else None, norm)
    return adj


def row_sums(adj: sp.csr_matrix) -> np.ndarray:
    """The degrees ``D`` of a CSR of edge counts: its row sums, float64, exact (scipy sums float32 values in
    float32, which rounds a vertex of more than 2^24 in-edges), a chunk of nonzeros at a time: from the running
    sums of the values, each row's end minus its start."""
    ends = np.zeros(adj.shape[0] + 1, dtype=np.float64)  # the sum of the values before each row's end
    total = 0.0
    for start in range(0, adj.nnz, _CHUNK):
        end = min(start + _CHUNK, adj.nnz)
        running = np.cumsum(adj.data[start:end], dtype=np.float64)
        running += total
        lo, hi = np.searchsorted(adj.indptr, [start, end], side="right")  # the rows ending in (start, end]
        ends[lo:hi] = running[adj.indptr[lo:hi] - start - 1]
        total = float(running[-1])
    return np.diff(ends)


def entry_values(count: np.ndarray, deg_target: np.ndarray, deg_source: np.ndarray | None,
                 norm: str = "sym", dtype: type = np.float32) -> np.ndarray:
    """``Â[t, s]`` (float32, or ``dtype``) of entries with multiplicity ``count`` (1 on the GCN's diagonal), given
    ``D`` at both ends.

    ``sym``: ``D_t^-1/2 · count · D_s^-1/2``; ``mean`` and ``in-mean``: ``count / D_t`` (``deg_source`` unused;
    ``D`` counts the unit self loop for ``mean``, the in-edges as given for ``in-mean``); ``sum`` and ``gat``:
    ``count`` (no degree used). Computed in float64 in this exact order, so that a rank building its rows from a
    prepared dataset gets the same float32 bits as :func:`normalize` on the whole graph.
    """
    _check(norm)
    count = np.asarray(count).astype(np.float64)
    if norm in _COUNTS:
        return count.astype(dtype)
    if norm == "sym":
        values = (1.0 / np.sqrt(np.asarray(deg_target, dtype=np.float64))) * count
        values *= 1.0 / np.sqrt(np.asarray(deg_source, dtype=np.float64))
    else:
        values = count / np.asarray(deg_target, dtype=np.float64)
    return values.astype(dtype)
