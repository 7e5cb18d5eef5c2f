"""Training across P ranks against a plain single-process float64 GCN (tests/reference.py)."""

import numpy as np
import pytest
import torch

import workers
from mggcn.config import TrainConfig
from mggcn.distributed.launch import run_workers
from mggcn.nn.model import GCN
from reference import gcn_losses, random_graph

EPOCHS = 10


def _few_train(graph):
    """Only three training vertices: most ranks own none and still take part in every collective."""
    train = np.zeros(graph.num_nodes, dtype=bool)
    train[[0, 5, 9]] = True
    graph.masks = {"train": train, "val": graph.masks["val"] & ~train, "test": graph.masks["test"] & ~train}
    return graph


def _cases():
    directed = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)
    undirected = random_graph(45, 120, features=12, classes=4, directed=False, seed=2)
    few = _few_train(random_graph(45, 200, features=12, classes=4, seed=3))
    return [
        (directed, TrainConfig(hidden=(16, 8), epochs=EPOCHS, seed=5)),
        (undirected, TrainConfig(hidden=(16, 8), epochs=EPOCHS, seed=6, norm="mean", activation="leaky_relu",
                                 overlap=False, order="transform-first")),
        (directed, TrainConfig(hidden=(16, 8), epochs=EPOCHS, seed=7, order="aggregate-first", input_dropout=0.0)),
        (few, TrainConfig(hidden=(20, 6), epochs=EPOCHS, seed=8)),
        (directed, TrainConfig(hidden=(16, 8), epochs=EPOCHS, seed=5), 4),  # case 0 with blocks cut in tiles
        (directed, TrainConfig(hidden=(16, 8), epochs=EPOCHS, seed=5, shm="off")),  # case 0 through gloo's broadcast
    ]


def _reference(graph, cfg):
    model = GCN(cfg.dims(graph.num_features, graph.num_classes), seed=cfg.seed)
    weights = [(conv.lin.weight, conv.bias) for conv in model.convs]
    return gcn_losses(graph, weights, cfg.epochs, cfg.lr, cfg.weight_decay, cfg.norm, cfg.activation)


def _run_all(nprocs, cases):
    return run_workers(workers.train_many_worker, nprocs, (cases,), timeout_s=300)


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_loss_curve_equals_single_process_reference(nprocs):
    cases = _cases()
    results = workers.train_many_worker(cases) if nprocs == 1 else _run_all(nprocs, cases)
    per_rank = [results] if nprocs == 1 else results
    for k, (graph, cfg, *_) in enumerate(cases):
        expected = _reference(graph, cfg)
        losses, history, state = per_rank[0][k]
        # float32 against float64 over 10 Adam steps: relative differences stay around 1e-6
        torch.testing.assert_close(torch.tensor(losses, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
                                   rtol=1e-5, atol=0, msg=lambda m: f"P={nprocs} case {k}: {m}")
        assert [h["epoch"] for h in history] == list(range(1, EPOCHS + 1))
        for other in per_rank[1:]:  # replicated weights stay identical on every rank
            assert other[k][0] == losses
            for name, tensor in state.items():
                assert torch.equal(tensor, other[k][2][name]), name


def test_accuracies_are_global_fractions():
    graph, cfg = _cases()[0]
    results = _run_all(3, [(graph, TrainConfig(hidden=(16,), epochs=2, seed=1))])
    losses, history, state = results[0][0]
    model = GCN(cfg.dims(graph.num_features, graph.num_classes)[:1] + [16, graph.num_classes], seed=1)
    # the accuracy of epoch 1 is that of the initial weights, computed on one process here
    from mggcn.distributed.partition import build_shard, make_partition
    from mggcn.distributed.spmm import local_adj

    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, "sym")
    pred = model(torch.from_numpy(graph.x), local_adj(shard.adj[0], shard.adj_t[0])).argmax(1).numpy()
    for split in ("train", "val", "test"):
        mask = graph.masks[split]
        expected = (pred[mask] == graph.y[mask]).mean()
        assert history[0][f"{split}_acc"] == pytest.approx(expected, abs=1e-12)
    for key in ("epoch_s", "spmm", "comm_wait", "gemm", "allreduce", "other"):
        assert history[0][key] >= 0.0


def test_dropout_trains_and_is_reproducible():
    graph = random_graph(60, 300, features=10, classes=3, seed=4)
    cfg = TrainConfig(hidden=(16,), epochs=5, dropout=0.5, input_dropout=0.2, seed=2)
    first = workers.train_many_worker([(graph, cfg)])[0][0]
    second = workers.train_many_worker([(graph, cfg)])[0][0]
    assert first == second
    assert all(np.isfinite(first))
