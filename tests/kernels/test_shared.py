"""The shared CPU kernels (mggcn.kernels.shared, MGGCN_CPU_KERNELS): items taken by free threads give the results
of the static and simple paths, and a GCN trained with each matches PyG."""

import threading

import pytest
import scipy.sparse as sp
import torch
from torch_geometric.nn.models import GCN as PygGCN

import mggcn.nn.functional as functional
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import local_adj
from mggcn.kernels import policy, shared, tiled
from mggcn.kernels.policy import CPU_KERNELS, CPU_KERNELS_ENV, CPU_SPMM_ENV, CPU_SPMMS, cpu_kernels, shared_threads
from mggcn.kernels.shared import run_items
from mggcn.nn.model import GCN
from mggcn.utils.errors import ConfigError
from reference import random_graph


def test_every_item_runs_once_on_one_thread_per_worker():
    seen, lock = [], threading.Lock()
    caller = torch.get_num_threads()

    def item(k, worker):
        with lock:
            seen.append((k, worker, torch.get_num_threads(), torch.is_grad_enabled()))

    with torch.no_grad():
        run_items(50, item, 3)
    assert sorted(k for k, *_ in seen) == list(range(50))
    assert {w for _, w, *_ in seen} <= {0, 1, 2}
    assert all(threads == 1 and not grad for *_, threads, grad in seen)  # one thread each, the caller's grad mode
    assert torch.get_num_threads() == caller


def _pin_with(cpus, monkeypatch):
    """The workers' pinning as on a machine whose process may run on ``cpus``, whatever this one has."""
    monkeypatch.setattr(policy, "process_cpus", lambda: list(cpus))


def test_workers_as_many_as_the_cores_run_one_per_core_and_are_freed_after(monkeypatch):
    """A pool as large as the process's cores pins worker w to the w-th of them, for every call however many items
    it has; once the pool no longer matches them (fewer threads, or MGGCN_PIN_WORKERS=0) its threads run on the
    caller's cores again."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        cpus = cpus * 2  # one core: both workers pinned to it, still one each
    monkeypatch.delenv(policy.PIN_WORKERS_ENV, raising=False)
    assert policy.worker_cpus(1) is None
    _pin_with(cpus[:2], monkeypatch)
    assert policy.worker_cpus(2) == cpus[:2] and policy.worker_cpus(3) is None
    seen, lock = {}, threading.Lock()

    def item(k, worker):
        with lock:
            seen.setdefault(worker, set()).update(os.sched_getaffinity(0))

    barrier = threading.Barrier(2)

    def both(k, worker):  # each worker holds one item until the other has one: both take part
        barrier.wait(timeout=30)
        item(k, worker)

    run_items(2, both, 2)
    run_items(40, item, 2)
    expected = policy.worker_cpus(2)
    assert seen == {w: {expected[w]} for w in (0, 1)}
    monkeypatch.setenv(policy.PIN_WORKERS_ENV, "0")
    assert policy.worker_cpus(2) is None
    seen.clear()
    barrier.reset()
    run_items(2, both, 2)
    caller = os.sched_getaffinity(0)
    assert seen == {0: caller, 1: caller}


def test_one_thread_or_a_nested_call_runs_in_order_on_the_caller():
    order = []
    run_items(5, lambda k, w: order.append((k, w, threading.get_ident())), 1)
    assert order == [(k, 0, threading.get_ident()) for k in range(5)]
    inner = []

    def outer(k, worker):
        run_items(3, lambda j, w: inner.append((k, j, w, threading.get_ident())), 4)

    run_items(4, outer, 2)
    for k in range(4):  # each outer item ran its inner items itself, in order
        mine = [(j, w) for kk, j, w, _ in inner if kk == k]
        assert mine == [(0, 0), (1, 0), (2, 0)]
        assert len({t for kk, *_, t in inner if kk == k}) == 1


def test_an_item_error_is_raised_after_every_worker_stopped():
    caller, ran = torch.get_num_threads(), []

    def item(k, worker):
        if k == 3:
            raise ValueError("item 3")
        ran.append(k)

    with pytest.raises(ValueError, match="item 3"):
        run_items(40, item, 2)
    assert torch.get_num_threads() == caller and 3 not in ran
    run_items(4, lambda k, w: ran.append(100 + k), 2)  # the pool still works
    assert sorted(ran[-4:]) == [100, 101, 102, 103]


def test_the_setting_names_itself(monkeypatch):
    monkeypatch.delenv(CPU_KERNELS_ENV, raising=False)
    assert cpu_kernels() == "shared" and shared_threads("cpu") == torch.get_num_threads()
    assert shared_threads("cuda") == 1
    monkeypatch.setenv(CPU_KERNELS_ENV, "static")
    assert shared_threads("cpu") == 1
    monkeypatch.setenv(CPU_KERNELS_ENV, "simple")
    assert not policy.gather_kernel("cpu") and policy.chain_rows(5000, 128) == 5000
    assert policy.weight_grad_parts(10**6, 64) == 1
    monkeypatch.setenv(CPU_KERNELS_ENV, "fast")
    with pytest.raises(ConfigError, match="MGGCN_CPU_KERNELS must be one of shared, static, simple") as err:
        cpu_kernels()
    assert err.value.option == CPU_KERNELS_ENV
    from mggcn.tools.cli.common import flag_message

    assert flag_message(err.value) == "MGGCN_CPU_KERNELS must be one of shared, static, simple, not 'fast'"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_bad_pinning_setting_is_refused_at_any_thread_count(monkeypatch, threads):
    """MGGCN_PIN_WORKERS is 0 or 1 (unset or empty: 1); anything else is one line naming it, the command line's
    too, even where one thread would never pin (so a typo is not silently taken for on)."""
    from mggcn.tools.cli.common import flag_message

    monkeypatch.setenv(policy.PIN_WORKERS_ENV, "")
    assert policy.worker_cpus(1) is None
    monkeypatch.setenv(policy.PIN_WORKERS_ENV, "no")
    with pytest.raises(ConfigError) as err:
        run_items(4, lambda k, w: None, threads)
    assert err.value.option == "MGGCN_PIN_WORKERS"
    assert flag_message(err.value) == "MGGCN_PIN_WORKERS must be 0 or 1, not 'no'"


def _small_items(monkeypatch, threads):
    """Items of a few rows, so that a small graph gives every worker many of them."""
    monkeypatch.setattr(tiled, "GATHER_CHUNK", 13)
    monkeypatch.setattr(policy, "SHARED_CHUNK", 40)
    monkeypatch.setattr(policy, "GEMM_CHUNK", 40)
    monkeypatch.setattr(policy, "MASK_CHUNK", 24)
    monkeypatch.setattr(policy, "shared_threads", lambda device="cpu": threads if cpu_kernels() == "shared" else 1)
    monkeypatch.setattr(tiled, "shared_threads", policy.shared_threads)
    monkeypatch.setattr(functional, "shared_threads", policy.shared_threads)


@pytest.mark.parametrize("threads", [2, 3])
def test_gather_kernel_items_equal_the_block_product(monkeypatch, threads):
    """Chunks taken by free threads: every row's bag is summed as in one call, so the result is the static
    kernel's to the bit, and the block product's to float rounding (float32 sums of ~10 products: rtol 1e-5)."""
    _small_items(monkeypatch, threads)
    graph = random_graph(61, 500, features=5, directed=True, seed=2)
    mat = sp.csr_matrix((torch.rand(500).numpy() + 0.5, graph.edge_index), shape=(61, 61))
    csr = tiled.csr_to_torch(mat)
    b = torch.randn(61, 7)
    outs = {}
    for path in ("shared", "static"):
        monkeypatch.setenv(CPU_KERNELS_ENV, path)
        outs[path] = tiled.gather_matmul(csr, b, torch.full((61, 7), float("nan")))
        start = torch.randn(61, 7)
        acc = tiled.gather_matmul(csr, b, start.clone(), accumulate=True)
        torch.testing.assert_close(acc, start + outs[path], rtol=1e-5, atol=1e-6)
    assert torch.equal(outs["shared"], outs["static"])
    torch.testing.assert_close(outs["shared"], torch.from_numpy(mat.toarray()).float() @ b, rtol=1e-5, atol=1e-5)


def _gcn(graph, weights, x):
    """A GCN 12-10-10-4 on ``graph`` (Â·X given), after one backward of its weighted output."""
    shard = build_shard(graph, make_partition(graph.num_nodes, 1, ordering="none"), 0, "sym")
    adj = local_adj(shard.adj[0], shard.adj_t[0])
    model = GCN([12, 10, 10, 4], seed=3, reuse_buffers=True)
    out = model(x, adj, x_aggregated=adj(x))
    (out * weights).sum().backward()
    return model, out


def _gcn_step(graph, weights, x):
    model, out = _gcn(graph, weights, x)
    return [out.detach()] + [p.grad for _, p in model.named_parameters()]


@pytest.mark.parametrize("spmm", CPU_SPMMS)
@pytest.mark.parametrize("threads", [2, 3])
def test_gcn_on_every_path_equals_pyg(monkeypatch, threads, spmm):
    """A 3-layer GCN whose first two layers run the GEMM-σ-GEMM and σ's backward in items: outputs and every
    gradient equal PyG's GCN on each path (float32, other summation orders: rtol 1e-4 over 61 rows of ~10
    neighbours), the shared path's those of the static one to float rounding, and its own on a second run to the
    bit."""
    _small_items(monkeypatch, threads)
    monkeypatch.setenv(CPU_SPMM_ENV, spmm)  # a whole block's product: the gather kernel's items, or MKL's
    graph = random_graph(61, 500, features=12, classes=4, directed=True, seed=5)
    x, edges = torch.from_numpy(graph.x), torch.from_numpy(graph.edge_index)
    weights = torch.randn(61, 4, generator=torch.Generator().manual_seed(1))
    fused, apply = [], functional._GemmActGemm.apply
    monkeypatch.setattr(functional._GemmActGemm, "apply", lambda *args: fused.append(args[-2]) or apply(*args))
    results = {}
    for path in CPU_KERNELS:
        monkeypatch.setenv(CPU_KERNELS_ENV, path)
        model, out = _gcn(graph, weights, x)
        pyg = PygGCN(12, 10, num_layers=3, out_channels=4)
        pyg.load_state_dict(model.pyg_state_dict())
        ref = pyg(x, edges)
        (ref * weights).sum().backward()
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
        theirs = dict(pyg.named_parameters())
        ours = [p.grad for _, p in model.named_parameters()]
        for name, p in model.named_parameters():  # the same names: convs.{l}.lin.weight, convs.{l}.bias
            torch.testing.assert_close(p.grad, theirs[name].grad, rtol=1e-4, atol=1e-5, msg=name)
        results[path] = [out.detach()] + ours
    assert fused == ["0"] * len(CPU_KERNELS)  # layer 0 (Â·X given), σ and layer 1 (multiplies first)
    for a, b in zip(results["shared"], results["static"], strict=True):
        # blocks of other sizes, on one thread or two: MKL may sum a row's products in another order
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    # whichever worker takes which item, the same numbers: the shared path once more, to the bit
    monkeypatch.setenv(CPU_KERNELS_ENV, "shared")
    for again, first in zip(_gcn_step(graph, weights, x), results["shared"], strict=True):
        assert torch.equal(again, first)


def test_pool_restarts_in_a_forked_child():
    run_items(4, lambda k, w: None, 2)
    shared._reset_after_fork()
    assert shared._pool is None
    seen = []
    run_items(6, lambda k, w: seen.append(k), 2)
    assert sorted(seen) == list(range(6))


def test_fewer_workers_than_cores_are_not_pinned(monkeypatch):
    """Several ranks of one machine (each with fewer workers than the process's cores) would all pin to the same
    first cores: only a pool exactly as large as the cores is pinned."""
    from mggcn.kernels import policy

    monkeypatch.delenv(policy.PIN_WORKERS_ENV, raising=False)
    monkeypatch.setattr(policy, "process_cpus", lambda: [0, 1, 2, 3])
    assert policy.worker_cpus(4) == [0, 1, 2, 3]
    assert policy.worker_cpus(2) is None and policy.worker_cpus(3) is None and policy.worker_cpus(5) is None
