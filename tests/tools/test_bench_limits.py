"""`mggcn bench`'s memory caps and out-of-memory rows (mggcn.tools.bench.limits): which errors mean out of memory, a
configuration that runs out becoming a row that says so (in the JSON and the table) while the others run on, and a
real one on this CPU made by --host-memory."""

import json
import os
import subprocess
import sys

import pytest

from mggcn.distributed.launch import WorkerError
from mggcn.tools import bench
from mggcn.tools.bench import limits
from mggcn.tools.bench import run as bench_run
from mggcn.tools.cli import main
from mggcn.utils.units import format_bytes

# (a worker's error as the launcher words it, whether it is running out of memory)
ERRORS = [
    ("rank 0 failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
     "of 139.81 GiB", True),
    ("rank 0 failed: MemoryError: ", True),
    ("rank 1 failed: _ArrayMemoryError: Unable to allocate 8.00 GiB for an array with shape (1073741824,)", True),
    ("rank 0 failed: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
     "allocate memory: you tried to allocate 536870912 bytes. Error code 12 (Cannot allocate memory)", True),
    ("rank 0 failed: RuntimeError: CUDA error: out of memory", True),
    ("rank 0 failed: torch.AcceleratorError: CUDA error: out of memory", True),
    ("rank 0 failed: RuntimeError: MKL error: SPARSE_STATUS_ALLOC_FAILED when calling `mkl_sparse_s_create_csr( A, "
     "indexing, rows, cols, rows_start, rows_end, col_indx, values)`", True),  # PyG's SpMM under --host-memory
    ("rank 0 failed: RuntimeError: MKL error: SPARSE_STATUS_INVALID_VALUE when calling `mkl_sparse_s_mm`", False),
    ("rank 1 was killed by signal SIGKILL", True),
    ("rank 0 was killed by signal SIGSEGV", False),
    ("rank 0 failed: RuntimeError: CUDA error: an illegal memory access was encountered", False),
    ("rank 0 failed: ValueError: out of memory is not a partition", False),
    ("rank 0 did not finish within 60 s (still running: ranks 0)", False),
]


@pytest.mark.parametrize("error, oom", ERRORS)
def test_out_of_memory_tells_allocation_failures_from_other_errors(error, oom):
    assert limits.out_of_memory(error) is oom


def test_memory_caps_are_refused_where_they_cannot_hold(capsys):
    """Each refusal is one line naming the option, before anything runs."""
    for args, message in (
            (["--gpu-memory", "64G"], "--gpu-memory caps a GPU's memory: give --device cuda (the device is cpu)"),
            (["--host-memory", "8G", "--device", "cuda"], "--host-memory caps a CPU run"),
            (["--host-memory", "lots"], "--host-memory: expected a size such as 80G or 512M, got 'lots'"),
            (["--host-memory", "0"], "--host-memory must be more than 0")):
        assert main(["bench", "--small", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"mggcn bench: error: {message}") and err.count("\n") == 1, err
    with pytest.raises(ValueError, match="gpu_memory 80.00 GiB is more than the GPU's 40.00 GiB"):
        limits.check_gpu_memory(80 << 30, [40 << 30, 80 << 30], 1)
    limits.check_gpu_memory(40 << 30, [40 << 30, 80 << 30], 1)
    with pytest.raises(ValueError, match="no CUDA device"):
        limits.check_gpu_memory(1 << 30, [], 1)


def test_configurations_that_run_out_of_memory_are_rows(tmp_path, monkeypatch, capsys):
    """PyG raises CUDA's out-of-memory error in its first epoch (its setup notes say it got there), mggcn at P = 2 is
    killed by SIGKILL before it wrote a word; mggcn at P = 1 runs. Each is a row; the ratios to an out-of-memory PyG
    are null; the bench ends complete and exits 0."""
    real_run_one = bench_run.run_one

    def run_one(run, opts, path, threads, notes=None):
        if run.kind == "pyg":
            with open(os.path.join(notes, "0.json"), "w") as f:
                json.dump({"seconds": 2.5, "phases": {"read": 1.0, "edge_index": 1.0, "optimizer": 0.5}}, f)
            raise WorkerError(0, "failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
        if run.nprocs == 2:
            raise WorkerError(1, "was killed by signal SIGKILL")
        return real_run_one(run, opts, path, threads, notes)

    monkeypatch.setattr(bench_run, "run_one", run_one)
    out = tmp_path / "bench.json"
    assert main(["bench", "--small", "--nprocs", "1,2", "--partition", "random-local", "--epochs", "1", "--warmup",
                 "1", "--repeats", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["complete"] and report["failed"] == []
    rows = {r["name"]: r for r in report["rows"]}
    assert list(rows) == ["mggcn P=1 random-local", "mggcn P=2 random-local", "mggcn P=2 random-local no-overlap",
                          "PyG GCNConv (csr)"]
    measured, killed, pyg = rows["mggcn P=1 random-local"], rows["mggcn P=2 random-local"], rows["PyG GCNConv (csr)"]
    assert not measured["oom"] and measured["epoch_s"] > 0 and len(measured["round_s"]) == 2
    assert measured["time_vs_pyg"] is None and measured["net_vs_pyg"] is None and measured["setup_vs_pyg"] > 0
    assert killed["oom"] and killed["error"] == "rank 1 was killed by signal SIGKILL" and killed["round"] == 1
    assert killed["oom_during"] is None and killed["setup_s"] is None and killed["setup_phases"] == {}
    for key in ("epoch_s", "test_acc", "peak", "net", "whole", "floor", "time_vs_pyg", "net_vs_pyg"):
        assert killed[key] is None and pyg[key] is None, key
    assert pyg["oom"] and pyg["oom_during"] == "training" and pyg["setup_s"] == 2.5
    # what the cap is compared with: the plan needs no run (of a rank of mean nonzeros)
    assert killed["predicted"] > 0 and pyg["predicted"] is None
    assert killed["predicted"] == pytest.approx(rows["mggcn P=2 random-local no-overlap"]["predicted"], rel=0.2)
    assert pyg["error"].startswith("rank 0 failed: OutOfMemoryError: CUDA out of memory")
    assert report["overlap"] == {}
    printed = capsys.readouterr().out
    lines = {line.split("  ")[0]: line for line in printed.splitlines() if line.startswith(("mggcn P=", "PyG"))}
    assert lines["mggcn P=2 random-local"].endswith("-  out of memory")
    assert lines["PyG GCNConv (csr)"].split()[3:6] == ["-", "-", "2.5"]  # no epoch, no ratio; its setup
    assert "PyG GCNConv (csr): out of memory in its training: rank 0 failed: OutOfMemoryError" in printed
    assert "mggcn P=2 random-local: out of memory: rank 1 was killed by signal SIGKILL" in printed
    assert bench.format_table(report) in printed


def _interpreter_data_mib() -> int:
    """VmData of a fresh interpreter once torch and mggcn are imported and a matmul ran, in MiB: about 250 with
    torch's CPU build, 800 with its CUDA build (its libraries' data), which a cap must leave room for."""
    code = ("import torch, mggcn; from mggcn.tools.bench.memory import status_bytes; "
            "x = torch.randn(64, 64); x @ x; print(status_bytes('VmData'))")
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              timeout=120).stdout) >> 20


def test_host_memory_cap_makes_pyg_an_out_of_memory_row(tmp_path):
    """--host-memory on this CPU, for real: PyG's GCNConv on the edge_index gathers E x 64 float messages (about
    1.7 GB on this graph) and cannot allocate them under an RLIMIT_DATA of 550 MB above the interpreter's own
    (800 MB in all with torch's CPU build), while mggcn trains in about 50 MB beyond it (one thread: few thread
    stacks). PyG's row says out of memory, with its setup measured; mggcn's row is whole."""
    cap_mib = _interpreter_data_mib() + 550
    opts = bench.options_from(nodes=20_000, degree=100.0, features=64, classes=8, hidden=(64,), nprocs=(1,),
                              partitions=("random",), epochs=1, warmup=1, threads=1, pyg_adj="edge_index",
                              host_memory=f"{cap_mib}M", probe_gemm=256, probe_copy=16 << 20)
    out = tmp_path / "bench.json"
    report = bench.run_bench(opts, log=lambda line: None, out=str(out))
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["complete"] and report["failed"] == [] and report["options"]["host_memory"] == cap_mib << 20
    mggcn_row, pyg = report["rows"]
    assert not mggcn_row["oom"] and mggcn_row["epoch_s"] > 0 and mggcn_row["memory"][0]["data"] < cap_mib << 20
    assert pyg["oom"] and pyg["oom_during"] == "training" and pyg["setup_s"] > 0
    assert "can't allocate memory" in pyg["error"] or "MemoryError" in pyg["error"]
    assert pyg["epoch_s"] is None and mggcn_row["time_vs_pyg"] is None
    table = bench.format_table(report)
    lines = table.splitlines()
    assert [line for line in lines if line.endswith("  out of memory")] == [lines[3]]  # PyG's row, after mggcn's
    assert lines[3].startswith("PyG GCNConv (edge_index)")
    assert any(line.startswith("PyG GCNConv (edge_index): out of memory in its training: rank 0") for line in lines)
    assert f"memory caps: host memory (RLIMIT_DATA) {format_bytes(cap_mib << 20)} per process" in table


def test_a_host_memory_cap_below_what_the_threads_need_is_an_out_of_memory_row():
    """A cap the configuration cannot set up in, with every core's thread: OpenMP's threads are made before the cap
    (under it OpenMP could not make them and ended the process, "libgomp: Thread creation failed", a failed row
    with status 1), so that what runs out is an allocation, said as out of memory."""
    cap_mib = _interpreter_data_mib()  # no room beyond the interpreter's own: the setup's first arrays fail
    opts = bench.options_from(small=True, nprocs=(1,), partitions=("random",), epochs=1, warmup=1, pyg=False,
                              host_memory=f"{cap_mib}M", probe_gemm=256, probe_copy=16 << 20)
    report = bench.run_bench(opts, log=lambda line: None)
    assert report["complete"] and report["failed"] == [], report["failed"]
    assert [(r["name"], r["oom"]) for r in report["rows"]] == [("mggcn P=1 random", True)]
