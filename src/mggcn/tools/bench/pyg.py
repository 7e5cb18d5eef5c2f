"""PyG's configuration: its ``GCNConv`` (or its GraphSAGE / GIN model), full batch, from mggcn's initial weights, with
the same loss, optimizer and accuracies, in a process of its own.

Its setup runs from reading the graph to its first epoch, marked by phase: ``read`` (the arrays), ``edge_index``
(the int64 edge list PyG takes, from the CSR: source = ``in_indices``, target = the row of each), ``gcn_norm`` (Â's
weights, once: what ``cached=True`` does), ``csr`` (Âᵀ as ``torch.sparse_csr``), ``device``, ``model``,
``optimizer``.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import torch

from mggcn.data.graph import SPLITS
from mggcn.distributed.context import init_distributed
from mggcn.nn.models import model_type
from mggcn.tools.bench.graph import read_graph
from mggcn.tools.bench.limits import SetupNotes, cap_memory, lift_caps
from mggcn.tools.bench.memory import MemoryProbe
from mggcn.tools.bench.options import BenchOptions, model_settings
from mggcn.tools.bench.probes import measure_after
from mggcn.tools.bench.workers import threshold, train_config
from mggcn.training.trainer import build_model
from mggcn.utils.timing import SetupClock, synchronize

__all__ = ["pyg_worker", "pyg_adjacency", "PYG_LAST_SETUP_PHASE"]

PYG_LAST_SETUP_PHASE = "optimizer"
_TARGET_ROWS = 1 << 20  # rows of the target side of edge_index filled at a time (a bounded temporary)


@dataclass
class _Input:
    """What PyG trains on, on the host: the graph as PyG takes it."""

    num_nodes: int
    edge_index: torch.Tensor | None  # int64 [2, E]: source, target
    x: torch.Tensor
    y: torch.Tensor
    rows: dict[str, torch.Tensor]  # the vertices of each split


def pyg_worker(path: str, opts: BenchOptions, threads: int, notes_dir: str | None = None) -> dict:
    """PyG's configuration: set up, train ``warmup + epochs`` epochs, measure; what it measured."""
    _import_pyg()
    ctx = init_distributed(opts.device, opts.timeout_s, threads, threshold(opts, None))
    dev = ctx.device
    cap_memory(opts.gpu_memory, opts.host_memory, dev)
    probe = MemoryProbe(dev, torch_adam=True)
    cfg = train_config(hidden=opts.hidden, seed=opts.seed, model=opts.model, **model_settings(opts))
    clock = SetupClock()
    notes = SetupNotes(notes_dir, 0, clock)
    with notes.on_failure():
        data = _read_input(path, opts, clock)
        adj = _adjacency(data, opts, clock)
        x, y, adj = data.x.to(dev), data.y.to(dev), adj.to(dev)
        rows = {s: r.to(dev) for s, r in data.rows.items()}
        synchronize(dev)
        clock.mark("device")
        convs = _model(opts, cfg, dev)
        clock.mark("model")
        optimizer = torch.optim.Adam(convs.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                     weight_decay=cfg.weight_decay)
        clock.mark("optimizer")
        notes.write()
        probe.ready()
        history = _train(convs, optimizer, x, y, adj, rows, opts, dev)
    memory = probe.done()
    lift_caps(opts.gpu_memory, opts.host_memory, dev)
    return {"rank": 0, "history": history, "memory": memory, "setup": notes.record(), "nodes": data.num_nodes,
            "threads": torch.get_num_threads(), "adjacency": pyg_adjacency(opts),
            "machine": measure_after(ctx, threads, opts)}


def _import_pyg() -> None:
    """What PyG's setup uses, imported before its clock starts and its memory base is taken, as mggcn's modules are
    (the process that starts workers imported them)."""
    import torch_geometric.nn  # noqa: F401
    import torch_geometric.nn.conv.gcn_conv  # noqa: F401
    import torch_geometric.utils  # noqa: F401


def _read_input(path: str, opts: BenchOptions, clock: SetupClock) -> _Input:
    """The graph as PyG takes it: from the prepared directory's arrays, or the GraphSAINT files (``--saint-graph``)."""
    if opts.saint_graph:
        graph = read_graph(path)
        clock.mark("read")
        rows = {s: torch.from_numpy(np.flatnonzero(graph.masks[s])) for s in SPLITS}
        data = _Input(graph.num_nodes, torch.from_numpy(graph.edge_index), torch.from_numpy(graph.x),
                      torch.from_numpy(graph.y), rows)
        clock.mark("edge_index")
        return data
    from mggcn.data.prepared.reader import PreparedDataset

    dataset = PreparedDataset(path)
    arrays = {name: np.load(dataset.source(name)) for name in ("in_indptr", "in_indices", "features", "labels",
                                                                 "split")}
    clock.mark("read")
    rows = {s: torch.from_numpy(np.flatnonzero(arrays["split"] == code)) for code, s in enumerate(SPLITS)}
    edge_index = _edge_index(arrays.pop("in_indptr"), arrays.pop("in_indices"))
    clock.mark("edge_index")
    return _Input(dataset.num_nodes, edge_index, torch.from_numpy(arrays["features"]),
                  torch.from_numpy(arrays["labels"]), rows)


def _edge_index(indptr: np.ndarray, indices: np.ndarray) -> torch.Tensor:
    """``[source, target]`` int64 from the CSR by target: source = ``indices``, target = the row of each entry
    (filled a block of rows at a time, so that the only temporaries are a block's)."""
    n, e = indptr.size - 1, indices.size
    edge_index = torch.empty((2, e), dtype=torch.int64)
    edge_index[0].copy_(torch.from_numpy(indices))
    counts = torch.from_numpy(np.diff(indptr))
    for lo in range(0, n, _TARGET_ROWS):
        hi = min(n, lo + _TARGET_ROWS)
        edge_index[1, int(indptr[lo]):int(indptr[hi])] = torch.repeat_interleave(
            torch.arange(lo, hi), counts[lo:hi], output_size=int(indptr[hi] - indptr[lo]))
    return edge_index


def _adjacency(data: _Input, opts: BenchOptions, clock: SetupClock) -> torch.Tensor:
    """What the convolutions are given, on the host: the normalized Âᵀ (GCN; SAGEConv and GINConv: Aᵀ unweighted,
    edge counts) as torch CSR with int32 or int64 indices, or the raw ``edge_index``. Takes the edge list out of
    ``data`` (so that it is freed once used)."""
    from torch_geometric.utils import to_torch_csr_tensor

    edge_index, data.edge_index, weight = data.edge_index, None, None
    if pyg_adjacency(opts) == "edge_index":
        return edge_index
    n = data.num_nodes
    edge_index, weight = model_type(opts.model).pyg_edge_weight(edge_index, n)
    if weight is not None:
        clock.mark("gcn_norm")
    adj_t = to_torch_csr_tensor(edge_index.flip(0), weight, (n, n))
    del edge_index, weight
    if opts.pyg_adj == "csr":
        adj_t = torch.sparse_csr_tensor(adj_t.crow_indices().int(), adj_t.col_indices().int(), adj_t.values(),
                                        adj_t.shape)
    clock.mark("csr")
    return adj_t


def pyg_adjacency(opts: BenchOptions) -> str:
    """What PyG's layers are given: ``opts.pyg_adj``, or the edge list for a model whose layers take only that."""
    return "edge_index" if model_type(opts.model).pyg_takes_edge_index else opts.pyg_adj


def _model(opts: BenchOptions, cfg, dev: torch.device) -> torch.nn.ModuleList:
    """PyG's convolutions, with the initial weights of mggcn's model of ``cfg``."""
    state = build_model(cfg, opts.features, opts.classes).pyg_state_dict()
    return model_type(opts.model).pyg_convs(opts.dims, state, normalize=opts.pyg_adj == "edge_index").to(dev)


def _train(convs, optimizer, x, y, adj, rows: dict, opts: BenchOptions, dev: torch.device) -> list[dict]:
    """``warmup + epochs`` full-batch epochs; each epoch's record (loss, accuracies, seconds by phase). The accuracies
    are those of the weights at the start of the epoch; where the model evaluates differently from how it trains
    (batch norm, dropout), from an eval forward of their own, inside the epoch's time as mggcn's."""
    import torch.nn.functional as F

    stochastic = any(isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.Dropout)) for m in convs.modules())

    def forward():
        h = x
        for i, conv in enumerate(convs):
            h = conv(h, adj, None)
            if i < len(convs) - 1:
                h = F.relu(h)
        return h

    sync = functools.partial(synchronize, dev)
    history = []
    for epoch in range(1, opts.warmup + opts.epochs + 1):
        t0 = time.perf_counter()
        if stochastic:  # as mggcn's trainer: the accuracies of an eval forward (batch norms' running statistics)
            with torch.no_grad():
                convs.eval()
                pred = forward().argmax(1)
                convs.train()
        optimizer.zero_grad()
        h = forward()
        loss = F.cross_entropy(h[rows["train"]], y[rows["train"]])
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        optimizer.step()
        sync()
        t3 = time.perf_counter()
        if not stochastic:
            pred = h.detach().argmax(1)
        acc = {s: float((pred[r] == y[r]).float().mean()) if r.numel() else None for s, r in rows.items()}
        history.append({"epoch": epoch, "loss": float(loss.detach()), "train_acc": acc["train"], "val_acc": acc["val"],
                        "test_acc": acc["test"], "epoch_s": t3 - t0, "forward": t1 - t0, "backward": t2 - t1,
                        "optimizer": t3 - t2})
    return history
