"""Training across P ranks against a plain single-process float64 GCN (tests/reference.py)."""

import numpy as np
import pytest
import torch

import workers
from mggcn.config import TrainConfig
from mggcn.distributed.launch import run_workers
from mggcn.nn.model import GCN
from mggcn.training.trainer import build_model
from reference import gcn_losses, pyg_model_losses, random_graph

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
        (undirected, TrainConfig(hidden=(16, 8), epochs=EPOCHS, seed=9, activation="elu", order="transform-first")),
    ]


def _reference(graph, cfg):
    model = GCN(cfg.dims(graph.num_features, graph.num_classes), seed=cfg.seed)
    weights = [(conv.lin.weight, conv.bias) for conv in model.convs]
    return gcn_losses(graph, weights, cfg.epochs, cfg.lr, cfg.weight_decay, cfg.norm, cfg.activation)


def _run_all(nprocs, cases):
    return run_workers(workers.train_many_worker, nprocs, (cases,), timeout_s=300)


@pytest.mark.parametrize("nprocs", [1, 2, 3, pytest.param(4, marks=pytest.mark.slow)])
def test_loss_curve_equals_single_process_reference(nprocs):
    cases = _cases()
    results = workers.train_many_worker(cases) if nprocs == 1 else _run_all(nprocs, cases)
    per_rank = [results] if nprocs == 1 else results
    for k, (graph, cfg, *_) in enumerate(cases):
        expected = _reference(graph, cfg)
        losses, history, state = per_rank[0][k]
        # float32 against float64 over 10 Adam steps: relative differences stay around 1e-6
        torch.testing.assert_close(torch.tensor(losses, dtype=torch.float64),
                                   torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=0,
                                   msg=lambda m, k=k: f"P={nprocs} case {k}: {m}")
        assert [h["epoch"] for h in history] == list(range(1, EPOCHS + 1))
        for other in per_rank[1:]:  # replicated weights stay identical on every rank
            assert other[k][0] == losses
            for name, tensor in state.items():
                assert torch.equal(tensor, other[k][2][name]), name


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_accuracies_are_global_fractions(dropout):
    # with dropout an epoch's accuracies come from an eval-mode pass before the training pass (the loss's hits
    # buffer, criterion.hits); without, from the training pass's loss: the initial weights' accuracies either way
    graph, cfg = _cases()[0]
    results = _run_all(3, [(graph, TrainConfig(hidden=(16,), epochs=2, seed=1, dropout=dropout))])
    losses, history, state = results[0][0]
    model = GCN(cfg.dims(graph.num_features, graph.num_classes)[:1] + [16, graph.num_classes], seed=1)
    # the accuracy of epoch 1 is that of the initial weights, computed on one process here
    from mggcn.distributed.partition import make_partition
    from mggcn.distributed.sharding import build_shard
    from mggcn.distributed.spmm import local_adj

    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, "sym")
    pred = model(torch.from_numpy(graph.x), local_adj(shard.adj[0], shard.adj_t[0])).argmax(1).numpy()
    for split in ("train", "val", "test"):
        mask = graph.masks[split]
        expected = (pred[mask] == graph.y[mask]).mean()
        assert history[0][f"{split}_acc"] == pytest.approx(expected, abs=1e-12)
    for key in ("epoch_s", "spmm", "comm_wait", "gemm", "allreduce", "other"):
        assert history[0][key] >= 0.0


@pytest.mark.parametrize("kind,options,nprocs", [("gin", {"gin_mlp_batch_norm": True}, 3),
                                                 ("gcn", {"batch_norm": True}, 2),
                                                 ("gat", {"attention_dropout": 0.6}, 1)])
def test_accuracies_come_from_eval_mode(kind, options, nprocs):
    """Models with batch norms (the running statistics against the batch's) and a GAT with attention dropout compute
    other logits in eval mode than in training mode: an epoch's accuracies are those of an eval-mode pass, for epoch
    1 those of the initial model in eval mode on one process."""
    from mggcn.distributed.partition import make_partition
    from mggcn.distributed.sharding import build_shard
    from mggcn.distributed.spmm import local_adj
    from mggcn.nn.models import make_model, model_options, operator_for

    graph = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)
    cfg = TrainConfig(model=kind, hidden=(16,), epochs=2, seed=1, heads=2, **options)
    history = (workers.train_many_worker([(graph, cfg)]) if nprocs == 1 else _run_all(nprocs, [(graph, cfg)])[0])[0][1]
    model = make_model(kind, cfg.dims(graph.num_features, graph.num_classes), seed=1, **model_options(cfg))
    assert model.evaluates_differently
    # a norm inside GIN's last layer reaches every row's gradient; one between layers leaves the last layer row-wise
    assert model.reads_training_columns == (kind == "gcn")
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, operator_for(kind))
    adj, x = local_adj(shard.adj[0], shard.adj_t[0]), torch.from_numpy(graph.x)
    model.seed_dropout(0)
    preds = {mode: model.train(mode == "train")(x, adj).argmax(1).numpy() for mode in ("eval", "train")}
    assert (preds["eval"] != preds["train"]).any()  # else this test could not tell the modes apart
    for split in ("train", "val", "test"):
        mask = graph.masks[split]
        assert history[0][f"{split}_acc"] == pytest.approx((preds["eval"][mask] == graph.y[mask]).mean(), abs=1e-12)


def test_dropout_trains_and_is_reproducible():
    graph = random_graph(60, 300, features=10, classes=3, seed=4)
    cfg = TrainConfig(hidden=(16,), epochs=5, dropout=0.5, input_dropout=0.2, seed=2)
    first = workers.train_many_worker([(graph, cfg)])[0][0]
    second = workers.train_many_worker([(graph, cfg)])[0][0]
    assert first == second
    assert all(np.isfinite(first))


@pytest.mark.parametrize("nprocs", [1, 2])
def test_dropout_masks_are_drawn_anew_every_epoch(nprocs):
    """With a learning rate too small to move a float32 weight, an epoch's loss changes only with its dropout
    masks: equal every epoch without dropout (the premise), different every epoch with it (a mask drawn once and
    kept would repeat the first epoch's loss)."""
    graph = random_graph(45, 200, features=12, classes=4, seed=1)
    cases = [(graph, TrainConfig(hidden=(16,), epochs=4, lr=1e-30, seed=2, dropout=p)) for p in (0.0, 0.5)]
    results = workers.train_many_worker(cases) if nprocs == 1 else _run_all(nprocs, cases)[0]
    still, dropped = results[0][0], results[1][0]
    assert len(set(still)) == 1, still
    assert len(set(dropped)) == len(dropped), dropped


def test_attention_dropout_draws_the_same_masks_at_any_p():
    """A GAT's attention dropout masks are drawn for the graph's edges, not per rank: the loss curve at P = 2 and 3
    is the one process's. float32, the same sums in another order: relative differences around 1e-7 per step."""
    graph = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)
    case = [(graph, TrainConfig(model="gat", heads=2, hidden=(8,), epochs=4, seed=3, attention_dropout=0.5))]
    one = workers.train_many_worker(case)[0][0]
    assert len(set(one)) == len(one)
    for nprocs in (2, 3):
        torch.testing.assert_close(torch.tensor(_run_all(nprocs, case)[0][0][0]), torch.tensor(one), rtol=1e-5,
                                   atol=0, msg=lambda m, p=nprocs: f"P={p}: {m}")


def test_the_cut_counts_the_nonzeros_between_ranks():
    """``cut_nnz``: the nonzeros of Â whose row and column belong to different ranks (none at P = 1; the diagonal
    blocks and self loops never), here with the original ids (``partition="none"``): rank r owns ids
    [r·m, (r+1)·m), m = ceil(n / P)."""
    graph = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)
    src, dst = graph.edge_index
    pairs = np.unique(np.stack([dst, src])[:, src != dst], axis=1)
    case = [(graph, TrainConfig(hidden=(8,), epochs=1, partition="none"))]
    for nprocs in (1, 2, 3):
        history = (workers.train_many_worker(case) if nprocs == 1 else _run_all(nprocs, case)[0])[0][1]
        m = -(-graph.num_nodes // nprocs)
        expected = int((pairs[0] // m != pairs[1] // m).sum())
        assert history[0]["cut_nnz"] == expected and (expected > 0) == (nprocs > 1), (nprocs, history[0]["cut_nnz"])


def _model_cases():
    directed = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)  # 45: not divisible by 2, 4
    few = _few_train(random_graph(45, 200, features=12, classes=4, seed=3))
    cases = []
    for kind in ("sage", "gin"):
        for order in ("aggregate-first", "transform-first"):
            cases.append((directed, TrainConfig(model=kind, hidden=(16, 16), epochs=EPOCHS, seed=5, order=order)))
    cases.append((few, TrainConfig(model="gin", hidden=(16, 16), epochs=EPOCHS, seed=6, gin_train_eps=True)))
    for order in ("aggregate-first", "transform-first"):  # the batch norm's statistics over every rank's vertices
        cases.append((directed, TrainConfig(model="gin", hidden=(16, 16), epochs=EPOCHS, seed=9, order=order,
                                            gin_mlp_batch_norm=True)))
    # a norm after each hidden layer (PyG's norm="batch_norm"; for GIN with its MLPs' norms, PyG's GIN(norm=...))
    cases.append((directed, TrainConfig(model="gcn", hidden=(16, 16), epochs=EPOCHS, seed=10, batch_norm=True)))
    cases.append((directed, TrainConfig(model="sage", hidden=(16, 16), epochs=EPOCHS, seed=11, batch_norm=True,
                                        order="transform-first")))
    cases.append((few, TrainConfig(model="gin", hidden=(16, 16), epochs=EPOCHS, seed=12, batch_norm=True,
                                   gin_mlp_batch_norm=True)))
    cases.append((directed, TrainConfig(model="sage", hidden=(16, 16), epochs=EPOCHS, seed=7, shm="off")))
    # ELU between the layers (and in GIN's MLPs): σ's backward from its output, over it, in both orders
    for kind, order in (("gcn", "auto"), ("gcn", "transform-first"), ("sage", "transform-first"),
                        ("gin", "aggregate-first")):
        cases.append((directed, TrainConfig(model=kind, hidden=(16, 16), epochs=EPOCHS, seed=13, order=order,
                                            activation="elu", gin_mlp_batch_norm=kind == "gin")))
    return cases


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_sage_and_gin_loss_curves_equal_pyg_models(nprocs):
    """3-layer GraphSAGE and GIN, both orders (and auto, where the first layer's Â·X is cached), GIN with a batch
    norm in its MLPs too, the GCN, GraphSAGE and GIN with a batch norm after each hidden layer, and the three with
    ELU: the 10-epoch loss
    curve equals that of PyG's own model in float64 on one process, started from the same weights, and so do the
    batch norms' running statistics at the end."""
    cases = _model_cases()
    results = workers.train_many_worker(cases) if nprocs == 1 else _run_all(nprocs, cases)
    per_rank = [results] if nprocs == 1 else results
    for k, (graph, cfg) in enumerate(cases):
        initial = build_model(cfg, graph.num_features, graph.num_classes).pyg_state_dict()
        final = {}
        expected = pyg_model_losses(graph, cfg.model, initial, 16, 3, cfg.epochs, cfg.lr, cfg.weight_decay,
                                    cfg.gin_train_eps, cfg.gin_mlp_batch_norm, final, cfg.batch_norm, cfg.activation)
        losses, history, state = per_rank[0][k]
        # float32 against float64 over 10 Adam steps: relative differences stay below 1e-6
        torch.testing.assert_close(torch.tensor(losses, dtype=torch.float64),
                                   torch.tensor(expected, dtype=torch.float64),
                                   rtol=1e-5, atol=0, msg=lambda m, k=k: f"P={nprocs} case {k}: {m}")
        assert set(state) == set(initial)
        for name in (n for n in final if "running" in n):
            # the bias before a batch norm has a zero gradient up to rounding (the norm removes the mean), so Adam
            # moves it by up to lr per step in a direction the rounding picks, float32 one way, float64 another: the
            # running mean follows it (momentum 0.1: |Δ| < 1e-2 after 10 steps, measured 1e-3); the variance not
            tol = dict(rtol=0, atol=1e-2) if name.endswith("running_mean") else dict(rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(state[name].double(), final[name], **tol, msg=name)
        for other in per_rank[1:]:
            assert other[k][0] == losses


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_training_columns_change_nothing_but_the_work(nprocs):
    """With at most half the vertices in the training split the last layer's backward multiplies only Âᵀ's training
    columns (mggcn.distributed.spmm.keeps_training_columns); the columns it skips meet exact zeros of the loss's
    gradient, so losses and weights equal those of the full Âᵀ (the sums skip only +0 terms: bit for bit with the
    gather kernel, but MKL may block a shorter row differently, hence a float32 tolerance), for the GCN in both
    orders, GraphSAGE and GIN, a GCN with batch norms between its layers, on a directed graph, through the broadcast
    and the sparse exchange."""
    directed = random_graph(45, 200, features=12, classes=4, directed=True, seed=1)
    assert directed.masks["train"].mean() <= 0.5
    cases = [(directed, TrainConfig(hidden=(16, 8), epochs=6, seed=5)),
             (directed, TrainConfig(hidden=(16,), epochs=6, seed=6, order="aggregate-first", comm="sparse")),
             (directed, TrainConfig(hidden=(16,), epochs=6, seed=7, model="sage")),
             (directed, TrainConfig(hidden=(16,), epochs=6, seed=8, model="gin", comm="auto")),
             # a norm between layers couples the rows before the last layer's SpMM, not after it
             (directed, TrainConfig(hidden=(16, 8), epochs=6, seed=9, batch_norm=True))]
    if nprocs == 1:
        results = [workers.training_columns_train_worker(cases)]
    else:
        results = run_workers(workers.training_columns_train_worker, nprocs, (cases,), timeout_s=300)
    for rank, runs in results:
        for k, ((losses, state, kept, recv), (full_losses, full_state, full_kept, full_recv)) in enumerate(runs):
            assert kept and not full_kept, f"P={nprocs} rank {rank} case {k}"
            if k == 1 and nprocs > 1:  # the sparse exchange: the marked backward asked for training rows only
                assert recv < full_recv, f"P={nprocs} rank {rank}"
            torch.testing.assert_close(torch.tensor(losses), torch.tensor(full_losses), rtol=1e-6, atol=0)
            cfg = cases[k][1]
            for name, tensor in state.items():
                if cfg.batch_norm and _cancelled_by_a_norm(name, len(cfg.hidden)):
                    # a norm subtracts the column means: the bias before it gets a gradient of zero up to rounding,
                    # which Adam scales to steps of up to lr whatever its sign (so does the running mean it shifts)
                    assert (tensor - full_state[name]).abs().max() <= 2 * cfg.lr * cfg.epochs, f"case {k} {name}"
                    continue
                torch.testing.assert_close(tensor, full_state[name], rtol=1e-5, atol=1e-7, msg=f"case {k} {name}")


def _cancelled_by_a_norm(name: str, hidden_layers: int) -> bool:
    """Whether parameter ``name`` of a model with batch norms after its ``hidden_layers`` hidden layers is a hidden
    layer's bias, or a norm's running mean, which the norm's mean subtraction cancels."""
    return name in {f"convs.{i}.bias" for i in range(hidden_layers)} | {f"norms.{i}.module.running_mean"
                                                                         for i in range(hidden_layers)}
