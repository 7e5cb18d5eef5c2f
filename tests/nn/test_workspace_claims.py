"""Two forward passes before one backward, as torch allows them (mggcn.nn.workspace.WorkspaceClaims): a forward
made while the graph of an earlier one may still be backpropagated runs on a workspace of its own, so both
backward passes read what their forward wrote; training (forward, backward, forwards without autograd) stays on the
model's own workspace."""

import pytest
import torch

import workers
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import local_adj
from mggcn.nn.models import make_model, operator_for
from reference import random_graph

# the same float32 operations in the same order with and without a workspace, but a layer's GEMM may run in row
# blocks on one and whole on the other: a few ulps of values of order 1-10
TOL = dict(rtol=1e-5, atol=1e-5)

MODELS = [
    ("gcn", {}), ("gcn", {"order": "aggregate-first"}), ("gcn", {"batch_norm": True}),
    ("gcn", {"dropout": 0.5, "input_dropout": 0.2}), ("sage", {}), ("sage", {"batch_norm": True}),
    ("gin", {"train_eps": True}), ("gin", {"mlp_batch_norm": True, "dropout": 0.3}),
]


def _local(graph, kind):
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, operator_for(kind))
    return local_adj(shard.adj[0], shard.adj_t[0])


def _two_forwards(model, x, adj, g1, g2):
    y1 = model(x, adj)
    y2 = model(2 * x, adj)
    ((y1 * g1).sum() + (y2 * g2).sum()).backward()
    return y1.detach().clone(), y2.detach().clone(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind,options", MODELS)
def test_two_forwards_then_one_backward_equal_the_model_without_a_workspace(kind, options):
    """Outputs and every parameter gradient of ``backward(Σ G1·Y1 + G2·Y2)`` after two forwards equal the same model
    without a workspace (each forward's tensors its own), dropout masks drawn alike; so does a third run after
    them, back on the model's own workspace, and the weights' gradients accumulate as torch's do."""
    graph = random_graph(29, 140, features=6, classes=4, directed=True, seed=2)  # directed: Âᵀ ≠ Â
    adj, x = _local(graph, kind), torch.from_numpy(graph.x)
    gen = torch.Generator().manual_seed(0)
    g1, g2 = torch.randn(29, 4, generator=gen), torch.randn(29, 4, generator=gen)
    dims = [6, 9, 5, 4]
    plain = make_model(kind, dims, seed=3, reuse_buffers=False, **options)
    reused = make_model(kind, dims, seed=3, **options)
    for run in range(2):
        want, got = _two_forwards(plain, x, adj, g1, g2), _two_forwards(reused, x, adj, g1, g2)
        for k, (a, b) in enumerate(zip(want[:2], got[:2], strict=True)):
            torch.testing.assert_close(b, a, **TOL, msg=lambda m, k=k, r=run: f"run {r} output {k}: {m}")
        for name, a in want[2].items():
            torch.testing.assert_close(got[2][name], a, **TOL, msg=lambda m, n=name, r=run: f"run {r} {n}: {m}")


def _on_own(model, y):
    return model.workspace.holds(f"out {len(model.convs) - 1}", y)


def test_training_stays_on_the_models_own_workspace_and_a_spare_is_let_go():
    """The logits asked on the workspace show which one a forward used: forward and backward, then a forward
    without autograd, use the model's own; a forward while a graph that may still be backpropagated holds it (the
    logits alive or a loss of them alive, no backward yet) takes another; once that graph is backpropagated or
    dropped, the next forward is back on the model's own, and no spare is kept."""
    graph = random_graph(23, 90, features=5, classes=3, seed=1)
    adj, x = _local(graph, "gcn"), torch.from_numpy(graph.x)
    model = make_model("gcn", [5, 7, 3], seed=0)
    y = model(x, adj, logits_in_workspace=True)
    assert _on_own(model, y)
    y.sum().backward()  # y stays alive: its graph is backpropagated, so the buffers are free
    with torch.no_grad():
        assert _on_own(model, model(x, adj, logits_in_workspace=True))
    loss = model(x, adj, logits_in_workspace=True).square().sum()  # only a loss of the logits is kept
    second = model(x, adj, logits_in_workspace=True)
    assert not _on_own(model, second)
    spare = second.data_ptr()
    del second  # its graph dropped: the spare is free, and a forward without autograd takes it, not a third one
    with torch.no_grad():
        assert model(x, adj, logits_in_workspace=True).data_ptr() == spare
    loss.backward()
    assert _on_own(model, model(x, adj, logits_in_workspace=True))
    assert model._claims._claims == [] or all(ws is model.workspace for ws, _ in model._claims._claims)
    model(x, adj)  # a graph dropped without its backward frees the workspace too
    assert _on_own(model, model(x, adj, logits_in_workspace=True))


def test_logits_changed_in_place_backpropagate_as_without_a_workspace():
    """The logits are the caller's to change in place (as a new tensor would be), and the gradient flows through
    that change."""
    graph = random_graph(17, 60, features=4, classes=3, seed=6)
    adj, x = _local(graph, "gcn"), torch.from_numpy(graph.x)
    grads = []
    for reuse in (False, True):
        model = make_model("gcn", [4, 6, 3], seed=2, reuse_buffers=reuse)
        y = model(x, adj)
        y.mul_(3.0).sin_().sum().backward()
        grads.append([p.grad for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(b, a, **TOL)


@pytest.mark.parametrize("nprocs", [2, 3])
def test_two_forwards_across_ranks_equal_one_process(nprocs):
    """Through the staged SpMM on 2 and 3 ranks (25 vertices: not divisible by either; a directed graph), two
    forwards before one backward give each rank's rows of both outputs, and parameter gradients whose sum over the
    ranks (the trainer all-reduces them) equals one process without a workspace."""
    graph = random_graph(25, 120, features=6, classes=4, directed=True, seed=8)
    gen = torch.Generator().manual_seed(1)
    cases, expected = [], []
    for kind, options in [(k, o) for k, o in MODELS if "dropout" not in o]:
        g1, g2 = torch.randn(25, 4, generator=gen), torch.randn(25, 4, generator=gen)
        options = dict(options, dims=[6, 8, 4], seed=5)
        plain = make_model(kind, reuse_buffers=False, **options)
        expected.append(_two_forwards(plain, torch.from_numpy(graph.x), _local(graph, kind), g1, g2))
        cases.append((kind, options, g1, g2))
    seed = 4
    per_rank = dict(run_workers(workers.two_forwards_worker, nprocs, (graph, cases, seed), timeout_s=300))
    position = torch.from_numpy(make_partition(25, nprocs, seed).position)
    for k, (want1, want2, want_grads) in enumerate(expected):
        rows = [per_rank[r][k] for r in range(nprocs)]
        for j, want in enumerate((want1, want2)):
            got = torch.cat([r[j] for r in rows])[position]  # partition order -> original ids, padding dropped
            torch.testing.assert_close(got, want, **TOL, msg=lambda m, k=k, j=j: f"case {k} output {j}: {m}")
        for name, want in want_grads.items():
            got = sum(r[2][name] for r in rows)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4, msg=lambda m, k=k, n=name: f"{k} {n}: {m}")


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin", "gat"])
def test_a_model_pickles_and_copies_without_its_buffers_after_forwards(kind):
    """``torch.save(model)`` (the whole module) and ``copy.deepcopy`` after a forward and backward, with a graph
    still alive: the workspaces are scratch and the claims belong to this process's graphs, so the copy carries
    neither (its pickle is as small as a fresh model's), and it computes the same logits and trains."""
    import copy
    import io

    graph = random_graph(21, 80, features=5, classes=3, seed=7)
    adj, x = _local(graph, kind), torch.from_numpy(graph.x)
    model = make_model(kind, [5, 64, 3], seed=1, **({"heads": 2} if kind == "gat" else {}))
    model(x, adj).sum().backward()
    alive = model(x, adj)  # a graph that still holds the workspace
    fresh = io.BytesIO()
    torch.save(make_model(kind, [5, 64, 3], seed=1, **({"heads": 2} if kind == "gat" else {})), fresh)
    saved = io.BytesIO()
    torch.save(model, saved)
    assert len(saved.getvalue()) < len(fresh.getvalue()) + 4096  # no [21, 64] float32 buffers (5 KiB each)
    saved.seek(0)
    for twin in (torch.load(saved, weights_only=False), copy.deepcopy(model)):
        torch.testing.assert_close(twin(x, adj), alive, rtol=0, atol=0)
        twin(x, adj).sum().backward()
        assert all(p.grad is not None for p in twin.parameters())
