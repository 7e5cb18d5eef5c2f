"""Who holds which part of Â and how the ranks exchange rows for ``Â·H``: one object that says it
(:class:`ParallelLayout`), as torchtitan's ``ParallelDims`` owns its device mesh.

The scheme is MG-GCN's 1D split: P ranks, rank i the i-th range of rows of the renumbered graph
(:class:`~mggcn.distributed.partition.Partition`: the renumbering and the row ranges) with all P column blocks
``Â[i, j]`` of its row block (and those of Âᵀ), the rows of ``H`` moved by a staged broadcast (``broadcast``,
:class:`~mggcn.distributed.spmm.StagedSpMM`) or by a sparse exchange of only the rows a block references (``sparse``,
``auto``: :class:`~mggcn.distributed.exchange.SparseExchangeSpMM`), each overlapped with the multiplies or not.
Everything else asks the layout: the partition (:meth:`~ParallelLayout.partition`), a rank's shard
(:meth:`~ParallelLayout.shard`, its blocks tiled by :mod:`mggcn.kernels.policy`), the blocks a rank holds
(:meth:`~ParallelLayout.blocks`), the SpMM operator (:meth:`~ParallelLayout.spmm_operator`) and the gather of every
rank's rows in the original vertex order (:meth:`~ParallelLayout.gather_original`).

A 1.5D or 2D scheme (row blocks replicated on c ranks; a √P × √P grid holding ``Â[i, j]`` on one rank each) is a
field of this object (its replication or grid shape) with its own :meth:`~ParallelLayout.blocks` and its operator
built in :meth:`~ParallelLayout.spmm_operator`: the trainer, the jobs and the planner ask for those and change not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mggcn.config import COMM_MODES, TrainConfig
from mggcn.data.datasets import Dataset
from mggcn.data.graph import Graph
from mggcn.distributed.context import DistContext, all_gather_rows
from mggcn.distributed.exchange import SparseExchangeSpMM
from mggcn.distributed.partition import Partition, Shard
from mggcn.distributed.sharding import build_shard, partition_dataset
from mggcn.distributed.shm import Transport, host_outboxes
from mggcn.distributed.spmm import BroadcastBuffers, SpMMOperator, StagedSpMM
from mggcn.kernels.policy import tile_columns
from mggcn.utils.errors import ConfigError
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["ParallelLayout"]


@dataclass(frozen=True)
class ParallelLayout:
    """How ``world_size`` ranks split the graph and exchange rows (the module docstring).

    Args:
        world_size: P, the ranks (and the row ranges: one per rank).
        comm: the exchange, one of :data:`~mggcn.config.COMM_MODES` (``broadcast``, ``sparse``, ``auto``).
        overlap: each stage's communication in flight during the previous stage's multiply.
        shm: CPU ranks of one host broadcast through shared memory, one of :data:`~mggcn.config.SHM_MODES`
            (:func:`mggcn.distributed.shm.host_outboxes`).
        ordering: the vertex renumbering before the row split, one of :data:`~mggcn.config.ORDERINGS`.
        seed: the renumbering's seed.
        tile_bytes: bytes of B per column tile of a CPU block (None: the policy's default; 0: whole blocks).
    """

    world_size: int
    comm: str = "broadcast"
    overlap: bool = True
    shm: str = "auto"
    ordering: str = "random-local"
    seed: int = 0
    tile_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.comm not in COMM_MODES:  # world_size and shm are checked where they are used (partition, shm)
            raise ConfigError(f"comm must be one of {', '.join(COMM_MODES)}, got '{self.comm}'", "comm")

    @classmethod
    def of(cls, cfg: TrainConfig, world_size: int) -> ParallelLayout:
        """The layout ``cfg`` trains with on ``world_size`` ranks."""
        return cls(world_size, comm=cfg.comm, overlap=cfg.overlap, shm=cfg.shm, ordering=cfg.partition, seed=cfg.seed,
                   tile_bytes=cfg.tile_bytes)

    def partition(self, dataset: Dataset | Graph) -> Partition:
        """The renumbering and the row ranges of ``dataset``'s vertices (one per rank)."""
        return partition_dataset(dataset, self.world_size, self.seed, self.ordering)

    def blocks(self, rank: int) -> list[tuple[int, int]]:
        """The blocks ``(row block, column block)`` of Â (and of Âᵀ) that ``rank`` holds, in the order of its
        shard's ``adj`` and ``adj_t``: its row block, every column block."""
        return [(rank, j) for j in range(self.world_size)]

    def tile_columns(self, num_nodes: int, num_edges: int, width: int, device: torch.device | str,
                     local_ranks: int = 1) -> int | None:
        """Columns per tile of a rank's blocks for SpMMs of ``width`` (:func:`mggcn.kernels.policy.tile_columns`),
        for blocks of the mean nonzeros ``(E + n) / P²``; the ``local_ranks`` of one machine share its cache."""
        p = self.world_size
        return tile_columns(width, -(-num_nodes // p), (num_edges + num_nodes) // (p * p), device, local_ranks,
                            self.tile_bytes)

    def shard(self, dataset: Dataset | Graph, ctx: DistContext, norm: str, width: int,
              partition: Partition | None = None) -> Shard:
        """This rank's shard of ``dataset`` for the operator ``norm``, its blocks tiled for SpMMs of ``width``;
        ``partition``: the layout's :meth:`partition` of ``dataset`` where the caller made it already (to time it)."""
        tiles = self.tile_columns(dataset.num_nodes, dataset.num_edges, width, ctx.device, ctx.local_world_size)
        part = self.partition(dataset) if partition is None else partition
        return build_shard(dataset, part, ctx.rank, norm, tiles)

    def spmm_operator(self, ctx: DistContext, shard: Shard, width: int,
                      timer: PhaseTimer = NULL_TIMER) -> tuple[SpMMOperator, Transport | None]:
        """The distributed ``Â·H`` on this rank's blocks for SpMMs up to ``width`` columns, and the broadcast's
        transport (None: no broadcast between ranks)."""
        vertex_ids = torch.from_numpy(shard.partition.order[shard.partition.rows(ctx.rank)]).to(ctx.device)
        if self.comm != "broadcast":
            adj = SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode=self.comm, overlap=self.overlap, timer=timer)
            adj.vertex_ids = vertex_ids  # the original ids of its rows (GAT's attention dropout hashes them)
            return adj, None
        rows, dtype = shard.x.shape[0], shard.x.dtype
        outboxes, transport = host_outboxes(ctx, self.shm, rows, width, dtype)
        buffers = BroadcastBuffers(rows, width, dtype, ctx.device) if ctx.world_size > 1 and outboxes is None \
            else None
        adj = StagedSpMM(ctx, shard.adj, shard.adj_t, buffers=buffers, overlap=self.overlap, timer=timer,
                         outboxes=outboxes)
        adj.vertex_ids = vertex_ids
        return adj, transport if ctx.world_size > 1 else None

    @staticmethod
    def gather_original(ctx: DistContext, partition: Partition, rows: torch.Tensor) -> np.ndarray | None:
        """This rank's ``rows`` [m, ...] of every rank, gathered on rank 0 in ORIGINAL vertex order [n, ...]
        (padding rows dropped); ``None`` on the other ranks."""
        every = all_gather_rows(ctx, rows).cpu().numpy()
        if not ctx.is_main:
            return None
        out = np.empty((partition.num_nodes,) + every.shape[1:], dtype=every.dtype)
        real = partition.order >= 0
        out[partition.order[real]] = every[real]
        return out
