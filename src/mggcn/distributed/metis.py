"""``--partition metis``: a graph partitioner's order, so that each rank's blocks reference fewer rows of the others.

METIS (through pymetis, an optional dependency: ``pip install 'mggcn[metis]'``) cuts the symmetrized graph (self
loops dropped, duplicates merged) into P parts, balancing the vertex weights ``deg + 1``: the nonzeros of a row of
``A + I``, so the parts carry about the same SpMM work. It is asked for a tight balance (``ufactor`` 1.01).

Equal row blocks: MG-GCN's ranks own exactly m = ⌈n/P⌉ rows each, and METIS parts are not exactly equal in size
(more so in vertices than in weight). Every part over m vertices hands its overflow — its lowest-degree vertices,
which carry the fewest cut edges and nonzeros with them — to the parts under m, the emptiest first. Part p then
becomes rank p's rows: its vertices in increasing original id (keeping what locality the ids carry), then padding
rows up to m (so padding may sit at the end of any block, not only the last).

Determinism: METIS is deterministic for a given input and seed (``options.seed``, from ``--seed``), so every rank
computes the same order from the same graph without any communication (checked in tests/distributed/test_metis.py).

Legend: n = vertices, P = parts, m = rows per part.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mggcn.distributed.partition import Partition
from mggcn.utils.errors import ConfigError
from mggcn.utils.optional import require

__all__ = ["UFACTOR", "require_pymetis", "metis_parts", "metis_partition", "partition_from_parts", "symmetric_pattern"]

UFACTOR = 10  # METIS' allowed imbalance in thousandths: 1.01


def symmetric_pattern(rows: np.ndarray, cols: np.ndarray, num_nodes: int) -> sp.csr_matrix:
    """The pattern of ``A + Aᵀ`` without self loops, duplicates merged (what METIS partitions)."""
    keep = rows != cols
    r, c = rows[keep], cols[keep]
    ones = np.ones(2 * r.shape[0], dtype=np.int8)
    sym = sp.csr_matrix((ones, (np.concatenate([r, c]), np.concatenate([c, r]))), shape=(num_nodes, num_nodes))
    sym.sum_duplicates()
    return sym


def require_pymetis():
    """The pymetis module, or a one-line error that says how to install it (a
    :class:`~mggcn.utils.optional.MissingDependency`, a :class:`ConfigError` of the option ``partition``)."""
    return require("pymetis", "metis", "partition metis", option="partition")


def metis_parts(sym: sp.csr_matrix, weights: np.ndarray, num_parts: int, seed: int = 0) -> np.ndarray:
    """METIS' part of every vertex of the symmetric pattern ``sym``, balancing ``weights`` (int, > 0)."""
    pymetis = require_pymetis()
    if num_parts == 1:
        return np.zeros(sym.shape[0], dtype=np.int64)
    options = pymetis.Options()
    options.seed = seed
    options.ufactor = UFACTOR
    xadj, adjncy = sym.indptr.astype(np.int64), sym.indices.astype(np.int64)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2
        graph = {"adjacency": pymetis.CSRAdjacency(xadj, adjncy)}
    else:
        graph = {"xadj": xadj, "adjncy": adjncy}
    _, parts = pymetis.part_graph(num_parts, vweights=weights.astype(np.int64), options=options, **graph)
    return np.asarray(parts, dtype=np.int64)


def partition_from_parts(parts: np.ndarray, num_parts: int, weights: np.ndarray) -> Partition:
    """Rank p's rows are part p's vertices (by original id) then padding; overflow beyond m moves to underfull parts."""
    n = parts.shape[0]
    m = -(-n // num_parts)
    parts = parts.copy()
    sizes = np.bincount(parts, minlength=num_parts)
    overflow = []
    for p in np.flatnonzero(sizes > m):
        members = np.flatnonzero(parts == p)
        overflow.append(members[np.argsort(weights[members], kind="stable")[: sizes[p] - m]])
    moving = np.concatenate(overflow) if overflow else np.empty(0, dtype=np.int64)
    room = np.maximum(m - sizes, 0)
    targets = np.repeat(np.argsort(-room, kind="stable"), np.sort(room)[::-1])  # emptiest first
    parts[moving] = targets[: moving.shape[0]]
    order = np.full(num_parts * m, -1, dtype=np.int64)
    for p in range(num_parts):
        members = np.flatnonzero(parts == p)  # increasing original id
        order[p * m: p * m + members.shape[0]] = members
    position = np.empty(n, dtype=np.int64)
    real = order >= 0
    position[order[real]] = np.flatnonzero(real)
    return Partition(n, num_parts, order, position)


def metis_partition(rows: np.ndarray, cols: np.ndarray, num_nodes: int, num_parts: int, seed: int = 0) -> Partition:
    """The METIS :class:`Partition` of the graph with nonzeros ``(rows, cols)`` of A (rows = targets)."""
    if num_parts > num_nodes:
        raise ConfigError(f"nprocs {num_parts} is larger than the graph's {num_nodes} vertices", "nprocs")
    sym = symmetric_pattern(rows, cols, num_nodes)
    pattern = sp.csr_matrix((np.ones(rows.shape[0], dtype=np.int32), (rows, cols)), shape=(num_nodes, num_nodes))
    pattern.sum_duplicates()
    weights = np.diff(pattern.indptr) - pattern.diagonal().astype(bool) + 1  # nonzeros of a row of A + I
    return partition_from_parts(metis_parts(sym, weights, num_parts, seed), num_parts, weights)
