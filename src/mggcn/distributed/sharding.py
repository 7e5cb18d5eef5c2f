"""A dataset's partition and each rank's shard: the one place that cuts shards, for every kind of dataset.

A dataset (:class:`mggcn.data.datasets.Dataset`: a graph in memory, or a directory ``mggcn prepare`` wrote) holds
the graph as arrays indexed by original vertex id (:data:`mggcn.data.datasets.ROW_ARRAYS`). :func:`build_shard`
reads from them only what rank ``rank`` needs: its rows of both CSRs, the degree of those rows and of their
neighbours, and its rows of features, labels and split. From a prepared dataset these are memory-mapped reads, so a
rank's host memory grows with its share of the graph, not with the whole graph.

Â is built as :func:`mggcn.nn.norm.normalize` builds it, entry for entry and bit for bit, for every operator
(:data:`mggcn.config.OPERATORS`): self loops dropped for one unit loop (the GCN's norms; GraphSAGE's ``in-mean`` and
GIN's ``sum`` keep the edges as given and add no diagonal), parallel edges summed into one entry, values from
:func:`mggcn.nn.norm.entry_values` with the degrees of :func:`_degree` (``Â[t, s]``: t is the row of Â, the column of
Âᵀ). The rows are read :data:`SHARD_CHUNK_EDGES` edges at a
time, so temporaries stay small.

Legend: n = vertices, m = rows of a rank, P = ranks.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from mggcn.config import NORMS, OPERATORS
from mggcn.data.datasets import Dataset, InMemoryDataset
from mggcn.data.graph import SPLITS, ConfigError, Graph, GraphError
from mggcn.distributed.metis import metis_partition
from mggcn.distributed.partition import Partition, Shard, make_partition, to_blocks
from mggcn.distributed.tiled import TiledCSR
from mggcn.nn.norm import adds_self_loops, entry_values

__all__ = ["SHARD_CHUNK_EDGES", "build_shard", "partition_dataset"]

SHARD_CHUNK_EDGES = 1 << 20  # edges a rank reads at a time while building its shard
ROWS_PER_READ = 1 << 14  # vertex rows copied out of a mapped array between two _drop_pages


def _drop_pages(arr: Any) -> None:
    """Take the pages of a memory-mapped array read so far out of this process's resident set (they stay in the
    page cache, and a later read maps them again): a rank's RSS then holds what it copied out of the files, not the
    files. A no-op for arrays that are not mapped, and where ``madvise`` is missing."""
    while arr is not None and not isinstance(getattr(arr, "_mmap", None), mmap.mmap):
        arr = getattr(arr, "base", None)
    if arr is not None and hasattr(mmap, "MADV_DONTNEED"):
        arr._mmap.madvise(mmap.MADV_DONTNEED)


def partition_dataset(dataset: Dataset | Graph, num_parts: int, seed: int = 0, ordering: str = "random") -> Partition:
    """The renumbering of ``dataset``'s vertices for ``num_parts`` ranks (:mod:`mggcn.distributed.partition`).

    ``metis`` reads the whole in-edge CSR (every rank computes the same result): unlike the shards, it needs the
    whole graph in memory, ~12 bytes per edge while METIS runs.
    """
    if isinstance(dataset, Graph):
        dataset = InMemoryDataset(dataset)
    if ordering == "metis":
        indptr = np.asarray(dataset.arrays["in_indptr"])
        targets = np.repeat(np.arange(dataset.num_nodes, dtype=np.int64), np.diff(indptr))
        sources = np.asarray(dataset.arrays["in_indices"]).astype(np.int64)
        return metis_partition(targets, sources, dataset.num_nodes, num_parts, seed)  # rows of Â are targets
    return make_partition(dataset.num_nodes, num_parts, seed, ordering)


def _err(dataset: Dataset, array: str, msg: str) -> GraphError:
    return GraphError(" ".join(f"{dataset.source(array)}: {msg}".split()))


def _check_rows(dataset: Dataset, ids: np.ndarray, degree: np.ndarray, x: np.ndarray, y: np.ndarray,
                codes: np.ndarray) -> None:
    """The vertex data of the rows a rank loads, checked (together, the ranks check every row once): a damaged
    prepared dataset is named by its file instead of training on garbage."""
    bad = (y < -1) | (y >= dataset.num_classes)
    if bad.any():
        raise _err(dataset, "labels", f"label {int(y[np.argmax(bad)])} of vertex {int(ids[np.argmax(bad)])} is out "
                                      f"of range [-1, {dataset.num_classes}) (num_classes of manifest.json)")
    bad = ~np.isin(codes, (-1, 0, 1, 2))
    if bad.any():
        raise _err(dataset, "split", f"split code {int(codes[np.argmax(bad)])} of vertex "
                                     f"{int(ids[np.argmax(bad)])} is not one of 0, 1, 2, -1")
    bad = (codes >= 0) & (y < 0)
    if bad.any():
        raise _err(dataset, "split", f"vertex {int(ids[np.argmax(bad)])} is in a split but has no label")
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise _err(dataset, "features", f"the features of vertex {int(ids[np.argmax(bad)])} contain NaN or inf")
    bad = degree < 1
    if bad.any():
        raise _err(dataset, "degree", f"degree {int(degree[np.argmax(bad)])} of vertex {int(ids[np.argmax(bad)])} "
                                      "is below 1 (the self loop counts one)")


def _check_symmetric_block(dataset: Dataset, diagonal: list, m: int) -> None:
    """A symmetric dataset lets a rank use its rows of A as its rows of Aᵀ: check it where a rank can, on its
    diagonal block (i, i), which must equal its transpose (with P = 1, the whole graph; with P > 1, the edges among
    its own rows, so an asymmetric graph is caught unless every asymmetric edge crosses ranks)."""
    if not diagonal:
        return
    r, c, mult = (np.concatenate([d[k] for d in diagonal]) for k in range(3))
    fwd, bwd = r.astype(np.int64) * m + c, c.astype(np.int64) * m + r
    o_f, o_b = np.argsort(fwd, kind="stable"), np.argsort(bwd, kind="stable")
    if not (np.array_equal(fwd[o_f], bwd[o_b]) and np.array_equal(mult[o_f], mult[o_b])):
        raise _err(dataset, "manifest", "says \"symmetric\": true but the edges of in_indices are not "
                                        "symmetric: prepare the dataset again")


def _degree(dataset: Dataset, ids: np.ndarray, norm: str) -> np.ndarray:
    """The ``D`` of :func:`mggcn.nn.norm.entry_values` for the vertices ``ids``: the stored degree (in-edges other
    than self loops, plus one) for the GCN's norms, the in-edges as given (``in_indptr``) otherwise."""
    if adds_self_loops(norm):
        return np.asarray(dataset.arrays["degree"][ids])
    indptr = dataset.arrays["in_indptr"]
    return np.asarray(indptr[ids + 1]) - np.asarray(indptr[ids])


def _gather(indices: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The CSR rows starting at ``starts`` (``counts`` long), concatenated, read from ``indices`` (a memory map)."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    offsets += np.arange(total, dtype=np.int64)
    return np.asarray(indices[offsets]).astype(np.int64, copy=False)


def _entries(dataset: Dataset, view: str, part: Partition, first_row: int, local: np.ndarray, ids: np.ndarray,
             degree: np.ndarray, norm: str, reads: dict[str, int],
             both: bool = False) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The entries ``(row, col, [values])`` of this rank's rows of Â (``view="in"``) or of Âᵀ (``"out"``): rows local
    (local row i is new id ``first_row + i``), columns in new ids, the unit diagonal included; ``both`` adds the
    values of Âᵀ at the same entries (a symmetric A). Preallocated at the upper bound (stored edges + diagonal)."""
    arrays = dataset.arrays
    loops = adds_self_loops(norm)
    indptr, indices = arrays[f"{view}_indptr"], arrays[f"{view}_indices"]
    starts = np.asarray(indptr[ids])
    counts = np.asarray(indptr[ids + 1]) - starts
    reads["bytes"] += 2 * counts.nbytes
    bad = (counts < 0) | (starts < 0) | (starts + counts > dataset.num_edges)
    if bad.any():
        v = int(ids[np.argmax(bad)])
        raise _err(dataset, f"{view}_indptr", f"corrupt row offsets: row {v} runs from {int(indptr[v])} to "
                                              f"{int(indptr[v + 1])}, outside [0, E = {dataset.num_edges}]")
    n_nodes = dataset.num_nodes
    diagonal = []  # both: the entries of the diagonal block, (local row, local column, multiplicity)
    ends = np.cumsum(counts)
    n_pad = part.padded_nodes
    bound = int(counts.sum()) + ids.size
    ids_dtype = np.int32 if n_pad < 2**31 else np.int64
    row, col = np.empty(bound, dtype=ids_dtype), np.empty(bound, dtype=ids_dtype)
    values = [np.empty(bound, dtype=np.float32) for _ in range(1 + both)]
    filled, begin = 0, 0
    while begin < ids.size:
        done = int(ends[begin - 1]) if begin else 0
        end = max(begin + 1, int(np.searchsorted(ends, done + SHARD_CHUNK_EDGES, side="right")))
        nbr = _gather(indices, starts[begin:end], counts[begin:end])
        _drop_pages(indices)
        reads["edges"] += nbr.size
        reads["bytes"] += nbr.nbytes
        if nbr.size and (int(nbr.min()) < 0 or int(nbr.max()) >= n_nodes):
            bad_id = int(nbr.min()) if int(nbr.min()) < 0 else int(nbr.max())
            raise _err(dataset, f"{view}_indices", f"vertex id {bad_id} is out of range [0, {n_nodes})")
        keep = nbr != np.repeat(ids[begin:end], counts[begin:end])
        if view == "in":  # the stored degree normalizes the GCN's Â: it must count these edges
            stored = degree[local[begin:end]] if loops else np.asarray(arrays["degree"][ids[begin:end]])
            kept = np.bincount(np.repeat(np.arange(end - begin), counts[begin:end])[keep], minlength=end - begin)
            wrong = kept + 1 != stored
            if wrong.any():
                k = int(np.argmax(wrong))
                raise _err(dataset, "degree", f"degree {int(stored[k])} of vertex {int(ids[begin + k])}"
                                              f", which has {int(kept[k])} in-edges besides self loops (expected that "
                                              "plus one)")
        if not loops:  # GraphSAGE's and GIN's Â keep the self loops as given
            keep = slice(None)
        key = np.repeat(local[begin:end], counts[begin:end])[keep] * n_pad + part.position[nbr[keep]]
        del nbr, keep
        key, mult = np.unique(key, return_counts=True)
        diag = local[begin:end] if loops else local[:0]
        r = np.concatenate([key // n_pad, diag])
        c = np.concatenate([key % n_pad, first_row + diag])
        del key
        if both:
            own = (c[:mult.size] >= first_row) & (c[:mult.size] < first_row + part.rows_per_part)
            diagonal.append((r[:mult.size][own], c[:mult.size][own] - first_row, mult[own]))
        deg_nbr = _degree(dataset, part.order[c[:mult.size]], norm)
        if loops and deg_nbr.size and int(deg_nbr.min()) < 1:  # its own rank says more; no division by it here
            v = int(part.order[c[:mult.size]][np.argmax(deg_nbr < 1)])
            raise _err(dataset, "degree", f"degree {int(deg_nbr.min())} of vertex {v} is below 1 (the self loop "
                                          "counts one)")
        reads["bytes"] += deg_nbr.nbytes
        mult = np.concatenate([mult, np.ones(diag.size, dtype=mult.dtype)])
        here, there = degree[r], np.concatenate([deg_nbr, degree[diag]])
        k = r.size
        row[filled:filled + k], col[filled:filled + k] = r, c
        # Â[t, s] with t = here for rows of Â, t = there for rows of Âᵀ
        orders = [(here, there)] if view == "in" else [(there, here)]
        if both:
            orders.append((there, here))
        for out, (deg_t, deg_s) in zip(values, orders, strict=True):
            out[filled:filled + k] = entry_values(mult, deg_t, deg_s if norm == "sym" else None, norm)
        filled += k
        begin = end
    if both:
        _check_symmetric_block(dataset, diagonal, part.rows_per_part)
    return row[:filled], col[:filled], [v[:filled] for v in values]


def _blocks(row: np.ndarray, col: np.ndarray, values: np.ndarray, part: Partition,
            tile_cols: int | None) -> list[TiledCSR]:
    """The P column blocks (``m × m``) of the rows given as COO entries."""
    block = sp.coo_matrix((values, (row, col)), shape=(part.rows_per_part, part.padded_nodes))
    return to_blocks(block, part.num_parts, tile_cols)


def build_shard(dataset: Dataset | Graph, part: Partition, rank: int, norm: str = "sym",
                tile_cols: int | None = None, reads: dict[str, Any] | None = None) -> Shard:
    """Rank ``rank``'s :class:`~mggcn.distributed.partition.Shard` of ``dataset``, reading only its rows.

    Args:
        dataset: a :class:`~mggcn.data.datasets.Dataset`, or a :class:`~mggcn.data.graph.Graph` in memory.
        part: the renumbering (:func:`partition_dataset`).
        rank: whose rows.
        norm: the operator, one of :data:`mggcn.config.OPERATORS` (:mod:`mggcn.nn.norm`; ``TrainConfig.operator``:
            the GCN's ``"sym"`` or ``"mean"``, GraphSAGE's ``"in-mean"``, GIN's ``"sum"``).
        tile_cols: columns per tile of the blocks (:func:`mggcn.distributed.tiled.tile_columns`; None: untiled).
        reads: if given, filled with what the shard read: ``rows``, ``edges`` (CSR entries of both views) and
            ``bytes`` (all it gathered from the arrays).

    When Â = Âᵀ on this rank's rows (a symmetric A with the ``sym`` norm), the backward blocks ARE the forward blocks.
    """
    if isinstance(dataset, Graph):
        dataset = InMemoryDataset(dataset)
    if norm not in OPERATORS:
        raise ConfigError(f"norm must be one of {', '.join(NORMS)}, got '{norm}'", "norm")
    if part.num_nodes != dataset.num_nodes:
        raise GraphError(f"{dataset.name}: a partition of {part.num_nodes} vertices for {dataset.num_nodes}")
    arrays = dataset.arrays
    counted = {"rows": 0, "edges": 0, "bytes": 0}
    first = part.rows(rank).start
    orig = part.order[part.rows(rank)]
    local = np.flatnonzero(orig >= 0)
    ids = orig[local]
    counted["rows"] = int(ids.size)
    m = orig.shape[0]
    degree = np.zeros(m, dtype=np.int64)  # of this rank's rows; padding rows have none
    degree[local] = _degree(dataset, ids, norm)
    counted["bytes"] += 8 * ids.size
    x = np.zeros((m, dataset.num_features), dtype=np.float32)
    y = np.full(m, -1, dtype=np.int64)
    codes = np.full(m, -1, dtype=np.int8)
    for out, name in ((x, "features"), (y, "labels"), (codes, "split")):
        for start in range(0, ids.size, ROWS_PER_READ):  # copied a chunk at a time, the pages read dropped
            rows = np.asarray(arrays[name][ids[start: start + ROWS_PER_READ]])
            out[local[start: start + ROWS_PER_READ]] = rows
            counted["bytes"] += rows.nbytes
            _drop_pages(arrays[name])
    stored = degree[local] if adds_self_loops(norm) else np.asarray(arrays["degree"][ids])
    _check_rows(dataset, ids, stored, x[local], y[local], codes[local])
    if dataset.symmetric:  # the rows of Aᵀ are the rows of A: read once, weighted twice
        row, col, (values, values_t) = _entries(dataset, "in", part, first, local, ids, degree, norm, counted,
                                                both=True)
        adj = _blocks(row, col, values, part, tile_cols)
        adj_t = adj if np.array_equal(values, values_t) else _blocks(row, col, values_t, part, tile_cols)
        del row, col, values, values_t
    else:
        row, col, (values,) = _entries(dataset, "in", part, first, local, ids, degree, norm, counted)
        adj = _blocks(row, col, values, part, tile_cols)
        del row, col, values
        row, col, (values,) = _entries(dataset, "out", part, first, local, ids, degree, norm, counted)
        adj_t = _blocks(row, col, values, part, tile_cols)
        del row, col, values
    if reads is not None:
        reads.update(counted)
    masks = {s: torch.from_numpy(codes == k) for k, s in enumerate(SPLITS)}
    return Shard(rank=rank, partition=part, adj=adj, adj_t=adj_t, x=torch.from_numpy(x), y=torch.from_numpy(y),
                 masks=masks, num_classes=dataset.num_classes, split_sizes=dict(dataset.split_sizes))
