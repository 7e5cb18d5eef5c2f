"""The less-visited outputs and inputs of the command line: ``mggcn report``'s metrics files (lines split as JSON
lines are, a byte order mark, a file without line ends, a cut or a garbage line, the metrics file among its own
plots, a timeline of many ranks), ``--tensorboard`` onto a file, ``--save-predictions`` and ``predict --out`` by
an extension of another format, an output named as a checkpoint, and ``mggcn info ''``: one line naming the file
or option, never a hang, a traceback or a file replaced that should not be."""

import json
import os
import sys
import types

import numpy as np
import pytest

from cli_util import run_cli
from mggcn.tools.cli import main

TRAIN = ["train", "synthetic:n=200,features=8", "--epochs", "2", "--quiet", "--trace-epoch", "0"]


def _status(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exited:  # the parser's refusals
        return exited.code


def _one_line(err: str, *words: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def _record(epoch: int, **extra) -> dict:
    return {"epoch": epoch, "loss": 1.0 / epoch, "train_acc": 0.5, "val_acc": 0.5, "test_acc": 0.5, "epoch_s": 0.01,
            **extra}


def _metrics(path, text: str | bytes):
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return str(path)


# -- mggcn report: its metrics file ------------------------------------------------------------------------------------

def test_report_of_an_epoch_that_was_not_traced_says_not(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    timeline = [[["spmm", 0.0, 0.001]]]
    path = _metrics(tmp_path / "m.jsonl", "".join(json.dumps(_record(e, **({"timeline": timeline} if e == 2 else {})))
                                                  + "\n" for e in (1, 2, 3)))
    assert _status(["report", path, "--out", str(tmp_path / "plots"), "--epoch", "3"]) == 2
    _one_line(capsys.readouterr().err, "epoch 3 was not traced", "--trace-epoch")
    assert not (tmp_path / "plots").exists()


def test_a_record_holding_a_line_separator_in_a_string_is_one_line(tmp_path):
    """JSON lines are split at newlines only: U+2028 in a string (a note written with ensure_ascii=False) is text."""
    pytest.importorskip("matplotlib")
    from mggcn.tools.report import read_metrics

    text = json.dumps(_record(1, note="a\u2028b\x85c"), ensure_ascii=False) + "\n" + json.dumps(_record(2)) + "\n"
    records = read_metrics(_metrics(tmp_path / "m.jsonl", text.encode()))
    assert [r["epoch"] for r in records] == [1, 2] and records[0]["note"] == "a\u2028b\x85c"


def test_a_byte_order_mark_is_skipped(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = _metrics(tmp_path / "m.jsonl", "\ufeff" + json.dumps(_record(1)) + "\n" + json.dumps(_record(2)) + "\n")
    assert _status(["report", path, "--out", str(tmp_path / "plots")]) == 0, capsys.readouterr().err
    assert capsys.readouterr().err == ""
    assert sorted(os.listdir(tmp_path / "plots")) == ["curves.png", "phases.png"]


@pytest.mark.parametrize("text, words", [
    (b"\x00\x00\x00\n", ["m.jsonl line 1: not a JSON record"]),  # a whole line that is no JSON is not a cut one
    (b'{"epoch": 1, "lo', ["m.jsonl: no epoch records", "its only line, 1, is cut short"]),
    (json.dumps(_record(1)).encode() + b"\nnot json\n", ["m.jsonl line 2: not a JSON record"]),
])
def test_a_file_without_records_is_one_line(tmp_path, capsys, text, words):
    pytest.importorskip("matplotlib")
    path = _metrics(tmp_path / "m.jsonl", text)
    assert _status(["report", path, "--out", str(tmp_path / "plots")]) == 2
    _one_line(capsys.readouterr().err, *words)
    assert not (tmp_path / "plots").exists()


def test_a_cut_last_line_after_records_is_skipped_with_a_note(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from mggcn.tools.report import read_metrics

    path = _metrics(tmp_path / "m.jsonl", json.dumps(_record(1)) + "\n" + json.dumps(_record(2))[:-5])
    assert [r["epoch"] for r in read_metrics(path)] == [1]
    _one_line(capsys.readouterr().err, "skipping the incomplete last line 2")


@pytest.mark.parametrize("source", ["a long line", "/dev/zero"])
def test_a_file_without_line_ends_is_refused_not_read_whole(tmp_path, capsys, monkeypatch, source):
    """A file of one huge line is refused at the line limit, not read whole into memory; /dev/zero, which never
    ends, before anything is read (a device is no metrics file)."""
    pytest.importorskip("matplotlib")
    from mggcn.tools import report

    monkeypatch.setattr(report, "_MAX_LINE", 1 << 20)
    long_line = b'{"epoch": 1, "x": "' + b"a" * (2 << 20)
    path = source if source.startswith("/") else _metrics(tmp_path / "m.jsonl", long_line)
    assert _status(["report", path, "--out", str(tmp_path / "plots")]) == 2
    said = f"{path}: is a device" if source.startswith("/") else f"{path} line 1: longer than 1 MiB"
    _one_line(capsys.readouterr().err, said, "--metrics")
    assert not (tmp_path / "plots").exists()


def test_the_metrics_file_among_its_plots_is_never_replaced_by_one(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    text = json.dumps(_record(1)) + "\n" + json.dumps(_record(2)) + "\n"
    path = _metrics(tmp_path / "curves.png", text)
    assert _status(["report", path, "--out", str(tmp_path)]) == 2
    _one_line(capsys.readouterr().err, "--out", "curves.png would replace", "the metrics file")
    assert (tmp_path / "curves.png").read_text() == text and not (tmp_path / "phases.png").exists()


def test_a_timeline_of_many_ranks_draws_in_few_calls_and_fits_a_png():
    """A call per broadcast (hundreds per rank in a large run) took minutes; a row per rank outgrew the 2^16 pixels
    a PNG may have beyond 727 ranks."""
    pytest.importorskip("matplotlib")
    from mggcn.tools.report import plot_timeline

    broadcasts = [["broadcast", i * 1e-4, i * 1e-4 + 5e-5] for i in range(100)]
    fig, series = plot_timeline({"epoch": 1, "timeline": [broadcasts + [["spmm", 0.0, 0.01]]]})
    assert len(fig.axes[0].collections) == 3  # two broadcast lines and the SpMMs
    assert series["ranks"][0]["broadcast"] == [(s, e) for _, s, e in broadcasts]
    bars = sorted(p.vertices[0][0] for c in fig.axes[0].collections[:2] for p in c.get_paths())
    assert bars == pytest.approx([s * 1e3 for _, s, _ in broadcasts])
    fig, _ = plot_timeline({"epoch": 1, "timeline": [[["spmm", 0.0, 0.001]]] * 740})
    assert fig.get_size_inches()[1] * fig.dpi < 2**16


# -- --tensorboard -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_tensorboard_onto_a_file_is_refused_before_training(tmp_path, where):
    existing = tmp_path / "run.jsonl"
    existing.write_text("kept\n")
    target = str(existing) if where == "a file" else f"{existing}/tb"
    out = run_cli(*TRAIN, "--tensorboard", target)
    assert out.returncode == 2 and out.stdout == ""
    _one_line(out.stderr, "--tensorboard", target, "not a directory")
    assert existing.read_text() == "kept\n"


def test_tensorboard_that_cannot_be_written_is_an_output_error(tmp_path, monkeypatch):
    """SummaryWriter's OSError (a directory it cannot make) escaped as a traceback after training."""
    from mggcn.tools.report import write_tensorboard
    from mggcn.utils.files import OutputError

    class Refusing:
        def __init__(self, logdir):
            raise PermissionError(13, "Permission denied", logdir)

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=Refusing))
    with pytest.raises(OutputError, match="tb: cannot write the TensorBoard log: Permission denied"):
        write_tensorboard([_record(1)], str(tmp_path / "tb"))


# -- --save-predictions, predict --out -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["p.npz", "p.csv.gz", "p.parquet", "p.PT"])
def test_predictions_by_the_name_of_another_format_are_refused_before_training(tmp_path, name):
    out = run_cli(*TRAIN, "--save-predictions", str(tmp_path / name))
    assert out.returncode == 2 and out.stdout == ""
    _one_line(out.stderr, "--save-predictions", name, "give a .npy file")
    assert os.listdir(tmp_path) == []


def test_npy_predictions_in_upper_case_are_npy_and_complete(tmp_path):
    out = run_cli(*TRAIN, "--save-predictions", str(tmp_path / "P.NPY"), "--save-model", str(tmp_path / "m.pt"))
    assert out.returncode == 0, out.stderr
    npy = np.load(tmp_path / "P.NPY")  # was CSV under a .NPY name
    assert npy.shape == (200,) and npy.dtype == np.int64
    out = run_cli("predict", str(tmp_path / "m.pt"), "synthetic:n=200,features=8", "--out", str(tmp_path / "p.csv"))
    assert out.returncode == 0, out.stderr
    csv = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1, dtype=np.int64)
    assert (csv[:, 0] == np.arange(200)).all() and (csv[:, 1] == npy).all()
    out = run_cli("predict", str(tmp_path / "m.pt"), "synthetic:n=200,features=8", "--proba", "--out",
                  str(tmp_path / "proba.npz"))
    assert out.returncode == 2
    _one_line(out.stderr, "--out", "proba.npz", ".npz is not a format")
    assert not (tmp_path / "proba.npz").exists()


# -- checkpoints -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("option", ["--save-model", "--save-predictions", "--metrics"])
def test_an_output_by_a_checkpoints_name_in_the_checkpoint_dir_is_refused(tmp_path, option):
    """--save-model ck/ckpt-000002.pt replaced the run's own last checkpoint, which a resume then skipped."""
    ck = tmp_path / "ck"
    ck.mkdir()
    out = run_cli(*TRAIN, "--checkpoint-dir", str(ck), "--checkpoint-every", "1", option, str(ck / "ckpt-000002.pt"))
    assert out.returncode == 2 and out.stdout == ""
    _one_line(out.stderr, option, "has a checkpoint's name", "--checkpoint-dir")
    assert os.listdir(ck) == []


# -- mggcn info ------------------------------------------------------------------------------------------------------

def test_info_of_an_empty_path_names_the_argument(capsys):
    assert _status(["info", ""]) == 2
    _one_line(capsys.readouterr().err, "expected a path, got ''")
