"""A configuration's row of the report, from what its processes measured, and the ratios between rows."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from mggcn.config import TrainConfig
from mggcn.nn.models import model_options, model_type
from mggcn.tools.bench.options import BenchOptions, model_settings
from mggcn.tools.plan import plan_memory
from mggcn.tools.roofline import Machine, epoch_floor, mggcn_work, pyg_work
from mggcn.utils.timing import PHASES

__all__ = ["Run", "median", "summarize", "add_ratios", "OOM_NULLS"]

# a row's numbers that an out-of-memory row has none of
OOM_NULLS = ("epoch_s", "test_acc", "loss", "peak", "net", "whole", "floor", "over_floor", "machine",
             "threads_per_rank", "predicted", "measured_over_predicted", "raw_over_predicted", "whole_over_plan_base",
             "whole_net_over_plan")


@dataclass
class Run:
    """One configuration, and what its rounds measured."""

    name: str
    kind: str  # mggcn | pyg
    nprocs: int = 1
    overlap: bool = True
    partition: str = ""
    tile_bytes: int | None = None
    shm: str = "auto"
    files: bool = False  # --saint-graph: read the SAINT files whole, not the prepared directory
    precision: str | None = None  # mggcn's --precision (None: the bench's)
    results: list = field(default_factory=list)  # the ranks' results of the first round
    round_s: list = field(default_factory=list)  # the median epoch of each round
    histories: list = field(default_factory=list)  # rank 0's history of each round
    machines: list = field(default_factory=list)  # the rates measured right after each round
    oom: dict | None = None  # it ran out of memory in its first round: the error, the ranks' setup notes, the round


def median(history: list[dict], key: str, warmup: int) -> float:
    """The median of ``key`` over the epochs after the warm-up (over all of them when there are no others)."""
    values = [r[key] for r in history[warmup:] if key in r] or [r[key] for r in history if key in r]
    return statistics.median(values) if values else float("nan")


def summarize(run: Run, opts: BenchOptions, graph: dict) -> dict:
    """The row of a configuration: its times, phases, accuracy, memory against the plan and PyG, and floor."""
    if not run.results:
        return _oom_row(run, opts, graph)
    first = run.results[0]
    history = first["history"]
    row = {"name": run.name, "kind": run.kind, "nprocs": run.nprocs, "overlap": run.overlap,
           "shm": bool(first.get("shm")), "oom": False,
           "partition": run.partition, "epoch_s": statistics.median(run.round_s), "round_s": list(run.round_s),
           "epochs_s": [r["epoch_s"] for r in history], "test_acc": history[-1]["test_acc"],
           "loss": history[-1]["loss"], "threads_per_rank": first["threads"],
           "precision": run.precision or opts.precision if run.kind == "mggcn" else None}
    row.update(_setup([r["setup"] for r in run.results]))
    timed = [r for h in run.histories for r in h[opts.warmup:]] or history
    phase_keys = (*PHASES, "other") if run.kind == "mggcn" else ("forward", "backward", "optimizer")
    row["phases"] = {k: median(timed, k, 0) for k in phase_keys}
    ranks = [_rank_memory(run, r, opts, graph) for r in run.results]
    row["memory"] = ranks
    row.update(_row_memory(run, ranks, opts))
    row.update(_floor(run, row["epoch_s"], opts, graph))
    return row


def _setup(records: list[dict | None]) -> dict:
    """The setup of a configuration's ranks: the slowest rank's seconds, and each phase's longest; None when a rank
    did not get through its setup."""
    done = [r for r in records if r is not None]
    phases: dict[str, float] = {}
    for r in done:
        for k, v in r["phases"].items():
            phases[k] = max(phases.get(k, 0.0), v)
    seconds = max(r["seconds"] for r in done) if done and len(done) == len(records) else None
    return {"setup_s": seconds, "setup_phases": phases}


def _model_settings(opts: BenchOptions) -> dict:
    """The bench model's own settings (GAT's heads, GIN's batch norms) as :func:`plan_memory`'s keywords."""
    cfg = TrainConfig(model=opts.model, **model_settings(opts))
    return {k: v for k, v in model_options(cfg).items() if k != "train_eps"}


def _plan(run: Run, opts: BenchOptions, graph: dict, **rank):
    """The plan of ``run``'s configuration on ``graph``; ``rank``: what a rank measured of its shard (without it,
    the plan of a rank of mean nonzeros)."""
    return plan_memory(graph["nodes"], graph["nnz"] - graph["nodes"], graph["features"], graph["classes"],
                       opts.hidden, run.nprocs, train=graph["train"], model=opts.model, device=opts.device,
                       precision=run.precision or opts.precision, **rank, **_model_settings(opts))


def _rank_memory(run: Run, r: dict, opts: BenchOptions, graph: dict) -> dict:
    """One rank's memory, and for mggcn what the plan predicts for it."""
    cuda = opts.device == "cuda"
    mem = r["memory"]
    entry = {"rank": r["rank"], **mem, "net": mem["peak"] - mem["base"]}
    if run.kind != "mggcn":
        return entry
    plan = _plan(run, opts, graph, rank_nnz=r["nnz"], rank_nnz_t=r["nnz_t"], symmetric=r["shared_t"],
                 tile_cols=r["tile_cols"], rank_nnz_train_t=r.get("nnz_train_t"), gather=r["gather"])
    measured = mem["cuda_peak"] if cuda else entry["net"]
    entry.update(predicted=plan.total, plan_parts=plan.parts, held=r["held"], workspace=r["workspace"],
                 measured_over_predicted=measured / plan.total, raw_over_predicted=mem["peak"] / plan.total)
    base = graph.get("baseline")
    if base and not cuda:  # the whole process against the plan plus the interpreter, measured in this run
        entry.update(whole_over_plan_base=mem["whole"] / (plan.total + base["import"]),
                     whole_net_over_plan=(mem["whole"] - base["warm"]) / plan.total)
    return entry


def _row_memory(run: Run, ranks: list[dict], opts: BenchOptions) -> dict:
    """A configuration's memory: the largest of its ranks'."""
    cuda = opts.device == "cuda"
    out = {"peak": max(e["cuda_peak"] if cuda else e["peak"] for e in ranks),
           "net": max(e["cuda_peak"] if cuda else e["net"] for e in ranks),
           "whole": None if cuda else max(e["whole"] for e in ranks)}
    if run.kind == "mggcn":
        for key in ("predicted", "measured_over_predicted", "raw_over_predicted"):
            out[key] = max(e[key] for e in ranks)
        for key in ("whole_over_plan_base", "whole_net_over_plan"):
            out[key] = max((e[key] for e in ranks if key in e), default=None)
    return out


def _floor(run: Run, epoch_s: float, opts: BenchOptions, graph: dict) -> dict:
    """The roofline floor of an epoch, from the median over rounds of the rates measured right after them."""
    nnz = graph["nnz"] if model_type(opts.model).self_loops else graph["nnz"] - graph["nodes"]
    if run.kind == "mggcn":
        work = mggcn_work(graph["nodes"], nnz, opts.dims, run.nprocs, model=opts.model, train=graph["train"])
    else:
        work = pyg_work(graph["nodes"], nnz, opts.dims, model=opts.model)
    machine = Machine(device=run.machines[0]["device"], threads=run.machines[0]["threads"],
                      bandwidth=statistics.median(m["bandwidth"] for m in run.machines),
                      gemm_rate=statistics.median(m["gemm_rate"] for m in run.machines))
    floor = epoch_floor(work, machine, run.nprocs, shared=opts.device != "cuda")
    return {"machine": machine.as_dict(), "floor": floor, "over_floor": epoch_s / floor["floor_s"]}


def _oom_row(run: Run, opts: BenchOptions, graph: dict) -> dict:
    """The row of a configuration that ran out of memory: what it got through of its setup and, for mggcn, its
    plan (of a rank of mean nonzeros: the run did not say its ranks'), the rest null."""
    oom = run.oom or {}
    row = {"name": run.name, "kind": run.kind, "nprocs": run.nprocs, "overlap": run.overlap, "shm": None,
           "partition": run.partition, "oom": True, "error": oom.get("error"), "round": oom.get("round"),
           "oom_during": oom.get("during"), "round_s": [], "epochs_s": [], "phases": {}, "memory": []}
    row.update(dict.fromkeys(OOM_NULLS))
    row.update(_setup(oom.get("notes", [None] * run.nprocs)))
    if row["oom_during"] != "training":
        row["setup_s"] = None  # it did not get to its first epoch
    if run.kind == "mggcn":
        row["predicted"] = _plan(run, opts, graph).total
    return row


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def add_ratios(report: dict) -> None:
    """Every row against PyG's (null where either side has no number: an out-of-memory row), and overlap on against
    off."""
    rows = report["rows"]
    pyg = next((r for r in rows if r["kind"] == "pyg"), None) or {}
    for r in rows:
        for key, of in (("time_vs_pyg", "epoch_s"), ("setup_vs_pyg", "setup_s"), ("peak_vs_pyg", "peak"),
                        ("net_vs_pyg", "net"), ("whole_vs_pyg", "whole")):
            r[key] = _ratio(r.get(of), pyg.get(of))
    report["overlap"] = _overlap(rows, report["options"])
    report["precision"] = _precision(rows, report["options"])


def _precision(rows: list[dict], options: dict) -> dict:
    """Each compared precision against the bench's own at the same P (main partition, overlap on): epoch time
    ratio and the change of the test accuracy, in points."""
    base = options.get("precision", "fp32")
    main = options["partitions"][0]
    measured = [r for r in rows if r["kind"] == "mggcn" and not r.get("oom") and r["overlap"]
                and r["partition"] == main and r.get("precision")]
    ref = {r["nprocs"]: r for r in measured if r["precision"] == base}
    out = {}
    for r in measured:
        this = ref.get(r["nprocs"])
        if r["precision"] != base and this is not None:
            out[f"{r['precision']} P={r['nprocs']}"] = {
                "epoch_s": r["epoch_s"], "base": base, "base_s": this["epoch_s"],
                "vs_base": r["epoch_s"] / this["epoch_s"], "test_acc_change": 100 * (r["test_acc"] - this["test_acc"])}
    return out


def _overlap(rows: list[dict], options: dict) -> dict:
    """P > 1 with the broadcasts overlapped against not, round by round (off / on)."""
    def key(r: dict) -> str:  # P, and the broadcast's transport where gloo's is compared with shared memory
        return f"{r['nprocs']} {'shm' if r['shm'] else 'gloo'}" if options.get("compare_shm") else str(r["nprocs"])

    measured = [r for r in rows if r["kind"] == "mggcn" and not r.get("oom")]
    main = options["partitions"][0]
    on = {key(r): r for r in measured if r["overlap"] and r["nprocs"] > 1 and r["partition"] == main}
    overlap = {}
    for off in measured:
        if off["overlap"] or key(off) not in on:
            continue
        this = on[key(off)]
        pairs = [b / a for a, b in zip(this["round_s"], off["round_s"])]  # off / on, round by round
        overlap[key(off)] = {
            "on_s": this["epoch_s"], "off_s": off["epoch_s"], "speedup": off["epoch_s"] / this["epoch_s"],
            "speedup_rounds": pairs, "comm_wait_on_s": this["phases"]["comm_wait"],
            "comm_wait_off_s": off["phases"]["comm_wait"]}
    return overlap
