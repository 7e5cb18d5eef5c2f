"""Rank 0's view of a run: a bar on a terminal, lines in logs, nothing with --quiet."""

import io
import re
import sys

import pytest

from mggcn.config import TrainConfig
from mggcn.training.job import TrainJob, format_epoch, run_train_job
from mggcn.utils.progress import Progress, epoch_progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _record(epoch: int) -> dict:
    return {"epoch": epoch, "loss": 1.0 / epoch, "train_acc": 0.5, "val_acc": 0.25, "test_acc": 0.125,
            "epoch_s": 0.01, "spmm": 0.0, "comm_wait": 0.0, "gemm": 0.0}


def _show(stream, epochs=5, **kwargs) -> str:
    with epoch_progress(epochs, format_epoch, stream=stream, **kwargs) as progress:
        for epoch in range(1, epochs + 1):
            progress.update(_record(epoch))
    return stream.getvalue()


def test_lines_when_not_a_terminal_every_kth_and_the_last():
    text = _show(io.StringIO(), log_every=2)
    assert [line.split("|")[0].split() for line in text.splitlines()] == [["epoch", "2"], ["epoch", "4"],
                                                                         ["epoch", "5"]]
    assert "loss 0.5000" in text.splitlines()[0]


def test_bar_on_a_terminal_with_loss_and_accuracy():
    pytest.importorskip("tqdm")
    text = _show(_Terminal(), log_every=2)
    assert "5/5" in text and "loss=0.2000" in text and "val=0.250" in text
    assert "epoch    2 |" not in text  # no lines under the bar


def test_quiet_shows_nothing():
    assert _show(_Terminal(), quiet=True) == "" == _show(io.StringIO(), quiet=True)


def test_resumed_run_starts_the_bar_where_it_left_off():
    pytest.importorskip("tqdm")
    stream = _Terminal()
    with epoch_progress(10, format_epoch, done=7, stream=stream) as progress:
        assert progress.shows_bar
        progress.update(_record(8))
    assert "8/10" in stream.getvalue()


@pytest.mark.parametrize("terminal", [False, True])
def test_training_job_shows_progress_on_stdout(monkeypatch, capsys, terminal):
    if terminal:
        pytest.importorskip("tqdm")
        monkeypatch.setattr(sys, "stdout", _Terminal())
    job = TrainJob(dataset="builtin:karate", config=TrainConfig(hidden=(4,), epochs=5, trace_epoch=0), log_every=2)
    run_train_job(job)
    text = sys.stdout.getvalue() if terminal else capsys.readouterr().out
    if terminal:
        assert "5/5" in text and "loss=" in text and "epoch    2 |" not in text
    else:
        lines = text.splitlines()
        assert re.fullmatch(r"mggcn: first epoch after [\d.]+ s \(launch [\d.]+, dataset [\d.]+, partition [\d.]+, "
                            r"shard [\d.]+, device [\d.]+, model [\d.]+, A\.X [\d.]+\)", lines[0]), lines[0]
        assert lines[1].startswith("mggcn: partition random-local, comm broadcast: nonzeros max/mean")
        assert [line.split("|")[0].strip() for line in lines[2:-1]] == ["epoch    2", "epoch    4", "epoch    5"]
        assert lines[-1].startswith("mggcn: trained model (after epoch 5, eval mode)")  # the run's last line


class _Flushed(io.StringIO):
    """Records what had been flushed: what a reader of a pipe or a `tail -f` would see by then."""

    flushed = ""

    def flush(self) -> None:
        self.flushed = self.getvalue()


def _record(epoch: int) -> dict:
    return {"epoch": epoch, "loss": 1.0 / epoch, "train_acc": 0.5, "val_acc": 0.25, "test_acc": 0.125,
            "epoch_s": 0.01, "spmm": 0.0, "comm_wait": 0.0, "gemm": 0.0}


def test_each_plain_line_is_flushed_as_it_is_written():
    stream = _Flushed()
    with epoch_progress(3, format_epoch, stream=stream, bar=False) as progress:
        progress.update(_record(1))
        assert stream.flushed.startswith("epoch    1") and stream.flushed == stream.getvalue()
    stream = _Flushed()
    with Progress(stream=stream, bar=False, every_s=0).step("sort", 10) as step:
        step.update(3)
        assert stream.flushed == stream.getvalue() == "mggcn: sort: 3 of 10 edges so far\n"
    assert stream.flushed == stream.getvalue() and "mggcn: sort: 3 edges in " in stream.flushed


def test_a_step_says_its_count_only_every_every_s_seconds():
    stream = io.StringIO()
    with Progress(stream=stream, bar=False, every_s=3600).step("sort", 10) as step:
        for _ in range(5):
            step.update(1)
    assert stream.getvalue().startswith("mggcn: sort: 5 edges in ") and stream.getvalue().count("\n") == 1


def test_a_step_that_fails_gives_no_closing_line():
    stream = io.StringIO()
    with pytest.raises(RuntimeError), Progress(stream=stream, bar=False, every_s=3600).step("sort", 10) as step:
        step.update(3)
        raise RuntimeError("disk full")
    assert stream.getvalue() == ""  # not "sort: 3 edges in 0.0 s", as if it had finished
