"""`mggcn bench` on a tiny graph (every configuration, the report's numbers consistent with each other), and the
CUDA path (skipped without GPUs)."""

import json
import statistics
from dataclasses import replace

import numpy as np
import pytest
import torch

import workers
from mggcn.config import TrainConfig
from mggcn.distributed.context import DistContext
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import local_adj
from mggcn.tools import bench
from mggcn.tools.cli import main
from mggcn.training.trainer import train_shard
from reference import random_graph

OPTIONS = bench.options_from(small=True, nprocs=(1, 2), partitions=("random-local",), epochs=2, warmup=1, repeats=2,
                             compare_tiles=(0,), compare_shm=True)


@pytest.fixture(scope="module")
def report():
    return bench.run_bench(OPTIONS, log=lambda line: None)


@pytest.mark.slow
def test_bench_runs_every_configuration(report):
    assert report["failed"] == []
    names = [r["name"] for r in report["rows"]]
    assert names == ["mggcn P=1 random-local", "mggcn P=2 random-local", "mggcn P=2 random-local no-overlap",
                     "mggcn P=2 random-local gloo", "mggcn P=2 random-local gloo no-overlap",
                     "mggcn P=1 random-local untiled", "PyG GCNConv (csr)"]
    assert report["graph"]["nodes"] == OPTIONS.nodes and report["graph"]["features"] == OPTIONS.features
    for row in report["rows"]:
        assert len(row["epochs_s"]) == OPTIONS.warmup + OPTIONS.epochs
        assert 0.0 <= row["test_acc"] <= 1.0 and np.isfinite(row["loss"])
        assert len(row["memory"]) == row["nprocs"]
        for rank in row["memory"]:
            assert rank["peak_reset"] and rank["peak"] >= rank["ready"] >= rank["base"] > 0
        # P = 2 broadcasts through shared memory unless told not to; a rank's peak leaves out the peer's outboxes
        assert row["shm"] == (row["nprocs"] == 2 and "gloo" not in row["name"])
        if row["shm"]:
            assert all(rank["peer_shm"] > 0 for rank in row["memory"])


@pytest.mark.slow
def test_report_numbers_are_consistent(report):
    rows = {r["name"]: r for r in report["rows"]}
    pyg = rows["PyG GCNConv (csr)"]
    for row in report["rows"]:
        # the mggcn configurations ran in 2 rounds, PyG in 1; a row's time is its median round
        assert len(row["round_s"]) == (2 if row["kind"] == "mggcn" else 1)
        assert row["round_s"][0] == statistics.median(row["epochs_s"][OPTIONS.warmup:])
        assert row["epoch_s"] == statistics.median(row["round_s"])
        assert row["time_vs_pyg"] == pytest.approx(row["epoch_s"] / pyg["epoch_s"])
        assert row["net_vs_pyg"] == pytest.approx(row["net"] / pyg["net"])
        assert row["over_floor"] == pytest.approx(row["epoch_s"] / row["floor"]["floor_s"])
        # the floor's rates: measured by the configuration's own processes after its epochs, with every thread
        assert row["machine"]["threads"] == report["options"]["threads"] and row["machine"]["bandwidth"] > 0
        assert row["floor"]["floor_min_s"] <= row["floor"]["floor_s"]
        assert row["peak"] == max(m["peak"] for m in row["memory"])
        assert row["net"] == max(m["peak"] - m["base"] for m in row["memory"])
    for row in [r for r in report["rows"] if r["kind"] == "mggcn"]:
        assert set(row["phases"]) == {"spmm", "comm_wait", "gemm", "allreduce", "criterion", "optimizer", "other"}
        for rank in row["memory"]:
            assert rank["measured_over_predicted"] == pytest.approx(rank["net"] / rank["predicted"])
            assert rank["predicted"] == sum(rank["plan_parts"].values())
            for part in ("adjacency A", "adjacency A^T", "features X"):  # the plan's resident parts, exactly
                assert rank["held"][part] == rank["plan_parts"][part]
    # the same model from the same weights: every configuration ends at the same loss
    losses = [r["loss"] for r in report["rows"]]
    np.testing.assert_allclose(losses, losses[0], rtol=1e-4)
    assert sorted(report["overlap"]) == ["2 gloo", "2 shm"]
    for key, name in (("2 shm", "mggcn P=2 random-local"), ("2 gloo", "mggcn P=2 random-local gloo")):
        overlap, on, off = report["overlap"][key], rows[name], rows[name + " no-overlap"]
        assert overlap["on_s"] == on["epoch_s"] and overlap["off_s"] == off["epoch_s"]
        assert overlap["speedup"] == pytest.approx(overlap["off_s"] / overlap["on_s"])
        assert overlap["speedup_rounds"] == pytest.approx([b / a for a, b in zip(on["round_s"], off["round_s"])])
    comm = report["broadcast"]  # the loopback broadcast probe of a CPU run with P > 1
    assert comm["bytes_per_s"] == pytest.approx(comm["bytes"] / comm["seconds"]) and 0.0 <= comm["busy"] <= 1.0


@pytest.mark.slow
def test_report_as_json_and_table(report, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "run_bench", lambda opts, log: report)
    out = tmp_path / "bench.json"
    assert main(["bench", "--small", "--nprocs", "1,2", "--partition", "random-local", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for row in report["rows"]:
        assert row["name"] in printed
    for part in ("P=2 shm: overlap on", "P=2 gloo: overlap on", "2 rounds", "loopback broadcast"):
        assert part in printed
    assert json.loads(out.read_text())["rows"][0]["name"] == report["rows"][0]["name"]


def test_bench_options_from_the_command_line(monkeypatch):
    seen = {}
    monkeypatch.setattr(bench, "run_bench", lambda opts, log: seen.setdefault("opts", opts) and None)
    monkeypatch.setattr(bench, "format_table", lambda report: "")
    main(["bench", "--nodes", "500", "--hidden", "8,8", "--nprocs", "1,2,4", "--partition", "random,random-local",
          "--no-pyg", "--threads", "1", "--repeats", "3", "--mmap-threshold", "0",
          "--tile-bytes", "2M", "--compare-tiles", "0,1M", "--shm", "off", "--compare-shm"])
    opts = seen["opts"]
    assert (opts.nodes, opts.hidden, opts.nprocs, opts.partitions, opts.pyg, opts.threads, opts.repeats,
            opts.mmap_threshold, opts.tile_bytes, opts.compare_tiles, opts.shm, opts.compare_shm) == (
        500, (8, 8), (1, 2, 4), ("random", "random-local"), False, 1, 3, 0, 2 << 20, (0, 1 << 20), "off", True)
    assert opts.features == bench.BenchOptions().features


# ----------------------------------------------------------------------------------------------------------------------
# CUDA (scripts/gpu_check.sh runs these on a GPU machine)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_cuda_spmm_forward_backward_equal_cpu():
    graph = random_graph(500, 4000, features=8, directed=True, seed=4)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="random"), 0, "sym")
    b, g = torch.randn(500, 7), torch.randn(500, 7)
    results = []
    for device in ("cpu", "cuda"):
        adj = local_adj(shard.adj[0].to(device), shard.adj_t[0].to(device))
        x = b.clone().to(device).requires_grad_()
        c = adj(x)
        c.backward(g.to(device))
        results.append((c.detach().cpu(), x.grad.cpu()))
    # cuSPARSE sums ~10 products per row in another order than MKL: a few ulps
    for cpu, gpu in zip(*results):
        torch.testing.assert_close(gpu, cpu, rtol=1e-5, atol=1e-5)


@cuda
def test_cuda_training_equals_cpu():
    graph = random_graph(400, 3000, features=16, classes=5, directed=False, seed=6)
    cfg = TrainConfig(hidden=(32,), epochs=3, trace_epoch=0)
    histories = []
    for device in ("cpu", "cuda"):
        shard = build_shard(graph, make_partition(graph.num_nodes, 1, 0, "random"), 0, "sym")
        histories.append(train_shard(DistContext(device=torch.device(device)), shard, cfg).history)
    losses = [[r["loss"] for r in h] for h in histories]
    # float32 GEMMs and SpMMs in other orders (cuBLAS/cuSPARSE vs MKL) over 3 Adam steps
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_cuda_two_ranks_with_nccl_equal_one_cpu_rank():
    graph = random_graph(400, 3000, features=16, classes=5, directed=True, seed=7)
    cfg = TrainConfig(hidden=(32,), epochs=3, trace_epoch=0)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, 0, "random"), 0, "sym")
    expected = [r["loss"] for r in train_shard(DistContext(), shard, cfg).history]
    for overlap in (True, False):
        results = run_workers(workers.cuda_train_worker, 2, (graph, replace(cfg, overlap=overlap)), timeout_s=300)
        for losses in results:
            np.testing.assert_allclose(losses, expected, rtol=1e-4)


@cuda
def test_cuda_bench_reports_device_memory_against_the_plan():
    opts = bench.options_from(small=True, nprocs=(1,), partitions=("random-local",), epochs=2, warmup=1,
                              device="cuda")
    report = bench.run_bench(opts, log=lambda line: None)
    mggcn_row = report["rows"][0]
    assert all("cuda_peak" in m for m in mggcn_row["memory"])
    assert mggcn_row["net"] == max(m["cuda_peak"] for m in mggcn_row["memory"])
    assert report["machine"]["device"] == "cuda"


@pytest.mark.slow
def test_gpu_check_script_rehearses_every_step_on_cpu(tmp_path):
    """scripts/gpu_check.sh with GPU_CHECK_DEVICE=cpu at a tiny size: the same plan and bench commands the GPU run
    makes, so an option renamed in the CLI breaks this test here rather than the one GPU run a session may get."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, GPU_CHECK_DEVICE="cpu", GPU_NODES="1500", GPU_DEGREE="6", GPU_FEATURES="8",
               GPU_HIDDEN="8", GPU_CLASSES="3", GPU_EPOCHS="2", OUT_DIR=str(tmp_path), PYTHON=sys.executable)
    done = subprocess.run(["bash", os.path.join(root, "scripts", "gpu_check.sh")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = (tmp_path / "gpu_check.log").read_text()
    for step in ("== CUDA tests", "== plan for the benchmark graph", "== benchmark"):
        assert step in log
    assert "4 skipped" in log  # the CUDA tests were collected (and skip without a GPU)
    report = json.loads((tmp_path / "gpu_bench.json").read_text())
    assert report["options"]["nodes"] == 1500 and report["options"]["device"] == "cpu"
    assert {r["kind"] for r in report["rows"]} == {"mggcn", "pyg"}
    assert all(r["epoch_s"] > 0 for r in report["rows"])
