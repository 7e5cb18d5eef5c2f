"""Several ranks on one device (``MGGCN_SHARE_DEVICE=1``): the command line's refusal without the switch, and a real
multi-rank job with the switch on, rehearsed on the CPU, whose losses equal one rank's.

Ranks that share a GPU talk over gloo (NCCL refuses two ranks on one GPU); on the CPU every rank shares the one
device over gloo already, so a CPU job with the switch runs the same collectives and the same decision code
(``rank_placement``, which each rank also asks for the GPU it would take with one visible). The CUDA run itself is
``scripts/gpu_check.sh``'s (``scripts/rank_check.py``).
"""

from dataclasses import replace

import pytest
import torch

import device_workers
import mggcn
import workers
from mggcn.config import TrainConfig
from mggcn.distributed.context import SHARE_DEVICE_ENV
from mggcn.distributed.launch import run_workers
from reference import random_graph


def test_the_command_line_refuses_more_ranks_than_gpus_naming_the_switch(monkeypatch, capsys):
    import torch.distributed as dist

    from mggcn.tools.cli import main

    started = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **kw: started.append(a))
    monkeypatch.delenv(SHARE_DEVICE_ENV, raising=False)
    assert main(["train", "builtin:karate", "--device", "cuda", "--nprocs", "3", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("mggcn train: error: --nprocs 3 needs 3 GPUs, 1 visible (or set MGGCN_SHARE_DEVICE=1 to run ranks "
                   "that share a GPU, over gloo: for testing)")
    monkeypatch.setenv(SHARE_DEVICE_ENV, "on")
    assert main(["train", "builtin:karate", "--device", "cuda", "--nprocs", "2", "--epochs", "1", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == \
        "mggcn train: error: MGGCN_SHARE_DEVICE=on: must be 1 (ranks may share a GPU) or 0 (--nprocs)"
    assert started == []


def test_the_api_refuses_more_ranks_than_gpus_before_any_worker_starts(monkeypatch):
    """mggcn.train checks the GPUs in the launching process, as the command line does: one ConfigError naming
    nprocs and the switch, and no worker started."""
    from mggcn.distributed import launch
    from mggcn.utils.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(launch, "run_workers", lambda *a, **kw: pytest.fail("a worker was started"))
    monkeypatch.delenv(SHARE_DEVICE_ENV, raising=False)
    with pytest.raises(ConfigError, match="nprocs 3 needs 3 GPUs, 2 visible .*MGGCN_SHARE_DEVICE=1") as err:
        mggcn.train("builtin:karate", device="cuda", nprocs=3, epochs=1, quiet=True)
    assert err.value.option == "nprocs"


@pytest.mark.parametrize("nprocs", [2, 3])
def test_ranks_sharing_a_device_train_as_one_rank(monkeypatch, nprocs):
    """Broadcast (through gloo, as on a shared GPU: no shared memory), sparse and auto exchange, with and without
    overlap: the losses at P = 2, 3 equal P = 1's. Directed, 31 vertices: not divisible by 2 or 3."""
    graph = random_graph(31, 150, features=6, classes=3, directed=True, seed=nprocs)
    base = TrainConfig(hidden=(8,), epochs=4, shm="off", trace_epoch=0, seed=3)
    configs = [replace(base, comm=comm, overlap=overlap) for comm in ("broadcast", "sparse", "auto")
               for overlap in (True, False)]
    expected = workers.train_worker(graph, base)[0]
    monkeypatch.setenv(SHARE_DEVICE_ENV, "1")  # the workers get the launcher's environment
    results = run_workers(device_workers.shared_device_worker, nprocs, (graph, configs), timeout_s=300)
    for rank, (placement, backend, losses) in enumerate(results):
        assert placement == ("cuda:0", "gloo") and backend == "gloo", rank
        for cfg, got in zip(configs, losses):
            where = f"rank {rank}, {cfg.comm}, overlap {cfg.overlap}"
            # the SpMM's rows and the all-reduce's ranks sum in another order than at P = 1: float32 rounding
            torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=1e-5, atol=0,
                                       msg=lambda m, where=where: f"{where}: {m}")
