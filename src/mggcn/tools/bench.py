"""``mggcn bench``: mggcn at P = 1 and P = 2 (overlap on and off) against PyG's ``GCNConv``, on one graph, in one run.

``--model sage`` / ``gin`` trains GraphSAGE / GIN instead, against PyG's own ``GraphSAGE`` / ``GIN`` model (its
``SAGEConv`` / ``GINConv`` given the unweighted adjacency as a torch CSR, int32 or int64 indices by ``--pyg-adj``,
or the ``edge_index``), from the same initial weights.

Every configuration trains the same synthetic graph (a degree-corrected block model, :func:`mggcn.data.generators.
community_graph`, generated once and shared through a file) with the same model, initial weights, epochs and
thread count, each in fresh processes of its own so that peak memories do not mix. Reported per configuration:
the median epoch time after a warm-up, the per-phase times, the test accuracy after the last epoch, the peak
resident memory, the floor of :mod:`mggcn.tools.roofline` (from the copy bandwidth and GEMM rate measured by the same
processes right after their epochs, all cores, the other ranks waiting) and the per-rank memory :mod:`mggcn.tools.plan`
predicts.

Noise: on a shared machine the same run varies by 10-20% from one minute to the next. ``--repeats K`` runs the mggcn
configurations K times (PyG's too with ``--repeat-pyg``, as ``--saint-graph`` does: 3 rounds), round after round in
the same order, and reports each one's median round; the overlap
line gives the ratio off/on of every round, so a slow spell that hits one round hits both sides of its ratio. On CPU
with P > 1 the bench also measures a 16 MiB broadcast between two ranks: its rate and how busy it keeps the cores,
the room that overlapping communication with computation has on this machine. Ranks on one CPU host broadcast
through shared memory by default (:mod:`mggcn.distributed.shm`); ``--compare-shm`` runs P > 1 through gloo's broadcast
too. A rank's peak RSS then leaves out the pages of the other ranks' outboxes it reads (``peer_shm`` in the JSON): their
owners count them.

Memory: a process's peak RSS is its ``VmHWM`` (``/proc/self/status``; ``ru_maxrss`` where there is no /proc —
on Linux a spawned process's ``ru_maxrss`` starts at its launcher's peak, which ``VmHWM`` does not). Each process
records its RSS before it loads the graph (the Python and PyTorch runtime: ``base``), builds what it trains on,
frees the rest, then resets the peak (``/proc/self/clear_refs``) so that ``peak`` is the peak while training;
``net = peak − base`` is what :func:`mggcn.tools.plan.plan_memory` predicts. ``whole`` is the peak of the whole
process, setup included (the larger of the peak before the reset, ``setup_peak``, and the training peak), as a
user of ``mggcn train`` sees it; beside it, a process that only imports torch and mggcn is measured in the same run
(the interpreter's baseline), and ``w/(p+b)`` = whole / (plan + that baseline). On CUDA the peak is
``torch.cuda.max_memory_allocated``.

``--saint-graph`` (issue 17's check): the benchmark writes its graph as a GraphSAINT directory (100k vertices, 5.0M
nonzeros, 128 features, 40 classes by default), prepares it once (``mggcn prepare``), and trains mggcn at
P = 1, 2, 4 with each rank reading its share of the prepared directory, plus P = 1 reading the SAINT files whole as
``mggcn train DIR --format saint`` does; PyG reads the SAINT files.

PyG's baseline is its fastest setup measured here: Â normalized once by PyG's ``gcn_norm`` (what ``cached=True``
does) into a ``torch.sparse_csr`` tensor with int32 indices (``--pyg-adj csr``); ``csr64`` keeps int64 indices,
``edge_index`` lets ``GCNConv(cached=True)`` gather and scatter ``E × d`` messages. ``SparseTensor`` needs
torch-sparse (not installed); PyG's ``EdgeIndex`` was 5-10× slower than the CSR and took 23 GB on the default graph.

Allocator: each configuration runs as it does by default. mggcn's ranks fix glibc's mmap threshold at 1 MiB
(:data:`mggcn.config.MMAP_THRESHOLD`: freed blocks go back to the system at once; an mggcn epoch allocates
nothing large, so this costs it no page faults); PyG runs under glibc's dynamic threshold, which keeps freed blocks of
up to 32 MiB in the heap and reuses them without page faults (PyG allocates its activations anew every epoch), at the
price of RSS above the live tensors. ``--mmap-threshold SIZE`` sets one threshold for every configuration (0: glibc's
dynamic one everywhere), to compare like with like.

Graph ids: ``--ids clustered`` (default) numbers the vertices community by community (random within one), as
crawled and real datasets often come with locality in their ids; ``--ids random`` keeps the generator's ids.
``--partition random-local`` keeps that locality inside each part, ``random`` scatters it.

    mggcn bench                                  # the default graph: 200k vertices, 20M nonzeros, ~5 minutes
    mggcn bench --small --out bench.json         # seconds
    mggcn bench --saint-graph                    # whole-process memory: a GraphSAINT graph, P = 1, 2, 4 and PyG
    mggcn bench --nprocs 1,2,4 --partition random-local
    mggcn bench --nprocs 2 --no-pyg --repeats 5           # overlap on/off in 5 interleaved rounds
    mggcn bench --nprocs 2 --no-pyg --compare-shm         # shared memory against gloo's broadcast
    mggcn bench --nprocs 1 --no-pyg --compare-tiles 0     # what column tiles buy: P = 1 untiled too
    mggcn bench --device cuda --nodes 20000000 --degree 50   # one GPU: P = 1 and PyG
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import resource
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np
import torch

from mggcn.config import MMAP_THRESHOLD, MODELS, TrainConfig
from mggcn.data.datasets import InMemoryDataset
from mggcn.data.graph import SPLITS, Graph, GraphError
from mggcn.distributed.context import available_cores, init_distributed
from mggcn.distributed.launch import WorkerError, run_workers
from mggcn.distributed.sharding import release_dataset
from mggcn.distributed.tiled import gather_kernel
from mggcn.nn.adam import Adam
from mggcn.tools.plan import plan_memory
from mggcn.tools.roofline import Machine, epoch_floor, measure_machine, mggcn_work, pyg_work
from mggcn.training.trainer import build_model, shard_for, train_shard
from mggcn.utils.errors import ConfigError
from mggcn.utils.system import torch_threads
from mggcn.utils.timing import PHASES

__all__ = ["BenchOptions", "SMALL", "run_bench", "format_table", "bench_graph", "peak_rss", "current_rss",
           "reset_peak_rss"]

PYG_ADJ = ("csr", "csr64", "edge_index")


@dataclass(frozen=True)
class BenchOptions:
    """Every option of ``mggcn bench`` and its default, in one place."""

    nodes: int = 200_000
    degree: float = 100.0  # mean degree: nonzeros of A = nodes · degree
    features: int = 128
    classes: int = 40
    hidden: tuple[int, ...] = (128,)
    model: str = "gcn"  # gcn, sage or gin (mggcn.nn.models), against PyG's GCNConv, GraphSAGE or GIN
    epochs: int = 8  # timed epochs, after the warm-up
    warmup: int = 2
    repeats: int = 1  # rounds over the mggcn configurations, interleaved (their medians are reported)
    repeat_pyg: bool = False  # PyG in every round too (its median round is then the ratios' denominator)
    threads: int | None = None  # per configuration (P ranks get threads // P each); default: the cores
    nprocs: tuple[int, ...] = (1, 2)
    partitions: tuple[str, ...] = ("random-local", "random")  # the first is the main one
    ids: str = "clustered"
    device: str = "cpu"
    pyg: bool = True
    pyg_adj: str = "csr"
    seed: int = 0
    graph_cache: str | None = None  # an .npz to reuse (written when missing)
    timeout_s: float = 3600.0
    mmap_threshold: int | None = None  # for every configuration (0: glibc's dynamic one); None: each its default
    tile_bytes: int | None = None  # mggcn's --tile-bytes (None: its default; 0: untiled blocks)
    compare_tiles: tuple[int, ...] = ()  # more --tile-bytes values, each run at P = 1 for every partition
    shm: str = "auto"  # mggcn's --shm for every mggcn configuration
    compare_shm: bool = False  # also run P > 1 through gloo's broadcast (overlap on and off), in the same rounds
    saint_graph: bool = False  # the graph as a GraphSAINT directory, prepared once; see the module docstring
    probe_gemm: int = 4096  # the machine's rates: a probe_gemm² matmul and a probe_copy-byte copy (x2, x4 on CUDA)
    probe_copy: int = 512 << 20

    @property
    def dims(self) -> list[int]:
        return [self.features, *self.hidden, self.classes]


SMALL = BenchOptions(nodes=3000, degree=10.0, features=32, classes=4, hidden=(16,), epochs=3, warmup=1,
                     probe_gemm=1024, probe_copy=64 << 20)
# --saint-graph: issue 17's graph (100k vertices, 5.0M nonzeros of A, 128 features, 40 classes) in GraphSAINT's
# layout, at P = 1, 2, 4 against PyG, in mggcn train's order; few epochs (the whole-process peak is reached in the
# first)
SAINT = BenchOptions(nodes=100_000, degree=50.0, epochs=3, warmup=1, nprocs=(1, 2, 4),
                     partitions=(TrainConfig.partition,),
                     saint_graph=True, repeats=3, repeat_pyg=True)


# ----------------------------------------------------------------------------------------------------------------------
# memory of this process


def _status_bytes(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _ru_maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def current_rss() -> int:
    rss = _status_bytes("VmRSS")
    return _ru_maxrss() if rss is None else rss


def peak_rss() -> int:
    """Peak RSS of this process since it started or since :func:`reset_peak_rss`."""
    hwm = _status_bytes("VmHWM")
    return _ru_maxrss() if hwm is None else hwm


def reset_peak_rss() -> bool:
    """Restart the peak at the current RSS (Linux ≥ 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _release_memory() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _warm_runtime(device: torch.device, torch_adam: bool = False) -> None:
    """Run each kind of kernel once on a toy problem, so that the runtime's one-time costs (libraries paged in on
    first use) count in the base, not in the peak. The optimizer is the one the configuration trains with:
    mggcn's :class:`~mggcn.nn.adam.Adam`, or ``torch.optim.Adam`` (PyG; its first use imports ~70 MB of PyTorch)."""
    import torch.nn.functional as F

    dense = torch.rand(8, 8, device=device)
    adj = dense.relu().to_sparse_csr()
    adj = torch.sparse_csr_tensor(adj.crow_indices().int(), adj.col_indices().int(), adj.values(), adj.shape)
    weight = torch.randn(8, 4, device=device, requires_grad=True)
    loss = F.cross_entropy(torch.sparse.mm(adj, dense) @ weight, torch.zeros(8, dtype=torch.long, device=device))
    loss.backward()
    (torch.optim.Adam if torch_adam else Adam)([weight]).step()


class _MemoryProbe:
    """base (before the graph) -> setup (graph loaded, structures built, rest freed) -> training peak."""

    def __init__(self, device: torch.device, torch_adam: bool = False) -> None:
        self.device = device
        _warm_runtime(device, torch_adam)
        _release_memory()
        self.record = {"base": current_rss()}

    def ready(self) -> None:
        self.record["setup_peak"] = peak_rss()  # the process's peak so far: runtime and setup
        _release_memory()
        self.record.update(ready=current_rss(), peak_reset=reset_peak_rss())
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)

    def done(self) -> dict:
        self.record.update(peak=peak_rss(), ru_maxrss=_ru_maxrss())
        self.record["whole"] = max(self.record["setup_peak"], self.record["peak"])  # the process's peak, all of it
        if self.device.type == "cuda":
            self.record["cuda_peak"] = torch.cuda.max_memory_allocated(self.device)
        return self.record


# ----------------------------------------------------------------------------------------------------------------------
# the graph


def bench_graph(opts: BenchOptions) -> Graph:
    """The benchmark's graph; see the module docstring for ``ids``."""
    from mggcn.data.generators import community_graph

    if opts.ids not in ("clustered", "random"):
        raise ConfigError(f"ids must be clustered or random, got '{opts.ids}'", "ids")
    graph = community_graph(opts.nodes, opts.classes, opts.features, opts.degree, seed=opts.seed)
    graph.meta = {}
    if opts.ids == "random":
        return graph
    order = np.argsort(graph.y, kind="stable")  # new id -> old id
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    return Graph(graph.num_nodes, position[graph.edge_index], graph.x[order], graph.y[order],
                 {s: m[order] for s, m in graph.masks.items()}, graph.num_classes, name=f"{graph.name}, clustered ids")


def _save_graph(graph: Graph, path: str) -> None:
    np.savez(path, edge_index=graph.edge_index, x=graph.x, y=graph.y, num_classes=graph.num_classes,
             **{f"mask_{s}": graph.masks[s] for s in SPLITS})


def _load_graph(path: str) -> Graph:
    with np.load(path) as f:
        return Graph(int(f["x"].shape[0]), f["edge_index"], f["x"], f["y"], {s: f[f"mask_{s}"] for s in SPLITS},
                     int(f["num_classes"]), name=os.path.basename(path))


def _read_graph(path: str, opts: BenchOptions) -> Graph:
    """The graph every configuration trains on, read as ``mggcn train`` reads it."""
    if opts.saint_graph:
        from mggcn.data.datasets import load_graph

        return load_graph(path, "saint")
    return _load_graph(path)


def _open_dataset(path: str, opts: BenchOptions):
    """The dataset a configuration trains on: a directory of `mggcn prepare` (each rank reads its share), or the
    graph read whole (:func:`_read_graph`)."""
    from mggcn.data.prepared.reader import PreparedDataset, is_prepared

    if os.path.isdir(path) and is_prepared(path):
        return PreparedDataset(path)
    return InMemoryDataset(_read_graph(path, opts), owned=True)  # as open_dataset reads a file


def _graph_info(graph: Graph) -> dict:
    self_loops = int((graph.edge_index[0] == graph.edge_index[1]).sum())
    return {"nodes": graph.num_nodes, "edges": graph.num_edges, "features": graph.num_features,
            "classes": graph.num_classes, "nnz": graph.num_edges - self_loops + graph.num_nodes,
            "train": float(graph.masks["train"].mean()), "name": graph.name}


def generate_worker(opts: BenchOptions, path: str) -> dict:
    graph = bench_graph(opts)
    if opts.saint_graph:
        from mggcn.data.formats.saint import write_saint

        write_saint(graph, path)
    else:
        _save_graph(graph, path)
    return _graph_info(graph)


def prepare_worker(source: str, out: str) -> dict:
    """``mggcn prepare SOURCE OUT --format saint``; its peak RSS."""
    from mggcn.data.prepared.writer import prepare

    prepare(source, out, fmt="saint", progress=False)
    return {"peak": peak_rss()}


def baseline_worker(device: str) -> dict:
    """The interpreter's own memory: RSS of a process that imported torch and mggcn (``import``), and after it ran
    each kind of kernel and mggcn's optimizer step once on a toy problem (``warm``: the code PyTorch loads on first
    use)."""
    import mggcn.training.job  # noqa: F401  (what `mggcn train` imports)

    _release_memory()
    record = {"import": current_rss(), "import_anon": _status_bytes("RssAnon")}
    _warm_runtime(torch.device(device))
    _release_memory()
    record.update(warm=current_rss(), warm_anon=_status_bytes("RssAnon"))
    return record


def machine_worker(opts: BenchOptions, threads: int) -> Machine:
    ctx = init_distributed(opts.device, threads=threads)
    return _measure(ctx.device, threads, opts)


def _measure(device: torch.device, threads: int, opts: BenchOptions, repeats: int = 5) -> Machine:
    """The machine's copy bandwidth and GEMM rate with ``threads`` threads (then this process's threads again)."""
    scale = (4, 2) if device.type == "cuda" else (1, 1)
    with torch_threads(threads):
        return measure_machine(device.type, copy_bytes=opts.probe_copy * scale[0], gemm_size=opts.probe_gemm * scale[1],
                               repeats=repeats)


def _measure_after(ctx, threads: int, opts: BenchOptions) -> dict:
    """The rates right after a configuration's epochs, measured by rank 0 while the other ranks wait (on a CPU the
    floor of P ranks is their work over the whole machine): the floor then sees the machine as the epochs did."""
    import torch.distributed as dist

    if ctx.world_size > 1:
        dist.barrier()
    machine = _measure(ctx.device, threads, opts, repeats=3).as_dict() if ctx.is_main else None
    if ctx.world_size > 1:
        dist.barrier()
    return machine


# ----------------------------------------------------------------------------------------------------------------------
# one configuration, in its own processes


def _train_config(**kwargs) -> TrainConfig:
    """A TrainConfig from the keys it has (it grows fields over time)."""
    names = {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in kwargs.items() if k in names})


def _threshold(opts: BenchOptions, default: int | None) -> int | None:
    return default if opts.mmap_threshold is None else (opts.mmap_threshold or None)


def mggcn_worker(path: str, config: dict, opts: BenchOptions, threads: int, machine_threads: int) -> dict:
    """One rank of an mggcn configuration: load, shard, train, measure the machine; what it measured."""
    ctx = init_distributed(opts.device, opts.timeout_s, threads, _threshold(opts, MMAP_THRESHOLD))
    probe = _MemoryProbe(ctx.device)
    start = time.perf_counter()
    cfg = _train_config(**config)
    dataset = _open_dataset(path, opts)  # as `mggcn train` cuts its shards
    shard = shard_for(cfg, dataset, ctx)
    release_dataset(dataset)
    del dataset
    held = _shard_bytes(shard)
    probe.ready()
    setup_s = time.perf_counter() - start
    result = train_shard(ctx, shard, cfg)
    memory = probe.done()
    outboxes = getattr(result.adj, "outboxes", None)
    if outboxes is not None:  # the other ranks' outboxes this rank read: in its RSS, but held by their owners
        memory["peer_shm"] = outboxes.peer_resident_bytes() or 0
        memory["peak"] -= memory["peer_shm"]
        memory["whole"] = max(memory["setup_peak"], memory["peak"])
    machine = _measure_after(ctx, machine_threads, opts)
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
            "setup_s": setup_s, "threads": torch.get_num_threads(), "machine": machine}


def _shard_bytes(shard) -> dict:
    def csr(blocks):
        return sum(b.nbytes for b in blocks)

    shared = all(a is t for a, t in zip(shard.adj, shard.adj_t))
    return {"adjacency A": csr(shard.adj), "adjacency A^T": 0 if shared else csr(shard.adj_t),
            "features X": shard.x.numel() * shard.x.element_size(),
            "labels": shard.y.numel() * shard.y.element_size() + sum(m.numel() for m in shard.masks.values())}


def pyg_worker(path: str, opts: BenchOptions, threads: int) -> dict:
    """PyG's GCNConv (or its GraphSAGE / GIN model), full batch, from mggcn's initial weights; the same loss,
    optimizer and accuracies."""
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    ctx = init_distributed(opts.device, opts.timeout_s, threads, _threshold(opts, None))
    dev = ctx.device
    probe = _MemoryProbe(dev, torch_adam=True)
    start = time.perf_counter()
    cfg = _train_config(hidden=opts.hidden, seed=opts.seed, model=opts.model)
    graph = _read_graph(path, opts)
    x, y = torch.from_numpy(graph.x).to(dev), torch.from_numpy(graph.y).to(dev)
    rows = {s: torch.from_numpy(graph.masks[s]).nonzero().squeeze(1).to(dev) for s in SPLITS}
    if opts.model == "gcn":
        adj, edge_weight = _pyg_adjacency(graph, opts.pyg_adj, dev)
    else:
        adj, edge_weight = _pyg_raw_adjacency(graph, opts.pyg_adj, dev), None
    num_nodes = graph.num_nodes
    del graph
    state = build_model(cfg, opts.features, opts.classes).pyg_state_dict()
    if opts.model == "gcn":
        convs = torch.nn.ModuleList(GCNConv(a, b, cached=True, normalize=opts.pyg_adj == "edge_index")
                                    for a, b in zip(opts.dims[:-1], opts.dims[1:], strict=True)).to(dev)
        convs.load_state_dict({k.removeprefix("convs."): v for k, v in state.items()})
    else:
        from torch_geometric.nn import models

        pyg_model = getattr(models, {"sage": "GraphSAGE", "gin": "GIN"}[opts.model])(
            opts.features, opts.hidden[0], len(opts.hidden) + 1, opts.classes)
        pyg_model.load_state_dict(state, strict=True)
        convs = pyg_model.convs.to(dev)
    optimizer = torch.optim.Adam(convs.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                 weight_decay=cfg.weight_decay)
    probe.ready()
    setup_s = time.perf_counter() - start
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    history = []
    for epoch in range(1, opts.warmup + opts.epochs + 1):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        h = x
        for i, conv in enumerate(convs):
            h = conv(h, adj, edge_weight)
            if i < len(convs) - 1:
                h = F.relu(h)
        loss = F.cross_entropy(h[rows["train"]], y[rows["train"]])
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        optimizer.step()
        sync()
        t3 = time.perf_counter()
        pred = h.detach().argmax(1)
        acc = {s: float((pred[r] == y[r]).float().mean()) if r.numel() else 0.0 for s, r in rows.items()}
        history.append({"epoch": epoch, "loss": float(loss.detach()), "train_acc": acc["train"], "val_acc": acc["val"],
                        "test_acc": acc["test"], "epoch_s": t3 - t0, "forward": t1 - t0, "backward": t2 - t1,
                        "optimizer": t3 - t2})
    memory = probe.done()
    return {"rank": 0, "history": history, "memory": memory, "setup_s": setup_s, "nodes": num_nodes,
            "threads": torch.get_num_threads(), "adjacency": opts.pyg_adj,
            "machine": _measure_after(ctx, threads, opts)}


def _pyg_raw_adjacency(graph: Graph, kind: str, device: torch.device):
    """What SAGEConv and GINConv are given: Aᵀ unweighted (edge counts) as torch CSR, or the raw edge_index."""
    from torch_geometric.utils import to_torch_csr_tensor

    edge_index = torch.from_numpy(graph.edge_index)
    if kind == "edge_index":
        return edge_index.to(device)
    if kind not in PYG_ADJ:
        raise ValueError(f"--pyg-adj must be one of {', '.join(PYG_ADJ)}, got '{kind}'")
    adj_t = to_torch_csr_tensor(edge_index.flip(0), None, (graph.num_nodes, graph.num_nodes))
    if kind == "csr":
        adj_t = torch.sparse_csr_tensor(adj_t.crow_indices().int(), adj_t.col_indices().int(), adj_t.values(),
                                        adj_t.shape)
    return adj_t.to(device)


def _pyg_adjacency(graph: Graph, kind: str, device: torch.device):
    """What GCNConv is given: the normalized Âᵀ as torch CSR (int32 or int64 indices), or the raw edge_index."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    from torch_geometric.utils import to_torch_csr_tensor

    edge_index = torch.from_numpy(graph.edge_index)
    if kind == "edge_index":
        return edge_index.to(device), None
    if kind not in PYG_ADJ:
        raise ConfigError(f"pyg_adj must be one of {', '.join(PYG_ADJ)}, got '{kind}'", "pyg_adj")
    edge_index, weight = gcn_norm(edge_index, None, graph.num_nodes, add_self_loops=True)
    adj_t = to_torch_csr_tensor(edge_index.flip(0), weight, (graph.num_nodes, graph.num_nodes))
    del edge_index, weight
    if kind == "csr":
        adj_t = torch.sparse_csr_tensor(adj_t.crow_indices().int(), adj_t.col_indices().int(), adj_t.values(),
                                        adj_t.shape)
    return adj_t.to(device), None


# ----------------------------------------------------------------------------------------------------------------------
# the whole benchmark


@dataclass
class _Run:
    name: str
    kind: str  # mggcn | pyg
    nprocs: int = 1
    overlap: bool = True
    partition: str = ""
    tile_bytes: int | None = None
    shm: str = "auto"
    files: bool = False  # --saint-graph: read the SAINT files whole, not the prepared directory
    results: list = field(default_factory=list)  # the ranks' results of the first round
    round_s: list = field(default_factory=list)  # the median epoch of each round
    histories: list = field(default_factory=list)  # rank 0's history of each round
    machines: list = field(default_factory=list)  # the rates measured right after each round


def _runs(opts: BenchOptions, gpus: int) -> list[_Run]:
    main, others = opts.partitions[0], opts.partitions[1:]
    runs = [_Run(f"mggcn P={p} {main}", "mggcn", p, True, main) for p in opts.nprocs]
    runs += [_Run(f"mggcn P={p} {main} no-overlap", "mggcn", p, False, main) for p in opts.nprocs if p > 1]
    runs += [_Run(f"mggcn P={p} {o}", "mggcn", p, True, o) for o in others for p in opts.nprocs if p <= 2]
    runs = [replace(r, tile_bytes=opts.tile_bytes, shm=opts.shm) for r in runs]
    if opts.compare_shm and opts.device == "cpu":
        runs += [_Run(f"mggcn P={p} {main} gloo{'' if on else ' no-overlap'}", "mggcn", p, on, main,
                      opts.tile_bytes, "off") for p in opts.nprocs if p > 1 for on in (True, False)]
    runs += [_Run(f"mggcn P=1 {o} {_tiles_label(t)}", "mggcn", 1, True, o, t)
             for t in opts.compare_tiles for o in opts.partitions]
    if opts.saint_graph:  # P ranks read their shares of the prepared directory; P = 1 also the SAINT files whole
        runs = [r for r in runs if r.overlap]
        runs.insert(1, _Run(f"mggcn P=1 {main}, SAINT files", "mggcn", 1, True, main, opts.tile_bytes, opts.shm,
                            files=True))
    if opts.device == "cuda":
        runs = [r for r in runs if r.nprocs <= gpus]
    if opts.pyg:
        pyg_name = {"gcn": "GCNConv", "sage": "GraphSAGE", "gin": "GIN"}[opts.model]
        runs.append(_Run(f"PyG {pyg_name} ({opts.pyg_adj})", "pyg"))
    return runs


def _rounds(runs: list[_Run], opts: BenchOptions) -> list[list[_Run]]:
    """Round 1 runs every configuration; later rounds the mggcn ones again (PyG too with ``repeat_pyg``), in the same
    order, so that a slow spell of a shared machine falls on every configuration alike."""
    again = [r for r in runs if r.kind == "mggcn" or opts.repeat_pyg]
    return [runs] + [again] * max(0, opts.repeats - 1)


def _tiles_label(tile_bytes: int) -> str:
    return "untiled" if tile_bytes == 0 else f"tiles {tile_bytes >> 10}K"


def _median(history: list[dict], key: str, warmup: int) -> float:
    values = [r[key] for r in history[warmup:] if key in r] or [r[key] for r in history if key in r]
    return statistics.median(values) if values else float("nan")


def _summarize(run: _Run, opts: BenchOptions, graph: dict) -> dict:
    first = run.results[0]
    history = first["history"]
    row = {"name": run.name, "kind": run.kind, "nprocs": run.nprocs, "overlap": run.overlap,
           "shm": bool(first.get("shm")),
           "partition": run.partition, "epoch_s": statistics.median(run.round_s), "round_s": list(run.round_s),
           "epochs_s": [r["epoch_s"] for r in history], "test_acc": history[-1]["test_acc"],
           "loss": history[-1]["loss"], "setup_s": max(r["setup_s"] for r in run.results),
           "threads_per_rank": first["threads"]}
    timed = [r for h in run.histories for r in h[opts.warmup:]] or history
    phase_keys = (*PHASES, "other") if run.kind == "mggcn" else ("forward", "backward", "optimizer")
    row["phases"] = {k: _median(timed, k, 0) for k in phase_keys}
    cuda = opts.device == "cuda"
    ranks = []
    for r in run.results:
        mem = r["memory"]
        entry = {"rank": r["rank"], **mem, "net": mem["peak"] - mem["base"]}
        if run.kind == "mggcn":
            plan = plan_memory(graph["nodes"], graph["nnz"] - graph["nodes"], graph["features"], graph["classes"],
                               opts.hidden, run.nprocs, train=graph["train"], rank_nnz=r["nnz"],
                               rank_nnz_t=r["nnz_t"], symmetric=r["shared_t"], tile_cols=r["tile_cols"],
                               model=opts.model, rank_nnz_train_t=r.get("nnz_train_t"), gather=r["gather"],
                               device=opts.device)
            measured = mem["cuda_peak"] if cuda else entry["net"]
            entry.update(predicted=plan.total, plan_parts=plan.parts, held=r["held"], workspace=r["workspace"],
                         measured_over_predicted=measured / plan.total, raw_over_predicted=mem["peak"] / plan.total)
            base = graph.get("baseline")
            if base and not cuda:  # the whole process against the plan plus the interpreter, measured in this run
                entry.update(whole_over_plan_base=mem["whole"] / (plan.total + base["import"]),
                             whole_net_over_plan=(mem["whole"] - base["warm"]) / plan.total)
        ranks.append(entry)
    row["memory"] = ranks
    nnz = graph["nnz"] if opts.model == "gcn" else graph["nnz"] - graph["nodes"]  # GraphSAGE and GIN: no self loops
    row["peak"] = max(e["cuda_peak"] if cuda else e["peak"] for e in ranks)
    row["net"] = max(e["cuda_peak"] if cuda else e["net"] for e in ranks)
    row["whole"] = None if cuda else max(e["whole"] for e in ranks)
    if run.kind == "mggcn":
        row["predicted"] = max(e["predicted"] for e in ranks)
        row["measured_over_predicted"] = max(e["measured_over_predicted"] for e in ranks)
        row["raw_over_predicted"] = max(e["raw_over_predicted"] for e in ranks)
        for key in ("whole_over_plan_base", "whole_net_over_plan"):
            row[key] = max((e[key] for e in ranks if key in e), default=None)
        work = mggcn_work(graph["nodes"], nnz, opts.dims, run.nprocs, model=opts.model, train=graph["train"])
    else:
        work = pyg_work(graph["nodes"], nnz, opts.dims, model=opts.model)
    machine = Machine(device=run.machines[0]["device"], threads=run.machines[0]["threads"],
                      bandwidth=statistics.median(m["bandwidth"] for m in run.machines),
                      gemm_rate=statistics.median(m["gemm_rate"] for m in run.machines))
    row["machine"] = machine.as_dict()  # the median over rounds of the rates measured right after them
    row["floor"] = epoch_floor(work, machine, run.nprocs, shared=not cuda)
    row["over_floor"] = row["epoch_s"] / row["floor"]["floor_s"]
    return row


def run_bench(opts: BenchOptions, log=print, out: str | None = None) -> dict:
    """Run every configuration; the report (also what ``--out`` writes).

    With ``out``, the report is written there after the graph, after every configuration and at the end, whatever
    happens: a configuration that fails is listed in ``failed`` with its error and the others still run; a step
    that stops the bench (the graph cannot be made, Ctrl-C) is named in ``error`` before the exception goes on.
    ``complete`` says whether every step ran.
    """
    threads = opts.threads or available_cores()
    gpus = torch.cuda.device_count() if opts.device == "cuda" else 0
    report = {"options": {**asdict(opts), "threads": threads}, "graph": None, "machine": None, "broadcast": None,
              "rows": [], "failed": [], "load_average": {"before": os.getloadavg(), "after": None},
              "complete": False}

    def save() -> None:
        report["load_average"]["after"] = os.getloadavg()
        _add_ratios(report)
        if out:
            write_report(report, out)

    try:
        _run_all(opts, threads, gpus, log, report, save)
        report["complete"] = True
    except BaseException as err:  # the report says where it stopped; the error goes on to the caller
        report["error"] = f"{type(err).__name__}: {err}"
        raise
    finally:
        save()
    return report


def _run_all(opts: BenchOptions, threads: int, gpus: int, log, report: dict, save) -> None:
    """Every step of the bench, into ``report``; ``save()`` after each."""
    rows, failed = report["rows"], report["failed"]
    with tempfile.TemporaryDirectory(prefix="mggcn-bench-") as tmp:
        path = opts.graph_cache or os.path.join(tmp, "saint" if opts.saint_graph else "graph.npz")
        start = time.perf_counter()
        if opts.graph_cache and os.path.exists(path):
            graph = run_workers(_info_worker, 1, (path, opts), timeout_s=opts.timeout_s)[0]
        else:
            graph = run_workers(generate_worker, 1, (opts, path), timeout_s=opts.timeout_s)[0]
        report["graph"] = graph
        log(f"graph: {graph['nodes']:,} vertices, {graph['nnz']:,} nonzeros of Â, {graph['features']} features, "
            f"{graph['classes']} classes ({time.perf_counter() - start:.0f} s)")
        baseline = run_workers(baseline_worker, 1, (opts.device,), timeout_s=opts.timeout_s)[0]
        graph["baseline"] = baseline
        log(f"interpreter baseline: {baseline['import'] / 2**20:.0f} MiB after importing torch and mggcn, "
            f"{baseline['warm'] / 2**20:.0f} MiB once its kernels and optimizer ran")
        prepared = None
        if opts.saint_graph:
            prepared = os.path.join(tmp, "prepared")
            start = time.perf_counter()
            graph["prepare"] = run_workers(prepare_worker, 1, (path, prepared), timeout_s=opts.timeout_s)[0]
            log(f"prepared for any P ({time.perf_counter() - start:.0f} s, peak "
                f"{graph['prepare']['peak'] / 2**20:.0f} MiB)")
        save()
        try:
            machine = run_workers(machine_worker, 1, (opts, threads), timeout_s=opts.timeout_s)[0]
            report["machine"] = machine.as_dict()
            log(f"machine: {machine.bandwidth / 1e9:.1f} GB/s copy, {machine.gemm_rate / 1e9:.0f} GFLOP/s GEMM "
                f"({machine.threads} threads)")
        except WorkerError as err:  # the configurations measure the machine again after their epochs
            failed.append({"name": "machine probe", "kind": "probe", "error": str(err)})
            log(f"  machine probe: FAILED: {err}")
        save()
        runs = _runs(opts, gpus)
        rounds = _rounds(runs, opts)
        for number, todo in enumerate(rounds, 1):
            for run in todo:
                if any(f["name"] == run.name for f in failed):
                    continue
                start = time.perf_counter()
                try:
                    source = prepared if prepared and run.kind == "mggcn" and not run.files else path
                    results = _run_one(run, opts, source, threads)
                except WorkerError as err:  # e.g. out of memory: that is a result too
                    failed.append({"name": run.name, "kind": run.kind, "nprocs": run.nprocs, "round": number,
                                   "error": str(err)})
                    log(f"  {run.name}: FAILED: {err}")
                    save()
                    continue
                run.results = run.results or results
                run.histories.append(results[0]["history"])
                run.machines.append(results[0]["machine"])
                run.round_s.append(_median(results[0]["history"], "epoch_s", opts.warmup))
                label = f" (round {number})" if len(rounds) > 1 else ""
                log(f"  {run.name}{label}: {run.round_s[-1]:.3f} s/epoch ({time.perf_counter() - start:.0f} s)")
                rows[:] = [_summarize(r, opts, graph) for r in runs if r.results]
                save()
        if opts.device == "cpu" and max(opts.nprocs) > 1:
            try:
                comm = run_workers(broadcast_worker, 2, (opts.timeout_s,), timeout_s=opts.timeout_s)[0]
            except WorkerError as err:
                failed.append({"name": "loopback broadcast", "kind": "probe", "error": str(err)})
                log(f"  loopback broadcast: FAILED: {err}")
            else:
                report["broadcast"] = comm
                busy = "" if comm["busy"] is None else f", cores {100 * comm['busy']:.0f}% busy"
                log(f"loopback broadcast: {comm['bytes_per_s'] / 1e9:.2f} GB/s{busy}")


def _run_one(run: _Run, opts: BenchOptions, path: str, threads: int) -> list:
    if run.kind == "pyg":
        return run_workers(pyg_worker, 1, (path, opts, threads), timeout_s=opts.timeout_s)
    config = dict(model=opts.model, hidden=opts.hidden, epochs=opts.warmup + opts.epochs, overlap=run.overlap,
                  partition=run.partition, seed=opts.seed, trace_epoch=0, tile_bytes=run.tile_bytes, shm=run.shm)
    args = (path, config, opts, max(1, threads // run.nprocs), threads)
    return run_workers(mggcn_worker, run.nprocs, args, timeout_s=opts.timeout_s)


def _cpu_times() -> tuple[int, int] | None:
    """(all, idle) clock ticks of the machine so far (Linux), or None."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(ticks), ticks[3] + ticks[4]


def broadcast_worker(timeout_s: float, nbytes: int = 16 << 20, repeats: int = 20) -> dict:
    """Two ranks broadcast ``nbytes`` back and forth (gloo, as the CPU SpMM does): the bytes per second, and the
    fraction of the machine's cores busy meanwhile (None where /proc/stat is missing)."""
    import torch.distributed as dist

    init_distributed("cpu", timeout_s, threads=1)
    data = torch.ones(nbytes // 4)
    for root in (0, 1):
        dist.broadcast(data, src=root)
    dist.barrier()
    ticks, start = _cpu_times(), time.perf_counter()
    for k in range(repeats):
        dist.broadcast(data, src=k % 2)
    seconds, after = time.perf_counter() - start, _cpu_times()
    busy = None if ticks is None or after is None else 1.0 - (after[1] - ticks[1]) / max(1, after[0] - ticks[0])
    return {"bytes": nbytes, "seconds": seconds / repeats, "bytes_per_s": nbytes * repeats / seconds, "busy": busy}


def _info_worker(path: str, opts: BenchOptions) -> dict:
    return _graph_info(_read_graph(path, opts))


def _add_ratios(report: dict) -> None:
    rows = report["rows"]
    pyg = next((r for r in rows if r["kind"] == "pyg"), None)
    for r in rows:
        r["time_vs_pyg"] = r["epoch_s"] / pyg["epoch_s"] if pyg else None
        r["peak_vs_pyg"] = r["peak"] / pyg["peak"] if pyg else None
        r["net_vs_pyg"] = r["net"] / pyg["net"] if pyg else None
        r["whole_vs_pyg"] = r["whole"] / pyg["whole"] if pyg and r["whole"] and pyg["whole"] else None

    def key(r: dict) -> str:  # P, and the broadcast's transport where gloo's is compared with shared memory
        return f"{r['nprocs']} {'shm' if r['shm'] else 'gloo'}" if report["options"].get("compare_shm") else \
            str(r["nprocs"])

    on = {key(r): r for r in rows if r["kind"] == "mggcn" and r["overlap"] and r["nprocs"] > 1
          and r["partition"] == report["options"]["partitions"][0]}
    report["overlap"] = {}
    for off in rows:
        if off["kind"] != "mggcn" or off["overlap"] or key(off) not in on:
            continue
        this = on[key(off)]
        pairs = [b / a for a, b in zip(this["round_s"], off["round_s"])]  # off / on, round by round
        report["overlap"][key(off)] = {
            "on_s": this["epoch_s"], "off_s": off["epoch_s"], "speedup": off["epoch_s"] / this["epoch_s"],
            "speedup_rounds": pairs, "comm_wait_on_s": this["phases"]["comm_wait"],
            "comm_wait_off_s": off["phases"]["comm_wait"]}


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-".rjust(int(spec.split(".")[0]))
    return format(value, spec)


def _graph_line(g: dict | None) -> str:
    return "graph not made" if g is None else f"graph {g['nodes']:,} vertices, {g['nnz']:,} nonzeros of Â"


def _machine_line(m: dict | None, after: list[dict]) -> str:
    """The rates measured at the start, and their range over the configurations (those that finished)."""
    start = "machine not measured at the start" if m is None else \
        f"machine {m['bandwidth'] / 1e9:.1f} GB/s copy, {m['gemm_rate'] / 1e9:.0f} GFLOP/s GEMM at the start"
    if not after:
        return start
    bw, gemm = [r["bandwidth"] / 1e9 for r in after], [r["gemm_rate"] / 1e9 for r in after]
    return (f"{start} ({min(bw):.1f}-{max(bw):.1f} GB/s, {min(gemm):.0f}-{max(gemm):.0f} GFLOP/s after the "
            "configurations)")


def _load(report: dict, when: str) -> str:
    value = report["load_average"].get(when)
    return "-" if not value else f"{value[0]:.1f}"


def format_table(report: dict) -> str:
    """The table ``mggcn bench`` prints."""
    mib = 2**20
    head = (f"{'configuration':<34}{'epoch s':>8}{'xPyG':>6}{'floor s':>8}{'xfloor':>7}{'spmm':>7}{'wait':>7}"
            f"{'gemm':>7}{'allred':>7}{'loss':>6}{'opt':>6}{'other':>7}{'test':>6}{'peak MB':>9}{'net MB':>8}"
            f"{'xPyG':>6}{'plan MB':>9}{'net/plan':>9}{'whole MB':>9}{'xPyG':>6}{'w/(p+b)':>8}")
    lines = [head, "-" * len(head)]
    for r in report["rows"]:
        p = r["phases"]
        phases = [p.get(k) for k in ("spmm", "comm_wait", "gemm", "allreduce", "criterion", "optimizer", "other")]
        if r["kind"] == "pyg":
            phases = [None] * 5 + [p["optimizer"], None]
        lines.append(
            f"{r['name']:<34}{_fmt(r['epoch_s'], '8.3f')}{_fmt(r['time_vs_pyg'], '6.2f')}"
            f"{_fmt(r['floor']['floor_s'], '8.3f')}{_fmt(r['over_floor'], '7.2f')}"
            + "".join(_fmt(v, w) for v, w in zip(phases, ("7.3f",) * 4 + ("6.3f",) * 2 + ("7.3f",)))
            + f"{_fmt(r['test_acc'], '6.3f')}{_fmt(r['peak'] / mib, '9.0f')}{_fmt(r['net'] / mib, '8.0f')}"
            f"{_fmt(r['net_vs_pyg'], '6.2f')}{_fmt(r.get('predicted', 0) / mib or None, '9.0f')}"
            f"{_fmt(r.get('measured_over_predicted'), '9.2f')}"
            f"{_fmt(r['whole'] / mib if r.get('whole') else None, '9.0f')}{_fmt(r.get('whole_vs_pyg'), '6.2f')}"
            f"{_fmt(r.get('whole_over_plan_base'), '8.2f')}")
    if not report["rows"]:
        lines.append("(no configuration finished)")
    g, m = report.get("graph"), report.get("machine")
    lines.append("")
    lines.append(f"{_graph_line(g)}; {_machine_line(m, [r['machine'] for r in report['rows']])}, "
                 f"{report['options']['threads']} threads per configuration; load average before/after "
                 f"{_load(report, 'before')}/{_load(report, 'after')}")
    lines.append("epoch s: median after the warm-up (max over ranks), the median round; phases: medians; floor: SpMM "
                 "bytes (a row per nonzero) / bandwidth + GEMM flops / rate, with the rates measured right after the "
                 "configuration's epochs; peak: training-phase peak RSS (max over ranks); net = peak - RSS before "
                 "loading; plan: mggcn.tools.plan per rank; net/plan: max over ranks; whole: the peak RSS of the whole "
                 "process, setup included (max over ranks); w/(p+b) = whole / (plan + the interpreter's baseline)")
    base = (g or {}).get("baseline")
    if base:
        lines.append(f"interpreter baseline (a process that imported torch and mggcn): {base['import'] / mib:.0f} MB, "
                     f"{base['warm'] / mib:.0f} MB once its kernels and optimizer ran (PyTorch code loaded on first "
                     "use; whole - that, over plan: "
                     + ", ".join(f"P={r['nprocs']} {r['whole_net_over_plan']:.2f}" for r in report["rows"]
                                 if r.get("whole_net_over_plan") is not None) + ")")
    pyg = next((r for r in report["rows"] if r["kind"] == "pyg"), None)
    if pyg:
        p = pyg["phases"]
        lines.append(f"PyG phases: forward {p['forward']:.3f} s, backward {p['backward']:.3f} s, optimizer "
                     f"{p['optimizer']:.3f} s")
    for f in report.get("failed", []):
        lines.append(f"{f['name']}: FAILED: {f['error']}")
    if report.get("error"):
        lines.append(f"the bench stopped early: {report['error']}")
    for n, o in report.get("overlap", {}).items():
        pairs = o.get("speedup_rounds", [])
        spread = (f", {len(pairs)} rounds: {min(pairs):.2f}x to {max(pairs):.2f}x" if len(pairs) > 1 else "")
        lines.append(f"P={n}: overlap on {o['on_s']:.3f} s vs off {o['off_s']:.3f} s per epoch ({o['speedup']:.2f}x"
                     f"{spread}); waiting on broadcasts {o['comm_wait_on_s']:.3f} s vs {o['comm_wait_off_s']:.3f} s")
    comm = report.get("broadcast")
    if comm:
        busy = "" if comm["busy"] is None else f", the cores {100 * comm['busy']:.0f}% busy meanwhile"
        lines.append(f"loopback broadcast between 2 ranks (gloo): {comm['bytes_per_s'] / 1e9:.2f} GB/s{busy}")
    return "\n".join(lines)


def write_report(report: dict, path: str) -> None:
    from mggcn.utils.files import atomic_write

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)

    atomic_write(path, write)


def options_from(small: bool = False, saint: bool = False, **overrides) -> BenchOptions:
    """The defaults (or :data:`SMALL`, or :data:`SAINT`; ``small`` and ``saint``: the small graph in GraphSAINT's
    layout) with the given options replaced (``None`` keeps the default)."""
    base = replace(SMALL, saint_graph=saint) if small else SAINT if saint else BenchOptions()
    opts = replace(base, **{k: v for k, v in overrides.items() if v is not None})
    if opts.model not in MODELS:
        raise GraphError(f"--model must be one of {', '.join(MODELS)}, got '{opts.model}'")
    if opts.model != "gcn" and opts.pyg and len(set(opts.hidden)) > 1:
        raise GraphError(f"--model {opts.model}: PyG's GraphSAGE and GIN have one hidden width, got --hidden "
                         f"{','.join(map(str, opts.hidden))} (or give --no-pyg)")
    return opts

