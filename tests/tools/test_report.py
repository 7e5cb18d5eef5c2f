"""``mggcn report``: the PNGs exist, are not blank, and what they plot is what the metrics say; TensorBoard."""

import json
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from matplotlib.image import imread  # noqa: E402

from mggcn.tools.cli import main  # noqa: E402
from mggcn.tools.report import (  # noqa: E402
    STACKED,
    MetricsError,
    TensorBoardMissing,
    plot_curves,
    plot_phases,
    plot_timeline,
    read_metrics,
    write_report,
    write_tensorboard,
)


def _records():
    """Four epochs of two ranks; epoch 2 traced: stage 1's broadcast is in flight during stage 0's SpMM."""
    rows = []
    for e in range(1, 5):
        rows.append({"epoch": e, "loss": 2.0 / e, "train_acc": 0.2 * e, "val_acc": [0.3, 0.6, 0.5, 0.55][e - 1],
                     "test_acc": 0.1 * e, "epoch_s": 0.05 + 0.01 * e, "spmm": 0.01 * e, "comm_wait": 0.002,
                     "gemm": 0.003, "allreduce": 0.004, "criterion": 0.001, "optimizer": 0.002, "other": 0.005})
    rows[1]["timeline"] = [
        [["gemm", 0.0, 0.004], ["broadcast", 0.004, 0.006], ["broadcast", 0.005, 0.012], ["spmm", 0.006, 0.011],
         ["comm_wait", 0.011, 0.012], ["spmm", 0.012, 0.015], ["allreduce", 0.016, 0.02]],
        [["gemm", 0.0, 0.005], ["broadcast", 0.005, 0.007], ["broadcast", 0.005, 0.009], ["spmm", 0.007, 0.01],
         ["spmm", 0.01, 0.014], ["allreduce", 0.016, 0.021]],
    ]
    return rows


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_curves_plot_the_loss_and_accuracies_of_the_metrics():
    records = _records()
    fig, series = plot_curves(records)
    loss_ax, acc_ax = fig.axes
    np.testing.assert_array_equal(loss_ax.lines[0].get_ydata(), [r["loss"] for r in records])
    for line, key in zip(acc_ax.lines, ("train_acc", "val_acc", "test_acc")):
        np.testing.assert_array_equal(line.get_xdata(), [1, 2, 3, 4])
        np.testing.assert_array_equal(line.get_ydata(), [r[key] for r in records])
        assert series[key] == [r[key] for r in records]
    assert acc_ax.lines[3].get_xdata()[0] == 2  # the best validation epoch is marked


def test_a_split_without_vertices_has_no_curve_and_no_best_epoch(tmp_path):
    """Records of a dataset without validation vertices hold null there: no validation curve (a flat 0 would read
    as a model that gets every vertex wrong), no best-validation mark; the file still makes a report."""
    records = [{**r, "val_acc": None} for r in _records()]
    fig, series = plot_curves(records)
    acc_ax = fig.axes[1]
    assert "val_acc" not in series and [line.get_label() for line in acc_ax.lines] == ["train", "test"]
    assert read_metrics(str(_write(tmp_path / "m.jsonl", records)))[0]["val_acc"] is None
    assert main(["report", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "out")]) == 0
    partial = [{**r, "val_acc": None if r["epoch"] == 2 else r["val_acc"]} for r in _records()]
    fig, series = plot_curves(partial)
    assert np.isnan(series["val_acc"][1]) and fig.axes[1].lines[3].get_xdata()[0] == 4  # best of those measured


def test_phase_bars_stack_the_phases_of_each_epoch():
    records = _records()
    fig, series = plot_phases(records)
    for phase in ("spmm", "comm_wait", "gemm", "allreduce"):
        assert series[phase] == [r[phase] for r in records]
    assert series["other"] == pytest.approx([r["other"] + r["criterion"] + r["optimizer"] for r in records])
    bars = fig.axes[0].patches
    assert len(bars) == len(STACKED) * len(records)
    # epochs under a second are drawn in ms; the bars of an epoch add up to its phases' sum
    tops: dict[int, float] = {}
    for bar in bars:
        epoch = round(bar.get_x() + bar.get_width() / 2)
        tops[epoch] = max(tops.get(epoch, 0.0), bar.get_y() + bar.get_height())
    for e in range(1, len(records) + 1):
        assert tops[e] == pytest.approx(1e3 * sum(series[p][e - 1] for p in STACKED))


def test_timeline_has_a_row_per_rank_with_broadcasts_over_multiplications():
    record = _records()[1]
    fig, series = plot_timeline(record)
    assert series["epoch"] == 2 and len(series["ranks"]) == 2
    for rank, events in enumerate(record["timeline"]):
        for kind in ("broadcast", "spmm", "gemm", "allreduce"):
            assert series["ranks"][rank][kind] == [(s, e) for k, s, e in events if k == kind]
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    drawn = [c for c in ax.collections if len(c.get_paths())]
    bars = {tuple(np.round(p.vertices[0], 6)) for c in drawn for p in c.get_paths()}
    assert (5.0, -0.25) in bars  # rank 0's second broadcast (5 ms), on the second communication line
    assert (6.0, 0.02) in bars  # rank 0's first SpMM, on its compute line, while that broadcast is in flight


def test_read_metrics_of_a_resumed_and_then_killed_run(tmp_path):
    records = _records()
    path = tmp_path / "m.jsonl"
    # epochs 1-3, killed after a checkpoint at 2, resumed from 2: 3 and 4 again; the last line cut short
    text = "".join(json.dumps(r) + "\n" for r in records[:3] + [dict(records[2], loss=9.0), records[3]])
    path.write_text(text + '{"epoch": 5, "lo')
    got = read_metrics(str(path))
    assert [r["epoch"] for r in got] == [1, 2, 3, 4] and got[2]["loss"] == 9.0
    path.write_text("not json\n" + text)
    with pytest.raises(MetricsError, match="line 1"):
        read_metrics(str(path))


def test_report_writes_non_blank_pngs_of_a_real_run(tmp_path, capsys):
    metrics, out = tmp_path / "m.jsonl", tmp_path / "plots"
    assert main(["train", "builtin:karate", "--epochs", "6", "--hidden", "8", "--quiet", "--metrics",
                 str(metrics)]) == 0
    assert capsys.readouterr().out.startswith("mggcn: trained model")  # a quiet run's one line
    assert main(["report", str(metrics), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert [p.rsplit("/", 1)[1] for p in printed] == ["curves.png", "phases.png", "timeline.png"]
    for path in printed:
        image = imread(path)
        assert image.shape[0] > 200 and image.shape[1] > 500
        assert image[..., :3].std() > 0.05  # not a blank canvas
    assert main(["report", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_report_without_a_traced_epoch_skips_the_timeline(tmp_path):
    records = [r for r in _records() if "timeline" not in r]
    paths = write_report(str(_write(tmp_path / "m.jsonl", records)), str(tmp_path / "out"))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["curves.png", "phases.png"]
    with pytest.raises(MetricsError, match=r"epoch 3 was not traced; train with trace_epoch=E to record a timeline$"):
        write_report(str(tmp_path / "m.jsonl"), str(tmp_path / "out"), epoch=3)


def test_a_report_without_a_traced_epoch_removes_an_earlier_reports_timeline(tmp_path):
    """A report into a directory that holds an earlier report's timeline.png, of a run with no traced epoch: that
    plot would pass for this run's; it is removed once this report's plots are written."""
    out = tmp_path / "out"
    write_report(str(_write(tmp_path / "traced.jsonl", _records())), str(out))
    assert (out / "timeline.png").is_file()
    untraced = _write(tmp_path / "m.jsonl", [r for r in _records() if "timeline" not in r])
    write_report(str(untraced), str(out))
    assert sorted(p.name for p in out.iterdir()) == ["curves.png", "phases.png"]


def test_tensorboard_not_installed_is_said_and_training_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed, even where it is
    with pytest.raises(TensorBoardMissing, match="pip install tensorboard"):
        write_tensorboard(_records(), str(tmp_path / "tb"))
    model = tmp_path / "model.pt"
    assert main(["train", "builtin:karate", "--epochs", "2", "--hidden", "4", "--quiet", "--tensorboard",
                 str(tmp_path / "tb"), "--save-model", str(model)]) == 0
    assert "tensorboard is not installed (pip install tensorboard); skipping" in capsys.readouterr().err
    assert model.exists()


@pytest.mark.parametrize("record, args", [
    ({"epoch": 1, "loss": 0.5}, ["--epoch", "3"]),  # no such traced epoch
    ({"epoch": 1, "loss": 0.5, "timeline": [[["spmm", "a", 1]]]}, []),  # a timeline that cannot be drawn
])
def test_a_metrics_file_that_cannot_be_drawn_leaves_no_out_directory(tmp_path, capsys, record, args):
    metrics = tmp_path / "bad.jsonl"
    metrics.write_text(json.dumps(record) + "\n")
    out = tmp_path / "plots"
    assert main(["report", str(metrics), "--out", str(out), *args]) == 2
    assert capsys.readouterr().err.startswith("mggcn report: error: ")
    assert not out.exists()
    existing = tmp_path / "existing"  # a directory that was there stays, with nothing half-written in it
    existing.mkdir()
    assert main(["report", str(metrics), "--out", str(existing), *args]) == 2
    assert existing.is_dir() and list(existing.iterdir()) == []


def test_a_long_run_draws_bars_of_runs_of_epochs_at_their_means():
    """200,000 epochs drew a bar per epoch and phase: minutes and gigabytes. Beyond 1,000 epochs a bar is the mean
    of a run of consecutive epochs (here 5: 5,000 epochs in 1,000 bars), whose heights the bars show."""
    base = _records()[0]
    records = [{**base, "epoch": e, "spmm": 0.001 * (e % 5)} for e in range(1, 5001)]
    fig, _ = plot_phases(records)
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == len(STACKED) * 1000
    spmm = bars[:1000]
    assert spmm[0].get_x() == 1 and spmm[0].get_width() == 5 and spmm[1].get_x() == 6
    assert spmm[0].get_height() == pytest.approx(1e3 * 0.001 * (1 + 2 + 3 + 4 + 0) / 5)  # ms: epochs under 1 s
    assert "each bar the mean of 5 epochs" in ax.get_title()
    # 1,001 epochs: runs of 2, the last run one epoch, its bar that epoch's own
    fig, _ = plot_phases([{**base, "epoch": e, "spmm": 1.0, "epoch_s": 1.5} for e in range(1, 1002)])
    spmm = fig.axes[0].patches[:501]
    assert spmm[-1].get_x() == 1001 and {bar.get_height() for bar in spmm} == {1.0}  # s: epochs of a second


@pytest.mark.parametrize("key, value", [("val_acc", "NaN"), ("spmm", "Infinity"), ("loss", "1e308"),
                                        ("epoch", "1e300")])  # 1e308: matplotlib's "arange: cannot compute length"
def test_a_number_no_run_writes_is_one_line_naming_the_file_and_line(tmp_path, capsys, key, value):
    """Python's json reads NaN and Infinity; a run writes neither (a non-finite loss ends it) nor numbers a plot's
    axis cannot hold: the plots failed with matplotlib's words (``max() arg is an empty sequence``, ``Axis limits
    cannot be NaN or Inf``) naming neither file nor line, or warned over two lines."""
    lines = [json.dumps(r) for r in _records()]
    lines[2] = lines[2].replace(f'"{key}": {json.dumps(_records()[2][key])}', f'"{key}": {value}')
    assert value in lines[2]
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["report", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"m.jsonl line 3: '{key}' is {value if value[0] != '1' else float(value)}" in err
    assert "not a finite number of at most 1e+39 in size, as a run writes" in err
    assert not (tmp_path / "out").exists()


def test_a_diverging_runs_largest_finite_loss_still_makes_a_report(tmp_path):
    """A loss as large as float32 holds (a run diverging before its loss turns inf, which ends it) is a number a
    run writes: its records make a report."""
    records = _records()
    records[3]["loss"] = 3.4e38
    assert main(["report", str(_write(tmp_path / "m.jsonl", records)), "--out", str(tmp_path / "out")]) == 0
