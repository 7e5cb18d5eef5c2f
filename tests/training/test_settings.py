"""The settings of a job are checked in one place (mggcn.training.settings, through the launcher's check_job) that the
command line and the Python API share: a value that is not finite or out of its range is refused in one line naming
the setting (the flag on the command line), before any data is read."""

from __future__ import annotations

import math

import pytest

import mggcn
from mggcn.tools.cli import main
from mggcn.utils.errors import ConfigError

# (command-line arguments, the API's keyword arguments, the message after the setting's name)
REFUSED = [
    (["--lr", "nan"], {"lr": math.nan}, " must be finite, got nan"),
    (["--lr", "inf"], {"lr": math.inf}, " must be finite, got inf"),
    (["--lr", "-1"], {"lr": -1.0}, " must be positive, got -1.0"),
    (["--weight-decay", "-1"], {"weight_decay": -1.0}, " must be at least 0, got -1.0"),
    (["--weight-decay", "nan"], {"weight_decay": math.nan}, " must be finite, got nan"),
    (["--timeout", "0"], {"timeout_s": 0.0}, " must be positive, got 0.0"),
    (["--timeout", "nan"], {"timeout_s": math.nan}, " must be finite, got nan"),
    (["--patience", "-1"], {"patience": -1}, " must be at least 0, got -1"),
    (["--trace-epoch", "-1"], {"trace_epoch": -1}, " must be at least 0, got -1"),
    (["--trace-epoch", "5"], {"trace_epoch": 5},
     (" 5 is after the last epoch (--epochs 1): no epoch would be traced",
      " 5 is after the last epoch (epochs=1): no epoch would be traced")),
    # what acts on hidden layers, given a one-layer model (PyG's ignores it; the other no-ops are refused too)
    (["--dropout", "0.5", "--hidden", ""], {"dropout": 0.5, "hidden": ()},
     " acts between layers, and the model has one (no hidden layer): it would have no effect"),
    (["--batch-norm", "--hidden", ""], {"batch_norm": True, "hidden": ()},
     " acts between layers, and the model has one (no hidden layer): it would have no effect"),
    (["--activation", "leaky_relu", "--hidden", ""], {"activation": "leaky_relu", "hidden": ()},
     " acts between layers, and the model has one (no hidden layer): it would have no effect"),
    # the setting it needs named by its flag, or as a keyword: (the command line's words, the API's)
    (["--checkpoint-every", "2"], {"checkpoint_every": 2},
     (" needs a checkpoint directory (--checkpoint-dir)", " needs a checkpoint directory (checkpoint_dir=)")),
]


@pytest.mark.parametrize("argv,kwargs,message", REFUSED, ids=[" ".join(r[0]) for r in REFUSED])
def test_the_command_line_and_the_api_refuse_alike(argv, kwargs, message, capsys, tmp_path):
    out = tmp_path / "predictions.csv"
    assert main(["train", "builtin:karate", "--epochs", "1", "--save-predictions", str(out), *argv]) == 2
    cli_message, message = message if isinstance(message, tuple) else (message, message)
    err = capsys.readouterr().err
    assert err == f"mggcn train: error: {argv[0]}{cli_message}\n"
    assert not out.exists()
    with pytest.raises(ConfigError) as caught:
        mggcn.train("builtin:karate", epochs=1, quiet=True, **kwargs)
    option = next(iter(kwargs))
    assert str(caught.value) == f"{option}{message}" and caught.value.option == option


@pytest.mark.parametrize("hidden", ["abc", 3.5, (8, "x"), (8, True), (0,)])
def test_the_api_refuses_hidden_sizes_that_are_not_positive_integers(hidden):
    with pytest.raises(ConfigError, match="^hidden (must be a sequence of positive integers|sizes must be positive)"):
        mggcn.train("builtin:karate", hidden=hidden, epochs=1, quiet=True)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_norm": "False"}, "batch_norm must be True or False, got 'False'"),  # a non-empty string: on
    ({"overlap": None}, "overlap must be True or False, got None"),
    ({"model": "gin", "gin_train_eps": "abc"}, "gin_train_eps must be True or False, got 'abc'"),
    ({"model": "gin", "gin_mlp_batch_norm": 1}, "gin_mlp_batch_norm must be True or False, got 1"),
    ({"betas": 0.9}, r"betas must be two numbers in \[0, 1\), got 0.9"),
    ({"betas": "16"}, r"betas must be two numbers in \[0, 1\), got '16'"),
    ({"betas": (0.9, math.nan)}, r"betas must be two numbers in \[0, 1\), got \(0.9, nan\)"),
    ({"betas": (0.9, True)}, r"betas must be two numbers in \[0, 1\), got \(0.9, True\)"),
])
def test_the_api_refuses_switches_and_betas_of_other_types(kwargs, message):
    """What the command line's parser fixes (a switch is a bool, betas a pair) a caller may give otherwise: one
    line naming the setting, not a switch that a non-empty string turns on, nor len() of a number."""
    with pytest.raises(ConfigError, match=f"^{message}$") as caught:
        mggcn.train("builtin:karate", epochs=1, quiet=True, **kwargs)
    assert caught.value.option == message.split()[0]


@pytest.mark.parametrize("nprocs", [0, -2, 1.5, "2"])
def test_the_api_refuses_a_process_count_below_one_or_not_an_integer(nprocs):
    with pytest.raises(ConfigError, match="^nprocs must be an integer of at least 1"):
        mggcn.train("builtin:karate", nprocs=nprocs, epochs=1, quiet=True)


@pytest.mark.parametrize("argv,where", [
    (["train", "builtin:karate", "--hidden", "8,,8"], "--hidden"),
    (["train", "builtin:karate", "--hidden", "8,"], "--hidden"),
    (["plan", "--dataset", "reddit", "--train", "1.5"], "--train"),
    (["plan", "--dataset", "reddit", "--train", "0"], "--train"),
])
def test_malformed_lists_and_fractions_are_refused_by_the_parser(argv, where, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and f"argument {where}:" in capsys.readouterr().err


def test_a_one_layer_gin_takes_an_activation_its_mlp_applies():
    """GIN's σ acts inside each layer's MLP too: with no hidden layer it still changes the model, unlike the others'."""
    losses = {a: [r["loss"] for r in mggcn.train("builtin:karate", model="gin", hidden=(), epochs=2, quiet=True,
                                                 activation=a).history] for a in ("relu", "leaky_relu")}
    assert losses["relu"] != losses["leaky_relu"]


def test_an_empty_hidden_list_is_one_layer_and_the_help_says_so(capsys):
    assert main(["train", "builtin:karate", "--hidden", "", "--epochs", "2", "--quiet"]) == 0
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "'' for none: one layer" in " ".join(capsys.readouterr().out.split())


def test_predict_refuses_a_timeout_that_is_not_positive(capsys, tmp_path):
    out = tmp_path / "p.csv"
    assert main(["predict", str(tmp_path / "absent.pt"), "builtin:karate", "--out", str(out), "--timeout", "-1"]) == 2
    assert capsys.readouterr().err == "mggcn predict: error: --timeout must be positive, got -1.0\n"


def test_a_quiet_run_says_only_its_final_accuracies(capsys):
    assert main(["train", "builtin:karate", "--epochs", "2", "--hidden", "4", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("mggcn: trained model (after epoch 2, eval mode): train ")


@pytest.mark.parametrize("command", [["bench", "--nprocs", "0"], ["plan", "--dataset", "reddit", "--nprocs", "1,0"]])
def test_a_process_count_of_zero_is_named_as_such(command, capsys):
    with pytest.raises(SystemExit):
        main(command)
    err = capsys.readouterr().err
    assert "argument --nprocs: expected comma-separated positive integers such as 1,2" in err and "hidden" not in err
