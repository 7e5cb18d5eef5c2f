"""Functions that spawned workers run in the multi-process tests (importable by module name)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import torch

from mggcn.config import TrainConfig
from mggcn.distributed.context import init_distributed
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard, partition_dataset, release_dataset
from mggcn.distributed.shm import SharedOutboxes
from mggcn.distributed.spmm import StagedSpMM
from mggcn.nn.models import operator_for
from mggcn.training.trainer import train_shard


def rows_of(global_new: torch.Tensor, part, rank: int) -> torch.Tensor:
    return global_new[part.rows(rank)]


def to_new_order(mat_orig: torch.Tensor, part) -> torch.Tensor:
    """Rows in original ids -> rows in the partition's order, padding rows zero."""
    out = torch.zeros((part.padded_nodes,) + tuple(mat_orig.shape[1:]), dtype=mat_orig.dtype)
    real = torch.from_numpy(part.order >= 0)
    out[real] = mat_orig[torch.from_numpy(part.order[part.order >= 0])]
    return out


def spmm_worker(cases, seed):
    """For each (graph, norm, overlap, tile columns, shared-memory width, B, G): C = Â·B and dB = Âᵀ·G on this rank's
    rows, in partition order. Shared-memory width: None = gloo's broadcast, else through outboxes of that width
    (created once per width and shared by the cases, as the layers of a model share them)."""
    ctx = init_distributed("cpu", timeout_s=60)
    out, outboxes = [], {}
    for graph, norm, overlap, tile_cols, shm_width, b_orig, g_orig in cases:
        part = make_partition(graph.num_nodes, ctx.world_size, seed)
        shard = build_shard(graph, part, ctx.rank, norm, tile_cols=tile_cols)
        if shm_width is not None and shm_width not in outboxes and ctx.world_size > 1:
            outboxes[shm_width] = SharedOutboxes.create(ctx, part.rows_per_part, shm_width, torch.float32)
        op = StagedSpMM(ctx, shard.adj, shard.adj_t, overlap=overlap, outboxes=outboxes.get(shm_width))
        b = rows_of(to_new_order(b_orig, part), part, ctx.rank).clone().requires_grad_()
        c = op(b)
        c.backward(rows_of(to_new_order(g_orig, part), part, ctx.rank))
        # the operator used again at another width reuses (and grows) its buffers
        c2 = op(b.detach()[:, :1].contiguous())
        out.append((c.detach(), b.grad, c2))
    return ctx.rank, out


def train_worker(graph, cfg: TrainConfig, tile_cols: int | None = None):
    ctx = init_distributed("cpu", timeout_s=60)
    part = make_partition(graph.num_nodes, ctx.world_size, cfg.seed, cfg.partition)
    shard = build_shard(graph, part, ctx.rank, operator_for(cfg.model, cfg.norm), tile_cols=tile_cols)
    result = train_shard(ctx, shard, cfg)
    return [r["loss"] for r in result.history], result.history, result.state_dict


def failing_worker(bad_rank: int, mode: str):
    """Rank ``bad_rank`` raises (``setting``: a ConfigError), hangs or kills itself after the group is up; the others
    wait in a collective."""
    ctx = init_distributed("cpu", timeout_s=120)
    if ctx.rank == bad_rank:
        if mode == "raise":
            raise RuntimeError("boom from the test")
        if mode == "setting":  # bad input that names the setting it concerns
            from mggcn.utils.errors import ConfigError

            raise ConfigError("hidden sizes must be positive, got 0 (or leave hidden= out)", "hidden")
        if mode == "pipe":  # its own output went away (`| head`)
            raise BrokenPipeError(32, "Broken pipe")
        if mode == "pipe text":  # an error that only reads like one
            raise RuntimeError("BrokenPipeError: a message that only looks like it")
        if mode == "hang":
            time.sleep(600)
        if mode == "kill":
            os.kill(os.getpid(), 9)
        if mode == "no memory":  # out of memory so far that wording the report runs out as well
            import traceback

            def no_room():
                raise MemoryError

            traceback.format_exc = no_room
            raise MemoryError
    torch.distributed.all_reduce(torch.ones(1))
    return ctx.rank


def stopping_worker(bad_rank: int, timeout_s: float):
    """Rank ``bad_rank`` stops itself (SIGSTOP, as Ctrl-Z of one process) once the group is up; the others wait in a
    collective until ``timeout_s`` runs out."""
    ctx = init_distributed("cpu", timeout_s=timeout_s)
    if ctx.rank == bad_rank:
        os.kill(os.getpid(), signal.SIGSTOP)
    torch.distributed.all_reduce(torch.ones(1))
    return ctx.rank


def slow_teardown_worker(bad_rank: int, timeout_s: float):
    """Rank ``bad_rank`` reports its own error as a failing worker does (its report in the job directory), then takes
    long to end (a slow teardown); the others wait in a collective until ``timeout_s`` runs out."""
    import json

    from mggcn.utils.files import atomic_write

    ctx = init_distributed("cpu", timeout_s=timeout_s)
    if ctx.rank == bad_rank:
        workdir = os.path.dirname(os.environ["MGGCN_INIT_METHOD"].removeprefix("file://"))
        report = {"time": time.time(), "error": "RuntimeError: the cause itself", "reason": "the cause itself",
                  "option": None, "detail": "", "kind": "error"}
        atomic_write(os.path.join(workdir, f"error.{ctx.rank}"), lambda tmp: json.dump(report, open(tmp, "w")))
        time.sleep(60)
    torch.distributed.all_reduce(torch.ones(1))
    return ctx.rank


def ok_worker(value):
    ctx = init_distributed("cpu", timeout_s=60)
    t = torch.tensor([float(value + ctx.rank)])
    torch.distributed.all_reduce(t)
    return float(t), np.arange(3)


def train_many_worker(cases):
    """Train each (graph, config[, tile columns]) in turn in one process group."""
    return [train_worker(*case) for case in cases]


def raise_mid_training_worker(graph, bad_rank: int, epoch: int):
    """Rank ``bad_rank`` raises inside epoch ``epoch``; the others are then waiting in a collective."""
    ctx = init_distributed("cpu", timeout_s=120)
    part = make_partition(graph.num_nodes, ctx.world_size, 0)
    shard = build_shard(graph, part, ctx.rank, "sym")

    def on_epoch(record):
        if ctx.rank == bad_rank and record["epoch"] == epoch:
            raise MemoryError("simulated out of memory")

    train_shard(ctx, shard, TrainConfig(hidden=(8,), epochs=10_000, trace_epoch=0), on_epoch)


def prepared_many_p_worker(path, graph, cfg: TrainConfig, sizes):
    """Train from the prepared directory ``path`` at every P in ``sizes`` within ONE spawn of max(sizes) ranks.

    P < world size runs on the process group of ranks 0..P-1 (the others sit that P out), so one spawn covers them
    all. Per P, this rank reports: losses, final weights, whether its shard equals the one cut from ``graph`` in
    memory (``build_shard``, compared exactly), what the shard read from the files, the tracemalloc peak while it
    was built, and the bytes the shard holds.
    """
    import dataclasses
    import tracemalloc

    import torch.distributed as dist

    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.distributed import sharding

    # the chunks of edges read at a time scale with the rank's share (1/16 of an average block), above a floor
    # (4096 edges) made for real graphs that would be all of this 12,000-edge one at every P: lower it here
    sharding.MIN_CHUNK_EDGES = 64
    ctx = init_distributed("cpu", timeout_s=120)
    groups = {p: (dist.new_group(list(range(p))) if 1 < p < ctx.world_size else None) for p in sizes}
    out = {}
    for p in sizes:
        if ctx.rank >= p:
            continue
        sub = dataclasses.replace(ctx, world_size=p, group=groups[p])
        dataset = PreparedDataset(path)
        part = partition_dataset(dataset, p, cfg.seed, cfg.partition)
        tracemalloc.start()
        reads = {}
        shard = build_shard(dataset, part, ctx.rank, operator_for(cfg.model, cfg.norm), reads=reads)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        held = sum(b.nbytes for b in shard.adj + shard.adj_t)
        held += shard.x.nbytes + shard.y.nbytes + sum(m.nbytes for m in shard.masks.values())
        same = shards_equal(shard, build_shard(graph, part, ctx.rank, operator_for(cfg.model, cfg.norm)))
        result = train_shard(sub, shard, cfg)
        out[p] = {"losses": [r["loss"] for r in result.history], "state": result.state_dict, "same": same,
                  "reads": reads, "peak": peak, "held": held}
    return out


def shards_equal(a, b) -> bool:
    """Exactly the same blocks (structure and float bits), rows of features, labels and masks."""
    for xs, ys in ((a.adj, b.adj), (a.adj_t, b.adj_t)):
        for x, y in zip(xs, ys, strict=True):
            if x.starts != y.starts:
                return False
            for s, t in zip(x.tiles, y.tiles, strict=True):
                if not (torch.equal(s.crow_indices().long(), t.crow_indices().long())
                        and torch.equal(s.col_indices().long(), t.col_indices().long())
                        and torch.equal(s.values(), t.values())):
                    return False
    return (torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and a.split_sizes == b.split_sizes
            and all(torch.equal(a.masks[k], b.masks[k]) for k in a.masks))


def exchange_worker(cases):
    """For each (graph, norm, partition, tile columns, B, G): Â·B and Âᵀ·G with the broadcast, sparse and auto
    SpMMs (auto twice: default threshold, and threshold 0 so every non-empty pair takes the all-rows path), with the
    bytes each moved."""
    from mggcn.distributed.exchange import SparseExchangeSpMM

    ctx = init_distributed("cpu", timeout_s=60)
    out = []
    for graph, norm, part, tile_cols, b_orig, g_orig in cases:
        shard = build_shard(graph, part, ctx.rank, norm, tile_cols=tile_cols)
        ops = {"broadcast": StagedSpMM(ctx, shard.adj, shard.adj_t),
               "sparse": SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode="sparse"),
               "auto": SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode="auto"),
               "auto-dense": SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode="auto", dense_fraction=0.0),
               "sparse-no-overlap": SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode="sparse", overlap=False)}
        results = {}
        for name, op in ops.items():
            b = rows_of(to_new_order(b_orig, part), part, ctx.rank).clone().requires_grad_()
            c = op(b)
            c.backward(rows_of(to_new_order(g_orig, part), part, ctx.rank))
            c2 = op(b.detach()[:, :1].contiguous())  # another width reuses the buffers
            results[name] = (c.detach(), b.grad, c2, op.sent_bytes, op.recv_bytes)
        out.append(results)
    return ctx.rank, out


def dataset_train_worker(cases):
    """Train each (graph, config) through the Dataset protocol (what partitions by METIS); per case, the order this
    rank computed, the history and the weights."""
    from mggcn.data.datasets import InMemoryDataset

    ctx = init_distributed("cpu", timeout_s=60)
    out = []
    for graph, cfg in cases:
        dataset = InMemoryDataset(graph)
        part = partition_dataset(dataset, ctx.world_size, cfg.seed, cfg.partition)
        result = train_shard(ctx, build_shard(dataset, part, ctx.rank, operator_for(cfg.model, cfg.norm)), cfg)
        out.append((part.order, result.history, result.state_dict))
    return ctx.rank, out


def cuda_train_worker(graph, cfg: TrainConfig):
    """One rank on its own GPU (NCCL): the losses of train_shard (tests/tools/test_bench.py, with 2+ GPUs only)."""
    ctx = init_distributed("cuda", timeout_s=120)
    part = make_partition(graph.num_nodes, ctx.world_size, cfg.seed, cfg.partition)
    shard = build_shard(graph, part, ctx.rank, operator_for(cfg.model, cfg.norm))
    return [r["loss"] for r in train_shard(ctx, shard, cfg).history]


def freed_rss_worker(threshold, nbytes):
    """Resident bytes left after a second ``nbytes`` tensor is filled and freed, with ``threshold`` set by
    init_distributed (None: glibc's dynamic one)."""
    from mggcn.tools.bench import current_rss

    init_distributed("cpu", timeout_s=60, mmap_threshold=threshold)
    torch.ones(nbytes // 4)  # allocated, filled, freed: glibc's dynamic threshold rises to its size
    before = current_rss()
    block = torch.ones(nbytes // 4)
    del block
    return current_rss() - before


def shm_worker(rows, width, directory):
    """Outboxes in ``directory``: what every rank reads from the others' after one SpMM-like exchange, the files
    left behind, and the peers' resident bytes; or the error of a failed creation."""
    from mggcn.distributed.shm import ShmUnavailable

    ctx = init_distributed("cpu", timeout_s=60)
    try:
        boxes = SharedOutboxes.create(ctx, rows, width, torch.float32, directory=directory)
    except ShmUnavailable as e:
        return {"rank": ctx.rank, "error": str(e), "left": sorted(os.listdir(directory))
                if os.path.isdir(directory) else None}
    left = sorted(os.listdir(directory))
    mine = torch.full((rows, width), float(ctx.rank + 1))
    seen = {}
    for call in (0, 1):
        for stage in range(ctx.world_size):
            if stage == ctx.rank:
                boxes.publish(mine * (call + 1), call)
            boxes.signal(stage).wait()
            seen[(call, stage)] = boxes.outbox(stage, call, width).clone()
    return {"rank": ctx.rank, "left": left, "seen": seen, "peer_resident": boxes.peer_resident_bytes(),
            "nbytes": boxes.nbytes}


def host_outboxes_worker(mode):
    from mggcn.distributed.shm import host_outboxes

    ctx = init_distributed("cpu", timeout_s=60)
    boxes, transport = host_outboxes(ctx, mode, 8, 4, torch.float32)
    return None if boxes is None else type(boxes).__name__, str(transport)


def private_shm_train_worker(graph, cfg: TrainConfig, directories):
    """Training with this rank's own ``MGGCN_SHM_DIR`` (``directories[rank]``), as two containers on one host with
    private ``/dev/shm`` see it: the losses and how the broadcast went, or the error."""
    from mggcn.distributed.shm import ShmUnavailable

    os.environ["MGGCN_SHM_DIR"] = directories[int(os.environ["RANK"])]
    ctx = init_distributed("cpu", timeout_s=60)
    part = make_partition(graph.num_nodes, ctx.world_size, cfg.seed, cfg.partition)
    shard = build_shard(graph, part, ctx.rank, cfg.norm)
    try:
        result = train_shard(ctx, shard, cfg)
    except ShmUnavailable as e:
        return {"error": str(e)}
    return {"losses": [r["loss"] for r in result.history], "broadcast": result.history[0]["broadcast"],
            "fallback": result.history[0].get("broadcast_fallback")}


def other_host_outboxes_worker(mode):
    """host_outboxes as ranks on two hosts see it (each rank's host identity differs)."""
    from mggcn.distributed import shm

    shm._host_id = lambda: f"host-{os.environ['RANK']}"
    ctx = init_distributed("cpu", timeout_s=60)
    try:
        boxes, transport = shm.host_outboxes(ctx, mode, 8, 4, torch.float32)
    except shm.ShmUnavailable as e:
        return {"error": str(e)}
    return {"boxes": boxes, "transport": str(transport)}


def late_reporting_worker(bad_rank: int, delay_s: float):
    """Rank ``bad_rank`` hits a bad index, leaves the group at once (as a failing job does) and takes ``delay_s``
    to report it; its peers, waiting in a collective, lose the connection first and report that sooner."""
    from mggcn.distributed.context import shutdown

    ctx = init_distributed("cpu", timeout_s=120)
    try:
        if ctx.rank == bad_rank:
            torch.arange(3)[torch.tensor([7])]
        torch.distributed.all_reduce(torch.ones(1))
        torch.distributed.all_reduce(torch.ones(1))
    except BaseException:
        shutdown(clean=False)
        if ctx.rank == bad_rank:
            time.sleep(delay_s)
        raise
    return ctx.rank


def setup_memory_worker(source, fmt, cfg: TrainConfig, chunk: int | None = None):
    """The peak RSS of this rank while it builds its shard from ``source`` (read inside, as ``mggcn train`` does)
    and while it trains, both above the RSS before the dataset is opened, and the bytes of its largest block.
    The whole sequence runs twice and the second is reported: the first pays the one-time costs of the runtime
    (modules imported and libraries paged in on first use), which belong to neither peak. ``chunk``: the edges,
    nonzeros and rows the setup's passes take at a time (scaled down with the graph, so that one chunk in flight
    is smaller than one block, as it is on the graphs the defaults are sized for)."""
    import gc

    import mggcn.data.rows as rows
    import mggcn.distributed.sharding as sharding
    import mggcn.nn.norm as norm

    if chunk is not None:
        sharding.SHARD_CHUNK_EDGES = norm._CHUNK = chunk
        rows.ROWS_PER_READ = max(1, chunk // 64)

    from mggcn.data.datasets import open_dataset
    from mggcn.tools.bench import _release_memory, current_rss, peak_rss, reset_peak_rss
    from mggcn.training.trainer import shard_for

    ctx = init_distributed("cpu", timeout_s=120)
    for _ in range(2):
        gc.collect()
        _release_memory()
        base = current_rss()
        if not reset_peak_rss():
            return None
        dataset = open_dataset(source, fmt)
        shard = shard_for(cfg, dataset, ctx)
        release_dataset(dataset)
        del dataset
        gc.collect()
        setup = peak_rss() - base
        _release_memory()
        reset_peak_rss()
        block = max(b.nbytes for b in shard.adj + shard.adj_t)
        result = train_shard(ctx, shard, cfg)
        train = peak_rss() - base
        del shard, result
    return {"setup": setup, "train": train, "block": block}


def final_accuracy_worker(graph, cfg: TrainConfig):
    """Train; return the run's final accuracies and weights."""
    ctx = init_distributed("cpu", timeout_s=60)
    part = make_partition(graph.num_nodes, ctx.world_size, cfg.seed, cfg.partition)
    result = train_shard(ctx, build_shard(graph, part, ctx.rank, cfg.norm), cfg)
    return result.final, result.state_dict


def collective_devices_worker(graph, nan_graph, configs):
    """The GPU path's collectives, rehearsed on gloo (tests/host_tensors.py): every tensor handed to a collective must
    be on ``ctx.device``, none made on the host. Runs the sparse and auto exchange SpMMs (forward and backward), the
    broadcast SpMM through gloo, ``train_shard`` with each of ``configs``, its non-finite-loss path on ``nan_graph``,
    and the gather of predictions. Returns this rank's violations and the tensors each collective checked."""
    from host_tensors import HostTracker, check_collectives
    from mggcn.distributed.exchange import SparseExchangeSpMM
    from mggcn.distributed.parallel_layout import ParallelLayout
    from mggcn.training.trainer import NonFiniteLoss

    with HostTracker(), check_collectives(torch.device("cpu")) as (problems, checked):
        ctx = init_distributed("cpu", timeout_s=120)
        part = make_partition(graph.num_nodes, ctx.world_size, 0)
        shard = build_shard(graph, part, ctx.rank, "mean").to(ctx.device)
        b = torch.randn(shard.x.shape[0], 3, device=ctx.device)
        for op in (SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode="sparse"),
                   SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode="auto", dense_fraction=0.0),
                   StagedSpMM(ctx, shard.adj, shard.adj_t)):
            leaf = b.clone().requires_grad_()
            op(leaf).sum().backward()
        for cfg in configs:
            result = train_shard(ctx, build_shard(graph, part, ctx.rank, cfg.norm), cfg)
            rows = result.model(shard.x, result.adj, x_aggregated=result.x_agg).argmax(dim=1)
            ParallelLayout.gather_original(ctx, shard.partition, rows)
        nan_part = make_partition(nan_graph.num_nodes, ctx.world_size, 0)
        try:
            nan_shard = build_shard(nan_graph, nan_part, ctx.rank, "sym")
            nan_shard.x.fill_(float("nan"))  # after the checks the build makes, which refuse NaN features
            train_shard(ctx, nan_shard, configs[0])
            problems.append("no NonFiniteLoss on a graph whose features are NaN")
        except NonFiniteLoss as e:
            if "first non-finite output: layer" not in str(e):
                problems.append(f"NonFiniteLoss without the layer: {e}")
    return problems, checked


def layer_worker(cases, seed):
    """For each (graph, kind, layer keywords, PyG state dict, X, G): one GraphSAGE or GIN layer (``kind``) with
    those weights on this rank's rows through the staged SpMM, on a workspace as the trainer runs it: its output
    rows, the gradient of its input rows (None for a first layer), this rank's partial parameter gradients and its
    buffers (ε, a batch norm's running statistics)."""
    from mggcn.nn.gin import GINLayer
    from mggcn.nn.sage import SAGELayer
    from mggcn.nn.workspace import Workspace

    ctx = init_distributed("cpu", timeout_s=60)
    out = []
    for graph, kind, options, state, x_orig, g_orig in cases:
        part = make_partition(graph.num_nodes, ctx.world_size, seed)
        shard = build_shard(graph, part, ctx.rank, operator_for(kind))
        op = StagedSpMM(ctx, shard.adj, shard.adj_t)
        op.vertex_ids = torch.from_numpy(part.order[part.rows(ctx.rank)])  # as the trainer sets them
        layer = (SAGELayer if kind == "sage" else GINLayer)(x_orig.shape[1], g_orig.shape[1], **options)
        layer.load_state_dict(state)
        x = rows_of(to_new_order(x_orig, part), part, ctx.rank).clone().requires_grad_(not options["first"])
        y = layer(x, op, workspace=Workspace(), key="0", output_in_workspace=True)
        y.backward(rows_of(to_new_order(g_orig, part), part, ctx.rank))
        grads = {name: p.grad.clone() for name, p in layer.named_parameters()}
        out.append((y.detach().clone(), None if x.grad is None else x.grad.clone(), grads,
                    {name: b.clone() for name, b in layer.named_buffers()}))
    return ctx.rank, out


def training_columns_worker(cases):
    """For each (graph, norm, partition, tile columns, training mask, B, G), with every operator (gloo broadcast,
    shared-memory broadcast, sparse and auto exchange) after ``use_training_columns``: Âᵀ·G from a backward marked
    ``grad_on_train_rows`` and from one not marked, and the bytes the marked backward received."""
    from mggcn.distributed.exchange import SparseExchangeSpMM

    ctx = init_distributed("cpu", timeout_s=60)
    out = []
    for graph, norm, part, tile_cols, train_orig, b_orig, g_orig in cases:
        shard = build_shard(graph, part, ctx.rank, norm, tile_cols=tile_cols)
        train = rows_of(to_new_order(train_orig, part), part, ctx.rank)
        width = b_orig.shape[1]
        outboxes = SharedOutboxes.create(ctx, part.rows_per_part, width, torch.float32) if ctx.world_size > 1 \
            else None
        ops = {"broadcast": StagedSpMM(ctx, shard.adj, shard.adj_t),
               "shm": StagedSpMM(ctx, shard.adj, shard.adj_t, outboxes=outboxes),
               "sparse": SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode="sparse"),
               "auto": SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode="auto")}
        results = {}
        for name, op in ops.items():
            op.use_training_columns(train)
            b = rows_of(to_new_order(b_orig, part), part, ctx.rank).clone().requires_grad_()
            g = rows_of(to_new_order(g_orig, part), part, ctx.rank)
            op(b, grad_on_train_rows=True).backward(g)
            received = op.recv_bytes
            marked = b.grad.clone()
            b.grad = None
            before = op.recv_bytes
            op(b).backward(g)
            results[name] = (marked, b.grad, received, op.recv_bytes - before)
        out.append(results)
    return ctx.rank, out


def training_columns_train_worker(cases):
    """Train each (graph, config) twice in one process group: with Âᵀ's training columns for the last layer's
    backward (the config's ``train_columns``, by default the rule) and without (``train_columns="off"``); per case
    and run: losses, weights, whether the operator kept them, and the bytes it received."""
    from dataclasses import replace

    ctx = init_distributed("cpu", timeout_s=60)
    out = []
    for graph, cfg in cases:
        runs = []
        for run_cfg in (cfg, replace(cfg, train_columns="off")):
            part = make_partition(graph.num_nodes, ctx.world_size, run_cfg.seed, run_cfg.partition)
            shard = build_shard(graph, part, ctx.rank, operator_for(run_cfg.model, run_cfg.norm))
            result = train_shard(ctx, shard, run_cfg)
            runs.append(([r["loss"] for r in result.history], result.state_dict, result.adj.has_training_columns,
                         result.adj.recv_bytes))
        out.append(runs)
    return ctx.rank, out


def gat_worker(cases, seed):
    """For each (graph, comm, overlap, tile columns, GAT keywords, state dict, X, G, dtype, attention seed): a GAT
    model (``mggcn.nn.gat.GAT``, training mode) with those weights on this rank's rows through the operator of
    ``comm``, its original vertex ids set as ``ParallelLayout.spmm_operator`` sets them: its output rows, the
    gradient of its input rows and this rank's partial parameter gradients."""
    from mggcn.distributed.exchange import SparseExchangeSpMM
    from mggcn.nn.gat import GAT

    ctx = init_distributed("cpu", timeout_s=60)
    out = []
    for graph, comm, overlap, tile_cols, options, state, x_orig, g_orig, dtype, attention_seed in cases:
        part = make_partition(graph.num_nodes, ctx.world_size, seed)
        shard = build_shard(graph, part, ctx.rank, "gat", tile_cols=tile_cols)
        if comm == "broadcast":
            op = StagedSpMM(ctx, shard.adj, shard.adj_t, overlap=overlap)
        else:
            op = SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode=comm, overlap=overlap)
        op.vertex_ids = torch.from_numpy(part.order[part.rows(ctx.rank)])
        dims = [x_orig.shape[1]] + list(options["hidden"]) + [g_orig.shape[1]]
        model = GAT(dims, heads=options["heads"], output_heads=options.get("output_heads"),
                    attention_dropout=options.get("attention_dropout", 0.0), seed=0)
        model.load_state_dict(state, strict=True)
        model = model.to(dtype)
        if attention_seed is not None:
            model.seed_attention(attention_seed)
        x = rows_of(to_new_order(x_orig, part), part, ctx.rank).to(dtype).clone().requires_grad_()
        y = model(x, op)
        y.backward(rows_of(to_new_order(g_orig, part), part, ctx.rank).to(dtype))
        grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        out.append((y.detach().clone(), x.grad.clone(), grads))
    return ctx.rank, out


def same_dataset_worker(directories):
    """Rank r opens ``directories[r]`` and checks, with its peers, that they opened the same dataset."""
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.distributed.context import shutdown
    from mggcn.training.job import _check_same_dataset

    ctx = init_distributed("cpu", timeout_s=60)
    try:
        _check_same_dataset(ctx, PreparedDataset(directories[ctx.rank]), opened_here=True)
    finally:
        shutdown()
    return ctx.rank


def two_forwards_worker(graph, cases, seed):
    """For each (kind, model keywords, G1, G2): the model (make_model's) on this rank's rows through the staged
    SpMM, two forwards (of X and of 2·X) before one backward of ``Σ G1·Y1 + G2·Y2``: both outputs' rows and this
    rank's partial parameter gradients."""
    from mggcn.nn.models import make_model

    ctx = init_distributed("cpu", timeout_s=60)
    part = make_partition(graph.num_nodes, ctx.world_size, seed)
    out = []
    for kind, options, g1, g2 in cases:
        shard = build_shard(graph, part, ctx.rank, operator_for(kind))
        op = StagedSpMM(ctx, shard.adj, shard.adj_t)
        op.vertex_ids = torch.from_numpy(part.order[part.rows(ctx.rank)])  # as the trainer sets them
        model = make_model(kind, **options)
        x = rows_of(to_new_order(torch.from_numpy(graph.x), part), part, ctx.rank)
        y1, y2 = model(x, op), model(2 * x, op)
        g1, g2 = (rows_of(to_new_order(g, part), part, ctx.rank) for g in (g1, g2))
        ((y1 * g1).sum() + (y2 * g2).sum()).backward()
        out.append((y1.detach().clone(), y2.detach().clone(),
                    {name: p.grad.clone() for name, p in model.named_parameters()}))
    return ctx.rank, out


def train_in_a_pool_worker(nprocs: int) -> str:
    """``mggcn.train`` in a worker of the caller's ``multiprocessing.Pool`` (a daemonic process): its outcome."""
    import mggcn

    try:
        mggcn.train("synthetic:n=200,features=4,classes=3", nprocs=nprocs, hidden=(4,), epochs=1, quiet=True)
    except Exception as err:  # noqa: BLE001 - the test reads what it was
        return f"{type(err).__name__}: {err}"
    return "trained"


def held_works_worker(graph, part, holds):
    """With ``context._GLOO_DESTROY_HOLDS_GIL`` set to ``holds``: one forward and backward through the broadcast
    SpMM (gloo, and shared-memory outboxes) and the sparse exchange; how many async works mggcn kept referenced
    then, and after :func:`shutdown` destroyed the group."""
    from mggcn.distributed import context
    from mggcn.distributed.exchange import SparseExchangeSpMM

    context._GLOO_DESTROY_HOLDS_GIL = holds
    ctx = init_distributed("cpu", timeout_s=60)
    shard = build_shard(graph, part, ctx.rank, "sym")
    outboxes = SharedOutboxes.create(ctx, part.rows_per_part, 4, torch.float32)
    ops = (StagedSpMM(ctx, shard.adj, shard.adj_t), StagedSpMM(ctx, shard.adj, shard.adj_t, outboxes=outboxes),
           SparseExchangeSpMM(ctx, shard.adj, shard.adj_t, mode="sparse"))
    for op in ops:
        b = torch.randn(part.rows_per_part, 4, requires_grad=True)
        op(b).sum().backward()
    held = [type(w).__name__ for w in context._Joined.works]
    context.shutdown()
    return ctx.rank, held, len(context._Joined.works)


def working_directory_worker():
    return os.getcwd()
