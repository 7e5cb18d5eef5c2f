"""The per-rank memory formula (mggcn.tools.plan) against a hand computation, a real shard, the model's workspace and
the bytes the profiler sees allocated; what autograd keeps; the planner's command."""

import math

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from mggcn.config import TILE_BYTES, TrainConfig
from mggcn.distributed.context import DistContext
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import BroadcastBuffers, local_adj
from mggcn.kernels import tiled
from mggcn.kernels.policy import gather_kernel
from mggcn.nn.loss import MaskedCrossEntropy
from mggcn.nn.model import GCN
from mggcn.tools.cli import main
from mggcn.tools.plan import PRESETS, activation_peak, plan_memory
from mggcn.training.trainer import train_shard
from mggcn.utils.units import format_bytes, parse_bytes
from reference import random_graph


def test_formula_by_hand():
    # n = 10 at P = 2: m = 5 rows; dims 4 -> 3 -> 2; layer 0 aggregates first (4 <= 2·3) with Â·X cached,
    # layer 1 multiplies first (3 > 2): SpMM widths [2, 2]; no training rows, so the loss adds nothing
    plan = plan_memory(10, 20, 4, 2, (3,), nprocs=2, train=0.0, rank_nnz=7, rank_nnz_t=9)
    assert plan.rows == 5 and plan.widths == [2, 2]
    assert plan.parts == {
        "adjacency A": 2 * 6 * 4 + 7 * (4 + 4),  # 2 blocks of 6 int32 row pointers; 7 int32 columns + float32 values
        "adjacency A^T": 2 * 6 * 4 + 9 * (4 + 4),
        "features X": 0,  # released once Â·X is computed: it counts in the activations' peak, before the epoch
        "A.X (cached)": 5 * 4 * 4,
        "labels, splits": 5 * (8 + 3 + 8),  # int64 y, 3 bool masks, the loss's label positions (no training rows)
        "optimizer": 5 * 4 * (4 * 3 + 3 + 3 * 2 + 2),  # weights, grads, 2 Adam moments, flat all-reduce buffer
        "broadcast buffers": 2 * 5 * 2 * 4,
        # workspace: out 0 [5, 3], H·W [5, 2], the logits out 1 [5, 2], each overwritten by its gradient in backward;
        # the loss's row maxima and labels' logits (float32) and hits (bool); the block buffer of out 0's gradient,
        # σ's backward fused with the GEMM (5 rows: float32 [5, 3]); at the peak (the loss) also two float32 vectors
        # of row sums
        "activations": 4 * 5 * (3 + 2 + 2) + 5 * (4 + 4 + 1) + 4 * 5 * 3 + 2 * 4 * 5,
    }
    assert plan.total == 104 + 120 + 80 + 95 + 460 + 80 + 285
    # before the epoch: X and the two temporaries of Â·X's broadcasts, [5, 8] each, instead of the activations
    assert plan_memory(10, 20, 8, 2, (4,), nprocs=2, train=0.0, rank_nnz=7).parts["activations"] == 3 * 5 * 8 * 4
    assert plan.comm_spmm == 2 * (1 * 5 * 2 * 4)  # two SpMMs of width 2: P - 1 blocks of [5, 2] received
    assert plan.comm_once == 1 * 5 * 4 * 4
    assert plan.fits(plan.total) and not plan.fits(plan.total - 1)


@pytest.mark.parametrize("nprocs", [1, 3])
def test_resident_parts_equal_the_bytes_of_a_real_shard(nprocs):
    graph = random_graph(301, 2000, features=12, classes=5, directed=True, seed=3)
    part = make_partition(graph.num_nodes, nprocs, 0, "random")
    for rank in range(nprocs):
        shard = build_shard(graph, part, rank, "sym")
        m = shard.x.shape[0]
        plan = plan_memory(graph.num_nodes, graph.num_edges, 12, 5, (16,), nprocs, rank_nnz=shard.nnz,
                           rank_nnz_t=sum(b.nnz for b in shard.adj_t), train=float(shard.masks["train"].sum()) / m)

        def nbytes(blocks):
            return sum(t.nbytes for b in blocks for tile in b.tiles
                       for t in (tile.crow_indices(), tile.col_indices(), tile.values()))

        assert plan.rows == m
        assert plan.parts["adjacency A"] == nbytes(shard.adj)
        assert plan.parts["adjacency A^T"] == nbytes(shard.adj_t)
        assert plan.parts["features X"] == 0  # no input dropout: Â·X is cached and X released
        assert plan.parts["activations"] >= shard.x.nbytes
        assert plan_memory(graph.num_nodes, graph.num_edges, 12, 5, (16,), nprocs, input_dropout=0.5,
                           rank_nnz=shard.nnz).parts["features X"] == shard.x.nbytes
        # the loss keeps its training rows and the label positions of every row and of its training rows
        loss = MaskedCrossEntropy(shard.y, shard.masks["train"], 1)
        loss(torch.zeros(m, 5))
        assert plan.parts["labels, splits"] == (shard.y.nbytes + sum(k.nbytes for k in shard.masks.values())
                                                + loss.rows.nbytes + loss.index.nbytes + loss.train_index.nbytes)
        # at most half the vertices train: Âᵀ's blocks again, with only the training columns (block j: rank j's)
        train = graph.masks["train"]
        assert train.mean() <= 0.5
        kept = [block.keep_columns(torch.from_numpy(_in_order(train, part, j))) for j, block in enumerate(shard.adj_t)]
        with_train = plan_memory(graph.num_nodes, graph.num_edges, 12, 5, (16,), nprocs, train=float(train.mean()),
                                 rank_nnz=shard.nnz, rank_nnz_t=sum(b.nnz for b in shard.adj_t),
                                 rank_nnz_train_t=sum(b.nnz for b in kept))
        assert with_train.parts["A^T training columns"] == nbytes(kept)
        assert "A^T training columns" not in plan_memory(graph.num_nodes, graph.num_edges, 12, 5, (16,), nprocs,
                                                         train=0.6).parts
        for mode, counted in (("on", True), ("off", False)):  # --train-columns overrides the fraction
            for fraction in (0.3, 0.6):
                parts = plan_memory(graph.num_nodes, graph.num_edges, 12, 5, (16,), nprocs, train=fraction,
                                    train_columns=mode).parts
                assert ("A^T training columns" in parts) is counted


def _in_order(mask: np.ndarray, part, rank: int) -> np.ndarray:
    """``mask`` (original ids) on ``rank``'s rows in partition order, padding rows False."""
    ids = part.order[part.rows(rank)]
    return np.where(ids >= 0, mask[np.maximum(ids, 0)], False)


def _third_epoch_allocations(operator, cfg):
    """Train ``cfg`` (3 epochs) on a 3,000-vertex graph of 24 features and 6 classes with ``operator``'s adjacency:
    the graph, the shard and its rows, the result, and the third epoch's allocations (start time, bytes; frees
    negative)."""
    graph = random_graph(3000, 15000, features=24, classes=6, directed=False, seed=1)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, 0, "random"), 0, operator)
    rows = shard.x.shape[0]  # training lets go of the shard's features
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)

    def on_epoch(record):
        if record["epoch"] == 2:
            prof.__enter__()
        if record["epoch"] == 3:
            prof.__exit__(None, None, None)

    result = train_shard(DistContext(), shard, cfg, on_epoch)
    events = sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.profiler.function_events
                    if e.self_cpu_memory_usage)
    return graph, shard, rows, result, events


@pytest.mark.parametrize("kind,train_eps,hidden,order", [
    ("gcn", False, (64,), "auto"), ("gcn", False, (16, 96), "auto"),
    ("gcn", False, (8,), "auto"),  # 24 features > 2 · 8: the policy would multiply first, but Â·X is cached
    ("sage", False, (64,), "auto"), ("sage", False, (16, 96), "transform-first"),
    ("sage", False, (16, 96), "aggregate-first"), ("gin", False, (16, 96), "auto"),
    ("gin", True, (16, 96), "transform-first"), ("gin", True, (16, 96), "aggregate-first"),
    # layer 1's output gradient comes on a gradient buffer (layer 2 aggregates first)
    ("gin", False, (96, 16, 64), "auto"),
    ("sage", False, (96, 16, 64), "auto"),
    # batch norms in GIN's MLPs, after hidden layers, both: x̂ kept per norm, an eval-mode forward per epoch (its
    # accuracies)
    ("gin", "mlp", (16, 96), "auto"), ("gin", "mlp", (96, 16, 64), "transform-first"),
    ("gcn", "between", (16, 96), "auto"), ("gcn", "between", (96, 16, 64), "auto"),
    ("sage", "between", (96, 16, 64), "auto"), ("gin", "mlp+between", (96, 16, 64), "auto")])
def test_workspace_and_epoch_allocations_match_the_walk(kind, train_eps, hidden, order):
    """After training, the model's workspace holds exactly the buffers activation_peak names, its parameters are
    those num_parameters counts, and a later epoch allocates nothing of the size of an activation: no tensor larger
    than one int64 per row, and at most the walk's peak beyond the workspace (two vectors of row sums) plus small
    vectors alive at once. GraphSAGE's and GIN's layers too, whose inputs feed two branches: each layer gives its
    input one gradient, on the workspace."""
    from mggcn.nn.models import num_parameters, operator_for

    norms = train_eps if isinstance(train_eps, str) else ""
    options = {"mlp_batch_norm": True} if "mlp" in norms else {}
    options |= {"batch_norm": True} if "between" in norms else {}
    train_eps = train_eps is True
    cfg = TrainConfig(model=kind, gin_train_eps=train_eps, gin_mlp_batch_norm="mlp" in norms,
                      batch_norm="between" in norms, hidden=hidden, epochs=3, trace_epoch=0, order=order)
    graph, shard, m, result, events = _third_epoch_allocations(operator_for(kind), cfg)
    dims = [24, *hidden, 6]
    peak, alive = activation_peak(m, dims, order=order, model=kind, train_eps=train_eps, **options)
    workspace = {k[3:]: v for k, v in alive.items() if k.startswith("ws:")}
    assert result.model.workspace.sizes == workspace
    assert sum(p.numel() for p in result.model.parameters()) == num_parameters(dims, kind, train_eps, **options)
    expected = peak - sum(workspace.values())
    assert expected == 2 * 4 * m
    # the CPU gather kernel's chunk of rows in flight (the whole 3000 rows here; under 1 MiB on any graph), a
    # part of the plan beside the activations
    plan = plan_memory(graph.num_nodes, graph.num_edges, 24, 6, hidden, gather=gather_kernel("cpu"), model=kind,
                       order=order, train_eps=train_eps, **options)
    chunk = plan.parts.get("SpMM row chunk", 0)
    assert (chunk > 0) == gather_kernel("cpu") and chunk <= 4 * tiled.GATHER_CHUNK + 3 * 4 * (m + 1)
    largest = max(b for _, b in events)
    # [m, d] tensors are all on the workspace: what else an epoch allocates is a vector of the rows, the gather's
    # chunk, or of the parameters' size (Adam's step; the gradients and the epoch's few statistics in one buffer
    # for the all-reduce), each smaller than an activation here
    params = 4 * num_parameters(dims, kind, train_eps, **options) + 256
    assert 8 * m < 4 * m * min(dims) and params < 4 * m * max(hidden)  # a hidden activation would be caught
    assert largest <= max(8 * (m + 1), chunk, params)  # m + 1 int64s: one such vector an epoch makes on torch 2.4
    allocated = int(np.cumsum([b for _, b in events]).max())
    # beyond the walk: the parameters' size (as above) and a few vectors of the width of a layer or of the
    # training rows, well under 64 KiB
    assert allocated <= expected + chunk + params + 64 * 1024, (allocated, expected, chunk, alive)


def _saved_by_forward(model, x, adj, x_agg=None):
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x, adj, x_aggregated=x_agg)
    return out, saved


def _storages(tensors):
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}


@pytest.mark.parametrize("dims,cached", [([8, 16, 3], True), ([8, 16, 3], False), ([40, 6, 12, 5], False),
                                         ([8, 16, 24, 3], True)])
def test_autograd_keeps_only_what_backward_reads(dims, cached):
    """Saved for backward: the parameters, each layer's GEMM input (X or Â·X for the first layer, σ's output
    after it, and Â·H for an aggregate-first layer) — σ's output being the same tensor for σ and the next GEMM.
    Nothing of the SpMM, nothing E-sized."""
    graph = random_graph(50, 300, features=dims[0], classes=dims[-1], seed=2)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, "sym")
    adj, x = local_adj(shard.adj[0], shard.adj_t[0]), shard.x
    model = GCN(dims, seed=1)
    x_agg = adj(x) if cached else None
    out, saved = _saved_by_forward(model, x, adj, x_agg)
    params = {p.data_ptr() for p in model.parameters()}
    activations = [t for t in saved if t.data_ptr() not in params]
    m = x.shape[0]
    expected = {}  # storage -> bytes of what the plan calls the kept activations
    for i, conv in enumerate(model.convs):
        if i > 0:
            expected[f"out {i - 1}"] = 4 * m * dims[i]
        if conv.aggregate_first and not (i == 0 and cached):
            expected[f"A.H {i}"] = 4 * m * dims[i]
    first_input = x_agg if cached else (None if model.convs[0].aggregate_first else x)
    kept = _storages(activations)
    if first_input is not None:  # resident before the forward: not an activation of the plan
        assert kept.pop(first_input.untyped_storage().data_ptr()) == first_input.untyped_storage().nbytes()
    assert sorted(kept.values()) == sorted(expected.values())
    assert all(t.dim() == 2 and t.shape[0] == m for t in activations)  # rows × width: nothing per edge
    out.sum().backward()  # and backward works from exactly these


def test_broadcast_buffers_keep_their_size_for_a_wider_one_off_spmm():
    bufs = BroadcastBuffers(rows=10, width=4, dtype=torch.float32, device=torch.device("cpu"))
    wide = bufs.view(0, 9)
    assert wide.shape == (10, 9) and wide.data_ptr() != bufs.view(0, 4).data_ptr()
    assert bufs.nbytes == 2 * 10 * 4 * 4


def test_parse_bytes_and_presets():
    assert parse_bytes("80G") == 80 * 2**30 and parse_bytes("512M") == 512 * 2**20 and parse_bytes("1e9") == 10**9
    with pytest.raises(ValueError, match="expected a size"):
        parse_bytes("eighty")
    products = PRESETS["products"]
    assert (products.nodes, products.edges) == (2_449_029, 123_718_280)
    big = PRESETS["papers100M"]
    one = plan_memory(big.nodes, big.edges, big.features, big.classes, (128, 128), 1, train=big.train)
    eight = plan_memory(big.nodes, big.edges, big.features, big.classes, (128, 128), 8, train=big.train)
    assert not one.fits(141 * 2**30)  # papers100M does not fit one H200 ...
    assert one.parts["adjacency A"] > 8 * big.edges  # ... whose blocks need int64 indices (> 2^31 nonzeros)
    assert eight.total < one.total / 6  # ... and splits over 8
    proteins = PRESETS["proteins"]  # the seed's largest single-GPU shape: within 64 GB at hidden 128,128
    plan = plan_memory(proteins.nodes, proteins.edges, proteins.features, proteins.classes, (128, 128), 1,
                       train=proteins.train)
    assert plan.fits(64 * 2**30) and plan.parts["adjacency A"] >= 8 * proteins.edges  # int64 indptr, int32 indices


def test_plan_command(capsys):
    assert main(["plan", "--dataset", "reddit", "--nprocs", "1,4", "--memory", "16G"]) == 0
    out = capsys.readouterr().out
    assert out.count("per-rank memory:") == 2 and "fits in 16.00 GiB" in out and "114,615,892" in out
    assert main(["plan", "--nodes", "1000", "--edges", "5000", "--features", "8", "--classes", "3",
                 "--memory", "1K"]) == 1  # a script tells the answer by the status
    assert "does NOT fit" in capsys.readouterr().out
    assert main(["plan", "--nodes", "1000"]) == 2
    assert "--edges" in capsys.readouterr().err
    assert math.isfinite(plan_memory(1000, 5000, 8, 3, (4,), 2).total)


def test_a_cpu_plan_fits_with_the_processes_runtime_and_says_no_by_its_status(capsys):
    """On a CPU the verdict counts every rank's plan and what Python and torch hold in the job's processes (a job
    whose plans alone fit a cap was killed in it); the status is 1 when one of the P given does not fit."""
    from mggcn.tools.plan import CPU_RUNTIME, CPU_RUNTIME_PER_RANK, format_plan, plan_need

    plan = plan_memory(100000, 2000000, 64, 10, (128,), 2, device="cpu")
    need = 2 * plan.total + CPU_RUNTIME + CPU_RUNTIME_PER_RANK
    assert plan_need(plan, "cpu") == need and plan_need(plan, "cuda") == plan.total
    assert plan.fits(need, "cpu") and not plan.fits(need - 1, "cpu") and plan.fits(plan.total, "cuda")
    assert format_plan(plan, "g", need, "cpu").splitlines()[-1] == (
        f"fits in {format_bytes(need)} of the machine (2 rank(s) × {format_bytes(plan.total)} + "
        f"{format_bytes(CPU_RUNTIME + CPU_RUNTIME_PER_RANK)} for Python and torch = {format_bytes(need)}, 100% used)")
    assert format_plan(plan, "g", need - 1, "cpu").splitlines()[-1].startswith("does NOT fit")
    # the command: P = 1 plans 112 MiB, P = 2 67 MiB a rank; with Python and torch 432 MiB and 582 MiB
    args = ["plan", "--nodes", "100000", "--edges", "2000000", "--features", "64", "--classes", "10", "--device", "cpu"]
    assert main([*args, "--memory", "1G", "--nprocs", "1,2"]) == 0
    assert main([*args, "--memory", "200M", "--nprocs", "1"]) == 1  # the plan alone would fit
    assert main([*args, "--memory", "500M", "--nprocs", "1,2"]) == 1  # P = 2 does not fit
    verdicts = [line.split(" in ")[0] for line in capsys.readouterr().out.splitlines() if "of the machine" in line]
    assert verdicts == ["fits", "fits", "does NOT fit", "fits", "does NOT fit"]


def test_symmetric_shard_stores_no_transpose_and_the_plan_says_so():
    graph = random_graph(301, 2000, features=12, classes=5, directed=False, seed=3)
    shard = build_shard(graph, make_partition(graph.num_nodes, 2, 0, "random"), 0, "sym")
    plan = plan_memory(graph.num_nodes, graph.num_edges, 12, 5, (16,), 2, rank_nnz=shard.nnz, symmetric=True)
    assert all(a is t for a, t in zip(shard.adj, shard.adj_t))
    assert plan.parts["adjacency A^T"] == 0
    assert plan_memory(graph.num_nodes, graph.num_edges, 12, 5, (16,), 2).parts["adjacency A^T"] > 0


def test_plan_command_on_cpu_counts_the_column_tiles(capsys):
    def adjacency(nodes, edges, *extra):
        sizes = ["--nodes", str(nodes), "--edges", str(edges), "--features", "128", "--classes", "40"]
        assert main(["plan", *sizes, *extra]) == 0
        lines = capsys.readouterr().out.splitlines()
        line = next(t for t in lines if t.strip().startswith("adjacency A "))
        return line.split()[-2:], any(t.strip().startswith("SpMM row chunk") for t in lines)

    # 400k rows, 101 nonzeros per row, widest SpMM 40 (64 MB of B, past GATHER_BYTES): tiles of TILE_BYTES / (4 * 40)
    # columns, 16 per block
    n, e = 400_000, 40_000_000
    tiles = -(-n // (TILE_BYTES // 160))
    expected = plan_memory(n, e, 128, 40, (128,), 1, tile_cols=TILE_BYTES // 160).parts["adjacency A"]
    assert expected - plan_memory(n, e, 128, 40, (128,), 1).parts["adjacency A"] == (tiles - 1) * (n + 1) * 4
    assert adjacency(n, e, "--device", "cpu") == (format_bytes(expected).split(), False)
    assert adjacency(n, e)[0] == adjacency(n, e, "--device", "cpu", "--tile-bytes", "0")[0]  # GPUs: whole blocks
    # 100k rows at width 40 (16 MB of B): whole blocks for the gather kernel where it runs, one chunk of rows in flight
    whole = plan_memory(100_000, 5_000_000, 128, 40, (128,), 1).parts["adjacency A"]
    gathers = gather_kernel("cpu")
    assert adjacency(100_000, 5_000_000, "--device", "cpu")[1] == gathers
    if gathers:
        assert adjacency(100_000, 5_000_000, "--device", "cpu")[0] == format_bytes(whole).split()


def test_plan_per_model(capsys):
    """GraphSAGE doubles the GCN's weights, GIN adds its MLP's second linear; both aggregate without self loops;
    `mggcn plan --model` prints each."""
    from mggcn.nn.models import num_parameters

    dims = [128, 256, 40]
    gcn, sage, gin = (plan_memory(10_000, 100_000, 128, 40, (256,), 2, model=m) for m in ("gcn", "sage", "gin"))
    assert num_parameters(dims, "gcn") == 128 * 256 + 256 + 256 * 40 + 40
    assert num_parameters(dims, "sage") == 2 * (128 * 256 + 256 * 40) + 256 + 40
    assert num_parameters(dims, "gin", train_eps=True) == 128 * 256 + 256 * 256 + 2 * 256 + 256 * 40 + 40 * 40 + 80 + 2
    for plan, kind in ((gcn, "gcn"), (sage, "sage"), (gin, "gin")):
        assert plan.parts["optimizer"] == 5 * 4 * num_parameters(dims, kind)
    assert sage.parts["adjacency A"] < gcn.parts["adjacency A"]  # no self loops: 10,000 nonzeros fewer
    # GraphSAGE's root term H·W_rᵀ is added by its GEMM into the layer's output: the GCN's buffers
    assert sage.parts["activations"] == gcn.parts["activations"]
    # X stays where an epoch reads it beside Â·X: GraphSAGE's root term, GIN's local term with a learnable ε
    gin_eps = plan_memory(10_000, 100_000, 128, 40, (256,), 2, model="gin", train_eps=True)
    assert gcn.parts["features X"] == gin.parts["features X"] == 0
    assert sage.parts["features X"] == gin_eps.parts["features X"] == 4 * 5_000 * 128
    assert main(["plan", "--nodes", "10000", "--edges", "100000", "--features", "128", "--classes", "40",
                 "--hidden", "256", "--model", "gin"]) == 0
    out = capsys.readouterr().out
    optimizer = next(line for line in out.splitlines() if line.strip().startswith("optimizer"))
    assert "graph, gin" in out and optimizer.split()[-2:] == format_bytes(5 * 4 * num_parameters(dims, "gin")).split()


def test_a_gpu_plan_counts_the_gpu_block_of_sigmas_backward():
    """On a GPU σ's backward runs blocks of MASK_CHUNK_GPU elements (few large kernels), on a CPU of MASK_CHUNK (in
    cache); the first GEMM, σ and the second GEMM run whole on a GPU (blocks would only add kernels)."""
    from mggcn.kernels.policy import MASK_CHUNK, MASK_CHUNK_GPU, chain_rows, mask_chunk_rows

    rows = 10**6
    assert mask_chunk_rows(rows, 128, "cuda") == MASK_CHUNK_GPU // 128 < rows
    assert mask_chunk_rows(rows, 128) == mask_chunk_rows(rows, 128, torch.device("cpu")) == MASK_CHUNK // 128
    assert chain_rows(rows, 128, "cuda") == rows > chain_rows(rows, 128, "cpu")
    cpu, gpu = (plan_memory(rows, 10**7, 128, 40, (128,), 1, device=d) for d in ("cpu", "cuda"))
    assert gpu.parts["activations"] - cpu.parts["activations"] == 4 * (MASK_CHUNK_GPU - MASK_CHUNK)


@pytest.mark.parametrize("device, nprocs", [("cpu", 1), ("cpu", 3), ("cuda", 3)])
def test_cpu_ranks_are_told_the_peers_outboxes_their_resident_memory_counts(capsys, device, nprocs):
    """CPU ranks of one host broadcast through shared memory: each maps the other P - 1 ranks' outboxes, which its
    resident size (top, VmHWM) counts beside its own memory. The plan says so under its total on the CPU at P > 1,
    (P - 1) times its own broadcast buffers, and adds nothing to the total."""
    assert main(["plan", "--nodes", "3000", "--edges", "30000", "--features", "64", "--classes", "8", "--hidden",
                 "256,256", "--nprocs", str(nprocs), "--device", device]) == 0
    lines = capsys.readouterr().out.splitlines()
    own = next(parse_bytes("".join(line.split()[2:4])) for line in lines if line.startswith("  broadcast buffers"))
    peers = [line for line in lines if line.startswith("  + peers outboxes")]
    if device == "cpu" and nprocs > 1:
        assert len(peers) == 1, lines
        shown = parse_bytes("".join(peers[0].split()[3:5]))  # both printed to 3 digits: 2 × (x ± 0.5%)
        assert abs(shown - (nprocs - 1) * own) <= 0.01 * shown, (peers, own)
        assert lines.index(peers[0]) == next(i for i, line in enumerate(lines) if line.startswith("  total")) + 1
    else:
        assert peers == []


@pytest.mark.parametrize("model, options", [
    ("gcn", {"dropout": 0.5}), ("gcn", {"batch_norm": True}), ("gcn", {"input_dropout": 0.1}),
    ("gcn", {"input_dropout": 0.1, "order": "transform-first"}), ("gcn", {}), ("sage", {"dropout": 0.3}),
    ("gin", {"gin_mlp_batch_norm": True}), ("gat", {"heads": 2, "attention_dropout": 0.3}), ("gat", {"heads": 2}),
])
def test_the_planned_exchanges_are_those_an_epoch_receives(model, options, tmp_path):
    """A model that evaluates otherwise than it trains (dropout, batch norm, GAT's attention dropout) runs a forward
    more per epoch to measure its accuracies: the plan counts its exchanges too (rank 0 of 2, 300 rows each)."""
    import json

    metrics = tmp_path / "m.jsonl"
    assert main(["train", "synthetic:n=600,features=24", "--nprocs", "2", "--threads", "1", "--hidden", "16",
                 "--epochs", "2", "--model", model, "--shm", "off", "--quiet", "--metrics", str(metrics),
                 *[f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}") for k, v in options.items()]]) == 0
    received = json.loads(metrics.read_text().splitlines()[-1])["recv_bytes"]
    mine = {k: v for k, v in options.items() if k not in ("gin_mlp_batch_norm", "heads", "attention_dropout",
                                                           "dropout", "input_dropout", "order")}
    model_options = {"heads": options.get("heads", 8), "attention_dropout": options.get("attention_dropout", 0.0)} \
        if model == "gat" else {"mlp_batch_norm": options.get("gin_mlp_batch_norm", False)} if model == "gin" else {}
    plan = plan_memory(600, 12000, 24, 10, (16,), nprocs=2, model=model, dropout=options.get("dropout", 0.0),
                       input_dropout=options.get("input_dropout", 0.0), order=options.get("order", "auto"),
                       **mine, **model_options)
    assert plan.comm_spmm == received, (plan.comm_spmm, received)
