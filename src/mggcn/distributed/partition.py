"""1D row partition of Â, the MG-GCN way.

1. The vertices are renumbered by one permutation of rows and columns (random by default, so that each part gets
   about the same number of nonzeros), and the vertex count is padded to a multiple of P with isolated dummy
   vertices that belong to no split.
2. Rank i owns the m = n_pad / P consecutive new ids ``[i·m, (i+1)·m)``: its rows of Â, of the features and labels.
   It cuts its row block into P column blocks ``Â[i, j]`` (m × m CSR, int32 indices where they fit; on CPU each
   further cut into column tiles, :mod:`mggcn.kernels.tiled`), and does the same with its row block of Âᵀ for the
   backward pass — built once here, never transposed at run time, and never assumed equal to Â (directed graphs,
   ``mean`` norm).

Orderings (``--partition``): ``random`` (the MG-GCN way), ``none`` (the original ids), and ``random-local`` (the
default): the same random permutation decides which part each vertex goes to (so the balance is that of ``random``),
then each part lists its vertices in increasing original id. Where the original ids carry locality (crawl order,
communities, an RCM order computed beforehand) the rows a block's nonzeros fetch are then close together again, which
is what a CPU SpMM is bound by; the order inside a part
changes no balance, cut or traffic, and the numbers are those of any other renumbering. ``metis``
(:mod:`mggcn.distributed.metis`) needs the graph (:func:`mggcn.distributed.sharding.partition_dataset`);
:func:`make_partition` only knows the vertex count. Each rank's :class:`Shard` is cut by
:func:`mggcn.distributed.sharding.build_shard`.

Legend: n = real vertices, m = rows per rank, F = features.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mggcn.config import ORDERINGS
from mggcn.kernels.tiled import TiledCSR
from mggcn.utils.errors import ConfigError

__all__ = ["Partition", "Shard", "check_partition", "make_partition"]


@dataclass(frozen=True)
class Partition:
    """The vertex renumbering and row ranges shared by all ranks.

    ``order[p]`` is the original id of the vertex at new position ``p`` (``-1`` for a padding vertex);
    ``position[v]`` is the new position of original vertex ``v``.
    """

    num_nodes: int
    num_parts: int
    order: np.ndarray  # int64 [n_pad]
    position: np.ndarray  # int64 [n]

    @property
    def rows_per_part(self) -> int:
        return self.order.shape[0] // self.num_parts

    @property
    def padded_nodes(self) -> int:
        return self.order.shape[0]

    def rows(self, part: int) -> slice:
        m = self.rows_per_part
        return slice(part * m, (part + 1) * m)


def check_partition(num_nodes: int, num_parts: int, ordering: str) -> None:
    """What a partition of ``num_nodes`` vertices into ``num_parts`` parts by ``ordering`` needs, checked without
    computing it (the launcher checks a job with it before any worker starts)."""
    if num_parts < 1:
        raise ConfigError(f"nprocs must be at least 1, got {num_parts}", "nprocs")
    if num_parts > num_nodes:
        raise ConfigError(f"nprocs {num_parts} is larger than the graph's {num_nodes} vertices", "nprocs")
    if ordering not in ORDERINGS:
        raise ConfigError(f"partition must be one of {', '.join(ORDERINGS)}, got '{ordering}'", "partition")


def make_partition(num_nodes: int, num_parts: int, seed: int = 0, ordering: str = "random") -> Partition:
    """Renumber ``num_nodes`` vertices for ``num_parts`` ranks; see the module docstring."""
    check_partition(num_nodes, num_parts, ordering)
    if ordering in ("random", "random-local"):
        real = np.random.default_rng(seed).permutation(num_nodes).astype(np.int64)
        if ordering == "random-local":
            m = -(-num_nodes // num_parts)
            for start in range(0, num_nodes, m):
                real[start: start + m].sort()
    elif ordering == "none":
        real = np.arange(num_nodes, dtype=np.int64)
    elif ordering == "metis":
        raise ConfigError("partition metis needs the graph: use mggcn.distributed.sharding.partition_dataset",
                          "partition")
    else:
        raise ConfigError(f"partition must be one of {', '.join(ORDERINGS)}, got '{ordering}'", "partition")
    padded = -(-num_nodes // num_parts) * num_parts
    order = np.concatenate([real, np.full(padded - num_nodes, -1, dtype=np.int64)])
    position = np.empty(num_nodes, dtype=np.int64)
    position[real] = np.arange(num_nodes, dtype=np.int64)
    return Partition(num_nodes, num_parts, order, position)


@dataclass
class Shard:
    """What one rank holds: its column blocks of Â and Âᵀ, and its rows of features, labels and splits.

    Shapes: ``x`` [m, F]; ``y`` [m] (``-1`` on padding and unlabelled rows); ``masks[s]`` bool [m];
    ``adj[j]``, ``adj_t[j]`` [m, m] for j in 0..P-1 (:class:`~mggcn.kernels.tiled.TiledCSR`; the same objects when
    Â = Âᵀ).
    """

    rank: int
    partition: Partition
    adj: list[TiledCSR]
    adj_t: list[TiledCSR]
    x: torch.Tensor | None  # None once training replaced it by Â·X (mggcn.training.trainer.train_shard)
    y: torch.Tensor
    masks: dict[str, torch.Tensor]
    num_classes: int
    split_sizes: dict[str, int]  # global counts, the denominators of loss and accuracy

    def to(self, device: torch.device, dtype: torch.dtype | None = None) -> Shard:
        """The shard on ``device``; with ``dtype``, its features and Â's values in that dtype (``precision``)."""
        shared = all(a is t for a, t in zip(self.adj, self.adj_t))
        self.adj = [b.to(device, dtype) for b in self.adj]
        self.adj_t = self.adj if shared else [b.to(device, dtype) for b in self.adj_t]
        self.x = None if self.x is None else self.x.to(device, dtype)
        self.y = self.y.to(device)
        self.masks = {k: v.to(device) for k, v in self.masks.items()}
        return self

    @property
    def nnz(self) -> int:
        return sum(b.nnz for b in self.adj)

    @property
    def tile_cols(self) -> int | None:
        """Columns per tile of the blocks (None: whole blocks)."""
        cut = next((b for b in self.adj + self.adj_t if len(b.tiles) > 1), None)
        return None if cut is None else cut.spans()[0][1]
