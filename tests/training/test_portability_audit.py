"""Saved models, checkpoints and predictions across runs: what a user does after training.

A resumed run either continues as the uninterrupted run would or is refused in one line saying what differs (the
model's σ or Â, fewer epochs than the checkpoint holds); a run resumed without patience keeps its last weights, not
the best weights a run with patience checkpointed. ``predict``'s embeddings of a model with batch norms are those its
next layer reads; a checkpoint or a newer model description given to ``predict`` is refused in one line."""

import json
import shutil

import numpy as np
import pytest
import torch

import mggcn
from mggcn.config import TrainConfig
from mggcn.data.generators import parse_spec
from mggcn.nn.models import operator_for
from mggcn.training.checkpoint import CheckpointError, load
from mggcn.training.job import TrainJob, check_job, run_train_job
from mggcn.training.outputs import load_model
from mggcn.utils.errors import GraphError

KARATE = "builtin:karate"


def _job(ck, epochs, resume=False, **config):
    cfg = TrainConfig(**{"hidden": (8,), "epochs": epochs, "seed": 1, "trace_epoch": 0, **config})
    return TrainJob(dataset=KARATE, config=cfg, quiet=True, checkpoint_dir=str(ck), checkpoint_every=3 if not resume
                    else 0, resume=resume)


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    """A directory holding the checkpoints of a 3-epoch run of a GCN (relu, sym)."""
    ck = tmp_path_factory.mktemp("ck") / "ck"
    run_train_job(_job(ck, 3))
    return ck


@pytest.mark.parametrize("change", [{"activation": "leaky_relu"}, {"norm": "mean"}])
def test_resume_with_another_activation_or_norm_is_refused(checkpointed, change):
    with pytest.raises(CheckpointError) as info:
        check_job(_job(checkpointed, 6, resume=True, **change), 1)
    (option, value), = change.items()
    message = str(info.value)
    assert info.value.option == option and "\n" not in message and "ckpt-000003.pt" in message
    assert f"trained with {option}" in message and repr(value) in message


def test_norm_that_the_model_does_not_read_does_not_stop_a_resume(tmp_path):
    ck = tmp_path / "ck"
    run_train_job(_job(ck, 3, model="sage", norm="mean"))
    check_job(_job(ck, 6, resume=True, model="sage"), 1)  # GraphSAGE aggregates by in-mean whatever norm says


@pytest.mark.parametrize("resume", [True, "auto"])
def test_resume_with_fewer_epochs_than_the_checkpoint_is_refused(checkpointed, resume):
    with pytest.raises(CheckpointError) as info:
        check_job(_job(checkpointed, 2, resume=resume), 1)
    assert info.value.option == "epochs" and "\n" not in str(info.value)
    assert str(info.value).startswith("epochs 2: ") and "at epoch 3" in str(info.value)
    check_job(_job(checkpointed, 3, resume=resume), 1)  # as many: nothing left to train, the outputs written


def test_resume_without_patience_keeps_the_last_weights(tmp_path):
    ck = tmp_path / "ck"
    run_train_job(_job(ck, 3, patience=50, lr=0.05))
    assert load(str(ck / "ckpt-000003.pt"))["best"] is not None
    resumed = run_train_job(_job(ck, 6, resume=True, lr=0.05))
    whole = run_train_job(_job(tmp_path / "whole", 6, lr=0.05))
    assert resumed.best_epoch is None
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in whole.history]
    assert all(torch.equal(resumed.state_dict[k], whole.state_dict[k]) for k in whole.state_dict)
    assert resumed.final == whole.final


@pytest.fixture(scope="module")
def batch_normed(tmp_path_factory):
    """Models with a batch norm after each hidden layer, trained a few epochs and saved, by kind."""
    root = tmp_path_factory.mktemp("bn")
    graph = parse_spec("synthetic:n=120")
    paths = {}
    for kind in ("gcn", "sage", "gin"):
        run = mggcn.train(graph, hidden=(16, 8), epochs=4, model=kind, batch_norm=True, quiet=True, lr=0.05)
        paths[kind] = str(root / f"{kind}.pt")
        run.save(paths[kind])
    return graph, paths


@torch.no_grad()
@pytest.mark.parametrize("kind", ["gcn", "sage", "gin"])
def test_embeddings_of_a_batch_normed_model_are_what_its_next_layer_reads(batch_normed, kind):
    graph, paths = batch_normed
    model, card = load_model(paths[kind])
    op = mggcn.adjacency_operator(graph.edge_index, graph.num_nodes, norm=operator_for(card["model"], card["norm"]))
    proba = torch.from_numpy(mggcn.predict(paths[kind], graph, output="proba"))
    h2 = torch.from_numpy(mggcn.predict(paths[kind], graph, output="embeddings", layer=2))
    h1 = torch.from_numpy(mggcn.predict(paths[kind], graph, output="embeddings", layer=1))
    assert torch.allclose(torch.softmax(model.convs[2](h2, op), dim=1), proba, atol=1e-5)
    # layer 2 from layer 1: its conv, its norm (eval: the running statistics), σ
    bn = model.norms[1].module
    z = torch.relu(torch.nn.functional.batch_norm(model.convs[1](h1, op), bn.running_mean, bn.running_var,
                                                  bn.weight, bn.bias, False, 0.0, bn.eps))
    assert torch.allclose(z, h2, atol=1e-4)


def test_embeddings_of_a_batch_normed_model_agree_across_ranks(batch_normed):
    graph, paths = batch_normed
    one = mggcn.predict(paths["gcn"], graph, output="embeddings", layer=1)
    two = mggcn.predict(paths["gcn"], graph, nprocs=2, output="embeddings", layer=1)
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-5)  # the SpMM sums in another order at P = 2


def test_predict_with_a_checkpoint_says_so_in_one_line(checkpointed):
    with pytest.raises(GraphError) as info:
        mggcn.predict(str(checkpointed / "ckpt-000003.pt"), KARATE)
    message = str(info.value)
    assert message.startswith(f"{checkpointed / 'ckpt-000003.pt'}: a training checkpoint, not a model file")
    assert "\n" not in message and "save_model=" in message


@pytest.mark.parametrize("version,why", [(3, "written by a newer mggcn"), ("2", "is not a model description's")])
def test_predict_refuses_a_model_description_it_cannot_read(batch_normed, tmp_path, version, why):
    graph, paths = batch_normed
    path = tmp_path / "model.pt"
    shutil.copy(paths["gcn"], path)
    card = json.loads(open(paths["gcn"] + ".json").read())
    (tmp_path / "model.pt.json").write_text(json.dumps({**card, "version": version}))
    with pytest.raises(GraphError) as info:
        mggcn.predict(str(path), graph)
    assert str(info.value).startswith(f"{path}.json: ") and why in str(info.value)
