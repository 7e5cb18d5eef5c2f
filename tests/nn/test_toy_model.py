"""A model added in one file: a class that says what mggcn needs to know about it, registered by its name, trains
(and resumes from a checkpoint), is planned, saved and predicted with, with no other file changed.

The toy is ``Â·(H·Wᵀ)`` per layer, without bias: a GCN layer's math under another parameter name, so its numbers
can be checked against a plain dense computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import mggcn
from mggcn.nn.initialization import glorot_linear
from mggcn.nn.model import LayerStack
from mggcn.nn.models import MODEL_TYPES, make_model, num_parameters, register_model
from mggcn.tools.plan import plan_memory
from mggcn.training.predict import predict
from mggcn.utils.timing import NULL_TIMER


class ToyLayer(nn.Module):
    def __init__(self, d_in: int, d_out: int, first: bool, generator: torch.Generator) -> None:
        super().__init__()
        self.proj = glorot_linear(d_in, d_out, bias=False, generator=generator)
        self.first, self.aggregate_first = first, False

    def forward(self, h, adj, timer=NULL_TIMER, h_aggregated=None, workspace=None, key="", output_in_workspace=False):
        if h_aggregated is not None:  # Â·X given: (Â·X)·Wᵀ is the same product
            return self.proj(h_aggregated)
        return adj(self.proj(h), out=None, grad_ws=None)


class Toy(LayerStack):
    kind = "toy"
    layer_weight = "convs.{}.proj.weight"
    pyg_name = None

    def __init__(self, dims, activation="relu", dropout=0.0, input_dropout=0.0, order="auto", seed=0,
                 reuse_buffers=True):
        super().__init__(dims, activation, dropout, input_dropout, reuse_buffers, seed=seed)
        generator = torch.Generator().manual_seed(seed)
        self.convs.extend(ToyLayer(dims[i], dims[i + 1], i == 0, generator) for i in range(len(dims) - 1))

    @classmethod
    def num_parameters(cls, dims, train_eps=False):
        return sum(a * b for a, b in zip(dims[:-1], dims[1:]))


@pytest.fixture
def toy():
    """The toy registered for one test (the registry restored after it)."""
    saved = dict(MODEL_TYPES)
    yield register_model(Toy)
    MODEL_TYPES.clear()
    MODEL_TYPES.update(saved)


def test_a_registered_model_trains_resumes_plans_saves_and_predicts(toy, tmp_path):
    torch.manual_seed(0)
    global_state = torch.random.get_rng_state()
    model = make_model("toy", [5, 8, 3], seed=2)
    assert torch.equal(torch.random.get_rng_state(), global_state)  # built from its own seeded generator
    assert isinstance(model, Toy) and sum(p.numel() for p in model.parameters()) == num_parameters([5, 8, 3], "toy")

    ckpt, saved = tmp_path / "ckpt", tmp_path / "toy.pt"
    first = mggcn.train("builtin:karate", hidden=8, epochs=6, model="toy", quiet=True, checkpoint_dir=str(ckpt),
                        checkpoint_every=3)
    assert [r["epoch"] for r in first.history] == [1, 2, 3, 4, 5, 6]
    assert first.history[-1]["loss"] < first.history[0]["loss"]
    assert set(first.model.state_dict()) == {"convs.0.proj.weight", "convs.1.proj.weight"}

    # the same run resumed from its epoch-6 checkpoint for 4 more epochs equals 10 epochs in one go
    more = mggcn.train("builtin:karate", hidden=8, epochs=10, model="toy", quiet=True, checkpoint_dir=str(ckpt),
                       resume=True, save_model=str(saved))
    whole = mggcn.train("builtin:karate", hidden=8, epochs=10, model="toy", quiet=True)
    assert [r["epoch"] for r in more.history] == list(range(1, 11))
    for name, w in whole.model.state_dict().items():
        torch.testing.assert_close(more.model.state_dict()[name], w, rtol=0, atol=0)  # the same float ops

    # predictions from the saved file: the forward pass of the toy, computed densely here
    from mggcn.data.datasets import load_graph
    from mggcn.nn.norm import adjacency, normalize

    graph = load_graph("builtin:karate")
    a_hat = torch.from_numpy(normalize(adjacency(graph.edge_index, graph.num_nodes), "sym").toarray()).float()
    w0, w1 = (whole.model.state_dict()[f"convs.{i}.proj.weight"] for i in (0, 1))
    logits = a_hat @ (torch.relu(a_hat @ (torch.from_numpy(graph.x) @ w0.T)) @ w1.T)
    predicted = predict(str(saved), "builtin:karate", output="proba")
    np.testing.assert_allclose(predicted, torch.softmax(logits, 1).numpy(), rtol=1e-4, atol=1e-5)

    plan = plan_memory(34, 156, 34, 4, (8,), model="toy")
    assert plan.parts["optimizer"] == 5 * 4 * (34 * 8 + 8 * 4) and plan.total > 0
    assert plan.parts["adjacency A"] > 0  # nonzeros = edges + the self loops it keeps by default (the GCN's Â)


def test_a_model_must_have_a_name_and_be_a_layer_stack():
    with pytest.raises(ValueError, match="a LayerStack subclass with a kind"):
        register_model(type("Nameless", (LayerStack,), {}))
    with pytest.raises(ValueError, match="a LayerStack subclass with a kind"):
        register_model(nn.Linear)
