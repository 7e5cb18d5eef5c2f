"""scripts/scale_check.py and scripts/gpu_scale.sh rehearsed at tiny sizes: the measurements and ratios they print,
the JSON they write, the table of bench reports (out-of-memory rows included), and the GPU script's steps on the
CPU. No wall-clock threshold is asserted: the ratios are checked to be the quotients of the times reported."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "scale_check.py")


def _scale_check():
    spec = importlib.util.spec_from_file_location("scale_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout)


def test_generate_measures_the_graph_against_numpy_sorting_its_keys(tmp_path):
    from mggcn.data.generators import generate_spec

    out = tmp_path / "generate.json"
    done = _run("generate", "rmat:scale=9,edge_factor=8,seed=3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    graph = generate_spec("rmat:scale=9,edge_factor=8,seed=3")
    assert (result["nnz"], result["nodes"]) == (graph.csr.nnz, graph.num_nodes)
    assert result["generate_s"] > 0 and result["sort_s"] > 0
    assert result["ratio"] == pytest.approx(result["generate_s"] / result["sort_s"])
    assert result["nnz_per_s"] == pytest.approx(result["nnz"] / result["generate_s"])
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"generated rmat:scale=9,edge_factor=8,seed=3: {graph.csr.nnz:,} nonzeros in ")
    assert lines[-1] == f"generation / sort: {result['ratio']:.2f}x"


def test_read_streams_an_edge_list_against_numpy_reading_it_whole(tmp_path):
    out = tmp_path / "read.json"
    done = _run("read", "30000", "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["edges"] == 30000 and result["bytes"] > 30000 * 4
    assert result["ratio"] == pytest.approx(result["stream_s"] / result["loadtxt_s"])
    lines = done.stdout.splitlines()
    assert lines[0].startswith("streamed 30,000 edges (") and lines[-1] == f"streamed / whole: {result['ratio']:.2f}x"
    bad = _run("read", "lots")
    assert bad.returncode == 2 and "read takes a positive number of edges, got 'lots'" in bad.stderr


@pytest.mark.parametrize("spec", ["rmat:scale=9,edge_factor=8",
                                  pytest.param("synthetic:n=700,degree=6", marks=pytest.mark.slow)])
def test_first_epoch_times_mggcn_train_against_one_numpy_thread(tmp_path, spec):
    """Both generators' references run (the R-MAT levels, the DC-SBM's blocks); the phases are those mggcn train
    printed, and they add up to no more than the time to the first epoch."""
    out = tmp_path / "first.json"
    done = _run("first-epoch", spec, "--nprocs", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["nprocs"] == 2 and result["spec"] == spec
    assert {"dataset", "shard"} <= set(result["phases"])
    assert sum(result["phases"].values()) <= result["first_epoch_s"] + 0.05 * len(result["phases"])  # rounding
    assert 0 < result["first_epoch_s"] < result["run_s"]
    assert result["reference_s"] >= result["reference_draw_s"] > 0
    from mggcn.data.generators import generate_spec

    # both directions of every pair drawn; the graph has fewer nonzeros (repeats and self loops are dropped)
    assert result["reference_entries"] >= generate_spec(spec).csr.nnz
    if spec.startswith("rmat"):
        assert result["reference_entries"] == 2 * (8 << 9)
    assert result["ratio"] == pytest.approx(result["first_epoch_s"] / result["reference_s"])
    assert result["peak_rss"] > 50 << 20
    assert done.stdout.splitlines()[-1] == f"first epoch / reference: {result['ratio']:.2f}x"


def test_a_failed_measurement_is_one_line():
    done = _run("first-epoch", "rmat:scale=9,bogus=1")
    assert done.returncode != 0
    assert done.stderr.strip().startswith("scale_check: ") and "bogus" in done.stderr
    assert "Traceback" not in done.stderr
    done = _run("table", "no-equals-sign")
    assert done.returncode != 0 and done.stderr.strip() == "scale_check: table: 'no-equals-sign' is not NAME=REPORT"


def _report(device="cuda", pyg_oom=True):
    graph = {"nodes": 8_750_000, "nnz": 1_207_500_000, "generate_s": 80.5, "nnz_per_s": 1.5e7}
    mggcn_row = {"name": "mggcn P=1 random-local", "kind": "mggcn", "oom": False, "setup_s": 41.2, "epoch_s": 0.8123,
                 "time_vs_pyg": None, "net": 40 << 30, "net_vs_pyg": None, "predicted": 42 << 30,
                 "measured_over_predicted": 40 / 42}
    pyg_row = {"name": "PyG GCNConv (csr)", "kind": "pyg", "oom": pyg_oom, "oom_during": "setup",
               "error": "CUDA out of memory", "setup_s": None, "epoch_s": None}
    return {"options": {"device": device}, "graph": graph, "rows": [mggcn_row, pyg_row],
            "failed": [{"name": "machine probe", "kind": "probe", "error": "x"}]}


def test_table_says_out_of_memory_and_leaves_numbers_out():
    scale = _scale_check()
    text = scale.scale_table({"proteins": _report(), "reddit": {"error": "ConfigError: bad", "rows": []}})
    lines = text.splitlines()
    assert lines[0].startswith("| shape | graph | generated | configuration | first epoch s | s/epoch |")
    mggcn_line, pyg_line, reddit_line = lines[2:5]
    assert mggcn_line == ("| proteins | 8,750,000 x 1,207.5M nonzeros | 80.5 s (15.0M/s) | mggcn P=1 random-local "
                          "| 41.2 | 0.8123 | - | 40.00 | - | 42.00 | 0.95 |")
    assert "PyG GCNConv (csr): out of memory (setup) | - | - |" in pyg_line
    assert reddit_line.startswith("| reddit | not made | - | ConfigError: bad | -")
    assert "machine probe" not in text  # probes are not configurations
    assert lines[-1].startswith("device cuda;")


def test_table_names_a_configuration_that_failed():
    scale = _scale_check()
    report = _report(pyg_oom=False)
    report["rows"] = report["rows"][:1]
    report["failed"].append({"name": "PyG GCNConv (csr)", "kind": "pyg", "error": "TimeoutError: after 190 s\nmore"})
    text = scale.scale_table({"proteins": report})
    assert "| PyG GCNConv (csr): failed (TimeoutError: after 190 s) | - |" in text


@pytest.mark.slow
def test_gpu_scale_script_rehearses_every_step_on_cpu(tmp_path):
    """scripts/gpu_scale.sh with SCALE_DEVICE=cpu at tiny sizes: the plan and bench commands the GPU run makes, so a
    renamed option breaks this test rather than the one GPU run a session may get. The Proteins step is given a
    graph the bench refuses: that step fails alone (bit 8), the table still holds the Reddit shape's rows and says
    what happened to the other, and every output file is there."""
    out = tmp_path / "out"
    env = dict(os.environ, SCALE_DEVICE="cpu", SCALE_REDDIT="1500 12 8 3", SCALE_PROTEINS="0 10 8 6",
               SCALE_HIDDEN="8,8", SCALE_EPOCHS="2", SCALE_CACHE=str(tmp_path / "cache" / "graphs"),
               OUT_DIR=str(out), PYTHON=sys.executable)
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_scale.sh")], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 8, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.rstrip().splitlines()[-1] == "gpu_scale: failed steps: proteins (exit 2); exit status 8"
    log = (out / "gpu_scale.log").read_text()
    assert [line for line in log.splitlines() if line.startswith("== ")] == \
        ["== imports", "== plan", "== reddit", "== proteins", "== table"]
    assert os.path.join(ROOT, "src", "mggcn") in log  # this checkout's mggcn
    assert "reddit: PyG Reddit" in log and "proteins: the protein similarity graph" in log  # both plans
    steps = [line.split()[:3] for line in (out / "gpu_scale_steps.txt").read_text().splitlines()]
    assert steps == [["imports", "exit", "0"], ["plan", "exit", "0"], ["reddit", "exit", "0"],
                     ["proteins", "exit", "2"], ["table", "exit", "0"]]
    report = json.loads((out / "scale_reddit.json").read_text())
    assert report["complete"] and report["options"]["nodes"] == 1500 and report["options"]["hidden"] == [8, 8]
    assert [r["kind"] for r in report["rows"]] == ["mggcn", "pyg"] and report["failed"] == []
    assert report["graph"]["generate_s"] > 0  # generated, not reused: the cache was emptied first
    table = (out / "gpu_scale.md").read_text().splitlines()
    assert [line.split(" | ")[3] for line in table[2:4]] == ["mggcn P=1 random-local", "PyG GCNConv (csr)"]
    assert table[4].startswith("| proteins | not made | - | no report (") and "see the log" in table[4]
    assert "nodes" in log[log.index("== proteins"):]  # the bench's one-line refusal of 0 vertices
    assert not (tmp_path / "cache" / "graphs").exists()  # the graphs are removed at the end


@pytest.mark.slow
def test_gpu_scale_script_ends_within_its_budget_whatever_hangs(tmp_path):
    """A Proteins shape far too large for the CPU: its step is stopped when the budget (less the kill grace) runs
    out, the table step still runs its own 20 s and holds the Reddit rows, and the script ends within budget + 20 s
    (+ the kill grace) rather than the steps' limits."""
    import time

    out, budget = tmp_path / "out", 60
    env = dict(os.environ, SCALE_DEVICE="cpu", SCALE_REDDIT="1500 12 8 3", SCALE_PROTEINS="50000000 40 8 6",
               SCALE_HIDDEN="8,8", SCALE_EPOCHS="2", SCALE_CACHE=str(tmp_path / "cache"), SCALE_BUDGET=str(budget),
               OUT_DIR=str(out), PYTHON=sys.executable)
    start = time.monotonic()
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_scale.sh")], env=env, capture_output=True,
                          text=True, timeout=600)
    took = time.monotonic() - start
    assert took < budget + 20 + 15, (took, done.stdout[-3000:])
    steps = [line.split()[:3] for line in (out / "gpu_scale_steps.txt").read_text().splitlines()]
    assert [s[0] for s in steps] == ["imports", "plan", "reddit", "proteins", "table"], steps
    assert steps[3][2] in ("124", "137") and steps[4][2] == "0", steps
    assert "gpu_scale: proteins: stopped after its" in done.stdout
    assert "mggcn P=1 random-local" in (out / "gpu_scale.md").read_text()
