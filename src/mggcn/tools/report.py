"""Plots of a training run from its ``--metrics`` file, and the same records as TensorBoard scalars.

``mggcn report METRICS.jsonl --out DIR`` writes three PNGs:

* ``curves.png`` — the loss and the train/val/test accuracy per epoch;
* ``phases.png`` — where each epoch's time went, stacked: SpMM, communication wait, GEMM, all-reduce, other
  (criterion, optimizer and the rest); the phases are the maximum over ranks, as recorded;
* ``timeline.png`` — the traced epoch (``--trace-epoch``), one row per rank: the broadcasts (from issue to
  completion, as seen by the host; consecutive ones on alternate lines, as they use alternate buffers) above the
  computation, so a broadcast that overlaps a multiplication is visible as in the MG-GCN paper's figures.

Each ``plot_*`` function draws on a new matplotlib figure (Agg, no display needed) and returns it with the series
it plotted. matplotlib (an optional dependency: ``pip install 'mggcn[plots]'``) is imported only when a plot is
made; TensorBoard only when asked for.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import stat
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from mggcn.utils.errors import ConfigError, InputError
from mggcn.utils.files import OutputError, check_writable, same_file, write_output
from mggcn.utils.optional import require

__all__ = ["STACKED", "COLORS", "MetricsError", "TensorBoardMissing", "read_metrics", "plot_curves", "plot_phases",
           "plot_timeline", "traced_epoch", "write_report", "check_tensorboard_dir", "write_tensorboard"]

# The stacked phases of phases.png; "other" also takes the criterion and optimizer phases.
STACKED = ("spmm", "comm_wait", "gemm", "allreduce", "other")
_FOLDED = ("criterion", "optimizer")
COLORS = {"spmm": "#1f77b4", "comm_wait": "#c7c7c7", "gemm": "#2ca02c", "allreduce": "#9467bd",
          "other": "#8c564b", "criterion": "#e377c2", "optimizer": "#bcbd22", "broadcast": "#ff7f0e"}
_LABELS = {"spmm": "SpMM", "comm_wait": "comm wait", "gemm": "GEMM", "allreduce": "all-reduce", "other": "other",
           "criterion": "criterion", "optimizer": "optimizer", "broadcast": "broadcast"}
_COMPUTE = ("spmm", "gemm", "criterion", "optimizer", "comm_wait")  # the lower line of a rank's row
_COMM = ("broadcast", "allreduce")  # the upper lines
# the timeline's height in inches, at most: a row per rank, squeezed beyond 65 ranks (a PNG may be at most 2^16
# pixels high)
_MAX_HEIGHT = 60.0
# the numbers of a record the plots read (each optional: an older record may lack a phase)
_SCORES = ("train_acc", "val_acc", "test_acc")
_NUMBERS = (*_SCORES, "epoch_s", *STACKED, *_FOLDED)
_LARGEST = 1e39  # beyond float32's largest (3.4e38): no loss a run writes, no epoch count or seconds; plots overflow
_BARS = 1000  # epochs drawn one bar each in the phase plot; more are drawn as the means of runs of epochs


class MetricsError(InputError):
    """A metrics file that cannot be plotted; the message names the file and line."""


class TensorBoardMissing(ImportError):
    """TensorBoard logging was asked for but the ``tensorboard`` package is not installed."""


# A line longer than this is no epoch record (a traced epoch of hundreds of ranks is a few MiB): a file without line
# ends (a binary file) is refused instead of read whole into memory.
_MAX_LINE = 256 << 20


def read_metrics(path: str) -> list[dict]:
    """The records of a ``--metrics`` file, one per epoch, in epoch order.

    A resumed run writes the file again, its checkpoint's records first; a file that holds an epoch twice (one
    appended to by hand, or the same run's records concatenated) keeps the last record of it. A final line cut short
    (a killed run: no newline ends it) is skipped.
    """
    by_epoch: dict[int, dict] = {}
    cut = None
    for number, line, ended in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except RecursionError:  # nesting deeper than the parser's recursion: no epoch record looks like that
            raise MetricsError(f"{path} line {number}: not a JSON record (nested too deep)") from None
        except ValueError:
            if not ended:  # the writer ends every record with a newline: one without was cut short
                cut = number
                continue
            raise MetricsError(f"{path} line {number}: not a JSON record") from None
        by_epoch[_epoch_of(path, number, record)] = record
    if not by_epoch:
        first = f" (its only line, {cut}, is cut short: a run stopped during its first epoch)" if cut else ""
        raise MetricsError(f"{path}: no epoch records{first}")
    if cut is not None:
        print(f"mggcn: {path}: skipping the incomplete last line {cut}", file=sys.stderr)
    return [by_epoch[e] for e in sorted(by_epoch)]


def _lines(path: str) -> Iterator[tuple[int, str, bool]]:
    """``(number, text, ended)`` of each line of ``path``, split at newlines only (a JSON string may hold U+2028 and
    the other characters ``str.splitlines`` splits at); ``ended``: whether a newline ends it. A UTF-8 byte order
    mark (a file saved by a Windows editor) is skipped."""
    with _open_regular(path) as f:
        offset = 0
        for number in itertools.count(1):
            try:
                raw = f.readline(_MAX_LINE + 1)
            except OSError as err:
                raise MetricsError(f"{path}: {err.strerror}") from None
            if not raw:
                return
            if len(raw) > _MAX_LINE:
                raise MetricsError(f"{path} line {number}: longer than {_MAX_LINE >> 20} MiB; not a file that "
                                   "metrics= wrote", "metrics")
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise MetricsError(f"{path}: not UTF-8 text (byte {offset + err.start}); not a file that metrics= "
                                   "wrote", "metrics") from None
            offset += len(raw)
            yield number, text, raw.endswith(b"\n")


def _open_regular(path: str):
    """``path`` open for reading in binary: a regular file, or a pipe (``cat m.jsonl | mggcn report /dev/stdin``);
    anything else is a :class:`MetricsError` naming it (a device such as ``/dev/zero`` never ends). Opened without
    blocking, as a FIFO's open would wait for a writer that may never come; a pipe is then read as usual, and one
    that no writer holds reads as empty. Checked on the descriptor, so that what is checked is what is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise MetricsError(f"{path}: {err.strerror}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode):
        os.set_blocking(fd, True)  # wait for what a connected writer has still to write
    elif not stat.S_ISREG(mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise MetricsError(f"{path}: is {what}, not a file that metrics= wrote", "metrics")
    return os.fdopen(fd, "rb")


def _epoch_of(path: str, number: int, record: Any) -> int:
    """The epoch of line ``number``'s ``record``, or :class:`MetricsError` for a record that is not one."""
    if not isinstance(record, dict) or "epoch" not in record or "loss" not in record:
        raise MetricsError(f"{path} line {number}: not an epoch record (no 'epoch' and 'loss')")
    bad = [k for k in ("epoch", "loss", *_NUMBERS) if k in record and not _is_number(record[k])
           and not (k in _SCORES and record[k] is None)]  # None: a split without a vertex
    if bad or not math.isfinite(record["epoch"]) or record["epoch"] != int(record["epoch"]):
        raise MetricsError(f"{path} line {number}: '{(bad or ['epoch'])[0]}' is not a number of an epoch record")
    # a run writes no NaN (a non-finite loss ends it first) and no value a plot's axis cannot hold
    wild = [k for k in ("epoch", "loss", *_NUMBERS) if _is_number(record.get(k))
            and not (math.isfinite(record[k]) and abs(record[k]) <= _LARGEST)]
    if wild:
        raise MetricsError(f"{path} line {number}: '{wild[0]}' is {_shown(record[wild[0]])}, not a finite number "
                           f"of at most {_LARGEST:g} in size, as a run writes")
    problem = _timeline_problem(record.get("timeline"))
    if problem:
        raise MetricsError(f"{path} line {number}: malformed 'timeline' ({problem}); expected a list per rank of "
                           "[kind, start, end] events, a name and two numbers of seconds")
    return int(record["epoch"])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _timeline_problem(timeline: Any) -> str | None:
    """What is wrong with a record's ``timeline`` (None when nothing: absent, or the lists of events
    :func:`plot_timeline` draws, each ``[kind, start, end]`` with ``start <= end``, finite)."""
    if timeline is None:
        return None
    if not isinstance(timeline, list):
        return f"{_shown(timeline)} is not a list of ranks"
    for rank, events in enumerate(timeline):
        if not isinstance(events, list):
            return f"rank {rank}: {_shown(events)} is not a list of events"
        for i, event in enumerate(events):
            if not (isinstance(event, list) and len(event) == 3 and isinstance(event[0], str)
                    and all(_is_number(t) and math.isfinite(t) for t in event[1:])):
                return f"rank {rank} event {i}: {_shown(event)} is not [kind, start, end]"
            if event[2] < event[1]:
                return f"rank {rank} event {i}: {_shown(event)} ends before it starts"
            if event[0] not in (*_COMM, *_COMPUTE):  # it would be left out of the plot without a word
                return f"rank {rank} event {i}: kind {_shown(event[0])} is not one of {', '.join((*_COMM, *_COMPUTE))}"
    if timeline and not any(timeline):
        return "no events on any rank"
    return None


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except RecursionError:  # nested as deep as the parser allows: deeper than the encoder does
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _figure(width: float, height: float, rows: int = 1, cols: int = 1):
    Figure = require("matplotlib.figure", "plots", "plotting").Figure  # an optional dependency: say how to get it
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.subplots(rows, cols)


def _column(records: Iterable[dict], key: str) -> list[float]:
    return [float(r.get(key, 0.0)) for r in records]


def plot_curves(records: list[dict]) -> tuple[Any, dict[str, list[float]]]:
    """Loss (left) and train/val/test accuracy (right; a multi-label run's records say they hold micro-F1) per
    epoch; the best validation epoch marked. A split without a vertex (its accuracies None) has no curve, and
    without a validation split no epoch is marked."""
    series = {"epoch": [int(r["epoch"]) for r in records], "loss": _column(records, "loss")}
    for key in _SCORES:
        if any(r.get(key) is not None for r in records):
            series[key] = [math.nan if r.get(key) is None else float(r[key]) for r in records]
    fig, (loss_ax, acc_ax) = _figure(10, 3.6, 1, 2)
    loss_ax.plot(series["epoch"], series["loss"], color="black", label="training loss")
    loss_ax.set(xlabel="epoch", ylabel="loss", title="Loss")
    if min(series["loss"]) > 0 and max(series["loss"]) > 30 * min(series["loss"]):
        loss_ax.set_yscale("log")
    loss_ax.grid(alpha=0.3)
    for key, color in zip(_SCORES, ("#1f77b4", "#ff7f0e", "#2ca02c"), strict=True):
        if key in series:
            acc_ax.plot(series["epoch"], series[key], color=color, label=key.split("_")[0])
    if "val_acc" in series:
        val = series["val_acc"]
        best = max((i for i in range(len(records)) if not math.isnan(val[i])), key=lambda i: val[i])
        acc_ax.axvline(series["epoch"][best], color="gray", linestyle=":",
                       label=f"best val {val[best]:.3f} (epoch {series['epoch'][best]})")
    metric = next((str(r["metric"]) for r in records if "metric" in r), "accuracy")
    acc_ax.set(xlabel="epoch", ylabel=metric, title=metric[:1].upper() + metric[1:], ylim=(0, 1.02))
    acc_ax.grid(alpha=0.3)
    if acc_ax.lines:
        acc_ax.legend(loc="lower right", fontsize="small")
    return fig, series


def plot_phases(records: list[dict]) -> tuple[Any, dict[str, list[float]]]:
    """Per-epoch seconds stacked by phase (series in seconds; drawn in ms when epochs are shorter than a second).
    Beyond :data:`_BARS` epochs, each bar is the mean of a run of consecutive epochs: a bar per epoch of a run of
    hundreds of thousands costs minutes and gigabytes to draw, and more bars than pixels show nothing more."""
    series: dict[str, list] = {"epoch": [int(r["epoch"]) for r in records]}
    for phase in STACKED:
        series[phase] = _column(records, phase)
    for phase in _FOLDED:
        series["other"] = [a + b for a, b in zip(series["other"], _column(records, phase))]
    series["epoch_s"] = _column(records, "epoch_s")
    scale, unit = (1e3, "ms") if max(series["epoch_s"], default=0.0) < 1.0 else (1.0, "s")
    fig, ax = _figure(10, 3.6)
    run = -(-len(records) // _BARS)  # epochs per bar
    starts = series["epoch"][::run]
    bottom = [0.0] * len(starts)
    for phase in STACKED:
        values = series[phase]
        heights = [scale * sum(chunk) / len(chunk) for chunk in (values[i:i + run] for i in range(0, len(values), run))]
        ax.bar(starts, heights, width=float(run), align="edge" if run > 1 else "center", bottom=bottom,
               color=COLORS[phase], label=_LABELS[phase], linewidth=0)
        bottom = [b + h for b, h in zip(bottom, heights)]
    each = f"; each bar the mean of {run} epochs" if run > 1 else ""
    ax.set(xlabel="epoch", ylabel=f"time per epoch ({unit})",
           title=f"Where the time goes (per phase, max over ranks; other = criterion, optimizer, rest{each})")
    ax.legend(loc="upper right", fontsize="small", ncol=len(STACKED))
    ax.margins(x=0.01)
    # the first epoch (warm-up: allocations, first collectives) may dwarf the rest: cut its bar and label it
    top = max(bottom[1:] or bottom, default=0.0) * 1.3 or 1.0
    if bottom and bottom[0] > top:
        ax.annotate(f"{bottom[0]:.0f} {unit}", (series["epoch"][0], top), xytext=(8, -12), textcoords="offset points",
                    fontsize="small")
    ax.set_ylim(0, top)
    return fig, series


def traced_epoch(records: list[dict], epoch: int | None = None) -> dict:
    """The record with a ``timeline`` (the given epoch's, or the first traced one)."""
    traced = [r for r in records if r.get("timeline")]
    if epoch is not None:
        traced = [r for r in traced if r["epoch"] == epoch]
    if not traced:
        which = f"epoch {epoch} was not" if epoch is not None else "no epoch was"
        raise MetricsError(f"{which} traced; train with trace_epoch=E to record a timeline", "trace_epoch")
    return traced[0]


def plot_timeline(record: dict) -> tuple[Any, dict]:
    """One row per rank of the traced epoch ``record``: broadcasts and all-reduce above, computation below.

    Returns the figure and ``{"epoch": E, "ranks": [{kind: [(start_s, end_s), ...]}, ...]}``.
    """
    ranks = []
    for events in record["timeline"]:
        kinds: dict[str, list[tuple[float, float]]] = {}
        for kind, start, end in events:
            kinds.setdefault(kind, []).append((float(start), float(end)))
        ranks.append(kinds)
    series = {"epoch": int(record["epoch"]), "ranks": ranks}
    fig, ax = _figure(10, min(1.2 + 0.9 * len(ranks), _MAX_HEIGHT))
    to_ms = 1e3
    for r, kinds in enumerate(ranks):
        # rank r's row spans [r - 0.45, r + 0.45], rank 0 on top: two communication lines, one compute line; one
        # call per line and kind, not per event (a rank of a large run has hundreds of broadcasts an epoch)
        broadcasts = kinds.get("broadcast", [])
        lines = [("broadcast", broadcasts[line::2], r - 0.45 + 0.2 * line, 0.18) for line in (0, 1)]
        lines += [("allreduce", kinds.get("allreduce", []), r - 0.45, 0.38)]
        lines += [(kind, kinds.get(kind, []), r + 0.02, 0.4) for kind in _COMPUTE]
        for kind, spans, y, height in lines:
            if spans:
                edge = {"edgecolor": "white", "linewidth": 0.3} if kind == "broadcast" else {}
                ax.broken_barh([(s * to_ms, (e - s) * to_ms) for s, e in spans], (y, height),
                               facecolor=COLORS[kind], **edge)
    present = [k for k in (*_COMM, *_COMPUTE) if any(k in kinds for kinds in ranks)]
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=COLORS[k], label=_LABELS[k]) for k in present], loc="upper center",
              bbox_to_anchor=(0.5, -0.28 if len(ranks) < 3 else -0.15), ncol=len(present), fontsize="small")
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in range(len(ranks))])
    ax.set_ylim(len(ranks) - 0.5, -0.5)
    ax.set(xlabel="ms since the epoch's start",
           title=f"Epoch {series['epoch']} on {len(ranks)} rank(s): communication (upper lines) against "
                 "computation (lower line)")
    ax.grid(axis="x", alpha=0.3)
    return fig, series


def write_report(metrics: str, out_dir: str, epoch: int | None = None) -> list[str]:
    """Write ``curves.png``, ``phases.png`` and, when an epoch was traced, ``timeline.png`` into ``out_dir`` (a
    ``timeline.png`` already there is removed when no epoch was traced).

    ``epoch`` picks the traced epoch to draw (default: the first). Returns the paths written.
    """
    records = read_metrics(metrics)
    # every figure is drawn before anything is written: a file that cannot be drawn leaves no directory behind
    figures = [("curves.png", plot_curves(records)[0]), ("phases.png", plot_phases(records)[0])]
    if epoch is not None or any(r.get("timeline") for r in records):
        figures.append(("timeline.png", plot_timeline(traced_epoch(records, epoch))[0]))
    for name, _ in figures:  # the metrics file kept among its plots under a plot's name
        if same_file(os.path.join(out_dir, name), metrics):
            raise ConfigError(f"out {out_dir}: its {name} would replace {metrics}, the metrics file this report "
                              "reads; give another directory", "out")
    created = _output_directory(out_dir)
    written = []
    try:
        for name, fig in figures:
            path = os.path.join(out_dir, name)
            write_output(path, lambda f, fig=fig: fig.savefig(f, format="png"))  # whole, or not at all
            written.append(path)
    except BaseException:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        else:
            for path in written:
                os.unlink(path)
        raise
    # a timeline.png of an earlier report into this directory would be read as this run's traced epoch
    stale = os.path.join(out_dir, "timeline.png")
    if len(figures) == 2 and os.path.isfile(stale):
        os.unlink(stale)
    return written


def _output_directory(out_dir: str) -> bool:
    """Make ``out_dir`` if missing (returns whether it was made) and check that it takes files, or raise
    :class:`~mggcn.utils.errors.ConfigError` naming it (``--out``): a file there, a parent that cannot have
    directories (``/proc``), a read-only file system."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ConfigError(f"out {out_dir}: exists and is not a directory (give a directory for the PNGs)", "out")
    created = not os.path.isdir(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"out {out_dir}: cannot make the directory ({err.strerror})", "out") from None
    try:
        check_writable("out", out_dir, out_dir)
    except ConfigError:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    return created


def check_tensorboard_dir(logdir: str) -> None:
    """Raise :class:`~mggcn.utils.errors.ConfigError` (``tensorboard``) unless ``logdir`` is, or can be made as, a
    directory that takes files: checked before training, not found out after it."""
    if os.path.exists(logdir) and not os.path.isdir(logdir):
        raise ConfigError(f"tensorboard {logdir}: exists and is not a directory (give a directory for the event "
                          "files)", "tensorboard")
    parent = os.path.abspath(logdir)
    while not os.path.exists(parent):  # made with its missing parents when the run ends
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"tensorboard {logdir}: {parent} is not a directory", "tensorboard")
    check_writable("tensorboard", logdir, parent)


def write_tensorboard(records: list[dict], logdir: str) -> None:
    """The records as TensorBoard scalars (``loss``, ``accuracy/*``, ``time/*``), step = epoch.

    Raises:
        TensorBoardMissing: the ``tensorboard`` package is not installed.
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise TensorBoardMissing("tensorboard is not installed (pip install tensorboard)") from None
    try:
        with SummaryWriter(logdir) as writer:
            for r in records:
                step = int(r["epoch"])
                writer.add_scalar("loss", r["loss"], step)
                for split in ("train", "val", "test"):
                    if r[f"{split}_acc"] is not None:  # a split without a vertex has no scalars
                        writer.add_scalar(f"accuracy/{split}", r[f"{split}_acc"], step)
                for key in ("epoch_s", *STACKED, *_FOLDED):
                    if key in r:
                        writer.add_scalar(f"time/{key}", r[key], step)
    except OSError as err:  # a directory that cannot be made or written (a full disk, a read-only file system)
        raise OutputError(logdir, f"cannot write the TensorBoard log: {err.strerror or err}", err.errno) from None
