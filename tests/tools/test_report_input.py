"""``mggcn report`` on a metrics file whose traced timeline or numbers are malformed: one line naming the file, the
record's line and what is wrong, exit status 2, and no plots directory left behind."""

import json

import pytest

pytest.importorskip("matplotlib")

from mggcn.tools.cli import main  # noqa: E402
from mggcn.tools.report import MetricsError, read_metrics  # noqa: E402


def _records() -> list[dict]:
    """Three epochs of two ranks, the second traced, as ``mggcn train --metrics`` writes them."""
    rows = [{"epoch": e, "loss": 1.0 / e, "train_acc": 0.5, "val_acc": 0.5, "test_acc": 0.5, "epoch_s": 0.01,
             "spmm": 0.002, "comm_wait": 0.0, "gemm": 0.001, "allreduce": 0.001, "criterion": 0.001,
             "optimizer": 0.001, "other": 0.004} for e in (1, 2, 3)]
    rows[1]["timeline"] = [[["gemm", 0.0, 0.001], ["spmm", 0.001, 0.003], ["allreduce", 0.003, 0.004]],
                           [["gemm", 0.0, 0.001], ["broadcast", 0.001, 0.002], ["spmm", 0.002, 0.003]]]
    return rows


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("timeline, what", [
    ([1, 2], "rank 0: 1 is not a list of events"),
    ([[[["spmm"], 1, 2]]], 'rank 0 event 0: [["spmm"], 1, 2] is not [kind, start, end]'),
    ([[["spmm", 1]]], "is not [kind, start, end]"),
    ([[["spmm", "a", 2]]], "is not [kind, start, end]"),
    ([[["spmm", True, 2]]], "is not [kind, start, end]"),
    ([[["spmm", 0.0, 0.001]], [["gemm", 0.002, 0.001]]], "rank 1 event 0: "),
    ([[]], "no events on any rank"),
    ([[["zzz", 0, 1]]], "rank 0 event 0: kind \"zzz\" is not one of broadcast, allreduce, spmm"),  # nothing to draw
    ([[["spmm", 0, 1], ["fft", 1, 2]]], 'rank 0 event 1: kind "fft" is not one of'),  # left out of the plot
    ({"a": 1}, 'is not a list of ranks'),
    ("abc", "is not a list of ranks"),
])
def test_a_malformed_timeline_is_named_in_one_line_and_nothing_is_written(timeline, what, tmp_path, capsys):
    records = _records()
    records[1]["timeline"] = timeline
    metrics = _write(tmp_path / "m.jsonl", records)
    assert main(["report", str(metrics), "--out", str(tmp_path / "plots")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{metrics} line 2: malformed 'timeline' (" in err and what in err, err
    assert not (tmp_path / "plots").exists()


@pytest.mark.parametrize("key, value", [("val_acc", "a"), ("spmm", None), ("epoch_s", [1]), ("epoch", 1e400),
                                        ("epoch", float("nan"))])
def test_a_number_of_a_record_that_is_not_one_is_named(key, value, tmp_path):
    records = _records()
    records[2][key] = value
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records).replace("Infinity", "1e400"))
    with pytest.raises(MetricsError, match=f"line 3: '{key}' is not a number"):
        read_metrics(str(path))


def test_a_well_formed_timeline_still_draws(tmp_path, capsys):
    metrics = _write(tmp_path / "m.jsonl", _records())
    assert main(["report", str(metrics), "--out", str(tmp_path / "plots")]) == 0
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["curves.png", "phases.png", "timeline.png"]
