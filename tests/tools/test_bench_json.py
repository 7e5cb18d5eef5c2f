"""The bench's JSON report is strict JSON: a number the bench could not measure (a phase no epoch recorded, a ratio of
such numbers, a loss that diverged) is null, not Python's NaN or Infinity, which jq and JavaScript refuse; and the
tables read such a report back."""

from __future__ import annotations

import json
import math

from mggcn.tools.bench.summary import add_ratios, median
from mggcn.tools.bench.table import format_markdown, format_table, write_report
from script_modules import load_script


def _strict_load(text: str):
    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _row(name: str, kind: str, nprocs: int, overlap: bool, epoch_s: float, phases: dict) -> dict:
    machine = {"device": "cpu", "threads": 2, "bandwidth": 1e10, "gemm_rate": 1e11}
    return {"name": name, "kind": kind, "nprocs": nprocs, "overlap": overlap, "shm": True, "oom": False,
            "partition": "random-local", "precision": "fp32" if kind == "mggcn" else None, "epoch_s": epoch_s,
            "round_s": [epoch_s], "setup_s": 1.0, "setup_phases": {"dataset": 0.5}, "test_acc": 0.5, "loss": 1.0,
            "phases": phases, "machine": machine}


def _report() -> dict:
    """A report whose numbers include those no epoch record had: an mggcn row without a phase, a PyG row without
    its timings, and the ratios and overlap made from them."""
    records = [{"epoch": 1, "loss": 1.0, "epoch_s": 0.1}]  # epoch records without their phases
    missing = median(records, "comm_wait", 0)
    assert math.isnan(missing)  # where the NaN of a report comes from
    on = _row("mggcn P=2 random-local", "mggcn", 2, True, 0.1, {"spmm": 0.05, "comm_wait": missing, "gemm": 0.02})
    off = _row("mggcn P=2 random-local no-overlap", "mggcn", 2, False, median(records, "round", 0),
               {"comm_wait": 0.01})
    pyg = _row("PyG GCNConv (csr)", "pyg", 1, True, 0.2, {k: missing for k in ("forward", "backward", "optimizer")})
    pyg["loss"] = math.inf  # a run that diverged
    report = {"options": {"threads": 2, "device": "cpu", "partitions": ["random-local"], "precision": "fp32"},
              "load_average": {"before": [1.0], "after": [1.0]}, "machine": None,
              "graph": {"nodes": 10, "nnz": 30, "generate_s": None}, "rows": [on, off, pyg], "failed": [],
              "complete": True}
    add_ratios(report)
    assert math.isnan(report["overlap"]["2"]["speedup"])
    return report


def test_the_report_has_no_nan_or_infinity_and_says_null(tmp_path):
    path = tmp_path / "bench.json"
    write_report(_report(), str(path))
    report = _strict_load(path.read_text())
    on, off, pyg = report["rows"]
    assert on["phases"] == {"spmm": 0.05, "comm_wait": None, "gemm": 0.02}
    assert off["epoch_s"] is None and off["round_s"] == [None] and pyg["loss"] is None
    assert report["overlap"]["2"]["speedup"] is None and report["overlap"]["2"]["speedup_rounds"] == [None]


def test_the_tables_read_a_report_with_nulls_back(tmp_path):
    path = tmp_path / "bench.json"
    write_report(_report(), str(path))
    report = json.loads(path.read_text())
    table = format_table(report)
    assert "PyG phases: forward - s, backward - s, optimizer - s" in table
    assert "P=2: overlap on 0.100 s vs off - s per epoch (-x); waiting on broadcasts - s vs 0.010 s" in table
    assert "nan" not in table.lower() and "none" not in table.lower()
    assert format_table(_report()).splitlines()[:4] == table.splitlines()[:4]  # as printed before it was written
    markdown = format_markdown(report)
    assert "| mggcn P=2 random-local no-overlap | - |" in markdown
    assert load_script("bench_table").main([str(path)]) == 0

