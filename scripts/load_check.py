"""How the CPU kernels hold up on a shared machine: the epoch quiet and with busy processes beside it, per way of
sharing out the kernels' work (``MGGCN_CPU_KERNELS``: shared, static, simple; mggcn.kernels.policy).

Every path runs as mggcn's own processes do, with OpenMP's waiting threads asleep (``OMP_WAIT_POLICY=PASSIVE``,
mggcn.utils.system.openmp_waits_passively); a path named with ``+spin`` (``shared+spin``) runs with OpenMP's own
waiting instead (the variable unset: its threads spin a while before they sleep), one with ``+float``
(``shared+float``) with the shared kernels' workers left where the scheduler puts them instead of one per core
(``MGGCN_PIN_WORKERS=0``, mggcn.kernels.policy.worker_cpus), and one with ``+gather`` or ``+mkl``
(``shared+gather``) with whole blocks multiplied by that SpMM kernel (``MGGCN_CPU_SPMM``; otherwise the CPU's own,
mggcn.kernels.policy.cpu_spmm).

Every measurement is a fresh process training a GCN at P = 1 on the same generated graph
(``synthetic:n=NODES,degree=DEGREE``); the epoch is the median after the warm-up. Rounds run each path quiet, then
loaded (``--busy`` processes spinning, ``yes``, started before the process and stopped after it), one path after
the other, so that the paths see the same machine. Prints a table of the median round: quiet and loaded epoch,
loaded / quiet, and each path against the simple path under the same load; then whether the paths' losses agree.
``--pyg`` also runs ``mggcn bench`` once, quiet, on its graph of the same size (mggcn at P = 1 and PyG's GCNConv)
and prints mggcn's epoch over PyG's.

    python scripts/load_check.py                      # 100,000 vertices, degree 50, 128-128-10, 3 rounds
    python scripts/load_check.py --paths shared,simple --repeats 5 --pyg --out load.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from mggcn.kernels.policy import CPU_KERNELS, CPU_KERNELS_ENV, CPU_SPMM_ENV, CPU_SPMMS, PIN_WORKERS_ENV
from mggcn.utils.system import OPENMP_WAIT, OPENMP_WAIT_ENV

SPIN = "+spin"  # a path's suffix: OpenMP's own waiting
FLOAT = "+float"  # a path's suffix: the shared kernels' workers not pinned to a core each
SPMMS = {f"+{k}" for k in CPU_SPMMS}  # a path's suffix: whole blocks multiplied by this SpMM kernel
PATHS = ("shared", "shared" + FLOAT, "simple")  # the default comparison
BUSY_SECONDS = 900  # a busy process ends by itself after this, should this script be killed before it stops it


def _path(path: str) -> tuple[str, set[str]]:
    """A path's kernels and its suffixes."""
    kernels, *suffixes = path.split("+")
    return kernels, {f"+{s}" for s in suffixes}


def _known(path: str) -> bool:
    kernels, suffixes = _path(path)
    return kernels in CPU_KERNELS and suffixes <= {SPIN, FLOAT} | SPMMS and len(suffixes & SPMMS) <= 1


def _worker(args: argparse.Namespace) -> None:
    """One measurement: train, print the median epoch and phases and the losses as one JSON line."""
    import mggcn

    result = mggcn.train(f"synthetic:n={args.nodes},degree={args.degree},features={args.features}", nprocs=1,
                         hidden=(args.hidden,), epochs=args.warmup + args.epochs, quiet=True, seed=args.seed)
    timed = result.history[args.warmup:]
    print(json.dumps({key: statistics.median(r[key] for r in timed) for key in ("epoch_s", "spmm", "gemm")}
                     | {"losses": [r["loss"] for r in result.history]}))


def _start_busy(count: int) -> list[subprocess.Popen]:
    """``count`` processes spinning on a core each (``yes``), each in its own session so that stopping it stops
    ``timeout`` and ``yes`` both."""
    return [subprocess.Popen(["timeout", str(BUSY_SECONDS), "yes"], stdout=subprocess.DEVNULL,
                             start_new_session=True) for _ in range(count)]


def _stop_busy(busy: list[subprocess.Popen]) -> None:
    for p in busy:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def _measure(args: argparse.Namespace, path: str, busy: int) -> dict:
    """One fresh process with ``path``'s kernels, ``busy`` processes spinning beside it."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--nodes", str(args.nodes), "--degree",
           str(args.degree), "--features", str(args.features), "--hidden", str(args.hidden), "--epochs",
           str(args.epochs), "--warmup", str(args.warmup), "--seed", str(args.seed)]
    kernels, suffixes = _path(path)
    env = {k: v for k, v in os.environ.items() if k not in (OPENMP_WAIT_ENV, PIN_WORKERS_ENV, CPU_SPMM_ENV)}
    env[CPU_KERNELS_ENV] = kernels
    if SPIN not in suffixes:
        env[OPENMP_WAIT_ENV] = os.environ.get(OPENMP_WAIT_ENV, OPENMP_WAIT)
    if FLOAT in suffixes:
        env[PIN_WORKERS_ENV] = "0"
    for spmm in suffixes & SPMMS:
        env[CPU_SPMM_ENV] = spmm[1:]
    procs = _start_busy(busy)
    try:
        if procs:
            print(f"  busy processes {' '.join(str(p.pid) for p in procs)} started", flush=True)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    finally:
        _stop_busy(procs)
        if procs:
            print(f"  busy processes {' '.join(str(p.pid) for p in procs)} stopped", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"load_check: the {path} measurement failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _pyg(args: argparse.Namespace) -> dict:
    """mggcn bench, quiet, at P = 1 with PyG: the two epochs (same graph, same run), and mggcn's roofline floor
    (its GEMM flops and SpMM bytes over the rates the bench measured right after), which bounds how far under PyG's
    epoch mggcn's can go on this machine."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        cmd = ["mggcn", "bench", "--nodes", str(args.nodes), "--degree", str(args.degree), "--features",
               str(args.features), "--hidden", str(args.hidden), "--nprocs", "1", "--partition", "random-local",
               "--epochs", str(args.epochs), "--warmup", str(args.warmup), "--out", out]
        subprocess.run(cmd, check=True, capture_output=True, timeout=args.timeout * 4)
        with open(out) as f:
            rows = json.load(f)["rows"]
    # the bench's JSON says null for a number not measured (an out-of-memory row): NaN here, as the ratios print it
    epochs = {r["kind"]: math.nan if r["epoch_s"] is None else r["epoch_s"] for r in rows}
    floor = next(r["floor"]["floor_s"] for r in rows if r["kind"] == "mggcn")
    floor = math.nan if floor is None else floor
    return {"mggcn_s": epochs["mggcn"], "pyg_s": epochs["pyg"], "ratio": epochs["mggcn"] / epochs["pyg"],
            "floor_s": floor, "floor_ratio": floor / epochs["pyg"]}


def _table(results: dict, paths: list[str]) -> list[str]:
    """The median round of every path: quiet, loaded, loaded / quiet, and against the simple path (if measured)."""
    med = {p: {c: statistics.median(r[c]["epoch_s"] for r in results[p]) for c in ("quiet", "loaded")}
           for p in paths}
    lines = [f"{'path':12} {'quiet s':>8} {'loaded s':>9} {'loaded/quiet':>13} {'quiet/simple':>13} "
             f"{'loaded/simple':>14}"]
    for p in paths:
        q, ld = med[p]["quiet"], med[p]["loaded"]
        vs = (f"{q / med['simple']['quiet']:13.2f} {ld / med['simple']['loaded']:14.2f}" if "simple" in med
              else f"{'-':>13} {'-':>14}")
        lines.append(f"{p:12} {q:8.3f} {ld:9.3f} {ld / q:13.2f} {vs}")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--degree", type=int, default=50)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=6, help="timed epochs after the warm-up (default 6)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="rounds over the paths (default 3)")
    ap.add_argument("--paths", default=",".join(PATHS),
                    help=f"kernel paths to compare, each optionally with {SPIN} and {FLOAT} "
                         f"(default: {','.join(PATHS)})")
    ap.add_argument("--busy", type=int, default=1, help="busy processes beside the loaded epochs (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per measurement (default 600)")
    ap.add_argument("--pyg", action="store_true", help="also mggcn bench, quiet, for mggcn's epoch over PyG's")
    ap.add_argument("--out", help="write every measurement as JSON here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)
    paths = args.paths.split(",")
    unknown = sorted({p for p in paths if not _known(p)})
    if unknown:
        ap.error(f"--paths: unknown {', '.join(unknown)} (choose from {', '.join(CPU_KERNELS)}, each optionally "
                 f"with {SPIN}, {FLOAT} and one of {', '.join(sorted(SPMMS))})")
    start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"load_check {start}: {args.nodes} vertices, degree {args.degree}, {args.features}-{args.hidden} GCN, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[str, list[dict]] = {p: [] for p in paths}
    for rnd in range(args.repeats):
        for p in paths:
            quiet, loaded = _measure(args, p, 0), _measure(args, p, args.busy)
            results[p].append({"quiet": quiet, "loaded": loaded})
            print(f"round {rnd + 1} {p}: quiet {quiet['epoch_s']:.3f} s, loaded {loaded['epoch_s']:.3f} s "
                  f"(spmm {quiet['spmm']:.3f} -> {loaded['spmm']:.3f}, gemm {quiet['gemm']:.3f} -> "
                  f"{loaded['gemm']:.3f})", flush=True)
    lines = _table(results, paths)
    losses = {p: results[p][0]["quiet"]["losses"] for p in paths}
    same = [p for p in paths if losses[p] == losses[paths[0]]]
    lines.append(f"losses bitwise equal to {paths[0]}'s: {', '.join(same)}")
    report = {"date": start, "args": vars(args), "results": results,
              "load_average_end": os.getloadavg()[0]}
    if args.pyg:
        report["pyg"] = _pyg(args)
        pyg = report["pyg"]
        lines.append(f"quiet, mggcn bench's graph: mggcn {pyg['mggcn_s']:.3f} s, PyG {pyg['pyg_s']:.3f} s, "
                     f"mggcn/PyG {pyg['ratio']:.3f}; mggcn's floor {pyg['floor_s']:.3f} s, floor/PyG "
                     f"{pyg['floor_ratio']:.3f}")
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
