"""Reproducible runs: two runs with the same seed give bitwise the same losses and weights, at P = 1 and 2, for the
GCN, GraphSAGE, GIN (also with batch norms) and GAT, with dropout (its masks drawn from the seed) and each exchange.
Each run is a job of its own processes, as two commands would be. The CUDA path's reproducibility is
``scripts/gpu_check.sh``'s (``scripts/rank_check.py repeat``); docs/benchmarks.md says why its kernels are
deterministic (GAT's edge sums on CUDA are not)."""

import pytest
import torch

import device_workers
import workers
from mggcn.config import TrainConfig
from mggcn.distributed.context import DETERMINISTIC_ENV
from mggcn.distributed.launch import run_workers
from reference import random_graph


@pytest.mark.parametrize("nprocs", [1, 2])
def test_two_runs_with_the_same_seed_are_bitwise_equal(nprocs):
    graph = random_graph(33, 160, features=7, classes=3, directed=True, seed=8)  # 33: not divisible by 2
    norms = {"batch_norm": True, "gin_mlp_batch_norm": True}  # statistics summed over the ranks; running ones kept
    cases = [(graph, TrainConfig(model=model, hidden=(8,), epochs=4, dropout=0.3, input_dropout=0.2, seed=11,
                                 comm=comm, trace_epoch=0, **options))
             for model, comm, options in (("gcn", "broadcast", {}), ("sage", "sparse", {}), ("gin", "auto", {}),
                                          ("gat", "broadcast", {}), ("gin", "sparse", norms))]
    runs = [run_workers(workers.train_many_worker, nprocs, (cases,), timeout_s=300) for _ in range(2)]
    for rank in range(nprocs):
        for k, ((first, _, first_state), (second, _, second_state)) in enumerate(zip(runs[0][rank], runs[1][rank])):
            assert first == second, f"rank {rank}, case {k}"  # floats compared exactly
            assert first_state.keys() == second_state.keys()
            assert all(torch.equal(first_state[name], second_state[name]) for name in first_state), (rank, k)
    other_seed = [(graph, TrainConfig(hidden=(8,), epochs=4, dropout=0.3, input_dropout=0.2, seed=12,
                                      trace_epoch=0))]
    # another seed draws other weights and masks: equality above is not that of a run that ignores its seed
    assert run_workers(workers.train_many_worker, 1, (other_seed,), timeout_s=300)[0][0][0] != runs[0][0][0][0]


def test_the_deterministic_switch_turns_torchs_deterministic_kernels_on_and_changes_no_cpu_result(monkeypatch):
    """MGGCN_DETERMINISTIC=1 (for GAT's edge sums on CUDA): every rank runs torch.use_deterministic_algorithms(True),
    with the cuBLAS workspace setting that mode requires; on the CPU no kernel of the GCN's or GAT's training is
    refused in that mode, and the losses are bitwise those without it."""
    graph = random_graph(27, 120, features=6, classes=3, directed=True, seed=9)  # 27: not divisible by 2
    configs = [TrainConfig(model=model, hidden=(8,), epochs=3, dropout=0.3, seed=4, comm=comm, trace_epoch=0)
               for model, comm in (("gcn", "sparse"), ("gat", "broadcast"))]
    monkeypatch.delenv(DETERMINISTIC_ENV, raising=False)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    plain = run_workers(device_workers.deterministic_worker, 2, (graph, configs), timeout_s=300)
    monkeypatch.setenv(DETERMINISTIC_ENV, "1")  # the workers get the launcher's environment
    switched = run_workers(device_workers.deterministic_worker, 2, (graph, configs), timeout_s=300)
    assert [state for state, _ in plain] == [(False, None)] * 2
    assert [state for state, _ in switched] == [(True, ":4096:8")] * 2
    assert [losses for _, losses in switched] == [losses for _, losses in plain]  # floats compared exactly
