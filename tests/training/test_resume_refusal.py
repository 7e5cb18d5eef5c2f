"""``--resume`` with nothing usable, checkpoints holding the wrong types, and which files a run may delete (issue 31).

resume=True refuses, in one line naming the directory and why, when no checkpoint is usable; resume="auto" starts at
epoch 1 instead, saying so. A checkpoint whose entries have the wrong type, or whose weights or optimizer state do not
fit the model, is refused naming the file. The rotation deletes only this run's checkpoints: never a corrupt file or
another run's; a file in the way of a new checkpoint is kept aside under another name."""

import hashlib
import io
import os

import pytest
import torch

from cli_util import run_cli
from mggcn.config import TrainConfig
from mggcn.training.checkpoint import Checkpointer, CheckpointError, check_compatible, load, resume_line
from mggcn.training.job import TrainJob, check_job, run_train_job
from mggcn.utils.errors import ConfigError

KARATE = "builtin:karate"


def _job(ck, epochs, resume=False, every=1):
    config = TrainConfig(hidden=(8,), epochs=epochs, seed=1, trace_epoch=0)
    return TrainJob(dataset=KARATE, config=config, quiet=True, checkpoint_dir=str(ck), checkpoint_every=every,
                    resume=resume)


def _rewrite(src, dst, change) -> None:
    """``src``'s contents changed by ``change(state)``, saved at ``dst`` under a valid header: the checksum says
    nothing of the types, since whoever writes the payload writes the header too."""
    state = load(str(src))
    change(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    dst.write_bytes(b"mggcn-checkpoint " + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)


@pytest.mark.parametrize("contents", ["missing", "empty", "corrupt"])
def test_resume_with_nothing_usable_is_refused_naming_the_directory(tmp_path, contents):
    ck = tmp_path / "ck"
    if contents != "missing":
        ck.mkdir()
    if contents == "corrupt":
        (ck / "ckpt-000003.pt").write_bytes(b"not a checkpoint\n")
    with pytest.raises(ConfigError) as info:
        check_job(_job(ck, 4, resume=True), 1)
    message = str(info.value)
    assert info.value.option == "resume" and "\n" not in message
    assert message.startswith(f"resume: nothing to resume from in {ck}: ")
    assert ("ckpt-000003.pt: not an mggcn checkpoint" in message) == (contents == "corrupt")
    assert "resume='auto'" in message
    if contents == "corrupt":
        assert (ck / "ckpt-000003.pt").read_bytes() == b"not a checkpoint\n"


def test_resume_auto_starts_at_epoch_one_and_never_deletes_what_it_did_not_write(tmp_path, capsys):
    ck = tmp_path / "ck"
    ck.mkdir()
    junk = {"ckpt-000001.pt": b"junk one\n", "ckpt-000009.pt": b"junk nine\n", "notes.txt": b"mine\n"}
    for name, data in junk.items():
        (ck / name).write_bytes(data)
    result = run_train_job(_job(ck, 4, resume="auto"))
    assert result.resumed_from is None and len(result.history) == 4
    err = capsys.readouterr().err
    assert f"nothing to resume from in {ck}" in err and "starting at epoch 1" in err
    names = sorted(os.listdir(ck))
    # its own checkpoints rotated to the newest two; the corrupt ones kept, the one in the way renamed aside
    assert names == ["ckpt-000001.pt.kept", "ckpt-000003.pt", "ckpt-000004.pt", "ckpt-000009.pt", "notes.txt"]
    assert (ck / "ckpt-000001.pt.kept").read_bytes() == b"junk one\n"
    assert (ck / "ckpt-000009.pt").read_bytes() == b"junk nine\n"
    assert f"{ck}/ckpt-000001.pt was not written by this run: kept as {ck}/ckpt-000001.pt.kept" in err


def test_a_resumed_run_rotates_its_own_lineage_but_not_other_files(tmp_path):
    ck = tmp_path / "ck"
    run_train_job(_job(ck, 3))
    assert sorted(os.listdir(ck)) == ["ckpt-000002.pt", "ckpt-000003.pt"]
    (ck / "ckpt-000005.pt").write_bytes(b"torn\n")  # newer than the resumed one, and corrupt
    resumed = run_train_job(_job(ck, 6, resume=True))
    assert resumed.resumed_from.endswith("ckpt-000003.pt") and len(resumed.history) == 6
    # 2 and 3 (the lineage it continues) and 4 rotated out; the torn 5 kept aside when this run wrote its own 5
    assert sorted(os.listdir(ck)) == ["ckpt-000005.pt", "ckpt-000005.pt.kept", "ckpt-000006.pt"]
    assert (ck / "ckpt-000005.pt.kept").read_bytes() == b"torn\n"
    assert Checkpointer(str(ck)).latest()[1].endswith("ckpt-000006.pt")


def _set_first_weight(value):
    def change(state):
        state["model"][next(iter(state["model"]))] = value
    return change


WRONG = {
    "a string for the weights": (lambda s: s.__setitem__("model", "weights"), "its 'model' is not a dict of tensors"),
    "a string for one tensor": (_set_first_weight("w"), "is a str"),
    "a string in the optimizer": (lambda s: s["optimizer"]["state"][0].__setitem__("exp_avg", "x"),
                                  "its 'optimizer' is not an optimizer state"),
    "a record without numbers": (lambda s: s["history"][0].__setitem__("loss", "low"),
                                 "its 'history' is not a list of epoch records"),
    "a string for the epoch": (lambda s: s.__setitem__("epoch", "3"), "not an mggcn checkpoint (no epoch)"),
    "best weights of another type": (lambda s: s.__setitem__("best", 5), "its 'best' is not the best weights"),
    "weights of another shape": (_set_first_weight(torch.zeros(2, 2)), "its weights do not fit this model"),
    "optimizer moments of another shape": (lambda s: s["optimizer"]["state"][0].__setitem__("exp_avg",
                                                                                        torch.zeros(3)),
                                           "its optimizer's exp_avg of parameter 0 has shape [3]"),
    # the param group's settings are the resumed run's: each is checked before the optimizer takes it
    "betas of text": (lambda s: s["optimizer"]["param_groups"][0].__setitem__("betas", "ab"),
                      "param group 0's betas 'ab' are not two numbers in [0, 1)"),
    "one beta": (lambda s: s["optimizer"]["param_groups"][0].__setitem__("betas", [0.9]),
                 "param group 0's betas [0.9] are not two numbers in [0, 1)"),
    "no eps": (lambda s: s["optimizer"]["param_groups"][0].__setitem__("eps", None),
               "param group 0's eps None is not a finite number >= 0"),
    "an lr of text": (lambda s: s["optimizer"]["param_groups"][0].__setitem__("lr", "abc"),
                      "param group 0's lr 'abc' is not a finite number >= 0"),
    "an infinite lr": (lambda s: s["optimizer"]["param_groups"][0].__setitem__("lr", float("inf")),
                       "param group 0's lr inf is not a finite number >= 0"),
    "a state of no parameter": (lambda s: s["optimizer"]["state"].__setitem__(99, s["optimizer"]["state"][0]),
                                "a state for parameter 99, which no param group holds"),
    # the run would go on after the last record while its messages and files said the epoch
    "a history shorter than the epoch": (lambda s: s["history"].pop(), "it is of epoch 2 but its history holds "
                                                                       "epochs 1..1 (1 records)"),
    "an epoch beyond the history": (lambda s: s.__setitem__("epoch", 4), "it is of epoch 4 but its history"),
    "no history": (lambda s: s.__setitem__("history", []), "it is of epoch 2 but its history holds no epoch"),
    # counted before it is compared: a list of 10^18 epochs would exhaust the memory
    "an epoch of 10^18": (lambda s: s.__setitem__("epoch", 10**18), "it is of epoch 1000000000000000000 but its"),
    # torch would copy them into the real parameters with a warning, dropping the imaginary parts
    "complex weights": (lambda s: s["model"].update({k: v.to(torch.complex64) for k, v in s["model"].items()}),
                        "its model entry convs.0.bias holds complex numbers"),
    "a complex moment": (lambda s: s["optimizer"]["state"][1].__setitem__(
        "exp_avg", s["optimizer"]["state"][1]["exp_avg"].to(torch.complex64)),
        "its optimizer entry state.1.exp_avg holds complex numbers"),
    # training never saves one (a non-finite loss stops it first): resumed, it failed at once, naming the file good
    "a NaN weight": (lambda s: s["model"]["convs.0.lin.weight"].view(-1).__setitem__(0, float("nan")),
                     "its model entry convs.0.lin.weight holds NaN or infinite values"),
    "an infinite moment": (lambda s: s["optimizer"]["state"][1]["exp_avg_sq"].view(-1).__setitem__(0, float("inf")),
                           "its optimizer entry state.1.exp_avg_sq holds NaN or infinite values"),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_a_checkpoint_with_the_wrong_types_is_refused_naming_the_file(tmp_path, case):
    change, expected = WRONG[case]
    ck = tmp_path / "ck"
    run_train_job(_job(ck, 2, every=2))
    crafted = ck / "ckpt-000002.pt"
    _rewrite(crafted, crafted, change)
    with pytest.raises((ConfigError, CheckpointError)) as info:
        check_job(_job(ck, 4, resume=True), 1)
    message = str(info.value)
    assert str(crafted) in message and expected in message and "\n" not in message


def test_the_command_line_refuses_and_starts_afresh_as_asked(tmp_path):
    ck = tmp_path / "ck"
    common = ["train", KARATE, "--epochs", "2", "--hidden", "8", "--quiet", "--trace-epoch", "0", "--checkpoint-dir",
              str(ck)]
    out = run_cli(*common, "--resume")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (f"mggcn train: error: --resume: nothing to resume from in {ck}: no checkpoint "
                                  "files (ckpt-*.pt: a run writes them every K epochs, --checkpoint-every K, and "
                                  "when a signal stops it); to start at epoch 1 when there is nothing to resume, ask "
                                  "for --resume-or-start")
    out = run_cli(*common, "--resume-or-start", "--checkpoint-every", "1")
    assert out.returncode == 0, out.stderr
    assert f"nothing to resume from in {ck} (no checkpoint files); starting at epoch 1" in out.stderr  # no keyword
    assert "starting at epoch 1" in out.stderr and sorted(os.listdir(ck)) == ["ckpt-000001.pt", "ckpt-000002.pt"]
    crafted = ck / "ckpt-000002.pt"
    _rewrite(crafted, crafted, lambda s: s.__setitem__("model", "weights"))
    out = run_cli(*common[:3], "3", *common[4:], "--resume")  # the intact one before it is used
    assert out.returncode == 0, out.stderr
    assert f"skipping {crafted}: refused: its 'model' is not a dict of tensors (a str)" in out.stderr
    assert crafted.exists()
    assert run_cli(*common, "--resume", "--resume-or-start").returncode == 2  # one or the other


def test_resume_takes_true_false_or_auto():
    with pytest.raises(ConfigError, match="resume must be True, False or 'auto', got 'yes'"):
        check_job(TrainJob(KARATE, checkpoint_dir="ck", resume="yes"), 1)


def test_resuming_a_run_that_stopped_early_trains_no_more(tmp_path):
    """The checkpoint of the epoch that ended a run by patience: resuming it (a finished job restarted with
    --resume-or-start) trained one epoch more, and each restart another; it now ends at once, as the run did, with
    its weights, its history and no new checkpoint. A larger --patience resumes training."""
    ck = tmp_path / "ck"

    def job(patience, resume=False):
        config = TrainConfig(hidden=(8,), epochs=200, seed=1, trace_epoch=0, patience=patience, lr=0.05)
        return TrainJob(dataset=KARATE, config=config, quiet=True, checkpoint_dir=str(ck), checkpoint_every=1,
                        resume=resume)

    whole = run_train_job(job(3))
    assert whole.stopped == "early" and len(whole.history) < 200
    files = sorted(os.listdir(ck))
    again = run_train_job(job(3, resume="auto"))
    assert again.stopped == "early" and again.history == whole.history and again.best_epoch == whole.best_epoch
    assert all(torch.equal(again.state_dict[k], v) for k, v in whole.state_dict.items())
    assert sorted(os.listdir(ck)) == files
    longer = run_train_job(job(50, resume=True))
    assert len(longer.history) > len(whole.history)


def test_patience_added_on_resume_says_where_it_starts_watching(tmp_path, capsys):
    """A run without patience keeps no best weights: resumed with patience, early stopping can only watch the
    epochs it trains, and says so (the final line's best validation may then be an epoch before the resume)."""
    ck = tmp_path / "ck"

    def job(patience, epochs, resume=False):
        config = TrainConfig(hidden=(8,), epochs=epochs, seed=1, trace_epoch=0, patience=patience, lr=0.05)
        return TrainJob(dataset=KARATE, config=config, quiet=True, checkpoint_dir=str(ck), checkpoint_every=1,
                        resume=resume)

    run_train_job(job(0, 4))
    capsys.readouterr()
    resumed = run_train_job(job(3, 200, resume=True))
    assert "early stopping watches from epoch 5 on" in capsys.readouterr().err
    assert resumed.stopped == "early" and resumed.best_epoch >= 5


def test_a_checkpoint_resumes_on_the_prepared_directory_of_its_dataset_and_back(tmp_path):
    """A dataset is known by its content: a run checkpointed on an edge list resumes on the directory mggcn prepare
    made of it, and the other way round, to the losses of the uninterrupted run (a graph in memory and a prepared
    directory had fingerprints of different definitions, and each refused the other's checkpoints)."""
    import numpy as np

    from mggcn.data.prepared.writer import prepare
    from reference import random_graph

    g = random_graph(60, 240, features=5, classes=3, directed=True, seed=4)
    np.savetxt(tmp_path / "g.txt", g.edge_index.T, fmt="%d")
    np.save(tmp_path / "x.npy", g.x)
    np.save(tmp_path / "y.npy", g.y)
    files = {"features": str(tmp_path / "x.npy"), "labels": str(tmp_path / "y.npy")}
    prepared = prepare(str(tmp_path / "g.txt"), tmp_path / "p", fmt="edgelist", progress=False, **files)

    def job(source, ck, epochs, resume=False):
        config = TrainConfig(hidden=(8,), epochs=epochs, seed=1, trace_epoch=0)
        options = {"fmt": "edgelist", "read_options": files} if source.endswith(".txt") else {}
        return TrainJob(dataset=source, config=config, quiet=True, checkpoint_dir=str(ck), checkpoint_every=2,
                        resume=resume, **options)

    whole = [r["loss"] for r in run_train_job(job(str(prepared), tmp_path / "w", 6)).history]
    for first, then in ((str(tmp_path / "g.txt"), str(prepared)), (str(prepared), str(tmp_path / "g.txt"))):
        ck = tmp_path / f"ck-{len(first)}"
        run_train_job(job(first, ck, 4))
        resumed = run_train_job(job(then, ck, 6, resume=True))
        assert resumed.resumed_from is not None
        assert [r["loss"] for r in resumed.history] == whole


def test_a_resumed_run_names_the_settings_it_changes_from_its_checkpoint_s_run(tmp_path):
    """Settings a resumed run may change (a smaller learning rate after a divergence; a default that another mggcn
    had) are said on its first line, each with the value its run recorded: the epochs from there are another run's
    than the uninterrupted one's. The seed, the partition and the process count are said where dropout draws its
    masks by them; with
    the checkpoint's own settings the line names the checkpoint alone, and that run continues its run exactly."""
    common = [KARATE, "--epochs", "4", "--hidden", "8", "--trace-epoch", "0", "--checkpoint-dir"]

    def run(ck, *extra):
        out = run_cli("train", *common, str(tmp_path / ck), "--metrics", str(tmp_path / f"{ck}.jsonl"), *extra)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()[1], [r.split('"loss": ')[1].split(",")[0]
                                            for r in (tmp_path / f"{ck}.jsonl").read_text().splitlines()]

    _, whole = run("whole", "--dropout", "0.5")
    for ck in ("same", "other", "plain"):
        first = run_cli("train", *common, str(tmp_path / ck), "--epochs", "2", "--checkpoint-every", "1",
                        "--quiet", *(("--dropout", "0.5") if ck != "plain" else ()))
        assert first.returncode == 0, first.stderr
    line, losses = run("same", "--dropout", "0.5", "--resume")
    assert line == f"mggcn: resuming from {tmp_path / 'same' / 'ckpt-000002.pt'} (epoch 2)" and losses == whole
    line, _ = run("other", "--dropout", "0.5", "--resume", "--lr", "0.001", "--partition", "random", "--seed", "3",
                  "--nprocs", "2")
    assert line.endswith("(epoch 2); settings other than its run's, so the epochs from here are another run's: "
                         "lr 0.001 (its run's: 0.01), seed 3 (its run's: 0), partition random (its run's: "
                         "random-local), processes 2 (its run's: 1)"), line
    line, _ = run("plain", "--resume", "--partition", "random", "--weight-decay", "0", "--nprocs", "2")
    assert line.endswith("another run's: weight_decay 0.0 (its run's: 0.0005)"), line


def test_a_checkpoint_that_records_no_norm_or_activation_has_the_defaults():
    """A checkpoint without ``norm`` or ``activation`` in its config (an older mggcn's) was trained with
    TrainConfig's defaults: resuming it under another Â or σ is refused, as for one that records them."""
    dataset = {"name": "g", "num_nodes": 10}
    state = {"dataset": dataset, "dims": [4, 8, 2], "config": {"model": "gcn"}}
    check_compatible(state, "ck.pt", dataset, [4, 8, 2], "gcn", {}, {"norm": "sym", "activation": "relu"})
    for option, value, default in (("norm", "mean", "sym"), ("activation", "elu", "relu")):
        with pytest.raises(CheckpointError, match=rf"trained with {option} '{default}', this run '{value}'"):
            check_compatible(state, "ck.pt", dataset, [4, 8, 2], "gcn", {},
                             {"norm": "sym", "activation": "relu", option: value})


def test_attention_dropout_alone_names_the_settings_that_draw_its_masks():
    """A GAT's attention dropout draws masks by the seed as the other dropouts do: a resumed run with another seed
    says so, with attention dropout the only dropout."""
    config = TrainConfig(model="gat", attention_dropout=0.5, seed=3)
    state = {"epoch": 2, "world_size": 1, "config": {**TrainConfig(model="gat", attention_dropout=0.5).__dict__}}
    assert resume_line(state, "ck.pt", config, 1).endswith("another run's: seed 3 (its run's: 0)")
    plain = TrainConfig(model="gat", seed=3)
    assert resume_line({**state, "config": {**TrainConfig(model="gat").__dict__}}, "ck.pt", plain, 1) == \
        "mggcn: resuming from ck.pt (epoch 2)"  # without dropout the seed draws nothing
