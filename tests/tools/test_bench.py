"""`mggcn bench` on a tiny graph (every configuration, the report's numbers consistent with each other), and the
CUDA path (skipped without GPUs)."""

import json
import statistics
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

import workers
from mggcn.config import TrainConfig
from mggcn.distributed.context import DistContext
from mggcn.distributed.launch import WorkerError, run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import local_adj
from mggcn.nn.models import operator_for
from mggcn.tools import bench
from mggcn.tools.bench import run as bench_run
from mggcn.tools.cli import main
from mggcn.training.trainer import train_shard
from mggcn.utils.errors import ConfigError
from reference import random_graph

MGGCN_SETUP = ["dataset", "partition", "shard", "release", "device", "model", "A.X"]  # as mggcn train's ranks
PYG_SETUP = ["read", "edge_index", "gcn_norm", "csr", "device", "model", "optimizer"]
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
    for row in report["rows"]:  # the setup: the time to the first epoch, by phase (the slowest rank's)
        assert not row["oom"] and row["setup_s"] > 0
        assert list(row["setup_phases"]) == (MGGCN_SETUP if row["kind"] == "mggcn" else PYG_SETUP)
        assert row["setup_s"] == pytest.approx(sum(row["setup_phases"].values()), rel=0.5)
        assert row["setup_vs_pyg"] == pytest.approx(row["setup_s"] / pyg["setup_s"])
    for row in [r for r in report["rows"] if r["kind"] == "mggcn"]:
        assert set(row["phases"]) == {"spmm", "comm_wait", "gemm", "allreduce", "criterion", "optimizer", "other"}
        for rank in row["memory"]:
            assert rank["measured_over_predicted"] == pytest.approx(rank["net"] / rank["predicted"])
            assert rank["predicted"] == sum(rank["plan_parts"].values())
            for part in ("adjacency A", "adjacency A^T"):  # the plan's resident parts, exactly
                assert rank["held"][part] == rank["plan_parts"][part]
            # this model caches Â·X, so X is released before the first epoch: the plan counts it in the activations
            assert rank["plan_parts"]["features X"] == 0
            assert rank["plan_parts"]["activations"] >= rank["held"]["features X"] > 0
            # the whole process: setup included, against the plan plus the interpreter measured in the same run
            assert rank["whole"] == max(rank["setup_peak"], rank["peak"])
            base = report["graph"]["baseline"]
            assert rank["whole_over_plan_base"] == pytest.approx(rank["whole"] / (rank["predicted"] + base["import"]))
        assert row["whole"] == max(m["whole"] for m in row["memory"])
        assert row["whole_vs_pyg"] == pytest.approx(row["whole"] / pyg["whole"])
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
    made_by = []

    def run_bench(opts, log, out=None, command=None):  # run_bench writes the report to --out
        made_by.append(command)
        bench.write_report(report, out)
        return report

    monkeypatch.setattr(bench, "run_bench", run_bench)
    out = tmp_path / "bench.json"
    assert main(["bench", "--small", "--nprocs", "1,2", "--partition", "random-local", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for row in report["rows"]:
        assert row["name"] in printed
    for part in ("P=2 shm: overlap on", "P=2 gloo: overlap on", "2 rounds", "loopback broadcast", "setup s",
                 "PyG GCNConv (csr): setup "):
        assert part in printed
    assert json.loads(out.read_text())["rows"][0]["name"] == report["rows"][0]["name"]
    assert made_by == [f"mggcn bench --small --nprocs 1,2 --partition random-local --out {out}"]
    assert report["date"] and report["host"]["torch"] == torch.__version__ and report["host"]["cores"] >= 1


@pytest.mark.slow
def test_saint_graph_bench_reports_the_whole_process(tmp_path, capsys):
    """`mggcn bench --saint-graph` on the small graph (~30 s): the GraphSAINT directory written and prepared, mggcn
    trained from the prepared directory (P = 1, 2) and from the SAINT files (P = 1), PyG from the files; the report
    and the table carry the whole-process peak beside the training peak, against PyG and the plan plus baseline."""
    out = tmp_path / "bench.json"
    assert main(["bench", "--small", "--saint-graph", "--nprocs", "1,2", "--partition", "random", "--epochs", "1",
                 "--warmup", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["failed"] == [] and report["complete"]
    assert [r["name"] for r in report["rows"]] == ["mggcn P=1 random", "mggcn P=1 random, SAINT files",
                                                   "mggcn P=2 random", "PyG GCNConv (csr)"]
    base = report["graph"]["baseline"]
    assert base["warm"] >= base["import"] > 0
    pyg = report["rows"][-1]
    assert pyg["whole"] >= pyg["peak"] > 0
    for row in report["rows"][:-1]:
        for rank in row["memory"]:
            assert rank["whole"] == max(rank["setup_peak"], rank["peak"]) > rank["base"] > 0
            assert rank["whole_over_plan_base"] == pytest.approx(rank["whole"] / (rank["predicted"] + base["import"]))
        assert row["whole"] == max(m["whole"] for m in row["memory"])
        assert row["whole_vs_pyg"] == pytest.approx(row["whole"] / pyg["whole"])
        assert row["name"] in printed
    for column in ("whole MiB", "w/(p+b)", "interpreter baseline"):
        assert column in printed


def test_bench_writes_its_report_before_the_table_when_every_configuration_fails(tmp_path, monkeypatch, capsys):
    # as on a GPU where every configuration hits a CUDA error: no rates to take a min or max of
    def fail(run, *args):
        raise WorkerError(0, f"failed: {run.name}: CUDA error: an illegal memory access was encountered")

    out, seen = tmp_path / "bench.json", {}

    def table(report):  # the JSON is on disk before the table is printed
        seen["json"] = json.loads(out.read_text())
        return real_table(report)

    real_table = bench.format_table
    monkeypatch.setattr(bench_run, "run_one", fail)
    monkeypatch.setattr(bench, "format_table", table)
    assert main(["bench", "--small", "--nprocs", "1", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    names = ["mggcn P=1 random-local", "mggcn P=1 random", "PyG GCNConv (csr)"]
    for report in (seen["json"], json.loads(out.read_text())):
        assert report["rows"] == [] and report["complete"] and report["graph"]["nodes"] == bench.SMALL.nodes
        assert [f["name"] for f in report["failed"]] == names
        assert all(f["error"] == f"rank 0 failed: {f['name']}: CUDA error: an illegal memory access was encountered"
                   for f in report["failed"])
    assert "(no configuration finished)" in captured.out and "PyG GCNConv (csr): FAILED: rank 0" in captured.out
    assert captured.err.strip() == "mggcn bench: failed: mggcn P=1 random-local, mggcn P=1 random"


def test_bench_report_keeps_what_finished_when_it_is_stopped(tmp_path, monkeypatch):
    calls = []
    real_run_one = bench_run.run_one

    def stop_at_the_second(run, *args):
        calls.append(run.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_run_one(run, *args)

    monkeypatch.setattr(bench_run, "run_one", stop_at_the_second)
    out = tmp_path / "bench.json"
    opts = bench.options_from(small=True, nprocs=(1,), partitions=("random-local",), epochs=1, warmup=1)
    with pytest.raises(KeyboardInterrupt):
        bench.run_bench(opts, log=lambda line: None, out=str(out))
    report = json.loads(out.read_text())
    assert [r["name"] for r in report["rows"]] == calls[:1] == ["mggcn P=1 random-local"]
    assert report["error"] == "KeyboardInterrupt: " and not report["complete"] and report["failed"] == []


def test_bench_without_a_graph_is_a_one_line_error_and_a_report(tmp_path, monkeypatch, capsys):
    def no_graph(fn, *args, **kwargs):
        raise WorkerError(0, f"died in {fn.__name__}: out of memory")

    monkeypatch.setattr(bench_run, "run_workers", no_graph)
    out = tmp_path / "bench.json"
    assert main(["bench", "--small", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"mggcn bench: error: rank 0 died in generate_worker: out of memory (the report so far: {out})\n"
    report = json.loads(out.read_text())
    assert report["graph"] is None and report["rows"] == [] and not report["complete"]
    assert report["error"] == "WorkerError: rank 0 died in generate_worker: out of memory"
    assert "graph not made" in bench.format_table(report)


def test_bench_options_from_the_command_line(monkeypatch):
    seen = {}
    monkeypatch.setattr(bench, "run_bench",
                        lambda opts, log, out=None, command=None:
                        seen.setdefault("opts", opts) and {"rows": [], "failed": []})
    monkeypatch.setattr(bench, "format_table", lambda report: "")
    main(["bench", "--nodes", "500", "--hidden", "8,8", "--nprocs", "1,2,4", "--partition", "random,random-local",
          "--no-pyg", "--threads", "1", "--repeats", "3", "--repeat-pyg", "--mmap-threshold", "0",
          "--tile-bytes", "2M", "--compare-tiles", "0,1M", "--shm", "off", "--compare-shm"])
    opts = seen["opts"]
    assert (opts.nodes, opts.hidden, opts.nprocs, opts.partitions, opts.pyg, opts.threads, opts.repeats,
            opts.mmap_threshold, opts.tile_bytes, opts.compare_tiles, opts.shm, opts.compare_shm) == (
        500, (8, 8), (1, 2, 4), ("random", "random-local"), False, 1, 3, 0, 2 << 20, (0, 1 << 20), "off", True)
    assert opts.features == bench.BenchOptions().features and opts.repeat_pyg
    # a configuration listed twice runs once (its rows would have the same name); hidden sizes repeat by design
    seen.clear()
    main(["bench", "--nodes", "500", "--hidden", "8,8", "--nprocs", "1,2,1", "--partition", "random,random",
          "--no-pyg", "--compare-tiles", "0,0", "--compare-precision", "bf16,bf16"])
    opts = seen["opts"]
    assert (opts.hidden, opts.nprocs, opts.partitions, opts.compare_tiles, opts.compare_precision) == (
        (8, 8), (1, 2), ("random",), (0,), ("bf16",))


def test_saint_graph_repeats_pyg_in_every_round():
    """--saint-graph's ratios to PyG: 3 rounds, PyG's epoch measured in each as mggcn's are (the median round of
    each), so that a slow spell of the machine does not fall on one side only; elsewhere PyG runs once."""
    saint, plain = bench.options_from(saint=True), bench.options_from(repeats=3)
    assert saint.repeats == 3 and saint.repeat_pyg and not plain.repeat_pyg
    for opts, pyg_rounds in ((saint, 3), (plain, 1)):
        rounds = bench_run.rounds(bench_run.configurations(opts, gpus=0), opts)
        assert len(rounds) == 3 and all(any(r.kind == "mggcn" for r in todo) for todo in rounds)
        assert sum(r.kind == "pyg" for todo in rounds for r in todo) == pyg_rounds


def test_bench_graph_is_generated_once_and_cached_as_a_prepared_directory(tmp_path, capsys):
    """--graph-cache DIR: the generator's graph written as a prepared directory (CSR, features, labels, split; the
    clustered ids), its generation time and rate reported; reused by the next run; refused for other options."""
    from mggcn.data.generators.community import community_generated
    from mggcn.data.prepared.reader import PreparedDataset

    cache, out = tmp_path / "graph", tmp_path / "bench.json"
    args = ["bench", "--small", "--nprocs", "1", "--partition", "random-local", "--epochs", "1", "--warmup", "1",
            "--graph-cache", str(cache), "--out", str(out)]
    assert main(args) == 0
    graph = json.loads(out.read_text())["graph"]
    assert not graph["cached"] and graph["generate_s"] > 0
    assert graph["nnz_per_s"] == pytest.approx(graph["nnz"] / graph["generate_s"])
    expected = community_generated(3000, 4, 32, 10.0, seed=0, clustered=True)
    dataset = PreparedDataset(cache)
    np.testing.assert_array_equal(dataset.arrays["in_indptr"], expected.csr.indptr)
    np.testing.assert_array_equal(dataset.arrays["in_indices"], expected.csr.indices)
    np.testing.assert_array_equal(dataset.arrays["features"], expected.x)
    np.testing.assert_array_equal(dataset.arrays["labels"], expected.y)
    assert graph["nnz"] == expected.csr.nnz + 3000 == 3000 * 10 + 3000  # nonzeros of A = nodes · degree, plus I
    assert "generated in" in capsys.readouterr().out
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert report["graph"]["cached"] and report["graph"]["generate_s"] is None and report["rows"][0]["setup_s"] > 0
    assert f"reused {cache}" in capsys.readouterr().out
    assert main(args + ["--nodes", "4000"]) == 2
    assert capsys.readouterr().err.startswith(f"mggcn bench: error: --graph-cache: {cache} holds the graph of nodes "
                                              "3000")


def test_pyg_edge_index_from_the_csr(monkeypatch):
    """PyG's edge_index, formed from the prepared CSR in blocks of rows: the generator's own edge list."""
    from mggcn.data.generators.community import community_generated
    from mggcn.tools.bench import pyg

    monkeypatch.setattr(pyg, "_TARGET_ROWS", 7)  # several blocks, the last one short
    generated = community_generated(50, 3, 4, 6.0, seed=1)
    edge_index = pyg._edge_index(generated.csr.indptr, generated.csr.indices)
    assert edge_index.dtype == torch.int64
    np.testing.assert_array_equal(edge_index.numpy(), generated.to_graph().edge_index)


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
        # into outputs that hold NaN (as a reused workspace buffer may): the first product writes with beta = 0
        filled = [adj.run(v.to(device), transpose=t, out=torch.full((500, 7), float("nan"), device=device))
                  for v, t in ((b, False), (g, True))]
        results.append((c.detach().cpu(), x.grad.cpu(), *(f.cpu() for f in filled)))
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


def _losses(device: str, model: str, precision: str, activation: str = "relu") -> list[float]:
    """Three epochs' losses of ``model`` in ``precision`` at P = 1 on ``device`` (a directed graph)."""
    graph = random_graph(400, 3000, features=16, classes=5, directed=True, seed=6)
    cfg = TrainConfig(model=model, hidden=(32,), epochs=3, trace_epoch=0, precision=precision,
                      activation=activation, **({"heads": 4} if model == "gat" else {}))
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, 0, "random"), 0, operator_for(model, cfg.norm))
    return [r["loss"] for r in train_shard(DistContext(device=torch.device(device)), shard, cfg).history]


@cuda
@pytest.mark.parametrize("model, precision, activation", [
    ("gat", "fp32", "relu"), ("gcn", "bf16", "relu"), ("sage", "bf16", "relu"), ("gat", "bf16", "relu"),
    ("gcn", "fp32", "elu"), ("gin", "fp32", "elu")])
def test_cuda_models_and_bf16_train_as_on_cpu(model, precision, activation):
    """The GAT's attention kernels (sampled_addmm, segment sums, weighted embedding_bag), the bf16 SpMMs and ELU's
    backward from its output (between layers, in GIN's MLP) on CUDA: the CPU's losses. fp32: other summation orders
    over 3 Adam steps; bf16: values rounded to 8 bits of mantissa in another order on each side, the loss within 2%
    (the CPU's bf16 follows fp32 within 5%: test_precision.py)."""
    np.testing.assert_allclose(_losses("cuda", model, precision, activation),
                               _losses("cpu", model, precision, activation), rtol=1e-4 if precision == "fp32" else 2e-2)


@cuda
def test_cuda_gpu_memory_cap_makes_out_of_memory_rows(tmp_path, capsys):
    """--gpu-memory 1M: every configuration runs out of memory on its GPU (torch.cuda.OutOfMemoryError), each is a
    row that says so, and the bench ends complete; a cap larger than the GPU is refused before the graph is made."""
    out = tmp_path / "bench.json"
    assert main(["bench", "--small", "--device", "cuda", "--nprocs", "1", "--partition", "random-local",
                 "--gpu-memory", "1M", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["complete"] and report["failed"] == [] and len(report["rows"]) == 2
    for row in report["rows"]:
        assert row["oom"] and "OutOfMemoryError" in row["error"] and row["epoch_s"] is None
    printed = capsys.readouterr().out
    assert printed.count("out of memory") >= 2
    assert main(["bench", "--small", "--device", "cuda", "--gpu-memory", "1000T"]) == 2
    assert "--gpu-memory 1000.00 TiB is more than the GPU's" in capsys.readouterr().err


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
    # under a cap that every configuration fits in (the cap's path taken, nothing running out)
    opts = bench.options_from(small=True, nprocs=(1,), partitions=("random-local",), epochs=2, warmup=1,
                              device="cuda", gpu_memory="8G")
    report = bench.run_bench(opts, log=lambda line: None)
    assert report["gpu_memory"]["cap"] == 8 << 30 and report["failed"] == []
    assert report["host"]["gpus"] == [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    assert [(r["name"], r["oom"]) for r in report["rows"]] == [("mggcn P=1 random-local", False),
                                                               ("PyG GCNConv (csr)", False)]
    mggcn_row = report["rows"][0]
    assert all("cuda_peak" in m for m in mggcn_row["memory"])
    assert mggcn_row["net"] == max(m["cuda_peak"] for m in mggcn_row["memory"])
    assert report["machine"]["device"] == "cuda"


@pytest.mark.slow
def test_gpu_check_script_rehearses_every_step_on_cpu(tmp_path):
    """scripts/gpu_check.sh with GPU_CHECK_DEVICE=cpu at a tiny size: the same import check, plan and bench commands
    the GPU run makes, so an option renamed in the CLI breaks this test here rather than the one GPU run a session
    may get. One CUDA test fails on purpose: the later steps still run, the log, the step table and the bench's
    JSON and table are written, and the exit status names the failed step (bit 2: the CUDA tests)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    failing = tmp_path / "tests" / "test_cuda_fails_on_purpose.py"
    failing.parent.mkdir()
    failing.write_text("def test_cuda_step_fails():\n    assert False, 'a CUDA test that fails'\n")
    out = tmp_path / "out"
    from test_gpu_check import TINY

    env = dict(os.environ, **TINY, GPU_CHECK_BUDGET="3000", OUT_DIR=str(out), PYTHON=sys.executable,
               GPU_CHECK_TESTS=f"tests/tools/test_bench.py tests/distributed/test_spmm.py {failing}")
    done = subprocess.run(["bash", os.path.join(root, "scripts", "gpu_check.sh")], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.rstrip().splitlines()[-1] == "gpu_check: failed steps: CUDA tests (exit 1); exit status 2"
    log = (out / "gpu_check.log").read_text()
    steps = [line for line in log.splitlines() if line.startswith("== ")]
    assert steps == ["== imports", "== CUDA tests", "== plan", "== bench", "== shared GPU", "== models",
                     "== reproducible"]
    imports = log[log.index("== imports"): log.index("== CUDA tests")]
    for module in ("torch", "numpy", "scipy", "torch_geometric", "pytest", "mggcn.tools.bench"):
        assert f"\n{module} " in imports or f"\n{module}\n" in imports, imports
    assert os.path.join(root, "src", "mggcn") in imports  # this checkout's mggcn, not an installed one
    assert "13 skipped" in log and "1 failed" in log  # the CUDA tests were collected (and skip without a GPU)
    table = json.loads((out / "gpu_check.json").read_text())
    assert [(s["step"], s["exit"]) for s in table["steps"]] == [("imports", 0), ("CUDA tests", 1), ("plan", 0),
                                                                 ("bench", 0), ("shared GPU", 0), ("models", 0),
                                                                 ("reproducible", 0)]
    assert [line.split()[0] for line in (out / "gpu_check_steps.txt").read_text().splitlines()] == \
        ["imports", "CUDA", "plan", "bench", "shared", "models", "reproducible"]
    report = json.loads((out / "gpu_bench.json").read_text())
    assert report["options"]["nodes"] == 1500 and report["options"]["device"] == "cpu" and report["complete"]
    assert {r["kind"] for r in report["rows"]} == {"mggcn", "pyg"} and report["failed"] == []
    assert all(r["epoch_s"] > 0 for r in report["rows"])
    printed = (out / "gpu_bench.txt").read_text()
    assert all(r["name"] in printed for r in report["rows"])
    # step 7: GraphSAGE, GIN and GAT against PyG's on their own graph, generated once (the later benches read it)
    for model, pyg in (("sage", "GraphSAGE"), ("gin", "GIN"), ("gat", "GATConv")):
        report = json.loads((out / f"gpu_{model}.json").read_text())
        assert report["options"]["model"] == model and report["options"]["nodes"] == 800 and report["complete"]
        assert report["failed"] == [] and {r["kind"] for r in report["rows"]} == {"mggcn", "pyg"}
        assert all(r["epoch_s"] > 0 for r in report["rows"])
        assert f"PyG {pyg}" in (out / f"gpu_{model}.txt").read_text()
    assert not json.loads((out / "gpu_sage.json").read_text())["graph"]["cached"]
    assert all(json.loads((out / f"gpu_{model}.json").read_text())["graph"]["cached"] for model in ("gin", "gat"))


# one model in the default run; the others beside the device check's rehearsal in the slow one
@pytest.mark.parametrize("model", ["sage", "gin+bn", pytest.param("gin", marks=pytest.mark.slow),
                                   pytest.param("gat", marks=pytest.mark.slow)])
def test_bench_model_against_pygs_own(model):
    """`bench --model sage|gin|gat` trains the model at P = 1 and 2 and PyG's GraphSAGE / GIN / GAT from the same
    weights (GAT: 4 heads, PyG's layers on the edge list; GIN with `--gin-mlp-batch-norm`: PyG's GINConv with
    MLP(norm="batch_norm")): the same losses after the same epochs, the same accuracies (with batch norms: of an eval
    forward on both sides), and the plan's parameters."""
    batch_norm = model == "gin+bn"
    model = model.removesuffix("+bn")
    opts = bench.options_from(small=True, model=model, nprocs=(1, 2), partitions=("random-local",), epochs=2,
                              warmup=1, heads=4 if model == "gat" else None, gin_mlp_batch_norm=batch_norm or None)
    report = bench.run_bench(opts, log=lambda line: None)
    assert report["failed"] == []
    rows = {r["name"]: r for r in report["rows"]}
    pyg = rows[{"sage": "PyG GraphSAGE (csr)", "gin": "PyG GIN (csr)", "gat": "PyG GATConv (edge_index)"}[model]]
    for name in ("mggcn P=1 random-local", "mggcn P=2 random-local"):
        # float32 on both sides, another summation order: 3 Adam steps agree to a few ulps of the loss
        assert rows[name]["loss"] == pytest.approx(pyg["loss"], rel=1e-5), name
        assert rows[name]["time_vs_pyg"] == pytest.approx(rows[name]["epoch_s"] / pyg["epoch_s"])
    with pytest.raises(ConfigError, match=r"one hidden width, got hidden=16,8 \(or give pyg=False\)$"):
        bench.options_from(small=True, model=model, hidden=(16, 8))
    if batch_norm:  # mggcn's runs did normalize: their workspaces hold the norms' x̂
        # both sides' accuracies come from an eval forward (running statistics) of the same weights: the same test
        # vertices right, but for a vertex whose two best classes tie within float rounding (the batch norms make
        # such ties: on one CPU's kernels one of the small graph's 750 test vertices flips); an accuracy of the
        # batch's statistics would differ by far more. PyG's share is a float32 mean.
        assert pyg["test_acc"] == pytest.approx(rows["mggcn P=1 random-local"]["test_acc"], abs=1.5 / 750)
        assert "bn 0" in rows["mggcn P=1 random-local"]["memory"][0]["workspace"]
        with pytest.raises(ConfigError, match="^gin_mlp_batch_norm is for model gin, not sage$"):
            bench.options_from(small=True, model="sage", gin_mlp_batch_norm=True)
        with pytest.raises(ConfigError, match="^heads is for model gat, not gin$"):
            bench.options_from(small=True, model="gin", heads=4)


def test_bench_compares_precisions_in_the_same_run():
    """`--compare-precision bf16` runs bf16 beside the bench's fp32 at every P: its rows say their precision and
    their plan counts 2-byte activations, and the report gives each one's epoch time against fp32's at the same P
    and its change of test accuracy (what the table prints below it)."""
    opts = bench.options_from(small=True, nprocs=(1, 2), partitions=("random-local",), epochs=2, warmup=1, pyg=False,
                              compare_precision=("bf16",))
    report = bench.run_bench(opts, log=lambda line: None)
    assert report["failed"] == []
    rows = {r["name"]: r for r in report["rows"]}
    assert {rows[f"mggcn P={p} random-local"]["precision"] for p in (1, 2)} == {"fp32"}
    assert {rows[f"mggcn P={p} random-local bf16"]["precision"] for p in (1, 2)} == {"bf16"}
    for p in (1, 2):
        half, full = rows[f"mggcn P={p} random-local bf16"], rows[f"mggcn P={p} random-local"]
        assert half["memory"][0]["plan_parts"]["features X"] * 2 == full["memory"][0]["plan_parts"]["features X"]
        entry = report["precision"][f"bf16 P={p}"]
        assert entry["vs_base"] == pytest.approx(half["epoch_s"] / full["epoch_s"])
        assert entry["test_acc_change"] == pytest.approx(100 * (half["test_acc"] - full["test_acc"]))
    table = bench.format_table(report)
    assert "bf16 P=1: " in table and "x fp32's" in table and " points" in table


@pytest.mark.parametrize("when", ["midway", "before the first report"])
def test_an_interrupted_bench_says_its_report_is_not_complete(tmp_path, monkeypatch, capsys, when):
    """SIGTERM ending a step's workers (the graph's, before they could stop by themselves) or Ctrl-C: status 130 and
    "interrupted", the report written so far named as not complete; a file there from before this run is not
    named as its report."""
    import mggcn.tools.bench as bench_module
    from mggcn.distributed.launch import JobInterrupted

    out = tmp_path / "b.json"
    out.write_text("{}")  # an earlier run's
    stamp = out.stat().st_mtime_ns

    def stopped(opts, log, out, command):
        if when == "midway":
            time.sleep(0.01)  # a later modification time than the earlier run's file
            bench_module.write_report({"complete": False, "rows": []}, out)
        raise JobInterrupted(0, "was stopped by SIGTERM before it could stop by itself")

    monkeypatch.setattr(bench_module, "run_bench", stopped)
    assert main(["bench", "--small", "--no-pyg", "--out", str(out)]) == 130
    said = capsys.readouterr().err
    if when == "midway":
        assert out.stat().st_mtime_ns != stamp
        assert said == f'mggcn bench: interrupted (the report so far, "complete": false: {out})\n'
    else:
        assert said == "mggcn bench: interrupted\n"
