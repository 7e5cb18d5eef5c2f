"""Workers of the tests of ranks that share a device and of reproducible runs (importable by module name)."""

from __future__ import annotations

import os

import workers
from mggcn.distributed.context import init_distributed, rank_placement


def shared_device_worker(graph, configs):
    """A rank of a job whose ranks share one GPU, rehearsed on the CPU with the job's environment (the switch set by
    the test): where the rank would run with one GPU visible (``rank_placement``, the decision ``init_distributed``
    makes), then the job on the CPU over gloo, the backend ranks sharing a GPU use, training each of ``configs``.
    Returns that placement, the context's backend and the losses of each config."""
    device, backend = rank_placement("cuda", int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"]),
                                     gpus=1)
    ctx = init_distributed("cpu", timeout_s=120)
    losses = [workers.train_worker(graph, cfg)[0] for cfg in configs]
    return (str(device), backend), ctx.backend, losses


def deterministic_worker(graph, configs):
    """A rank as its environment makes it (MGGCN_DETERMINISTIC set by the test, or not): whether torch's
    deterministic kernels are on and cuBLAS's workspace setting once it joined, and the losses of each config."""
    import torch

    init_distributed("cpu", timeout_s=120)
    state = (torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    return state, [workers.train_worker(graph, cfg)[0] for cfg in configs]
