"""Model files whose tensors do not make a model: `mggcn predict` says so in one line naming the file (exit status 2)
and writes nothing, whatever the shapes claim; nothing of the size they claim is allocated."""

import json

import pytest
import torch

from cli_util import run_cli


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A GCN and a GAT trained on karate (hidden 8; GAT with 2 heads), with their sidecars."""
    root = tmp_path_factory.mktemp("models")
    for model, extra in (("gcn", []), ("gat", ["--heads", "2"])):
        out = run_cli("train", "builtin:karate", "--model", model, "--hidden", "8", "--epochs", "1", "--quiet",
                      "--save-model", str(root / f"{model}.pt"), *extra)
        assert out.returncode == 0, out.stderr
    return root


def _crafted(trained, tmp_path, model: str, change) -> str:
    state = torch.load(trained / f"{model}.pt", weights_only=True)
    card = json.loads((trained / f"{model}.pt.json").read_text())
    change(state, card)
    path = tmp_path / "crafted.pt"
    torch.save(state, path)
    (tmp_path / "crafted.pt.json").write_text(json.dumps(card))
    return str(path)


def _huge(state, card):
    """A hidden layer of 10^8 claimed by stride-0 views: a few bytes on disk, 13.6 GB as a model."""
    wide = 10**8
    state["convs.0.lin.weight"] = torch.zeros(1, 34).expand(wide, 34)
    state["convs.0.bias"] = torch.zeros(1).expand(wide)
    state["convs.1.lin.weight"] = torch.zeros(2, 1).expand(2, wide)
    card["dims"] = [34, wide, 2]


def _set(name, value):
    def change(state, card):
        state[name] = value
    return change


def _zero_wide(state, card):
    state["convs.1.lin.weight"] = torch.zeros(0, 8)
    state["convs.1.bias"] = torch.zeros(0)
    card["dims"] = [34, 8, 0]


CASES = {
    "a layer larger than memory": ("gcn", _huge, ["GiB", "more than this machine's"]),
    "a bias of another length": ("gcn", _set("convs.0.bias", torch.zeros(5)), ["convs.0.bias"]),
    "a layer of no width": ("gcn", _zero_wide, ["no width"]),
    # torch would copy them into the real model with a warning, dropping the imaginary parts
    "complex weights": ("gcn", _set("convs.0.bias", torch.zeros(8, dtype=torch.complex64)),
                        ["convs.0.bias holds complex numbers"]),
    # it predicted class 0 for every vertex, and probabilities of NaN, with exit 0
    "a NaN weight": ("gcn", _set("convs.0.bias", torch.full((8,), float("nan"))),
                     ["convs.0.bias holds NaN or infinite values; the model would predict NaN"]),
    "attention vectors of one dimension": ("gat", _set("convs.0.att_src", torch.zeros(8)), ["convs.0.att_src"]),
    "attention vectors of another last layer": ("gat", _set("convs.1.att_src", torch.zeros(1, 1, 4)),
                                                ["describes layers [34, 8, 2]", "has [34, 8, 4]"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_predict_refuses_a_crafted_model_in_one_line(trained, tmp_path, case):
    model, change, words = CASES[case]
    path = _crafted(trained, tmp_path, model, change)
    out_file = tmp_path / "p.csv"
    out = run_cli("predict", path, "builtin:karate", "--out", str(out_file), timeout=60)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr and path in lines[0] and all(w in lines[0] for w in words), lines[0]
    assert not out_file.exists()


def test_the_library_refuses_to_write_predictions_over_the_model_it_reads(trained, tmp_path):
    from mggcn.training.predict import predict
    from mggcn.utils.errors import ConfigError

    model = tmp_path / "m.pt"
    model.write_bytes((trained / "gcn.pt").read_bytes())
    (tmp_path / "m.pt.json").write_bytes((trained / "gcn.pt.json").read_bytes())
    before = model.read_bytes()
    for out in (model, tmp_path / "m.pt.json"):
        with pytest.raises(ConfigError, match="would replace the model"):
            predict(str(model), "builtin:karate", out=str(out))
    assert model.read_bytes() == before
    assert predict(str(model), "builtin:karate").shape == (34,)
