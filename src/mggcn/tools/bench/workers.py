"""One process of an mggcn configuration: open the graph, cut its shard, train, measure; as ``mggcn train``'s ranks
do, with the bench's memory probe between setup and training."""

from __future__ import annotations

from dataclasses import fields

import torch

from mggcn.config import MMAP_THRESHOLD, TrainConfig
from mggcn.distributed.context import init_distributed
from mggcn.distributed.parallel_layout import ParallelLayout
from mggcn.distributed.sharding import release_dataset
from mggcn.kernels.policy import gather_kernel
from mggcn.nn.models import operator_for
from mggcn.tools.bench.graph import open_dataset
from mggcn.tools.bench.limits import SetupNotes, cap_memory, lift_caps
from mggcn.tools.bench.memory import MemoryProbe
from mggcn.tools.bench.options import BenchOptions
from mggcn.tools.bench.probes import measure_after
from mggcn.training.trainer import epoch_width, train_shard
from mggcn.utils.timing import SetupClock

__all__ = ["mggcn_worker", "train_config", "threshold", "PROBE_PHASE", "MGGCN_LAST_SETUP_PHASE"]

PROBE_PHASE = "bench probe"  # the bench's memory probe before the first epoch: left out of the setup's time
MGGCN_LAST_SETUP_PHASE = "A.X"  # what train_shard marks last before its first epoch


def train_config(**kwargs) -> TrainConfig:
    """A TrainConfig from the keys it has (it grows fields over time)."""
    names = {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in kwargs.items() if k in names})


def threshold(opts: BenchOptions, default: int | None) -> int | None:
    """The glibc mmap threshold of a configuration: ``--mmap-threshold`` for all, else its own default."""
    return default if opts.mmap_threshold is None else (opts.mmap_threshold or None)


def mggcn_worker(path: str, config: dict, opts: BenchOptions, threads: int, machine_threads: int,
                 notes_dir: str | None = None) -> dict:
    """One rank of an mggcn configuration: load, shard, train, measure the machine; what it measured.

    Its setup clock starts right before it opens the dataset and runs to its first epoch, marked as ``mggcn
    train``'s ranks mark it (``dataset``, ``partition``, ``shard``, then :func:`train_shard`'s phases), the bench's
    memory probe left out; ``notes_dir`` receives how far it got (:class:`SetupNotes`)."""
    ctx = init_distributed(opts.device, opts.timeout_s, threads, threshold(opts, MMAP_THRESHOLD))
    cap_memory(opts.gpu_memory, opts.host_memory, ctx.device)
    probe = MemoryProbe(ctx.device)
    cfg = train_config(**config)
    clock = SetupClock()
    notes = SetupNotes(notes_dir, ctx.rank, clock, left_out=PROBE_PHASE)
    with notes.on_failure():
        shard = _shard(path, cfg, ctx, clock)
        notes.write()
        held = _shard_bytes(shard)
        probe.ready()
        clock.mark(PROBE_PHASE)
        result = train_shard(ctx, shard, cfg, clock=clock)
    memory = probe.done()
    lift_caps(opts.gpu_memory, opts.host_memory, ctx.device)
    outboxes = getattr(result.adj, "outboxes", None)
    if outboxes is not None:  # the other ranks' outboxes this rank read: in its RSS, but held by their owners
        memory["peer_shm"] = outboxes.peer_resident_bytes() or 0
        memory["peak"] -= memory["peer_shm"]
        memory["whole"] = max(memory["setup_peak"], memory["peak"])
    machine = measure_after(ctx, machine_threads, opts)
    workspace = getattr(result.model, "workspace", None)
    train_t = getattr(result.adj, "adj_t_train", None) or []
    held["A^T training columns"] = sum(b.nbytes for b in train_t)
    return {"rank": ctx.rank, "history": [{k: v for k, v in r.items() if k != "timeline"} for r in result.history],
            "memory": memory, "held": held, "nnz": shard.nnz, "nnz_t": sum(b.nnz for b in shard.adj_t),
            "nnz_train_t": sum(b.nnz for b in train_t),
            "shared_t": all(a is t for a, t in zip(shard.adj, shard.adj_t)),
            "tile_cols": shard.tile_cols, "shm": outboxes is not None,
            "gather": gather_kernel(ctx.device),
            "rows": int(shard.y.shape[0]), "workspace": workspace.sizes if workspace is not None else {},
            "setup": notes.record(), "threads": torch.get_num_threads(), "machine": machine}


def _shard(path: str, cfg: TrainConfig, ctx, clock: SetupClock):
    """This rank's shard, cut as ``mggcn train`` cuts it (each rank reads its share of a prepared directory)."""
    dataset = open_dataset(path)
    clock.mark("dataset")
    layout = ParallelLayout.of(cfg, ctx.world_size)
    part = layout.partition(dataset)
    clock.mark("partition")
    shard = layout.shard(dataset, ctx, operator_for(cfg.model, cfg.norm),
                         epoch_width(cfg, dataset.num_features, dataset.num_classes), part)
    clock.mark("shard")
    release_dataset(dataset)
    clock.mark("release")
    return shard


def _shard_bytes(shard) -> dict:
    def csr(blocks):
        return sum(b.nbytes for b in blocks)

    shared = all(a is t for a, t in zip(shard.adj, shard.adj_t))
    return {"adjacency A": csr(shard.adj), "adjacency A^T": 0 if shared else csr(shard.adj_t),
            "features X": shard.x.numel() * shard.x.element_size(),
            "labels": shard.y.numel() * shard.y.element_size() + sum(m.numel() for m in shard.masks.values())}
