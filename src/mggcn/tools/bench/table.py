"""The report as the table ``mggcn bench`` prints, and as the JSON ``--out`` writes."""

from __future__ import annotations

import json
import math

from mggcn.utils.units import format_bytes

__all__ = ["format_table", "format_markdown", "report_source", "markdown_cell", "configurations", "configuration_label",
           "write_report"]

_MIB = 2**20
_HEAD = (f"{'configuration':<34}{'epoch s':>8}{'xPyG':>6}{'setup s':>8}{'xPyG':>6}{'floor s':>8}{'xfloor':>7}"
         f"{'spmm':>7}{'wait':>7}{'gemm':>7}{'allred':>7}{'loss':>6}{'opt':>6}{'other':>7}{'test':>6}{'peak MiB':>9}"
         f"{'net MiB':>8}{'xPyG':>6}{'plan MiB':>9}{'net/plan':>9}{'whole MiB':>10}{'xPyG':>6}{'w/(p+b)':>8}")
_NOTES = ("epoch s: median after the warm-up (max over ranks), the median round; setup s: from opening the graph to "
          "the first epoch (max over ranks; PyG: reading the arrays, edge_index, gcn_norm, CSR, to the device, model, "
          "optimizer); phases: medians; floor: SpMM bytes (a row per nonzero) / bandwidth + GEMM flops / rate, with "
          "the rates measured right after the configuration's epochs; peak: training-phase peak RSS (max over ranks); "
          "net = peak - RSS before loading; plan: mggcn.tools.plan per rank; net/plan: max over ranks; whole: the peak "
          "RSS of the whole process, setup included (max over ranks); w/(p+b) = whole / (plan + the interpreter's "
          "baseline); -: not measured (out of memory)")


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-".rjust(int(spec.split(".")[0]))
    return format(value, spec)


def _mib(value) -> float | None:
    return None if value is None else value / _MIB


def _row_line(r: dict) -> str:
    """One configuration's line of the table ("-" for what it has no number of)."""
    p = r.get("phases") or {}
    phases = [p.get(k) for k in ("spmm", "comm_wait", "gemm", "allreduce", "criterion", "optimizer", "other")]
    if r["kind"] == "pyg":
        phases = [None] * 5 + [p.get("optimizer"), None]
    floor = (r.get("floor") or {}).get("floor_s")
    line = (f"{r['name']:<34}{_fmt(r.get('epoch_s'), '8.3f')}{_fmt(r.get('time_vs_pyg'), '6.2f')}"
            f"{_fmt(r.get('setup_s'), '8.1f')}{_fmt(r.get('setup_vs_pyg'), '6.2f')}"
            f"{_fmt(floor, '8.3f')}{_fmt(r.get('over_floor'), '7.2f')}"
            + "".join(_fmt(v, w) for v, w in zip(phases, ("7.3f",) * 4 + ("6.3f",) * 2 + ("7.3f",)))
            + f"{_fmt(r.get('test_acc'), '6.3f')}{_fmt(_mib(r.get('peak')), '9.0f')}{_fmt(_mib(r.get('net')), '8.0f')}"
            f"{_fmt(r.get('net_vs_pyg'), '6.2f')}{_fmt(_mib(r.get('predicted')), '9.0f')}"
            f"{_fmt(r.get('measured_over_predicted'), '9.2f')}"
            f"{_fmt(_mib(r.get('whole')), '10.0f')}{_fmt(r.get('whole_vs_pyg'), '6.2f')}"
            f"{_fmt(r.get('whole_over_plan_base'), '8.2f')}")
    return line + "  out of memory" if r.get("oom") else line


def _graph_line(g: dict | None) -> str:
    if g is None:
        return "graph not made"
    line = f"graph {g['nodes']:,} vertices, {g['nnz']:,} nonzeros of Â"
    if g.get("generate_s") is not None:
        line += f" (generated in {g['generate_s']:.1f} s: {g['nnz_per_s'] / 1e6:.1f}M nonzeros/s)"
    return line


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


def _caps_line(options: dict) -> str | None:
    caps = [f"{name} {format_bytes(options[key])} per process" for key, name in
            (("gpu_memory", "GPU memory"), ("host_memory", "host memory (RLIMIT_DATA)")) if options.get(key)]
    return "memory caps: " + ", ".join(caps) if caps else None


def format_table(report: dict) -> str:
    """The table ``mggcn bench`` prints."""
    rows = report["rows"]
    lines = [_HEAD, "-" * len(_HEAD)] + [_row_line(r) for r in rows]
    if not rows:
        lines.append("(no configuration finished)")
    g, m = report.get("graph"), report.get("machine")
    measured = [r for r in rows if not r.get("oom")]
    lines.append("")
    lines.append(f"{_graph_line(g)}; {_machine_line(m, [r['machine'] for r in measured])}, "
                 f"{report['options']['threads']} threads per configuration; load average before/after "
                 f"{_load(report, 'before')}/{_load(report, 'after')}")
    caps = _caps_line(report["options"])
    if caps:
        lines.append(caps)
    lines.append(_NOTES)
    lines += _detail_lines(report, g)
    return "\n".join(lines)


def _detail_lines(report: dict, g: dict | None) -> list[str]:
    """Below the table: the baseline, PyG's phases, setup phases, what ran out of memory or failed, the overlap, the
    broadcast probe."""
    lines, rows = [], report["rows"]
    base = (g or {}).get("baseline")
    if base:
        over = ", ".join(f"P={r['nprocs']} {r['whole_net_over_plan']:.2f}" for r in rows
                         if r.get("whole_net_over_plan") is not None)
        lines.append(f"interpreter baseline (a process that imported torch and mggcn): "
                     f"{base['import'] / _MIB:.0f} MiB, {base['warm'] / _MIB:.0f} MiB once its kernels and optimizer "
                     f"ran (PyTorch code loaded on first use{'; whole - that, over plan: ' + over if over else ''})")
    pyg = next((r for r in rows if r["kind"] == "pyg" and not r.get("oom")), None)
    n = markdown_cell  # a number, or "-" for none (null in a report read back, NaN in one just measured)
    if pyg:
        p = pyg["phases"]
        lines.append(f"PyG phases: forward {n(p.get('forward'), '.3f')} s, backward {n(p.get('backward'), '.3f')} "
                     f"s, optimizer {n(p.get('optimizer'), '.3f')} s")
    for r in rows:
        if r.get("setup_phases"):
            phases = ", ".join(f"{k} {n(v, '.2f')}" for k, v in r["setup_phases"].items())
            seconds = "not finished" if r.get("setup_s") is None else f"{r['setup_s']:.2f} s"
            lines.append(f"{r['name']}: setup {seconds} ({phases})")
    for r in rows:
        if r.get("oom"):
            during = f" in its {r['oom_during']}" if r.get("oom_during") else ""
            lines.append(f"{r['name']}: out of memory{during}: {r['error']}")
    for f in report.get("failed", []):
        lines.append(f"{f['name']}: {'out of memory' if f.get('oom') else 'FAILED'}: {f['error']}")
    if report.get("error"):
        lines.append(f"the bench stopped early: {report['error']}")
    for key, o in report.get("overlap", {}).items():
        pairs = [x for x in o.get("speedup_rounds", []) if _measured(x)]
        spread = (f", {len(pairs)} rounds: {min(pairs):.2f}x to {max(pairs):.2f}x" if len(pairs) > 1 else "")
        lines.append(f"P={key}: overlap on {n(o['on_s'], '.3f')} s vs off {n(o['off_s'], '.3f')} s per epoch "
                     f"({n(o['speedup'], '.2f')}x{spread}); waiting on broadcasts {n(o['comm_wait_on_s'], '.3f')} s "
                     f"vs {n(o['comm_wait_off_s'], '.3f')} s")
    for name, p in report.get("precision", {}).items():
        lines.append(f"{name}: {n(p['epoch_s'], '.3f')} s per epoch, {n(p['vs_base'], '.2f')}x {p['base']}'s "
                     f"{n(p['base_s'], '.3f')} s; test accuracy {n(p['test_acc_change'], '+.1f')} points")
    comm = report.get("broadcast")
    if comm:
        busy = "" if comm["busy"] is None else f", the cores {100 * comm['busy']:.0f}% busy meanwhile"
        lines.append(f"loopback broadcast between 2 ranks (gloo): {comm['bytes_per_s'] / 1e9:.2f} GB/s{busy}")
    return lines


def write_report(report: dict, path: str) -> None:
    """The report as JSON at ``path`` (written whole or not at all): strict JSON, a number that is NaN or infinite
    (not measured: a phase no epoch recorded, a ratio of such numbers; a loss that diverged) written as null, since
    Python's ``NaN`` and ``Infinity`` are no JSON and jq or JavaScript refuse the file."""
    from mggcn.utils.files import write_output

    strict = _finite(report)
    write_output(path, lambda f: json.dump(strict, f, indent=1, allow_nan=False), text=True)


def _finite(value):
    """``value`` with every NaN or infinite float, in lists and dicts at any depth, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _measured(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def report_source(report: dict) -> str:
    """When, on what and by which command a report was measured, in one line (what a published table carries)."""
    host = report.get("host") or {}
    parts = [report.get("date") or "date not recorded"]
    if host:
        machine = f"{host.get('cpu')}, {host.get('cores')} cores"
        if host.get("memory"):
            machine += f", {host['memory'] / 2**30:.0f} GiB"
        if host.get("gpus"):
            machine += "; " + ", ".join(host["gpus"])
        parts.append(machine)
        parts.append(f"torch {host.get('torch')}, mggcn {host.get('mggcn')}"
                     + (f" at {host['commit']}" if host.get("commit") else ""))
    else:
        parts.append("machine not recorded")
    opts = report.get("options") or {}
    parts.append(f"{opts.get('threads')} threads per configuration on {opts.get('device')}")
    parts.append(f"`{report['command']}`" if report.get("command") else "command not recorded (run from Python)")
    return "; ".join(parts)


def markdown_cell(value, spec: str) -> str:
    """A number of a Markdown table, "-" for one not measured (None or NaN)."""
    return format(value, spec) if _measured(value) else "-"


def configurations(report: dict) -> list[dict]:
    """The report's configurations as table lines: its rows, then those that failed (marked ``failed``); the bench's
    probes are not configurations."""
    return report.get("rows", []) + [dict(f, failed=True) for f in report.get("failed", []) if f.get("kind") != "probe"]


def configuration_label(row: dict) -> str:
    """A configuration's name, and what stopped it: out of memory (and when), or the first line of its error."""
    if row.get("oom"):
        return f"{row['name']}: out of memory ({row.get('oom_during') or 'training'})"
    if row.get("failed"):
        error = (row.get("error") or "").splitlines()
        return f"{row['name']}: failed ({error[0][:80] if error else 'no error'})"
    return row["name"]


def format_markdown(report: dict) -> str:
    """The report as a Markdown table for docs/benchmarks.md: its source line (:func:`report_source`), the graph,
    and a line per configuration (seconds per epoch and to the first epoch, accuracy, memory against PyG and the
    plan; "out of memory" where a configuration ran out)."""
    cuda = (report.get("options") or {}).get("device") == "cuda"
    head = ["configuration", "epoch s", "x PyG", "setup s", "x PyG", "test acc",
            "GPU peak MiB" if cuda else "net MiB", "x PyG", "plan MiB", "net/plan"]
    lines = [report_source(report), "", _graph_line(report.get("graph")), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    cell = markdown_cell
    for r in configurations(report):
        lines.append("| " + " | ".join([
            configuration_label(r), cell(r.get("epoch_s"), ".4f"), cell(r.get("time_vs_pyg"), ".2f"),
            cell(r.get("setup_s"), ".1f"), cell(r.get("setup_vs_pyg"), ".2f"), cell(r.get("test_acc"), ".4f"),
            cell(_mib(r.get("net")), ".0f"), cell(r.get("net_vs_pyg"), ".2f"), cell(_mib(r.get("predicted")), ".0f"),
            cell(r.get("measured_over_predicted"), ".2f")]) + " |")
    if not configurations(report):
        lines.append("")
        lines.append("(no configuration finished)")
    if not report.get("complete", True):
        lines.append("")
        lines.append(f"(stopped before the end: {report.get('error') or 'the report was written midway'})")
    return "\n".join(lines)
