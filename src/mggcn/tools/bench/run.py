"""The whole benchmark: the graph, the probes, then every configuration in its own processes, round after round,
the report saved after every step."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, replace

import torch

from mggcn.distributed.context import resolve_device
from mggcn.distributed.launch import JobInterrupted, WorkerError, run_workers
from mggcn.nn.models import model_type
from mggcn.tools.bench.graph import (
    SIZES,
    cached_info,
    check_cached,
    generate_worker,
    info_worker,
    prepare_worker,
    remove_stale_partials,
    saint_made,
)
from mggcn.tools.bench.limits import check_gpu_memory, gpu_memory_worker, out_of_memory, read_notes
from mggcn.tools.bench.options import BenchOptions, model_settings
from mggcn.tools.bench.probes import baseline_worker, broadcast_worker, describe_host, machine_worker
from mggcn.tools.bench.pyg import PYG_LAST_SETUP_PHASE, pyg_adjacency, pyg_worker
from mggcn.tools.bench.summary import Run, add_ratios, median, summarize
from mggcn.tools.bench.table import write_report
from mggcn.tools.bench.workers import MGGCN_LAST_SETUP_PHASE, mggcn_worker
from mggcn.training.outputs import check_distinct, check_output
from mggcn.training.precision import check_precision_device
from mggcn.utils.cleanup import private_directory
from mggcn.utils.errors import ConfigError
from mggcn.utils.files import check_writable
from mggcn.utils.parallel import available_cores

__all__ = ["run_bench", "configurations", "rounds", "run_one"]


def run_bench(opts: BenchOptions, log=print, out: str | None = None, command: str | None = None) -> dict:
    """Run every configuration; the report (also what ``--out`` writes), with when, where and by which ``command``
    it was measured (``date``, ``host``, ``command``: what a table made from it says).

    With ``out``, the report is written there after the graph, after every configuration and at the end, whatever
    happens: a configuration that runs out of memory is a row that says so; one that fails otherwise is listed in
    ``failed`` with its error; the others still run. A step that stops the bench (the graph cannot be made, a
    ``--gpu-memory`` larger than the GPU, Ctrl-C) is named in ``error`` before the exception goes on. ``complete``
    says whether every step ran.
    """
    check_output("out", out)  # before an hour of measuring, not after it
    check_distinct([("out", out), ("graph_cache", opts.graph_cache)])  # the report would be written over the graph
    if opts.device == "cuda":
        resolve_device("cuda")  # no GPU: one line now, not every configuration failing after the graph is made
    check_precision_device(opts.precision, opts.device)
    for precision in opts.compare_precision:
        check_precision_device(precision, opts.device, "compare_precision")
    threads = opts.threads or available_cores()
    gpus = torch.cuda.device_count() if opts.device == "cuda" else 0
    report = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "host": describe_host(), "command": command,
              "options": {**asdict(opts), "threads": threads}, "graph": None, "machine": None, "broadcast": None,
              "rows": [], "failed": [], "load_average": {"before": os.getloadavg(), "after": None},
              "complete": False}

    def save() -> None:
        report["load_average"]["after"] = os.getloadavg()
        add_ratios(report)
        if out:
            write_report(report, out)

    try:
        _run_all(opts, threads, gpus, log, report, save)
        report["complete"] = True
    except BaseException as err:  # the report says where it stopped; the error goes on to the caller
        report["error"] = f"{type(err).__name__}: {err}"
        raise
    finally:
        save()
    return report


def _run_all(opts: BenchOptions, threads: int, gpus: int, log, report: dict, save) -> None:
    """Every step of the bench, into ``report``; ``save()`` after each."""
    if opts.device == "cuda":
        found = run_workers(gpu_memory_worker, 1, timeout_s=opts.timeout_s)[0]
        report["host"]["gpus"] = found["names"]
        if opts.gpu_memory is not None:
            check_gpu_memory(opts.gpu_memory, found["totals"], max(opts.nprocs))
            report["gpu_memory"] = {"cap": opts.gpu_memory, "totals": found["totals"]}
    with private_directory("mggcn-bench-") as tmp:  # the graphs' copies go with it, even should the bench be killed
        path = _graph_step(opts, threads, tmp, log, report)
        baseline = run_workers(baseline_worker, 1, (opts.device,), timeout_s=opts.timeout_s)[0]
        report["graph"]["baseline"] = baseline
        log(f"interpreter baseline: {baseline['import'] / 2**20:.0f} MiB after importing torch and mggcn, "
            f"{baseline['warm'] / 2**20:.0f} MiB once its kernels and optimizer ran")
        prepared = _prepare_step(path, tmp, opts, log, report) if opts.saint_graph else None
        save()
        _machine_step(opts, threads, log, report)
        save()
        _configurations_step(opts, threads, gpus, (path, prepared), tmp, log, report, save)
        if opts.device == "cpu" and max(opts.nprocs) > 1:
            _broadcast_step(opts, log, report)


def _graph_step(opts: BenchOptions, threads: int, tmp: str, log, report: dict) -> str:
    """Generate the graph (or reuse ``--graph-cache``); its path."""
    path = opts.graph_cache or os.path.join(tmp, "saint" if opts.saint_graph else "graph")
    start = time.perf_counter()
    for stale in remove_stale_partials(path) if opts.graph_cache else ():
        log(f"graph cache: removed {stale}, left by a bench that was stopped before it finished writing the graph")
    if opts.graph_cache and os.path.exists(path):
        if opts.saint_graph:
            from mggcn.data.prepared.reader import is_prepared

            if is_prepared(path):  # one the bench wrote without --saint-graph: its rank would name an fmt= option
                raise ConfigError(f"graph_cache: {path} holds a prepared graph, not GraphSAINT's files (it was made "
                                  "without saint_graph): give another graph_cache=", "graph_cache")
            graph = run_workers(info_worker, 1, (path,), timeout_s=opts.timeout_s)[0]
            check_cached(path, saint_made(path) or {k: graph[k] for k in SIZES}, opts)
        else:
            graph = cached_info(path, opts)
        graph.update(cached=True, generate_s=None, write_s=None, nnz_per_s=None)
        made = f"reused {path}"
    else:
        _make_parent(path)
        graph = run_workers(generate_worker, 1, (opts, path, threads), timeout_s=opts.timeout_s)[0]
        made = (f"generated in {graph['generate_s']:.1f} s, {graph['nnz_per_s'] / 1e6:.1f}M nonzeros/s; written in "
                f"{graph['write_s']:.1f} s")
    report["graph"] = graph
    log(f"graph: {graph['nodes']:,} vertices, {graph['nnz']:,} nonzeros of Â, {graph['features']} features, "
        f"{graph['classes']} classes ({made}; {time.perf_counter() - start:.0f} s)")
    return path


def _make_parent(path: str) -> None:
    """The folder a new ``--graph-cache`` goes in, made as ``mkdir -p`` would."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as err:  # a file on the way, no permission
        raise ConfigError(f"graph_cache: {path}: cannot make its folder {parent} ({err.strerror})",
                          "graph_cache") from None
    check_writable("graph_cache", path, parent)  # before the graph is generated (/proc, a read-only mount)


def _prepare_step(path: str, tmp: str, opts: BenchOptions, log, report: dict) -> str:
    """``--saint-graph``: prepare the GraphSAINT directory once; the prepared directory."""
    prepared = os.path.join(tmp, "prepared")
    start = time.perf_counter()
    report["graph"]["prepare"] = run_workers(prepare_worker, 1, (path, prepared), timeout_s=opts.timeout_s)[0]
    log(f"prepared for any P ({time.perf_counter() - start:.0f} s, peak "
        f"{report['graph']['prepare']['peak'] / 2**20:.0f} MiB)")
    return prepared


def _machine_step(opts: BenchOptions, threads: int, log, report: dict) -> None:
    try:
        machine = run_workers(machine_worker, 1, (opts, threads), timeout_s=opts.timeout_s)[0]
    except WorkerError as err:  # the configurations measure the machine again after their epochs
        _stop_if_interrupted(err)
        report["failed"].append({"name": "machine probe", "kind": "probe", "error": str(err)})
        log(f"  machine probe: FAILED: {err}")
        return
    report["machine"] = machine.as_dict()
    log(f"machine: {machine.bandwidth / 1e9:.1f} GB/s copy, {machine.gemm_rate / 1e9:.0f} GFLOP/s GEMM "
        f"({machine.threads} threads)")


def _broadcast_step(opts: BenchOptions, log, report: dict) -> None:
    try:
        comm = run_workers(broadcast_worker, 2, (opts.timeout_s,), timeout_s=opts.timeout_s)[0]
    except WorkerError as err:
        _stop_if_interrupted(err)
        report["failed"].append({"name": "loopback broadcast", "kind": "probe", "error": str(err)})
        log(f"  loopback broadcast: FAILED: {err}")
        return
    report["broadcast"] = comm
    busy = "" if comm["busy"] is None else f", cores {100 * comm['busy']:.0f}% busy"
    log(f"loopback broadcast: {comm['bytes_per_s'] / 1e9:.2f} GB/s{busy}")


def configurations(opts: BenchOptions, gpus: int) -> list[Run]:
    """Every configuration the options ask for, mggcn's first, PyG's last."""
    main, others = opts.partitions[0], opts.partitions[1:]
    runs = [Run(f"mggcn P={p} {main}", "mggcn", p, True, main) for p in opts.nprocs]
    runs += [Run(f"mggcn P={p} {main} no-overlap", "mggcn", p, False, main) for p in opts.nprocs if p > 1]
    runs += [Run(f"mggcn P={p} {o}", "mggcn", p, True, o) for o in others for p in opts.nprocs if p <= 2]
    runs = [replace(r, tile_bytes=opts.tile_bytes, shm=opts.shm) for r in runs]
    if opts.compare_shm and opts.device == "cpu":
        runs += [Run(f"mggcn P={p} {main} gloo{'' if on else ' no-overlap'}", "mggcn", p, on, main,
                     opts.tile_bytes, "off") for p in opts.nprocs if p > 1 for on in (True, False)]
    runs += [Run(f"mggcn P=1 {o} {_tiles_label(t)}", "mggcn", 1, True, o, t)
             for t in opts.compare_tiles for o in opts.partitions]
    runs += [Run(f"mggcn P={p} {main} {precision}", "mggcn", p, True, main, opts.tile_bytes, opts.shm,
                 precision=precision) for precision in opts.compare_precision if precision != opts.precision
             for p in opts.nprocs]
    if opts.saint_graph:  # P ranks read their shares of the prepared directory; P = 1 also the SAINT files whole
        runs = [r for r in runs if r.overlap]
        runs.insert(1, Run(f"mggcn P=1 {main}, SAINT files", "mggcn", 1, True, main, opts.tile_bytes, opts.shm,
                           files=True))
    if opts.device == "cuda":
        runs = [r for r in runs if r.nprocs <= gpus]
    if opts.pyg:
        runs.append(Run(f"PyG {model_type(opts.model).pyg_label} ({pyg_adjacency(opts)})", "pyg"))
    return runs


def rounds(runs: list[Run], opts: BenchOptions) -> list[list[Run]]:
    """Round 1 runs every configuration; later rounds the mggcn ones again (PyG too with ``repeat_pyg``), in the same
    order, so that a slow spell of a shared machine falls on every configuration alike."""
    again = [r for r in runs if r.kind == "mggcn" or opts.repeat_pyg]
    return [runs] + [again] * max(0, opts.repeats - 1)


def _tiles_label(tile_bytes: int) -> str:
    return "untiled" if tile_bytes == 0 else f"tiles {tile_bytes >> 10}K"


def _configurations_step(opts: BenchOptions, threads: int, gpus: int, paths: tuple[str, str | None], tmp: str,
                         log, report: dict, save) -> None:
    """Every configuration, round after round; a row for each that ran (or ran out of memory)."""
    runs = configurations(opts, gpus)
    todo = rounds(runs, opts)
    path, prepared = paths
    for number, this_round in enumerate(todo, 1):
        for index, run in enumerate(this_round):
            if run.oom or any(f["name"] == run.name for f in report["failed"]):
                continue
            start = time.perf_counter()
            source = prepared if prepared and run.kind == "mggcn" and not run.files else path
            notes = tempfile.mkdtemp(prefix=f"notes-{number}-{index}-", dir=tmp)
            try:
                results = run_one(run, opts, source, threads, notes)
            except WorkerError as err:
                _stop_if_interrupted(err)
                _record_failure(run, err, number, notes, log, report)
                report["rows"][:] = [summarize(r, opts, report["graph"]) for r in runs if r.results or r.oom]
                save()
                continue
            run.results = run.results or results
            run.histories.append(results[0]["history"])
            run.machines.append(results[0]["machine"])
            run.round_s.append(median(results[0]["history"], "epoch_s", opts.warmup))
            label = f" (round {number})" if len(todo) > 1 else ""
            log(f"  {run.name}{label}: {run.round_s[-1]:.3f} s/epoch, first epoch after "
                f"{max(r['setup']['seconds'] for r in results):.1f} s ({time.perf_counter() - start:.0f} s)")
            report["rows"][:] = [summarize(r, opts, report["graph"]) for r in runs if r.results or r.oom]
            save()


def _stop_if_interrupted(err: WorkerError) -> None:
    """A configuration's workers stopped by Ctrl-C or SIGTERM stop the whole bench, as Ctrl-C of the bench itself
    does (its report then says it is not complete), instead of counting as one failed configuration."""
    if isinstance(err, JobInterrupted):
        raise KeyboardInterrupt(str(err)) from None


def _record_failure(run: Run, err: WorkerError, number: int, notes: str, log, report: dict) -> None:
    """A configuration that ran out of memory in its first round becomes a row that says so; any other failure
    (and running out of memory in a later round, after rows of the earlier ones) goes to ``failed``."""
    oom = out_of_memory(str(err))
    if oom and not run.results:
        ranks = read_notes(notes, run.nprocs)
        last = MGGCN_LAST_SETUP_PHASE if run.kind == "mggcn" else PYG_LAST_SETUP_PHASE
        during = "training" if ranks and all(n and last in n["phases"] for n in ranks) else \
            "setup" if any(ranks) else None
        run.oom = {"error": str(err), "round": number, "notes": ranks, "during": during}
        log(f"  {run.name}: out of memory{f' in its {during}' if during else ''}: {err}")
        return
    report["failed"].append({"name": run.name, "kind": run.kind, "nprocs": run.nprocs, "round": number,
                             "error": str(err), **({"oom": True} if oom else {})})
    log(f"  {run.name}: {'out of memory' if oom else 'FAILED'}: {err}")


def run_one(run: Run, opts: BenchOptions, path: str, threads: int, notes: str | None = None) -> list:
    """One round of a configuration in fresh processes: each rank's result."""
    if run.kind == "pyg":
        return run_workers(pyg_worker, 1, (path, opts, threads, notes), timeout_s=opts.timeout_s)
    config = dict(model=opts.model, hidden=opts.hidden, epochs=opts.warmup + opts.epochs, overlap=run.overlap,
                  partition=run.partition, seed=opts.seed, trace_epoch=0, tile_bytes=run.tile_bytes, shm=run.shm,
                  precision=run.precision or opts.precision, **model_settings(opts))
    args = (path, config, opts, max(1, threads // run.nprocs), threads, notes)
    return run_workers(mggcn_worker, run.nprocs, args, timeout_s=opts.timeout_s)
