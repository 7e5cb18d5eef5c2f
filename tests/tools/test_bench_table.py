"""The Markdown tables docs/benchmarks.md is made of (scripts/bench_table.py): each headed by the date, the machine
and the command the report records, a line per configuration, out-of-memory and failed ones included."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from mggcn.tools.bench.probes import describe_host
from mggcn.tools.bench.table import format_markdown, report_source

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ratios_are_each_row_over_pygs():
    """time, setup and memory of every row over PyG's (1.0 for PyG's own; none where either side has no number)."""
    from mggcn.tools.bench.summary import add_ratios

    rows = [{"kind": "mggcn", "nprocs": 1, "overlap": True, "partition": "random", "epoch_s": 2.0, "setup_s": 3.0,
             "peak": 10, "net": 4, "whole": 12},
            {"kind": "mggcn", "nprocs": 2, "overlap": True, "partition": "random", "oom": True, "epoch_s": None,
             "setup_s": None, "peak": None, "net": None, "whole": None},
            {"kind": "pyg", "epoch_s": 4.0, "setup_s": 1.5, "peak": 20, "net": 16, "whole": 24}]
    report = {"rows": rows, "options": {"partitions": ["random"]}}
    add_ratios(report)
    assert [rows[0][k] for k in ("time_vs_pyg", "setup_vs_pyg", "peak_vs_pyg", "net_vs_pyg", "whole_vs_pyg")] == \
        [0.5, 2.0, 0.5, 0.25, 0.5]
    assert rows[1]["time_vs_pyg"] is None and rows[2]["time_vs_pyg"] == 1.0


def _report() -> dict:
    host = {"cpu": "AMD EPYC", "cores": 16, "memory": 128 << 30, "gpus": ["NVIDIA H200"], "python": "3.11.7",
            "torch": "2.11.0", "mggcn": "0.1.0", "commit": "abc1234"}
    mggcn_row = {"name": "mggcn P=1 random-local", "kind": "mggcn", "oom": False, "epoch_s": 0.04123,
                 "time_vs_pyg": 0.5, "setup_s": 30.25, "setup_vs_pyg": 0.8, "test_acc": 0.91234, "net": 3 << 30,
                 "net_vs_pyg": 0.25, "predicted": 2 << 30, "measured_over_predicted": 1.5}
    pyg_row = {"name": "PyG GCNConv (csr)", "kind": "pyg", "oom": True, "oom_during": "setup"}
    return {"date": "2026-12-05 04:00 UTC", "host": host, "command": "mggcn bench --device cuda --nprocs 1",
            "options": {"device": "cuda", "threads": 16},
            "graph": {"nodes": 1000, "nnz": 21000, "generate_s": 1.5, "nnz_per_s": 14000.0},
            "rows": [mggcn_row, pyg_row],
            "failed": [{"name": "machine probe", "kind": "probe", "error": "x"},
                       {"name": "mggcn P=2 random-local", "kind": "mggcn", "error": "TimeoutError: 100 s\nmore"}],
            "complete": False, "error": "KeyboardInterrupt"}


def test_markdown_table_says_when_where_and_how():
    lines = format_markdown(_report()).splitlines()
    assert lines[0] == ("2026-12-05 04:00 UTC; AMD EPYC, 16 cores, 128 GiB; NVIDIA H200; torch 2.11.0, mggcn 0.1.0 at "
                        "abc1234; 16 threads per configuration on cuda; `mggcn bench --device cuda --nprocs 1`")
    assert lines[2].startswith("graph 1,000 vertices, 21,000 nonzeros of Â (generated in 1.5 s")
    assert lines[4].startswith("| configuration | epoch s | x PyG | setup s | x PyG | test acc | GPU peak MiB |")
    assert lines[6] == "| mggcn P=1 random-local | 0.0412 | 0.50 | 30.2 | 0.80 | 0.9123 | 3072 | 0.25 | 2048 | 1.50 |"
    assert lines[7] == "| PyG GCNConv (csr): out of memory (setup) | - | - | - | - | - | - | - | - | - |"
    assert lines[8].startswith("| mggcn P=2 random-local: failed (TimeoutError: 100 s) | - |")
    assert "machine probe" not in "\n".join(lines)
    assert lines[-1] == "(stopped before the end: KeyboardInterrupt)"


def test_a_report_without_provenance_says_so():
    report = {k: v for k, v in _report().items() if k not in ("date", "host", "command")}
    assert report_source(report) == ("date not recorded; machine not recorded; 16 threads per configuration on cuda; "
                                     "command not recorded (run from Python)")


def test_the_host_description_names_this_checkouts_commit():
    host = describe_host()
    assert host["cores"] == os.cpu_count() and host["gpus"] == [] and host["memory"] > 0 and host["cpu"]
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # a git checkout (CI clones one)
        assert host["commit"] == head.stdout.strip()


def test_the_script_prints_and_writes_the_tables(tmp_path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps(_report()))
    out = tmp_path / "tables.md"
    script = os.path.join(ROOT, "scripts", "bench_table.py")
    done = subprocess.run([sys.executable, script, str(report), str(report), "--out", str(out)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == out.read_text() == format_markdown(_report()) + "\n\n" + format_markdown(_report()) + "\n"
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    done = subprocess.run([sys.executable, script, str(bad)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith(f"bench_table: {bad}: not a report of mggcn bench")
    assert done.stderr.count("\n") == 1


def test_a_configuration_that_failed_without_a_message_still_has_its_line():
    report = _report()
    report["failed"].append({"name": "PyG GCNConv (csr)", "kind": "pyg", "error": ""})
    assert "| PyG GCNConv (csr): failed (no error) | - |" in format_markdown(report)
