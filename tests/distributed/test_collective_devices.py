"""Every collective of the GPU path gets tensors on the rank's device (NCCL rejects CPU tensors), checked on gloo,
and is one that gloo runs on CUDA tensors too (ranks sharing a GPU talk over gloo: MGGCN_SHARE_DEVICE).

On gloo a CPU tensor and the rank's device are the same place; tests/host_tensors.py follows where each tensor
would be on a GPU run (made without a device: on the host) and wraps ``torch.distributed``'s collectives so that
a host tensor is reported with the library line that passed it.
"""

import pytest
import torch

import workers
from host_tensors import HostTracker, check_collectives, on_host
from mggcn.config import TrainConfig
from mggcn.distributed.launch import run_workers
from reference import random_graph

# The collectives whose CUDA tensors torch's ProcessGroupGloo moves through host memory (its Async*CUDAWork):
# send/recv, reduce_scatter and the *_into_tensor forms are not among them on every torch from 2.4 on.
GLOO_CUDA_COLLECTIVES = {"broadcast", "all_reduce", "all_gather", "all_to_all_single"}


def test_the_tracker_follows_tensors_to_the_host_and_back():
    device = torch.device("cpu")  # what ctx.device is on gloo
    with HostTracker():
        made_here = torch.tensor([1.0, 2.0])
        on_device = torch.tensor([1.0, 2.0], device=device)
        assert on_host(made_here) and not on_host(on_device)
        assert on_host(torch.arange(3)) and not on_host(torch.empty(2, device=on_device.device))
        assert on_host(on_device.cpu()) and on_host(on_device.to("cpu")) and not on_host(made_here.to(device))
        assert on_host(made_here + on_device) and not on_host(on_device * 2)
        assert all(on_host(t) for t in torch.split(torch.cat([made_here, on_device]), 1))
        assert on_host(torch.empty_like(made_here)) and not on_host(torch.zeros_like(made_here, device=device))
        assert not on_host(on_device.copy_(made_here))  # in place: stays on the device
        assert on_host(made_here.to(torch.float64)) and not on_host(on_device.to(torch.float64))


def test_a_host_tensor_in_a_collective_is_reported_with_the_library_line(monkeypatch):
    import torch.distributed as dist

    calls = []
    monkeypatch.setattr(dist, "all_reduce", lambda t, **kw: calls.append(t))
    monkeypatch.setattr(dist, "all_to_all_single", lambda out, inp, **kw: calls.append(inp))
    with HostTracker(), check_collectives(torch.device("cpu")) as (problems, checked):
        from mggcn.distributed.context import DistContext, all_reduce_sum

        ctx = DistContext(rank=0, world_size=2)
        all_reduce_sum(ctx, torch.zeros(2, device=ctx.device))
        assert problems == [] and checked == {"all_reduce": 1}
        all_reduce_sum(ctx, torch.zeros(2))
        dist.all_to_all_single(torch.empty(2, device=ctx.device), torch.zeros(2, device=ctx.device))
    assert len(calls) == 3 and checked == {"all_reduce": 2, "all_to_all_single": 2}
    assert len(problems) == 1
    assert problems[0].startswith("all_reduce: tensor argument 0 (torch.float32) is on the host")
    assert "distributed/context.py" in problems[0] and "dist.all_reduce" in problems[0]


@pytest.mark.parametrize("nprocs", [2, 3])
def test_every_collective_of_the_gpu_path_gets_device_tensors(nprocs):
    # directed, n not divisible by P; every comm mode, and the non-finite-loss path (a shard whose features go NaN)
    graph = random_graph(29, 120, directed=True, seed=nprocs)
    nan_graph = random_graph(29, 120, directed=True, seed=nprocs)
    configs = [TrainConfig(hidden=(6,), epochs=2, comm=comm, shm="off", trace_epoch=1, norm=norm)
               for comm, norm in (("broadcast", "sym"), ("sparse", "mean"), ("auto", "sym"))]
    results = run_workers(workers.collective_devices_worker, nprocs, (graph, nan_graph, configs), timeout_s=300)
    for rank, (problems, checked) in enumerate(results):
        assert problems == [], f"rank {rank}:\n" + "\n".join(problems)
        # the wrapper saw the collectives of every path (else the check above proves nothing), and no other one:
        # ranks that share a GPU run every one of them over gloo on CUDA tensors
        assert set(checked) == GLOO_CUDA_COLLECTIVES, checked
