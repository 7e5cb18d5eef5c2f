"""``precision``: bf16 trains in bfloat16 with float32 weights, tf32 is refused where there are no tensor cores, the
plan counts each precision's bytes, and fp32 is the float32 path untouched."""

import subprocess
import sys

import numpy as np
import pytest
import torch

import mggcn
import workers
from mggcn.config import TrainConfig
from mggcn.distributed.context import DistContext
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.tools.plan import activation_peak, plan_memory
from mggcn.training.precision import MasterWeights, check_precision_device
from mggcn.training.trainer import build_model, train_shard
from mggcn.utils.errors import ConfigError
from reference import random_graph


def _learnable_graph(n=1200, classes=4, seed=0):
    """Labels a GCN can learn: each class's features around its own mean, edges mostly inside a class."""
    graph = random_graph(n, 6 * n, features=16, classes=classes, directed=False, seed=seed)
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((classes, 16)).astype(np.float32)
    graph.x = (means[graph.y] + 1.5 * rng.standard_normal((n, 16))).astype(np.float32)
    src = rng.integers(0, n, 4 * n)
    order = np.argsort(graph.y, kind="stable")
    pos = np.searchsorted(graph.y[order], graph.y[src])
    counts = np.bincount(graph.y, minlength=classes)[graph.y[src]]
    dst = order[pos + rng.integers(0, counts)]
    graph.edge_index = np.concatenate([graph.edge_index, np.stack([src, dst]), np.stack([dst, src])], axis=1)
    return graph


def _train(graph, cfg, nprocs=1):
    if nprocs == 1:
        part = make_partition(graph.num_nodes, 1, cfg.seed)
        from mggcn.nn.models import operator_for
        shard = build_shard(graph, part, 0, operator_for(cfg.model, cfg.norm))
        result = train_shard(DistContext(), shard, cfg)
        return [r["loss"] for r in result.history], result
    out = run_workers(workers.train_worker, nprocs, (graph, cfg), timeout_s=300)
    return out[0][0], None


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_bf16_trains_in_bfloat16_with_float32_weights_and_the_accuracy_of_fp32(model):
    """The model computes in bfloat16 (its parameters and workspace), the weights the run returns are float32,
    the loss curve follows fp32's (bfloat16 keeps 8 bits of mantissa: a relative error of ~0.4% per rounding, a
    few roundings per layer: curves within 5%) and the test accuracy is within 0.5 points of fp32's."""
    graph = _learnable_graph()
    runs = {}
    for precision in ("fp32", "bf16"):
        cfg = TrainConfig(model=model, hidden=(32,), epochs=40, lr=0.02, precision=precision, trace_epoch=0)
        runs[precision] = _train(graph, cfg)
    (loss32, r32), (loss16, r16) = runs["fp32"], runs["bf16"]
    assert all(p.dtype == torch.bfloat16 for p in r16.model.parameters())
    loss_buffers = {"row max": torch.float32, "label logit": torch.float32, "label hits": torch.bool}
    dtypes = {name: buffer.dtype for name, buffer in r16.model.workspace._flat.items()}
    assert dtypes == {name: loss_buffers.get(name, torch.bfloat16) for name in dtypes}
    assert {"out 0", "out 1"} <= set(dtypes)
    assert all(v.dtype == torch.float32 for v in r16.state_dict.values())
    assert all(p.dtype == torch.float32 for p in r32.model.parameters())
    torch.testing.assert_close(torch.tensor(loss16), torch.tensor(loss32), rtol=0.05, atol=0)
    assert loss16[-1] < 0.5 * loss16[0]  # it learns
    assert abs(r16.final["test_acc"] - r32.final["test_acc"]) <= 0.005, (r16.final, r32.final)
    assert r32.final["test_acc"] > 0.8


@pytest.mark.parametrize("model, options, atol", [
    # GIN's sums of ~14 rows make its first logits large: without batch norms its ReLUs die in fp32 as in bf16 (PyG's
    # GIN too), and its loss stays at log 4; with them it learns
    ("gin", {"lr": 0.002, "batch_norm": True}, 0.0),
    # GAT's loss falls to ~0.01, where bfloat16's rounding of the logits is a larger part of it: 0.002 absolute
    ("gat", {"lr": 0.02}, 0.002),
])
def test_bf16_follows_fp32_for_gin_and_gat(model, options, atol):
    """GIN and GAT in bfloat16, as the GCN and GraphSAGE above: bfloat16 parameters, float32 weights returned, the
    loss curve within 5% of fp32's and the test accuracy within 0.5 points."""
    graph = _learnable_graph()
    runs = {p: _train(graph, TrainConfig(model=model, hidden=(32,), epochs=40, precision=p, trace_epoch=0, **options))
            for p in ("fp32", "bf16")}
    (loss32, r32), (loss16, r16) = runs["fp32"], runs["bf16"]
    assert {p.dtype for p in r16.model.parameters()} == {torch.bfloat16}
    assert {v.dtype for v in r16.state_dict.values() if v.is_floating_point()} == {torch.float32}
    torch.testing.assert_close(torch.tensor(loss16), torch.tensor(loss32), rtol=0.05, atol=atol)
    assert loss16[-1] < 0.5 * loss16[0]
    assert abs(r16.final["test_acc"] - r32.final["test_acc"]) <= 0.005, (r16.final, r32.final)
    assert r32.final["test_acc"] > 0.7


def test_bf16_across_ranks_follows_one_rank():
    """P = 2 and 3 in bfloat16 against P = 1 in bfloat16: the same products summed in another order and rounded to
    bfloat16 at other points (relative 2^-8 per rounding): losses within 2%."""
    graph = random_graph(61, 300, features=12, classes=4, directed=True, seed=3)
    cfg = TrainConfig(hidden=(16, 8), epochs=8, precision="bf16", trace_epoch=0, seed=2)
    one, _ = _train(graph, cfg)
    for nprocs in (2, 3):
        losses, _ = _train(graph, cfg, nprocs)
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(one), rtol=0.02, atol=0)


def test_master_weights_round_trip_and_carry_gradients():
    """The float32 copies are what the optimizer sees; the model gets their bfloat16 rounding after an update,
    state dicts read and write float32."""
    model = build_model(TrainConfig(hidden=(8,)), 5, 3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    weights = MasterWeights(model, torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert all(torch.equal(weights.state_dict()[k], v) for k, v in before.items())  # nothing lost to the cast
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    weights.gradients_from_model()
    assert all(torch.equal(m.grad, torch.full_like(m, 0.5)) and m.grad.dtype == torch.float32 for m in weights.params)
    with torch.no_grad():
        for m in weights.params:
            m.add_(1e-3)  # below bfloat16's resolution at 1: the float32 copy keeps it
    weights.update_model()
    for m, p in zip(weights.params, model.parameters()):
        assert torch.equal(p, m.to(torch.bfloat16))
    state = {k: v + 1 for k, v in before.items()}
    weights.load_state_dict(state)
    assert all(torch.equal(weights.state_dict()[k], v) for k, v in state.items())


def test_tf32_needs_cuda_and_a_bad_precision_is_refused():
    with pytest.raises(ConfigError, match="precision tf32 runs the GEMMs on CUDA tensor cores; the device is cpu"):
        check_precision_device("tf32", "cpu")
    check_precision_device("bf16", "cpu")  # runs on a CPU: torch's bfloat16 GEMM and gather kernels
    import mggcn

    with pytest.raises(ConfigError, match="precision must be one of fp32, tf32, bf16, got 'fp16'"):
        mggcn.train(random_graph(20, 40), epochs=1, precision="fp16", quiet=True)
    with pytest.raises(ConfigError, match="the device is cpu") as err:
        mggcn.train(random_graph(20, 40), epochs=1, precision="tf32", quiet=True)
    assert err.value.option == "precision"
    cli = subprocess.run([sys.executable, "-m", "mggcn", "train", "builtin:karate", "--epochs", "1", "--precision",
                          "tf32"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2
    assert cli.stderr.strip().splitlines() == ["mggcn train: error: --precision tf32 runs the GEMMs on CUDA tensor "
                                               "cores; the device is cpu: use fp32 (or bf16)"]


@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
def test_bf16_workspace_is_the_walk_in_two_byte_elements(model):
    """The bfloat16 run's workspace holds exactly the buffers the plan's walk names, at 2 bytes per element."""
    from mggcn.nn.models import operator_for

    graph = random_graph(900, 4000, features=24, classes=6, directed=False, seed=1)
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, 0, "random"), 0, operator_for(model))
    m, dims = shard.x.shape[0], [24, 40, 6]
    result = train_shard(DistContext(), shard, TrainConfig(model=model, hidden=(40,), epochs=2, trace_epoch=0,
                                                           precision="bf16"))
    _, alive = activation_peak(m, dims, model=model, precision="bf16")
    assert result.model.workspace.sizes == {k[3:]: v for k, v in alive.items() if k.startswith("ws:")}
    _, alive32 = activation_peak(m, dims, model=model)
    loss = {"ws:row max", "ws:label logit", "ws:label hits"}  # the loss's, on the float32 logits
    if model == "gin":
        # the logits' gradient is the float32 copy's cast, a new tensor instead of one over the logits: the last
        # layer's Âᵀ·∂ goes on a buffer of its own
        assert alive.pop("ws:H.W") == 2 * m * 6 and "ws:H.W" not in alive32
    assert {k: 2 * v for k, v in alive.items() if k.startswith("ws:") and k not in loss} == \
        {k: v for k, v in alive32.items() if k.startswith("ws:") and k not in loss}


def test_plan_counts_bf16_bytes():
    """bf16 halves what scales with the rows (features, Â's values, buffers, activations) and the SpMM's traffic,
    and adds a bfloat16 copy of the weights and gradients."""
    kw = dict(hidden=(256, 256), nprocs=4, train=0.1)
    p32 = plan_memory(2_000_000, 100_000_000, 100, 47, **kw)
    p16 = plan_memory(2_000_000, 100_000_000, 100, 47, precision="bf16", **kw)
    assert p16.comm_spmm * 2 == p32.comm_spmm and p16.comm_allreduce == p32.comm_allreduce
    for part in ("A.X (cached)", "broadcast buffers"):
        assert p16.parts[part] * 2 == p32.parts[part]
    # half, plus the float32 copy of the logits the loss reads, and its gradient
    assert p32.parts["activations"] / 2 <= p16.parts["activations"] < 0.6 * p32.parts["activations"]
    assert p16.parts["optimizer"] == p32.parts["optimizer"] * (20 + 4) // 20
    m = 500_000
    nnz = -(-(100_000_000 + 2_000_000) // 4)
    assert p32.parts["adjacency A"] - p16.parts["adjacency A"] == 2 * nnz  # values: 4 bytes -> 2
    assert p32.parts["adjacency A"] > 2 * 4 * (m + 1)


@pytest.fixture
def callers_gemm_settings():
    """Torch's float32 GEMM switches as a caller set them for its own work, put back after the test."""
    saved = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(saved)


@pytest.mark.parametrize("callers", ["process-wide", "per backend"])
def test_fp32_is_exact_whatever_the_caller_set_for_its_gemms_and_leaves_the_setting(callers, callers_gemm_settings):
    """A caller that lets torch's float32 GEMMs run in reduced precision (``set_float32_matmul_precision("medium")``:
    TF32 on CUDA, bfloat16 passes on a CPU with bfloat16 instructions; or torch 2.9's per-backend switches, beside
    which the process-wide one cannot even be read) still gets fp32's exact losses from ``mggcn.train``, and its
    settings back."""
    graph = _learnable_graph(n=400)
    options = dict(hidden=(32,), epochs=3, trace_epoch=0, quiet=True)
    exact = [r["loss"] for r in mggcn.train(graph, **options).history]
    if callers == "per backend" and not hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        pytest.skip("torch < 2.9 has one process-wide switch")
    if callers == "per backend":
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        states = lambda: (torch.backends.cuda.matmul.fp32_precision, torch.backends.mkldnn.matmul.fp32_precision)  # noqa: E731
    else:
        torch.set_float32_matmul_precision("medium")
        states = torch.get_float32_matmul_precision
    before = states()
    assert [r["loss"] for r in mggcn.train(graph, **options).history] == exact  # bitwise: the same float32 GEMMs
    assert states() == before


def test_tf32_switches_cuda_gemms_only_and_puts_them_back(callers_gemm_settings):
    """tf32's GEMM mode (set per job, on CUDA ranks): TF32 for CUDA's float32 GEMMs, IEEE float32 for a CPU's, and
    afterwards what the caller had, whichever of torch's switches it used."""
    from mggcn.training.precision import gemm_mode

    torch.set_float32_matmul_precision("medium")
    with gemm_mode(tf32=True):
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
            assert (torch.backends.cuda.matmul.fp32_precision, torch.backends.mkldnn.matmul.fp32_precision) == \
                ("tf32", "ieee")
        else:
            assert torch.get_float32_matmul_precision() == "high" and torch.backends.cuda.matmul.allow_tf32
    assert torch.get_float32_matmul_precision() == "medium"
