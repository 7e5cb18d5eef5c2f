"""`--format planetoid` through the command: train, prepare, predict on files in the GCN paper's layout, and a
pickle that runs code refused before anything runs."""

from __future__ import annotations

import os

import numpy as np

from cli_util import run_cli
from planetoid_files import cora_like, py2_pickle


def test_train_prepare_predict(tmp_path):
    folder = cora_like(tmp_path / "raw")
    model = tmp_path / "model.pt"
    out = run_cli("train", str(folder / "ind.cora"), "--format", "planetoid", "--normalize-features", "--nprocs", "2",
                  "--epochs", "3", "--hidden", "8", "--dropout", "0.5", "--input-dropout", "0.5",
                  "--save-model", str(model))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("mggcn: cora: 664 vertices, ")
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("mggcn: trained model (after epoch 3, eval mode): train ") and "best validation" in last

    prepared = tmp_path / "cora"
    out = run_cli("prepare", str(folder), str(prepared), "--format", "planetoid", "--normalize-features", "--quiet")
    assert out.returncode == 0, out.stderr
    pred = tmp_path / "pred.npy"
    out = run_cli("predict", str(model), str(prepared), "--out", str(pred), "--nprocs", "2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"mggcn: wrote the predicted class of each of 664 vertices to {pred}"
    assert np.load(pred).shape == (664,)


def test_pickle_that_runs_code_is_refused_in_one_line(tmp_path):
    folder = cora_like(tmp_path / "raw")
    marker = tmp_path / "marker"

    class Mkdir:
        def __reduce__(self):
            return os.mkdir, (str(marker),)

    py2_pickle({0: [Mkdir()]}, folder / "ind.cora.graph")
    out = run_cli("train", str(folder), "--format", "planetoid", "--epochs", "1")
    assert out.returncode == 2, (out.stdout, out.stderr)
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and "ind.cora.graph: refused: not a Planetoid pickle (it names posix.mkdir" in err[0], err
    assert not marker.exists() and "epoch" not in out.stdout
