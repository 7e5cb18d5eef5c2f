"""What a long job shows while it runs: a progress bar on a terminal, plain lines anywhere else.

One :class:`Progress` serves training (rank 0's epochs: :func:`epoch_progress`) and ``mggcn prepare`` (the steps
of a preparation: :meth:`Progress.step`). A terminal gets a tqdm bar; logs and CI, where a bar would be a mess of
carriage returns, get plain lines: the line of every ``log_every``-th epoch record (and the last), or, for counted
steps, a line every ``every_s`` seconds and one when the step ends. ``quiet`` shows neither. tqdm is optional
(``pip install 'mggcn[progress]'``): without it, the lines are used on a terminal too.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["Progress", "epoch_progress"]


class Progress:
    """Work done toward ``total``, shown on ``stream``; use as a context manager so that the bar is closed on errors.

    Args:
        total: items of the whole job (None: unknown, or a job made of :meth:`step` s).
        desc: what is counted (the bar's label; the plain lines of a step start with it).
        unit: the unit of the count (``epoch``, ``edges``, ``rows``).
        line: formats a record passed to :meth:`update` as its plain line (training's epochs); without it, plain
            lines report the count every ``every_s`` seconds and when the step ends.
        postfix: the record's values shown at the end of the bar.
        done: items already done when the job starts (a resumed run).
        quiet: show nothing.
        log_every: with ``line``: print the line of every K-th record (and of the last); the bar moves every time.
        every_s: without ``line``: seconds between plain lines while the count runs.
        prefix: before the plain lines of a step (``"mggcn prepare"``).
        stream: where to write (default: ``sys.stdout`` at the time of the call).
        bar: force the bar on or off (default: on when ``stream`` is a terminal and tqdm is importable).
        leave: keep the bar on screen when done.
        summary: print ``desc: N unit in T s`` when the job ends without error (the steps of a preparation).
    """

    def __init__(self, total: int | None = None, desc: str = "", unit: str = "", *,
                 line: Callable[[dict], str] | None = None, postfix: Callable[[dict], dict[str, str]] | None = None,
                 done: int = 0, quiet: bool = False, log_every: int = 1, every_s: float = 30.0, prefix: str = "mggcn",
                 stream: TextIO | None = None, bar: bool | None = None, leave: bool = True,
                 summary: bool = False) -> None:
        self.total, self.desc, self.unit, self.line, self.postfix = total, desc, unit, line, postfix
        self.quiet, self.log_every, self.every_s, self.prefix = quiet, max(1, log_every), every_s, prefix
        self.stream = stream if stream is not None else sys.stdout
        self.summary, self.done, self.count = summary, done, 0
        self.start = self.last = time.monotonic()
        self._tqdm: Any = None
        self._bar: Any = None
        if quiet:
            return
        if bar is None:
            bar = _isatty(self.stream)
        if bar:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            if getattr(tqdm, "_lock", None) is None:
                # tqdm's default lock holds a multiprocessing semaphore: a worker that ends with os._exit (as
                # mggcn's do) never releases it, and the launcher's resource tracker warns of a leak at exit.
                # One process writes the bar: a thread lock is enough.
                tqdm.set_lock(threading.RLock())
            self._tqdm = tqdm
            if desc:
                initial = min(done, total) if total is not None else done
                self._bar = tqdm(total=total, initial=initial, unit=f" {unit}" if summary else unit, desc=desc,
                                 file=self.stream, dynamic_ncols=True, leave=leave, unit_scale=summary)

    @property
    def shows_bar(self) -> bool:
        return self._bar is not None

    def step(self, desc: str, total: int | None = None, unit: str = "edges") -> Progress:
        """One step of a job of steps: counted, shown like its parent, with a closing line of its own."""
        return Progress(total, desc, unit, quiet=self.quiet, every_s=self.every_s, prefix=self.prefix,
                        stream=self.stream, bar=self._tqdm is not None, leave=False, summary=True)

    def update(self, item: int | dict = 1) -> None:
        """``item``: a count of items done, or one record (an epoch's), formatted by ``line``."""
        record = item if isinstance(item, dict) else None
        count = 1 if record is not None else int(item)
        self.done += count
        self.count += count
        if self.quiet:
            return
        if self._bar is not None:
            if record is not None and self.postfix is not None:
                self._bar.set_postfix(self.postfix(record), refresh=False)
            self._bar.update(count)
        elif record is not None and self.line is not None:
            epoch = record.get("epoch", self.done)
            if epoch % self.log_every == 0 or epoch == self.total:
                print(self.line(record), file=self.stream, flush=True)
        elif time.monotonic() - self.last >= self.every_s:
            self.last = time.monotonic()
            of = f" of {self.total:,}" if self.total else ""
            self._say(f"{self.desc}: {self.count:,}{of} {self.unit} so far")

    def note(self, text: str) -> None:
        """A line of its own (above the bar when there is one)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self, completed: bool = True) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self.summary and completed and not self.quiet:
            self.summary = False
            self._say(f"{self.desc}: {self.count:,} {self.unit} in {time.monotonic() - self.start:.1f} s")

    def _say(self, text: str) -> None:
        print(f"{self.prefix}: {text}", file=self.stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close(completed=exc[0] is None)


def _epoch_postfix(record: dict) -> dict[str, str]:
    """The bar's latest loss and accuracies (``-`` for a split without a vertex)."""
    return {"loss": f"{record['loss']:.4f}",
            **{s: "-" if record[f"{s}_acc"] is None else f"{record[f'{s}_acc']:.3f}" for s in ("train", "val")}}


def epoch_progress(epochs: int, line: Callable[[dict], str], done: int = 0, quiet: bool = False, log_every: int = 1,
                   stream: TextIO | None = None, bar: bool | None = None) -> Progress:
    """Rank 0's view of a training run: one bar of ``epochs`` (the latest loss and accuracies at its end), or the
    ``line`` of every ``log_every``-th epoch record (e.g. :func:`mggcn.training.job.format_epoch`); ``done``:
    epochs already done (a resumed run)."""
    return Progress(epochs, "train", "epoch", line=line, postfix=_epoch_postfix, done=done, quiet=quiet,
                    log_every=log_every, stream=stream, bar=bar)


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
