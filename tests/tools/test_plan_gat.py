"""The plan of a GAT (mggcn.tools.plan with model="gat", GAT's plan hooks in mggcn.nn.gat) against the bytes a
training epoch allocates, its parameters, its exchange widths and the planner's command."""

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from mggcn.config import TrainConfig
from mggcn.distributed.context import DistContext
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.nn.gat import GAT
from mggcn.nn.models import model_type, num_parameters
from mggcn.tools.cli import main
from mggcn.tools.plan import activation_peak, plan_memory
from mggcn.training.trainer import epoch_tile_columns, epoch_width, train_shard
from mggcn.utils.errors import ConfigError
from mggcn.utils.units import format_bytes
from reference import random_graph


def _epoch_peak(shard, cfg) -> int:
    """The largest total of the bytes allocated less those freed, from the start of the second epoch to its end,
    in allocation order (the profiler's memory events, on this thread)."""
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)

    def on_epoch(record):
        if record["epoch"] == 1:
            prof.__enter__()
        if record["epoch"] == 2:
            prof.__exit__(None, None, None)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the kernels then run on this thread, where the profiler sees their allocations
    try:
        train_shard(DistContext(), shard, cfg, on_epoch)
    finally:
        torch.set_num_threads(threads)
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    totals = np.cumsum([b for _, b in events])
    assert abs(int(totals[-1])) < 1024  # the epoch frees what it allocates: its peak is a peak of activations
    return int(totals.max())


@pytest.mark.parametrize("n,e,hidden,heads,edges_matter,precision", [
    (3000, 15000, (64,), 8, True, "fp32"),  # per-edge values about half the peak
    (2000, 40000, (32, 32), 4, True, "fp32"),  # three layers, per-edge values most of it
    (4000, 4000, (256,), 4, False, "fp32"),  # per-row values most of it
    (3000, 15000, (64,), 8, True, "bf16"),  # 2-byte activations, the SDDMM in float32
    (4000, 4000, (256,), 4, False, "bf16"),
    (3000, 15000, (64,), (8, 1), True, "fp32"),  # one output head (output_heads)
])
def test_the_activation_peak_is_the_measured_peak_of_an_epoch(n, e, hidden, heads, edges_matter, precision):
    """What a GAT's epoch allocates at its peak (P = 1) equals the plan's activation peak less the loss's workspace
    vectors (allocated in the first epoch), within 10% both ways: the walk names every tensor the layers and the
    loss keep and the attention's transients; the per-edge step's temporaries are the kernels' own and shift a few
    percent with how torch lays out their intermediates."""
    heads, output_heads = heads if isinstance(heads, tuple) else (heads, None)
    graph = random_graph(n, e, features=16, classes=5, directed=True, seed=1)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, 0, "random"), 0, "gat")
    cfg = TrainConfig(model="gat", heads=heads, output_heads=output_heads, hidden=hidden, epochs=2, trace_epoch=0,
                      precision=precision)
    measured = _epoch_peak(shard, cfg)
    tiles = [tile for block in shard.adj for tile in block.tiles]
    peak, alive = activation_peak(shard.x.shape[0], [16, *hidden, 5], model="gat", heads=heads,
                                  output_heads=output_heads,
                                  block_edges=max(t._nnz() for t in tiles), columns=max(t.shape[1] for t in tiles),
                                  precision=precision)
    planned = peak - sum(v for k, v in alive.items() if k.startswith("ws:"))
    assert 0.9 * measured <= planned <= 1.1 * measured, (planned, measured, alive)
    if edges_matter:  # without the per-edge step the plan would be short
        assert planned - alive["edge step"] < 0.9 * measured


@pytest.mark.parametrize("directed", [True, False])
def test_the_kernels_kept_indices_are_the_plans(directed):
    """The row ids the attention kernels build once per block of Â and Âᵀ (one set when Â = Âᵀ) and keep."""
    from mggcn.distributed import attention

    graph = random_graph(500, 3000, features=8, classes=3, directed=directed, seed=2)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, 0, "random"), 0, "gat")
    train_shard(DistContext(), shard, TrainConfig(model="gat", heads=2, hidden=(8,), epochs=1, trace_epoch=0))
    blocks = {id(b): b for b in [*shard.adj, *shard.adj_t]}.values()
    kept = sum(c.row.nbytes for b in blocks for chunks in attention._chunk_cache.get(b, {}).values() for c in chunks)
    plan = plan_memory(graph.num_nodes, graph.num_edges, 8, 3, (8,), 1, model="gat", heads=2, rank_nnz=shard.nnz,
                       rank_nnz_t=sum(b.nnz for b in shard.adj_t), symmetric=not directed)
    assert kept == plan.parts["kernel indices"] > 0
    assert "kernel indices" not in plan_memory(graph.num_nodes, graph.num_edges, 8, 3, (8,), 1).parts


def test_the_plan_counts_a_gat_by_its_heads():
    """Parameters with heads (as the model has them), the optimizer by them, per layer the two exchanges
    [Z | e_src] and [∂out | e_dst | lse | c], the broadcast buffers of the widest and the score gradients'
    all-reduce; no Â·X (a GAT multiplies first)."""
    for dims, heads in (([24, 64, 6], 8), ([10, 12, 12, 3], 2), ([7, 4], 4)):
        model = GAT(dims, heads=heads)
        assert num_parameters(dims, "gat", heads=heads) == sum(p.numel() for p in model.parameters())
    dims, heads, n, p = [128, 64, 40], 8, 10_001, 4
    plan = plan_memory(n, 100_000, 128, 40, (64,), p, model="gat", heads=heads)
    m = -(-n // p)
    assert plan.widths == [64 + 8, 64 + 24, 8 * 40 + 8, 8 * 40 + 24]
    assert plan.parts["broadcast buffers"] == 2 * 4 * m * (8 * 40 + 24)
    assert plan.parts["optimizer"] == 5 * 4 * num_parameters(dims, "gat", heads=heads)
    assert plan.parts["A.X (cached)"] == 0 and plan.parts["features X"] == 4 * m * 128
    assert plan.comm_spmm == sum((p - 1) * m * w * 4 for w in plan.widths)
    assert plan.comm_layers == 2 * 2 * (p - 1) * m * heads * 4  # two layers' [P·m, H] ring all-reduces
    assert plan_memory(n, 100_000, 128, 40, (64,), p).comm_layers == 0  # the GCN has none
    four = plan_memory(n, 100_000, 128, 40, (64,), p, model="gat", heads=4)
    assert four.parts["activations"] < plan.parts["activations"]  # fewer heads: fewer per-head values
    with pytest.raises(ConfigError, match="takes no option heads"):
        plan_memory(n, 100_000, 128, 40, (64,), p, heads=8)
    # one output head: the last layer's exchanges, parameters and all-reduce by its one head
    one = plan_memory(n, 100_000, 128, 40, (64,), p, model="gat", heads=heads, output_heads=1)
    assert one.widths == [64 + 8, 64 + 24, 40 + 1, 40 + 3]
    assert one.comm_layers == 2 * (p - 1) * m * (heads + 1) * 4
    for dims in ([24, 64, 6], [10, 16, 16, 3]):
        assert num_parameters(dims, "gat", heads=8, output_heads=1) == sum(
            t.numel() for t in GAT(dims, heads=8, output_heads=1).parameters())


def test_the_trainer_sizes_the_exchange_by_the_models_widths():
    """The operator's buffers hold the widest exchange of the model's epoch: a GAT's backward rows, wider than
    the GCN's SpMMs of the same sizes."""
    gat = TrainConfig(model="gat", heads=4, hidden=(32,))
    assert epoch_width(gat, 16, 5) == max(model_type("gat").exchange_widths([16, 32, 5], heads=4)) == 32 + 3 * 4
    assert epoch_width(TrainConfig(model="gat", heads=4, hidden=(8,)), 16, 5) == 4 * 5 + 3 * 4  # the last layer
    assert epoch_width(TrainConfig(hidden=(32,)), 16, 5) == 5  # the GCN: Â·X cached, its one SpMM of width 5


def test_plan_command_for_gat(capsys):
    dims = [128, 256, 40]
    assert main(["plan", "--nodes", "10000", "--edges", "100000", "--features", "128", "--classes", "40",
                 "--hidden", "256", "--model", "gat", "--heads", "4", "--nprocs", "1,2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    optimizer = next(line for line in out.splitlines() if line.strip().startswith("optimizer"))
    assert "graph, gat" in out
    assert optimizer.split()[-2:] == format_bytes(5 * 4 * num_parameters(dims, "gat", heads=4)).split()
    assert "[260, 268, 164, 172]" in out  # 256 + 4, 256 + 12, 4·40 + 4, 4·40 + 12
    assert out.count("the layers' all-reduces") == 1  # at P = 2 only
    # the blocks tiled as the command tiles them at P = 2 (the CPU's SpMM kernel decides: mggcn.kernels.policy)
    tiles = epoch_tile_columns(TrainConfig(model="gat", heads=4, hidden=(256,)), 10_000, 100_000, 128, 40, 2, "cpu", 2)
    activations = plan_memory(10_000, 100_000, 128, 40, (256,), 2, model="gat", heads=4, device="cpu",
                              tile_cols=tiles).parts["activations"]
    assert format_bytes(activations) in out


def test_a_gat_keeps_no_copy_of_the_training_columns():
    """GAT's backward passes over every block of Âᵀ (the attention's gradient needs each edge), so neither the trainer
    nor the plan keeps the copy of Âᵀ's training columns the other models' last layer reads; a GCN on the same graph
    and split keeps it (training split at most half the vertices)."""
    graph = random_graph(300, 1500, features=6, classes=3, directed=True, seed=4)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, 0), 0, "gat")
    result = train_shard(DistContext(), shard, TrainConfig(model="gat", hidden=(8,), heads=2, epochs=1, trace_epoch=0,
                                                           train_columns="on"))
    assert not result.adj.has_training_columns
    gat = plan_memory(300, 1500, 6, 3, (8,), model="gat", heads=2, train=0.1)
    gcn = plan_memory(300, 1500, 6, 3, (8,), train=0.1)
    assert gat.parts.get("A^T training columns", 0) == 0 < gcn.parts["A^T training columns"]
