"""One training job from dataset to outputs, as every rank runs it (under mggcn's launcher or under torchrun).

:func:`check_job` runs first, in the launching process, so that bad input stops the job before any worker starts;
:func:`run_train_job` is the worker: join the process group, load this rank's shard, train, write the outputs.
Outputs are written whole or not at all (:mod:`mggcn.training.outputs`), by rank 0.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch

from mggcn.config import DEFAULT_DATASET, MMAP_THRESHOLD, TrainConfig
from mggcn.data.datasets import Dataset, open_dataset
from mggcn.data.formats import random_features
from mggcn.data.graph import SPLITS, Graph
from mggcn.data.prepared.reader import PreparedDataset
from mggcn.data.prepared.writer import write_dataset
from mggcn.distributed.context import (
    DistContext,
    all_gather_objects,
    broadcast_object,
    check_host_gpus,
    init_distributed,
    job_device,
    rank_environment,
    shutdown,
)
from mggcn.distributed.metis import require_pymetis
from mggcn.distributed.parallel_layout import ParallelLayout
from mggcn.distributed.partition import Shard, check_partition
from mggcn.distributed.sharding import release_dataset
from mggcn.distributed.spmm import check_train_columns
from mggcn.nn.models import make_model, model_options, model_type, operator_for
from mggcn.training.checkpoint import (
    Checkpointer,
    CheckpointError,
    check_compatible,
    check_fits,
    check_resumed_from_the_newest,
    resume_line,
)
from mggcn.training.outputs import check_output, save_model, save_predictions, table_format
from mggcn.training.precision import check_precision_device
from mggcn.training.settings import check_job_settings, check_model_size, check_switch, check_tile_bytes
from mggcn.training.trainer import TrainResult, epoch_width, format_balance, predict_shard, train_shard
from mggcn.utils.errors import ConfigError, GraphError
from mggcn.utils.files import check_writable, link_to_nothing, open_output, write_error
from mggcn.utils.launcher import under_torchrun
from mggcn.utils.parallel import available_cores
from mggcn.utils.progress import epoch_progress
from mggcn.utils.system import StopOnSignal, caller_settings_kept
from mggcn.utils.timing import SetupClock

__all__ = ["TrainJob", "JobResult", "check_job", "check_job_fields", "dataset_reading", "open_job_dataset",
           "run_train_job", "format_epoch", "format_final", "format_labels", "format_setup", "share_dataset"]


@dataclass(frozen=True)
class TrainJob:
    """A training run: what to read, how to train, where the outputs go."""

    dataset: str | Graph = DEFAULT_DATASET
    config: TrainConfig = field(default_factory=TrainConfig)
    fmt: str | None = None
    undirected: bool = False
    dedup: bool = False
    read_options: dict = field(default_factory=dict)  # reader keywords, e.g. features=, labels=, split=
    device: str = "cpu"
    threads: int | None = None
    timeout_s: float = 60.0
    mmap_threshold: int | None = MMAP_THRESHOLD  # host allocator: mggcn.config.MMAP_THRESHOLD (None: glibc's)
    metrics: str | None = None
    save_model: str | None = None
    save_predictions: str | None = None
    keep_predictions: bool = False  # rank 0's result holds the predictions (mggcn.train), saved or not
    quiet: bool = False
    log_every: int = 1
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool | str = False  # True: continue or refuse; "auto": continue, or start at epoch 1 (find_resume)
    clock: SetupClock | None = None  # the job's setup phases since its start (the command's process start)
    read_as: dict | None = None  # reading() of the job whose dataset share_dataset handed over prepared

    def reading(self) -> dict[str, bool]:
        """How the dataset is read, as a saved model's card records it (``predict`` reads its graph so again)."""
        if self.read_as is not None:
            return dict(self.read_as)
        return {"undirected": bool(self.undirected), "dedup": bool(self.dedup),
                "normalize_features": bool(self.read_options.get("normalize_features", False)),
                "random_features": isinstance(self.dataset, str) and random_features(self.fmt, self.read_options)}


@dataclass
class JobResult:
    history: list[dict]
    state_dict: dict[str, torch.Tensor]
    predictions: np.ndarray | None = None
    stopped: str | None = None  # None, "early" or "interrupted"
    best_epoch: int | None = None
    checkpoint: str | None = None
    resumed_from: str | None = None
    final: dict = field(default_factory=dict)  # accuracies of the returned weights in eval mode (TrainResult.final)
    empty_splits: tuple[str, ...] = ()  # splits without a vertex: their accuracies are None


def format_labels(dataset: Dataset) -> str:
    """What the run's first line says of the labels: ``C classes``, or that the accuracies will be micro-F1."""
    if dataset.multilabel:
        return f"multi-label ({dataset.num_classes} labels; accuracies are micro-F1)"
    return f"{dataset.num_classes} classes"


def dataset_identity(dataset: Dataset, content: bool = True) -> dict:
    """What a checkpoint records of its dataset, to refuse resuming against another one: its sizes and, with
    ``content``, a fingerprint of its arrays (a prepared dataset's comes from its manifest; one in memory is hashed,
    once), so that the same data read from another path resumes. A multi-label dataset's says so (``multilabel``:
    its model's outputs are read by σ, not softmax); a single-label one's has no such entry."""
    identity = {"name": str(dataset.name), "num_nodes": dataset.num_nodes, "num_edges": dataset.num_edges,
                "num_features": dataset.num_features, "num_classes": dataset.num_classes}
    if dataset.multilabel:
        identity["multilabel"] = True
    fingerprint = getattr(dataset, "fingerprint", None) if content else None
    if fingerprint:
        identity["fingerprint"] = fingerprint
    return identity


def _print_err(message: str) -> None:
    print(f"mggcn: {message}", file=sys.stderr, flush=True)


def _silent(message: str) -> None:
    pass


def find_resume(job: TrainJob, dataset: Dataset, report: Callable[[str], None] = _print_err
                ) -> tuple[dict, str] | None:
    """The checkpoint ``resume`` continues from: the newest in ``checkpoint_dir`` that reads back intact, checked
    against the dataset and the model (its identity, its weights and optimizer state); None to start at epoch 1.

    ``resume=True`` (``--resume``) refuses, naming the directory and why, when there is nothing to resume from (no
    checkpoint file, or none intact), as a resumed run that silently started over would be; ``resume="auto"``
    (``--resume-or-start``) then starts at epoch 1, saying so. Skipped files are ``report`` ed, never deleted.
    """
    if not (job.resume and job.checkpoint_dir):
        return None
    skipped: list[str] = []

    def skip(message: str) -> None:  # "skipping FILE: why"
        skipped.append(message.removeprefix("skipping "))
        report(message)

    found = Checkpointer(job.checkpoint_dir).latest(skip)
    if found is None:
        why = (f"no intact checkpoint ({len(skipped)} skipped; the newest: {skipped[0]})" if skipped else
               "no checkpoint files")
        if job.resume != "auto":  # the command line names the settings by their flags
            hint = "" if skipped else (" (ckpt-*.pt: a run writes them every K epochs, checkpoint_every=K, and when "
                                       "a signal stops it)")
            raise ConfigError(f"resume: nothing to resume from in {job.checkpoint_dir}: {why}{hint}; to start at "
                              "epoch 1 when there is nothing to resume, ask for resume='auto'", "resume")
        report(f"nothing to resume from in {job.checkpoint_dir} ({why}); starting at epoch 1")
        return None
    state, path = found
    cfg = job.config
    dims = cfg.dims(dataset.num_features, dataset.num_classes)
    check_compatible(state, path, dataset_identity(dataset), dims, cfg.model,
                     {o: getattr(cfg, o) for o in model_type(cfg.model).options}, _function(cfg))
    check_fits(state, path, make_model(cfg.model, dims, activation=cfg.activation, **model_options(cfg)))
    epochs = [r["epoch"] for r in state["history"]]
    # the run goes on after its last record, and says epoch N (counted first: a crafted N may be huge)
    if len(epochs) != state["epoch"] or epochs != list(range(1, len(epochs) + 1)):
        shown = f"epochs {epochs[0]}..{epochs[-1]} ({len(epochs)} records)" if epochs else "no epoch"
        raise CheckpointError(f"{path}: refused: it is of epoch {state['epoch']} but its history holds {shown}")
    if cfg.epochs < state["epoch"]:  # nothing would train, and the weights would be of more epochs than asked
        raise CheckpointError(f"epochs {cfg.epochs}: {path} is already at epoch {state['epoch']}; with resume, "
                              f"epochs is the total: give at least {state['epoch']}", "epochs")
    if cfg.patience <= 0 and state.get("best") is not None:
        # the best weights of a run with patience: this run keeps its last weights, as it would uninterrupted
        return {**state, "best": None}, path
    if cfg.patience > 0 and state.get("best") is None:
        report(f"patience {cfg.patience}: {path} was saved by a run without patience, which kept no best "
               f"weights: early stopping watches from epoch {state['epoch'] + 1} on")
    return found


def _function(cfg: TrainConfig) -> dict:
    """The settings beside the model's shape that decide what its weights compute: σ, and the GCN's Â (the other
    models aggregate as they do whatever ``norm`` says)."""
    kind = model_type(cfg.model)
    norm = {"norm": cfg.norm} if kind.operator("sym") != kind.operator("mean") else {}
    return {"activation": cfg.activation, **norm}


def check_checkpoint_dir(path: str | None) -> None:
    """``checkpoint_dir``: a directory that takes files, or a path where one can be made (its nearest existing
    ancestor takes a new directory)."""
    if path is None:
        return
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ConfigError(f"checkpoint_dir {path}: exists and is not a directory", "checkpoint_dir")
        check_writable("checkpoint_dir", path, path)
        return
    nothing = link_to_nothing(path)  # no directory can be made through a link that loops or leads nowhere
    if nothing is not None:
        raise ConfigError(f"checkpoint_dir {path}: {nothing}", "checkpoint_dir")
    ancestor = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ConfigError(f"checkpoint_dir {path}: {ancestor} is not a directory", "checkpoint_dir")
    check_writable("checkpoint_dir", path, ancestor)


def check_threads(threads: int | None) -> None:
    """``threads`` at most the cores this process may run on: more only oversubscribes them, and a thread pool
    told to start 10^5 threads crashes the process."""
    if threads is None:
        return
    cores = available_cores()
    if not 1 <= threads <= cores:
        raise ConfigError(f"threads {threads}: must be between 1 and the {cores} core(s) this process may use",
                          "threads")


_FLAGS = ("undirected", "dedup", "quiet", "keep_predictions")
_PATHS = ("metrics", "save_model", "save_predictions", "checkpoint_dir")


def check_job_fields(job: TrainJob) -> None:
    """The types of the job's own fields, which the command line's parser fixes and a caller of :func:`mggcn.train`
    may not: switches are booleans, outputs are paths (``str``), ``threads`` and ``mmap_threshold`` integers. One
    :class:`ConfigError` naming the field, as for every other setting, never a ``TypeError`` from deep inside."""
    for option in _FLAGS:
        check_switch(option, getattr(job, option))
    for option in _PATHS:
        path = getattr(job, option)
        if path is not None and (not isinstance(path, str) or not path):
            raise ConfigError(f"{option} must be a path, got {path!r}", option)
    for option, low in (("threads", 1), ("mmap_threshold", 0)):
        value = getattr(job, option)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ConfigError(f"{option} must be an integer of at least {low}, got {value!r}", option)
    if job.fmt is not None and not isinstance(job.fmt, str):
        raise ConfigError(f"fmt must be a format's name, got {job.fmt!r}", "fmt")


def open_job_dataset(job: TrainJob) -> Dataset:
    return open_dataset(job.dataset, job.fmt, job.undirected, job.dedup, job.read_options, progress=not job.quiet)


def check_job(job: TrainJob, nprocs: int) -> Dataset:
    """Everything that can be checked before workers start: the dataset, P against it, the output paths."""
    check_job_fields(job)
    for option, path in (("metrics", job.metrics), ("save_model", job.save_model),
                         ("save_predictions", job.save_predictions)):
        check_output(option, path, sidecar=option == "save_model")
    cfg = job.config
    check_job_settings(job)
    if job.save_predictions is not None:
        table_format("save_predictions", job.save_predictions)
    device = job_device(job.device)
    check_precision_device(cfg.precision, device)
    check_tile_bytes(cfg.tile_bytes, device)
    check_host_gpus(device, nprocs)
    check_train_columns(cfg.train_columns)
    check_checkpoint_dir(job.checkpoint_dir)
    check_threads(job.threads)
    if cfg.partition == "metis":
        require_pymetis()
    _mark(job, "start")
    dataset = open_job_dataset(job)
    _mark(job, "dataset")
    check_partition(dataset.num_nodes, nprocs, cfg.partition)
    if cfg.patience > 0 and dataset.split_sizes.get("val") == 0:
        # every epoch's validation accuracy would be 0: the run would stop after patience epochs and restore the
        # first epoch's weights as the best
        raise ConfigError(f"patience {cfg.patience}: the dataset's validation split is empty, so early stopping has "
                          "nothing to watch; leave patience out", "patience")
    check_model_size(cfg, dataset.num_features, dataset.num_classes, dataset.num_nodes, nprocs)
    if rank_environment()[0] == 0:  # rank 0 alone resumes: it sends the checkpoint to the others
        find_resume(job, dataset, report=_silent)  # raises for another dataset or model; says what it skips later
    return dataset


def _mark(job: TrainJob, phase: str) -> None:
    if job.clock is not None:
        job.clock.mark(phase)


def share_dataset(job: Any, dataset: Dataset, directory: str) -> Any:
    """The job local workers run, reading ``dataset`` as this process checked it: a dataset in memory (a generated
    graph, files read whole, a Graph) is written once into ``directory`` as a prepared dataset (no checksums: only
    this job reads it), and each worker then reads only its rows from it, instead of every worker reading or
    generating the whole graph again; a prepared directory is read where it is."""
    if isinstance(dataset, PreparedDataset):
        return job
    fingerprint = dataset.fingerprint if getattr(job, "checkpoint_dir", None) else None  # hashed only for those
    try:
        path = write_dataset(dataset, os.path.join(directory, "dataset"), checksums=False, fingerprint=fingerprint)
    except OSError as err:  # the job's directory under TMPDIR: full, or beyond the file size limit (ulimit -f)
        raise write_error(err.filename or directory, err, "cannot write the dataset for the workers (in the job's "
                          "directory, under TMPDIR)") from None
    release_dataset(dataset)
    if getattr(job, "clock", None) is not None:
        job.clock.mark("hand-over")
    kept = {"read_as": job.reading()} if isinstance(job, TrainJob) else {}  # what the model's card records
    return replace(job, dataset=str(path), fmt=None, undirected=False, dedup=False, read_options={}, **kept)


def format_setup(setup: dict) -> str:
    """The line that says how long the job took to its first epoch (rank 0's view), and where the time went."""
    phases = ", ".join(f"{name} {seconds:.1f}" for name, seconds in setup["phases"].items())
    return f"mggcn: first epoch after {setup['seconds']:.1f} s ({phases})"


def format_epoch(record: dict) -> str:
    return (f"epoch {record['epoch']:4d} | loss {record['loss']:.4f} | train {_score(record['train_acc'])} "
            f"val {_score(record['val_acc'])} test {_score(record['test_acc'])} | {record['epoch_s']:.3f} s "
            f"(spmm {record['spmm']:.3f}, wait {record['comm_wait']:.3f}, gemm {record['gemm']:.3f})")


def _score(value: float | None) -> str:
    """An accuracy, or ``-`` for a split without a vertex (None)."""
    return "-" if value is None else f"{value:.4f}"


def format_final(history: list[dict], final: dict, kept_epoch: int | None = None) -> str:
    """The last line of a run: the accuracies of the trained model (eval mode), then the epoch of the best validation
    accuracy and that epoch's test accuracy (an epoch's record is measured before its update).

    ``kept_epoch``: the epoch whose weights the run keeps (``--patience``); default the weights after the last update.
    A split without a vertex (None) is shown as ``-``; without a validation split there is no best validation epoch.
    A multi-label run's line ends with each split's ROC-AUC (``-`` where no label has both a positive and a negative
    vertex in the split).
    """
    weights = f"weights of epoch {kept_epoch}" if kept_epoch is not None else f"after epoch {len(history)}"
    acc = {s: _score(final[f"{s}_acc"]) for s in SPLITS}
    line = f"mggcn: trained model ({weights}, eval mode): train {acc['train']} val {acc['val']} test {acc['test']}"
    if history and final["val_acc"] is not None:
        best = max(history, key=lambda r: r["val_acc"])  # the first of equals
        line += (f" | best validation {_score(best['val_acc'])} at epoch {best['epoch']} "
                 f"(test {_score(best['test_acc'])})")
    if "train_rocauc" in final:  # multi-label: OGB's metric for ogbn-proteins too
        auc = {s: _score(final[f"{s}_rocauc"]) for s in SPLITS}
        line += f" | ROC-AUC train {auc['train']} val {auc['val']} test {auc['test']}"
    return line


def run_train_job(job: TrainJob, dataset: Dataset | None = None) -> JobResult:
    """The body of every rank. ``dataset`` skips opening it again (in-process use). In the caller's process the
    thread count and warning filters are as they were on return (:func:`mggcn.utils.system.caller_settings_kept`)."""
    with caller_settings_kept():
        return _train_on_rank(job, dataset)


def _train_on_rank(job: TrainJob, dataset: Dataset | None) -> JobResult:
    ctx = init_distributed(job.device, job.timeout_s, job.threads, job.mmap_threshold)
    clock = job.clock or SetupClock()
    try:
        cfg = job.config
        shard, resume, identity, reading = _rank_shard(job, ctx, clock, dataset)
        if resume is not None and ctx.is_main and not job.quiet:
            print(resume_line(resume[0], resume[1], cfg, ctx.world_size), flush=True)
        log = _EpochLog(job, ctx, resume)
        checkpointer = (Checkpointer(job.checkpoint_dir, job.checkpoint_every, resumed_from=resume and resume[1])
                        if job.checkpoint_dir else None)
        try:
            with StopOnSignal() as stop:
                result = train_shard(ctx, shard, cfg, log, checkpointer=checkpointer,
                                     checkpoint_meta={"dataset": identity},
                                     resume=resume[0] if resume else None, stop_requested=lambda: stop.requested,
                                     clock=clock)
            if job.metrics and ctx.is_main:
                log.log_metrics(None)  # no epoch left to run: the file all the same
        finally:
            log.close()
        predictions = _write_outputs(job, ctx, shard, result, dict(identity, read=reading))
        empty = tuple(s for s in SPLITS if shard.split_sizes[s] == 0)
        if ctx.is_main and not job.quiet:
            _report_end(result, job)
        elif ctx.is_main and result.stopped == "interrupted":  # quiet, it is still no run to its last epoch
            print(_stopped_line(result, job), file=sys.stderr, flush=True)
        outcome = JobResult(result.history, result.state_dict, predictions, result.stopped, result.best_epoch,
                            result.checkpoint, resume[1] if resume else None, result.final, empty)
    except BaseException:
        shutdown(clean=False)
        raise
    shutdown(clean=True)
    return outcome


def _rank_shard(job: TrainJob, ctx: DistContext, clock: SetupClock, dataset: Dataset | None
                ) -> tuple[Shard, tuple[dict, str] | None, dict, dict[str, bool]]:
    """This rank's shard, the checkpoint to resume from (or None), the dataset's identity and how it was read
    (:func:`dataset_reading`); the dataset is released once the shard is cut."""
    _check_same_settings(ctx, job)
    opened_here = dataset is None
    if opened_here:  # a worker: its own start, then its dataset
        clock.mark("launch")
        dataset = open_job_dataset(job)
        clock.mark("dataset")
    _check_same_dataset(ctx, dataset, opened_here)  # torchrun's ranks too, which opened theirs on their own nodes
    cfg = job.config
    layout = ParallelLayout.of(cfg, ctx.world_size)
    part = layout.partition(dataset)
    clock.mark("partition")
    shard = layout.shard(dataset, ctx, operator_for(cfg.model, cfg.norm),
                         epoch_width(cfg, dataset.num_features, dataset.num_classes), part)
    clock.mark("shard")
    # rank 0 finds the checkpoint and sends it: on other nodes the directory may hold other files, or none
    resume = broadcast_object(ctx, find_resume(job, dataset) if ctx.is_main else None)
    if job.resume and job.checkpoint_dir:
        check_resumed_from_the_newest(ctx, job.checkpoint_dir, resume[0]["epoch"] if resume else 0, job.resume)
    identity = dataset_identity(dataset, content=job.checkpoint_dir is not None)  # hashed only for checkpoints
    reading = dataset_reading(job, dataset)
    release_dataset(dataset)
    return shard, resume, identity, reading


def dataset_reading(job: TrainJob, dataset: Dataset) -> dict[str, bool]:
    """How the graph the model trains on was read, for its card: the job's switches, or those a prepared directory
    was made with (``mggcn prepare --undirected``; a named dataset's own, such as ogbn-products' reverse edges)."""
    reading = job.reading()
    made = _built(dataset)
    if made:  # the features file was given to prepare, or none, and random ones were written
        made["random_features"] = random_features(made.get("format"), made)
    return {k: bool(on or made.get(k) is True) for k, on in reading.items()}


def _built(dataset: Dataset) -> dict:
    """What ``mggcn prepare`` made a prepared dataset with (its switches and reader options, flat); empty else."""
    built = dataset.manifest.get("built", {}) if isinstance(dataset, PreparedDataset) else {}
    return {**built.get("options", {}), **built} if isinstance(built, dict) else {}


def has_random_features(dataset: Dataset, fmt: str | None, read_options: dict) -> bool:
    """Whether ``dataset``, read as ``fmt`` with ``read_options``, has synthesized features: an edge list or a
    Matrix Market file read (or prepared) without its features file."""
    made = _built(dataset)
    if made:
        return random_features(made.get("format"), made)
    return random_features(fmt, read_options)


def _check_same_settings(ctx: DistContext, job: TrainJob) -> None:
    """Every rank was given the same training settings: torchrun starts each node's ranks with that node's command
    line, and ranks of other models, seeds or epoch counts would train a mixture of them without a word, or wait
    for each other at a collective that one of them never reaches. Outputs, checkpoints and resuming are rank 0's to
    write and decide, and rank 0 may land on any node: one asked for on another rank alone would be dropped without
    a word, so whether each is given is compared too (not its path: each node names its own). (Each rank's threads
    and log are its own, and so is which GPU, ``cuda:K``, its host gives it: the device's kind is compared.)"""
    given = {k: "given" if getattr(job, k) else "not given" for k in _PATHS}
    mine = {**asdict(job.config), "device": torch.device(job_device(job.device)).type, **given,
            "checkpoint_every": job.checkpoint_every, "resume": job.resume}
    seen = all_gather_objects(ctx, mine)
    differ = [k for k in mine if any(s.get(k) != seen[0].get(k) for s in seen)]
    if differ:
        shown = "; ".join(f"{k}: " + ", ".join(f"rank {r} {s.get(k)!r}" for r, s in enumerate(seen)
                                               if r == 0 or s.get(k) != seen[0].get(k))[:200] for k in differ[:3])
        raise ConfigError(f"the ranks were given different settings ({shown}): give every rank of the job the same "
                          "options", differ[0])


def _check_same_dataset(ctx: DistContext, dataset: Dataset, opened_here: bool) -> None:
    """Every rank opened the same dataset: one replaced while the job started (``prepare --overwrite`` into its
    directory), or torchrun's nodes each reading their own copy of different data (other files of the same sizes,
    another generator seed), would have the ranks cut their shards of different graphs, without a word or with a
    collective of mismatched sizes. Compared: the sizes and the fingerprint, a prepared dataset's from its manifest;
    another dataset is hashed (a pass over its arrays, at about 1 GB/s, a fraction of reading them) where this rank
    read it itself beside other ranks (``opened_here``, or a torchrun rank): ranks that mggcn's launcher handed one
    dataset share the same."""
    content = isinstance(dataset, PreparedDataset) or (ctx.world_size > 1 and (opened_here or under_torchrun()))
    mine = dataset_identity(dataset, content=content)
    mine.pop("name")  # each node may read it from its own path
    seen = all_gather_objects(ctx, mine)
    if any(s != seen[0] for s in seen):
        shown = "; ".join(f"rank {r}: {_identity_text(s)}" for r, s in enumerate(seen) if s != seen[0] or r == 0)
        raise GraphError(f"{dataset.name}: the ranks opened different datasets ({shown}): each node must read the "
                         "same data; one replaced while the job started: run the job again")


def _identity_text(identity: dict) -> str:
    """A dataset's identity (:func:`dataset_identity`) as the refusal of different datasets says it."""
    kind = "labels" if identity.get("multilabel") else "classes"
    sizes = (f"{identity['num_nodes']} vertices, {identity['num_edges']} edges, {identity['num_features']} features, "
             f"{identity['num_classes']} {kind}")
    return sizes + (f", fingerprint {identity['fingerprint']}" if "fingerprint" in identity else "")


class _EpochLog:
    """What rank 0 does with each epoch's record: the progress line (the setup and partition lines once, first) and
    the metrics file, opened with the first epoch's record (a job that fails before one writes no file)."""

    def __init__(self, job: TrainJob, ctx: DistContext, resume: tuple[dict, str] | None):
        self.job, self.ctx, self.resume = job, ctx, resume
        self.metrics_file = None
        self.progress = epoch_progress(job.config.epochs, format_epoch, done=resume[0]["epoch"] if resume else 0,
                                       quiet=job.quiet or not ctx.is_main, log_every=job.log_every)
        self.balance_shown = False

    def log_metrics(self, record: dict | None) -> None:
        """Append an epoch's record (None: only open the file)."""
        if self.metrics_file is None:
            self.metrics_file = open_output(self.job.metrics)
            # the epochs of the checkpoint, not those the interrupted run may have logged after it
            self.metrics_file.writelines(json.dumps(r) + "\n"
                                         for r in (self.resume[0]["history"] if self.resume else []))
        if record is not None:
            self.metrics_file.write(json.dumps(record) + "\n")
        self.metrics_file.flush()

    def __call__(self, record: dict) -> None:
        if not self.ctx.is_main:
            return
        if not self.balance_shown:  # every record carries the partition's balance; say it once
            self.balance_shown = True
            if "setup" in record:
                self.progress.note(format_setup(record["setup"]))
            via = f" ({record['broadcast']})" if "broadcast" in record else ""
            if "broadcast_fallback" in record:  # shm auto could not use shared memory: one warning line
                _print_err(f"warning: shm auto: no shared memory ({record['broadcast_fallback']}); broadcasting "
                           f"through {record['broadcast']}")
            cfg = self.job.config
            self.progress.note(f"mggcn: partition {cfg.partition}, comm {cfg.comm}{via}: {format_balance(record)}")
        self.progress.update(record)
        if self.job.metrics:
            self.log_metrics(record)

    def close(self) -> None:
        self.progress.close()
        if self.metrics_file is not None:
            self.metrics_file.close()


def _write_outputs(job: TrainJob, ctx: DistContext, shard: Shard, result: TrainResult, identity: dict
                   ) -> np.ndarray | None:
    """The predictions (every rank takes part; rank 0 has them), and rank 0 saves the model and the predictions
    asked for."""
    predictions = None
    if job.save_predictions or job.keep_predictions:
        predictions = predict_shard(ctx, shard, result.model, result.adj, result.x_agg)
    if ctx.is_main:
        if job.save_model:
            save_model(job.save_model, result.state_dict, job.config, identity, epochs=len(result.history),
                       best_epoch=result.best_epoch, stopped=result.stopped)
        if job.save_predictions:
            save_predictions(job.save_predictions, predictions)
    return predictions


def _stopped_line(result: TrainResult, job: TrainJob) -> str:
    saved = f"; checkpoint {result.checkpoint}" if result.checkpoint else " (no checkpoint directory)"
    written = "".join(f"; {path} is of that epoch" for path in (job.save_model, job.save_predictions) if path)
    return f"mggcn: stopped by a signal after epoch {len(result.history)}{saved}{written}"


def _report_end(result: TrainResult, job: TrainJob) -> None:
    """How the run ended (a signal, early stopping) and the final accuracies."""
    if result.stopped == "interrupted":
        print(_stopped_line(result, job), flush=True)
    elif result.stopped == "early":
        print(f"mggcn: early stop after epoch {len(result.history)}; keeping the weights of epoch "
              f"{result.best_epoch}", flush=True)
    best = result.best_epoch if job.config.patience > 0 else None
    print(format_final(result.history, result.final, best), flush=True)
