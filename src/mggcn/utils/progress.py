"""What rank 0 shows of a training run while it runs: a progress bar on a terminal, plain lines anywhere else.

A terminal gets one tqdm bar (epochs done, rate, ETA, the latest loss and accuracies); logs and CI, where a bar
would be a mess of carriage returns, get one line per ``log_every``-th epoch (and the last). ``quiet`` shows neither.
Without tqdm installed the lines are used on a terminal too.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TextIO

__all__ = ["TrainProgress"]


class TrainProgress:
    """Shows epoch records as they come; use as a context manager so that the bar is closed on errors too.

    Args:
        epochs: the last epoch of the run (the bar's total).
        line: formats one epoch record as a line (e.g. :func:`mggcn.training.job.format_epoch`).
        done: epochs already done when the run starts (a resumed run).
        quiet: show nothing.
        log_every: print the line of every K-th epoch (and of the last); the bar moves every epoch.
        stream: where to write (default: ``sys.stdout`` at the time of the call).
        bar: force the bar on or off (default: on when ``stream`` is a terminal and tqdm is importable).
    """

    def __init__(self, epochs: int, line: Callable[[dict], str], done: int = 0, quiet: bool = False,
                 log_every: int = 1, stream: TextIO | None = None, bar: bool | None = None) -> None:
        self.epochs, self.line, self.quiet, self.log_every = epochs, line, quiet, max(1, log_every)
        self.stream = stream if stream is not None else sys.stdout
        self._bar = None
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
            self._bar = tqdm(total=epochs, initial=min(done, epochs), unit="epoch", desc="train", file=self.stream,
                             dynamic_ncols=True, leave=True)

    @property
    def shows_bar(self) -> bool:
        return self._bar is not None

    def update(self, record: dict) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{record['loss']:.4f}", train=f"{record['train_acc']:.3f}",
                                  val=f"{record['val_acc']:.3f}", refresh=False)
            self._bar.update(1)
        elif record["epoch"] % self.log_every == 0 or record["epoch"] == self.epochs:
            print(self.line(record), file=self.stream, flush=True)

    def note(self, text: str) -> None:
        """A line of its own (above the bar when there is one)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> TrainProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
