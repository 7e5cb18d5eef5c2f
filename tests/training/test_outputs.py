"""What a job writes (mggcn.training.outputs): predictions as .npy or CSV, and model files."""

import json

import numpy as np
import pytest
import torch

from mggcn.config import TrainConfig
from mggcn.nn.model import GCN
from mggcn.training.outputs import check_output, load_model, save_model, save_output, save_predictions
from mggcn.utils.errors import ConfigError


def test_check_output_names_the_option(tmp_path):
    check_output("out", str(tmp_path / "x.npy"))
    check_output("out", None)
    with pytest.raises(ConfigError, match="save_model .*: is a directory"):
        check_output("save_model", str(tmp_path))


def test_predictions_and_outputs_as_npy_and_csv(tmp_path):
    classes = np.array([2, 0, 1], dtype=np.int64)
    save_predictions(str(tmp_path / "p.npy"), classes)
    assert np.array_equal(np.load(tmp_path / "p.npy"), classes)
    save_predictions(str(tmp_path / "p.csv"), classes)
    assert (tmp_path / "p.csv").read_text() == "vertex,prediction\n0,2\n1,0\n2,1\n"
    proba = np.array([[0.25, 0.75], [1.0, 0.0]], dtype=np.float32)
    save_output(str(tmp_path / "q.csv"), proba, "p")
    assert (tmp_path / "q.csv").read_text() == "vertex,p0,p1\n0,0.25,0.75\n1,1,0\n"
    # a .tsv or .tab name (any case) is tab-separated, as its name says
    save_predictions(str(tmp_path / "p.tsv"), classes)
    assert (tmp_path / "p.tsv").read_text() == "vertex\tprediction\n0\t2\n1\t0\n2\t1\n"
    save_output(str(tmp_path / "q.TAB"), proba, "p")
    assert (tmp_path / "q.TAB").read_text() == "vertex\tp0\tp1\n0\t0.25\t0.75\n1\t1\t0\n"


def test_model_file_round_trip_and_its_description(tmp_path):
    model = GCN([5, 4, 3], activation="leaky_relu", seed=2)
    path = str(tmp_path / "m.pt")
    save_model(path, model.gcnconv_state_dict(), TrainConfig(activation="leaky_relu", norm="mean"), {"name": "g"},
               epochs=9)
    card = json.loads((tmp_path / "m.pt.json").read_text())
    assert card["dims"] == [5, 4, 3] and card["norm"] == "mean" and card["epochs"] == 9
    loaded, described = load_model(path)
    assert described["activation"] == "leaky_relu" and not loaded.training
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor)
    with pytest.raises(ConfigError, match="norm sym: the model was trained with norm mean") as err:
        load_model(path, norm="sym")
    assert err.value.option == "norm"
