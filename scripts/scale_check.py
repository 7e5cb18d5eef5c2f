"""How fast a generated graph is made, and how long ``mggcn train`` takes to its first epoch, each against a
reference measured in the same run.

    python scripts/scale_check.py generate [SPEC] [--out FILE]
        SPEC generated on every core (mggcn.data.generators.generate_spec), against numpy sorting as many int64 keys
        as the graph has nonzeros (one np.sort, one thread): the ratio of the times. Default SPEC
        rmat:scale=21,edge_factor=16.
    python scripts/scale_check.py first-epoch [SPEC] [--nprocs P] [--device D] [--out FILE]
        `mggcn train SPEC --epochs 1` in a child process: the time to its first epoch (the line it prints, counted from
        the child's start) and the child's peak resident memory, against one numpy thread drawing the same edges
        and sorting them, both ways, into the CSR of the graph and the CSR of its transpose (two np.sort of the
        graph's 2·E directed keys). The ratio of the times.

    python scripts/scale_check.py read [EDGES] [--out FILE]
        An edge list of EDGES random edges (default 5000000) written as text, streamed as `mggcn prepare` reads it
        (mggcn.data.formats.iter_edgelist_chunks, blocks of 2^20 edges) against numpy reading the whole file by its
        path (np.loadtxt, its block reader, one thread): edges/s of each and the ratio of the times.
    python scripts/scale_check.py table NAME=REPORT... [--out FILE]
        One Markdown table of `mggcn bench` reports (scripts/gpu_scale.sh writes one per shape): per shape, the
        graph's generation seconds and nonzeros/s, and per configuration the time to its first epoch, s/epoch, peak
        memory (the GPU's on CUDA), the plan and net/plan, and the ratios to PyG, or "out of memory".

generate and first-epoch print one line per measurement and the ratio last; ``--out`` writes them as JSON. The
references are measured after mggcn, in a fresh child process each, so that neither side finds the other's memory
already touched.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

DEFAULT_SPEC = "rmat:scale=21,edge_factor=16"


def _child(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh interpreter (argv = args); it prints one JSON object last."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"scale_check: a measurement of {' '.join(args)} failed ({out.returncode}): {last}")
    return json.loads(out.stdout.strip().splitlines()[-1])


_GENERATE = """
import json, resource, sys, time
start = time.perf_counter()
from mggcn.data.generators import generate_spec
g = generate_spec(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - start, "nnz": g.csr.nnz, "nodes": g.num_nodes,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

_SORT = """
import json, sys, time
import numpy as np
keys = np.random.default_rng(0).integers(0, 2**62, int(sys.argv[1]), dtype=np.int64)
start = time.perf_counter()
np.sort(keys)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""

# One numpy thread: the edges drawn level by level (the textbook R-MAT), or the DC-SBM's pairs block by block; the
# graph's directed entries as keys, sorted by target (the CSR) and by source (the CSR of the transpose).
_REFERENCE = """
import json, sys, time
import numpy as np
from mggcn.data.generators.spec import _rmat_options, _synthetic_options
spec = sys.argv[1]
head, _, rest = spec.partition(":")
start = time.perf_counter()
if head == "rmat":
    kw = _rmat_options(spec, rest, 40)
    scale, total = kw["scale"], kw.get("edge_factor", 16) << kw["scale"]
    a, b, c = kw.get("a", 0.57), kw.get("b", 0.19), kw.get("c", 0.19)
    n, rng = 1 << scale, np.random.default_rng(kw.get("seed", 0))
    src, dst = np.zeros(total, dtype=np.int64), np.zeros(total, dtype=np.int64)
    for _ in range(scale):
        r = rng.random(total, dtype=np.float32)
        bottom = r >= a + b
        src = (src << 1) | bottom
        dst = (dst << 1) | ((r >= a + b + c) | ((r >= a) & ~bottom))
else:
    from mggcn.data.generators import community as cm
    kw = _synthetic_options(spec, rest)
    n, seed = kw.get("num_nodes", cm.DEFAULT_NODES), kw.get("seed", 0)
    model, _ = cm._model(n, kw.get("num_classes", cm.DEFAULT_CLASSES), kw.get("p_in", cm.DEFAULT_P_IN),
                         kw.get("degree_exponent", cm.DEFAULT_DEGREE_EXPONENT), seed)
    rng, total = np.random.default_rng(seed), cm._target(n, kw.get("avg_degree", cm.DEFAULT_DEGREE))
    pairs = [model.pairs(rng, min(cm.COMMUNITY_BLOCK, total - s)) for s in range(0, total, cm.COMMUNITY_BLOCK)]
    src, dst = (np.concatenate([p[i] for p in pairs]).astype(np.int64) for i in (0, 1))  # int32 ids: keys need int64
drawn = time.perf_counter()
rows, cols = np.concatenate([dst, src]), np.concatenate([src, dst])
del src, dst
csr = {}
for name, (major, minor) in (("A", (rows, cols)), ("A^T", (cols, rows))):
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(major, minlength=n), out=indptr[1:])
    keys = major * n + minor
    keys.sort()
    csr[name] = (indptr, (keys % n).astype(np.int32))
    del keys
print(json.dumps({"seconds": time.perf_counter() - start, "draw_s": drawn - start, "entries": int(rows.size)}))
"""


_STREAM = """
import json, sys, time
from mggcn.data.formats import iter_edgelist_chunks
start = time.perf_counter()
edges = sum(chunk.shape[1] for chunk in iter_edgelist_chunks(sys.argv[1]))
print(json.dumps({"seconds": time.perf_counter() - start, "edges": edges}))
"""

_LOADTXT = """
import json, sys, time
import numpy as np
start = time.perf_counter()
table = np.loadtxt(sys.argv[1], dtype=np.int64, usecols=(0, 1), ndmin=2)
print(json.dumps({"seconds": time.perf_counter() - start, "edges": int(table.shape[0])}))
"""


def read(edges: int) -> dict:
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "edges.txt")
        pairs = np.random.default_rng(0).integers(0, max(edges // 10, 1), (edges, 2))
        with open(path, "w") as f:
            for begin in range(0, edges, 1 << 20):
                f.write("\n".join(f"{u} {v}" for u, v in pairs[begin:begin + (1 << 20)].tolist()) + "\n")
        size = os.path.getsize(path)
        mine, ref = _child(_STREAM, path), _child(_LOADTXT, path)
    if mine["edges"] != edges or ref["edges"] != edges:
        raise SystemExit(f"scale_check: read {mine['edges']} and {ref['edges']} edges of {edges}")
    return {"edges": edges, "bytes": size, "stream_s": mine["seconds"], "loadtxt_s": ref["seconds"],
            "ratio": mine["seconds"] / ref["seconds"]}


def generate(spec: str) -> dict:
    mine = _child(_GENERATE, spec)
    ref = _child(_SORT, str(mine["nnz"]))
    return {"spec": spec, "nnz": mine["nnz"], "nodes": mine["nodes"], "threads": len(os.sched_getaffinity(0)),
            "generate_s": mine["seconds"], "nnz_per_s": mine["nnz"] / mine["seconds"],
            "generate_peak_rss": mine["peak_rss"], "sort_s": ref["seconds"],
            "sort_keys_per_s": mine["nnz"] / ref["seconds"], "ratio": mine["seconds"] / ref["seconds"]}


def first_epoch(spec: str, nprocs: int, device: str) -> dict:
    start = time.time()
    cmd = [sys.executable, "-m", "mggcn", "train", spec, "--epochs", "1", "--nprocs", str(nprocs),
           "--device", device]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f"scale_check: {' '.join(cmd[2:])} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    found = re.search(r"first epoch after ([\d.]+) s \((.*)\)", proc.stdout)
    if found is None:
        raise SystemExit(f"scale_check: no 'first epoch after' line in the output of {' '.join(cmd[2:])}")
    phases = {name: float(sec) for name, sec in (p.rsplit(" ", 1) for p in found.group(2).split(", "))}
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest process of the run
    ref = _child(_REFERENCE, spec)
    return {"spec": spec, "nprocs": nprocs, "device": device, "threads": len(os.sched_getaffinity(0)),
            "first_epoch_s": float(found.group(1)), "phases": phases, "run_s": wall, "peak_rss": peak,
            "reference_s": ref["seconds"], "reference_draw_s": ref["draw_s"], "reference_entries": ref["entries"],
            "ratio": float(found.group(1)) / ref["seconds"]}


def scale_table(reports: dict[str, dict]) -> str:
    """The Markdown table of bench reports by shape name: a line per configuration, out of memory or finished."""
    from mggcn.tools.bench.table import configuration_label, configurations, report_source
    from mggcn.tools.bench.table import markdown_cell as cell

    head = ["shape", "graph", "generated", "configuration", "first epoch s", "s/epoch", "x PyG", "peak GiB",
            "x PyG", "plan GiB", "net/plan"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for shape, report in reports.items():
        g = report.get("graph") or {}
        graph = f"{g['nodes']:,} x {g['nnz'] / 1e6:,.1f}M nonzeros" if g else "not made"
        made = "-" if g.get("generate_s") is None else \
            f"{g['generate_s']:.1f} s ({g['nnz_per_s'] / 1e6:.1f}M/s)"
        rows = configurations(report) or [{"name": report.get("error") or "no configuration finished"}]
        for r in rows:
            peak = r.get("net")
            cells = [shape, graph, made, configuration_label(r), cell(r.get("setup_s"), ".1f"),
                     cell(r.get("epoch_s"), ".4f"), cell(r.get("time_vs_pyg"), ".2f"),
                     cell(peak and peak / 2**30, ".2f"), cell(r.get("net_vs_pyg"), ".2f"),
                     cell(r.get("predicted") and r["predicted"] / 2**30, ".2f"),
                     cell(r.get("measured_over_predicted"), ".2f")]
            lines.append("| " + " | ".join(cells) + " |")
    device = next((r["options"].get("device") for r in reports.values() if r.get("options")), "?")
    lines.append("")
    lines += [f"{shape}: {report_source(report)}" for shape, report in reports.items() if report.get("options")]
    lines.append(f"device {device}; first epoch: from opening the graph to the first epoch (mggcn: its ranks; PyG: "
                 "reading the arrays, edge_index, gcn_norm, to the device); peak: the GPU's peak allocated on CUDA, "
                 "the net RSS on the CPU; plan: `mggcn plan` per rank; -: not measured")
    return "\n".join(lines)


def table(pairs: list[str]) -> str:
    reports = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep:
            raise SystemExit(f"scale_check: table: {pair!r} is not NAME=REPORT")
        if not os.path.exists(path):
            reports[name] = {"error": f"no report ({path} was not written: see the log)", "rows": []}
            continue
        try:
            with open(path) as f:
                reports[name] = json.load(f)
        except (OSError, ValueError) as err:
            raise SystemExit(f"scale_check: table: {path}: {err}") from None
    return scale_table(reports)


def _print(result: dict) -> None:
    gib = 2**30
    if "stream_s" in result:
        mib = result["bytes"] / 2**20
        print(f"streamed {result['edges']:,} edges ({mib:.0f} MiB of text) as prepare reads them: "
              f"{result['stream_s']:.2f} s ({result['edges'] / result['stream_s'] / 1e6:.1f} M edges/s)")
        print(f"numpy reads the whole file by its path: {result['loadtxt_s']:.2f} s "
              f"({result['edges'] / result['loadtxt_s'] / 1e6:.1f} M edges/s, one thread)")
        print(f"streamed / whole: {result['ratio']:.2f}x")
        return
    if "generate_s" in result:
        print(f"generated {result['spec']}: {result['nnz']:,} nonzeros in {result['generate_s']:.2f} s "
              f"({result['nnz_per_s'] / 1e6:.1f} M/s, {result['threads']} threads, peak "
              f"{result['generate_peak_rss'] / gib:.2f} GiB)")
        print(f"numpy sorts {result['nnz']:,} int64 keys in {result['sort_s']:.2f} s "
              f"({result['sort_keys_per_s'] / 1e6:.1f} M/s, one thread)")
        print(f"generation / sort: {result['ratio']:.2f}x")
        return
    phases = ", ".join(f"{k} {v:.1f}" for k, v in result["phases"].items())
    print(f"mggcn train {result['spec']} --epochs 1 --nprocs {result['nprocs']}: first epoch after "
          f"{result['first_epoch_s']:.1f} s ({phases}); peak RSS {result['peak_rss'] / gib:.2f} GiB")
    print(f"one numpy thread: draw the edges ({result['reference_draw_s']:.1f} s) and sort their "
          f"{result['reference_entries']:,} entries into the CSR and the CSR of the transpose: "
          f"{result['reference_s']:.1f} s")
    print(f"first epoch / reference: {result['ratio']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("generate", "first-epoch", "read", "table"))
    parser.add_argument("spec", nargs="*", help="the generated graph (default rmat:scale=21,edge_factor=16); for "
                        "table: NAME=REPORT pairs")
    parser.add_argument("--nprocs", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", help="write the measurements as JSON")
    args = parser.parse_args(argv)
    if args.what == "table":
        text = table(args.spec)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        return 0
    if len(args.spec) > 1:
        parser.error(f"{args.what} takes one graph")
    if args.what == "read":
        if args.spec and not (args.spec[0].isdigit() and int(args.spec[0]) > 0):
            parser.error(f"read takes a positive number of edges, got {args.spec[0]!r}")
        result = read(int(args.spec[0]) if args.spec else 5_000_000)
    else:
        spec = args.spec[0] if args.spec else DEFAULT_SPEC
        result = generate(spec) if args.what == "generate" else first_epoch(spec, args.nprocs, args.device)
    result["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
    _print(result)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
