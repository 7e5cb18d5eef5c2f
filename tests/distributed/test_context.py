"""The distributed context (mggcn.distributed.context): the host allocator policy of mggcn's ranks
(mggcn.utils.system.set_mmap_threshold) and their thread count, in fresh processes; which device and backend each
rank gets, and the refusal of more CUDA ranks than GPUs without MGGCN_SHARE_DEVICE=1."""

import os
import pickle
import threading
import uuid

import pytest

import workers
from mggcn.config import MMAP_THRESHOLD
from mggcn.distributed.launch import run_workers


def test_a_fixed_mmap_threshold_returns_freed_tensors_to_the_system():
    # glibc's dynamic threshold rises to 8 MiB when the first 8 MiB block is freed: the second one then comes from
    # the heap and stays resident after it is freed; with the threshold fixed at 1 MiB it goes back at once. (Kept:
    # at least half, not all 8 MiB: the block may reuse free heap pages that were resident already, 6.8 MiB kept
    # measured once in a fresh clone; returned stays at most 1 MiB.)
    kept = run_workers(workers.freed_rss_worker, 1, (None, 8 << 20), timeout_s=120)[0]
    returned = run_workers(workers.freed_rss_worker, 1, (MMAP_THRESHOLD, 8 << 20), timeout_s=120)[0]
    assert kept >= 4 << 20, kept
    assert returned <= 1 << 20, returned


def test_a_thread_count_above_the_cores_is_refused_before_torch_hears_of_it():
    """``threads=100000`` would make the next parallel region crash the process (SIGSEGV, libgomp failing to start
    the threads), even after fewer are set again: refused with one line, the thread count left as it was."""
    import pytest
    import torch

    from mggcn.distributed.context import init_distributed
    from mggcn.utils.parallel import available_cores

    before = torch.get_num_threads()
    for threads in (available_cores() + 1, 100000, 0):
        with pytest.raises(ValueError, match=f"threads {threads}: must be between 1 and"):
            init_distributed("cpu", threads=threads)
    assert torch.get_num_threads() == before


# ----------------------------------------------------------------------------------------------------------------------
# Which device and backend a rank gets (rank_placement): decided by the same code on a machine without GPUs, with the
# GPU count given or torch.cuda's answers replaced.

def test_cpu_ranks_use_gloo_on_the_cpu_whatever_the_switch(monkeypatch):
    import torch

    from mggcn.distributed.context import SHARE_DEVICE_ENV, rank_placement

    for value in ("0", "1"):
        monkeypatch.setenv(SHARE_DEVICE_ENV, value)
        assert [rank_placement("cpu", r, 3, gpus=0) for r in range(3)] == [(torch.device("cpu"), "gloo")] * 3


def test_one_gpu_per_rank_uses_nccl_and_never_needs_the_switch(monkeypatch):
    import torch

    from mggcn.distributed.context import SHARE_DEVICE_ENV, rank_placement

    monkeypatch.delenv(SHARE_DEVICE_ENV, raising=False)
    assert [rank_placement("cuda", r, 4, gpus=4) for r in range(4)] == \
        [(torch.device("cuda", r), "nccl") for r in range(4)]
    assert rank_placement("cuda", 0, 1, gpus=8) == (torch.device("cuda", 0), "nccl")


def test_more_ranks_than_gpus_share_them_over_gloo_when_the_switch_allows(monkeypatch):
    import torch

    from mggcn.distributed.context import SHARE_DEVICE_ENV, rank_placement

    # every rank of the host decides gloo: NCCL refuses two ranks on one GPU, and a job has one backend
    assert [rank_placement("cuda", r, 3, gpus=1, share=True) for r in range(3)] == \
        [(torch.device("cuda", 0), "gloo")] * 3
    assert [rank_placement("cuda", r, 3, gpus=2, share=True)[0].index for r in range(3)] == [0, 1, 0]
    monkeypatch.setenv(SHARE_DEVICE_ENV, "1")  # the switch stands for share= when that is not given
    assert [rank_placement("cuda", r, 2, gpus=1) for r in range(2)] == [(torch.device("cuda", 0), "gloo")] * 2


def test_more_ranks_than_gpus_are_refused_with_one_line_naming_the_switch(monkeypatch):
    from mggcn.distributed.context import SHARE_DEVICE_ENV, check_gpus, rank_placement
    from mggcn.utils.errors import ConfigError

    expected = ("nprocs 3 needs 3 GPUs, 1 visible (or set MGGCN_SHARE_DEVICE=1 to run ranks that share a GPU, over "
                "gloo: for testing)")
    for value in (None, "0", " 0 "):
        if value is None:
            monkeypatch.delenv(SHARE_DEVICE_ENV, raising=False)
        else:
            monkeypatch.setenv(SHARE_DEVICE_ENV, value)
        for refused in (lambda: check_gpus(3, gpus=1), lambda: rank_placement("cuda", 2, 3, gpus=1)):
            with pytest.raises(ConfigError) as err:
                refused()
            assert str(err.value) == expected and err.value.option == "nprocs"
    with pytest.raises(ConfigError, match="^nprocs 2 needs 2 GPUs, 1 visible"):
        rank_placement("cuda", 0, 2, gpus=1, share=False)  # share= given wins over the environment
    monkeypatch.setenv(SHARE_DEVICE_ENV, "yes")
    with pytest.raises(ConfigError, match=r"^MGGCN_SHARE_DEVICE=yes: must be 1 \(ranks may share a GPU\) or 0$"):
        check_gpus(2, gpus=1)
    assert check_gpus(1, gpus=1) is False  # enough GPUs: the switch is not read at all


def _fake_gpus(monkeypatch, count: int) -> list:
    """torch.cuda as on a machine with ``count`` GPUs, as far as the context asks; the devices that set_device and
    init_process_group were given are recorded."""
    import torch
    import torch.distributed as dist

    calls: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(dist, "init_process_group",
                        lambda backend, **kw: calls.append(("init_process_group", backend, kw.get("device_id"))))
    store, token = dist.HashStore(), uuid.uuid4().hex

    def rank_0() -> None:  # its part in naming the group (context._fresh_prefix) and in the roll call
        store.set("mggcn-leader", token)  # (context._roll_call), for rank 1, the rank under test
        try:
            store.set(f"mggcn-answer/{store.get(f'mggcn-ask/{token}/1').decode()}", token)
            group = dist.PrefixStore(f"mggcn-{token}", store)
            outcome = pickle.loads(group.get("mggcn-outcome/1"))
            group.set("mggcn-verdict", pickle.dumps(None if outcome is None else (1, *outcome)))
        except dist.DistStoreError:  # the rank under test did not join: nobody to answer
            pass

    threading.Thread(target=rank_0, daemon=True).start()
    monkeypatch.setattr(dist, "rendezvous", lambda url, rank, world, **kw: iter([(store, rank, world)]))
    return calls


def _rank_environment(monkeypatch, rank: int, world: int) -> None:
    for name, value in (("RANK", rank), ("LOCAL_RANK", rank), ("WORLD_SIZE", world), ("LOCAL_WORLD_SIZE", world)):
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("MGGCN_INIT_METHOD", "file:///nonexistent/never-used")


def test_a_rank_of_more_than_the_gpus_is_refused_before_it_touches_a_gpu_or_its_settings(monkeypatch):
    import torch

    from mggcn.distributed.context import SHARE_DEVICE_ENV, init_distributed
    from mggcn.utils.errors import ConfigError

    calls = _fake_gpus(monkeypatch, 1)
    _rank_environment(monkeypatch, 1, 3)
    monkeypatch.delenv(SHARE_DEVICE_ENV, raising=False)
    threads = torch.get_num_threads()
    with pytest.raises(ConfigError, match=r"^nprocs 3 needs 3 GPUs, 1 visible \(or set MGGCN_SHARE_DEVICE=1"):
        init_distributed("cuda", threads=1)
    assert calls == [] and torch.get_num_threads() == threads


@pytest.mark.parametrize("gpus, device, backend", [(1, 0, "gloo"), (2, 1, "gloo"), (3, 1, "nccl")])
def test_a_rank_joins_with_the_device_and_backend_decided(monkeypatch, gpus, device, backend):
    """init_distributed runs rank_placement's decision: local rank 1 of 3 on 1, 2 or 3 GPUs (the switch on)."""
    import torch

    from mggcn.distributed.context import SHARE_DEVICE_ENV, init_distributed
    from mggcn.utils.system import caller_settings_kept

    calls = _fake_gpus(monkeypatch, gpus)
    _rank_environment(monkeypatch, 1, 3)
    monkeypatch.setenv(SHARE_DEVICE_ENV, "1")
    with caller_settings_kept():  # the rank's thread count, in this test's process
        ctx = init_distributed("cuda", threads=1)
    cuda = torch.device("cuda", device)
    assert (ctx.device, ctx.backend, ctx.rank, ctx.world_size) == (cuda, backend, 1, 3)
    # NCCL is told its device up front; gloo takes none (it moves CUDA tensors through the host)
    assert calls == [("set_device", cuda), ("init_process_group", backend, cuda if backend == "nccl" else None)]


def test_the_deterministic_switch_is_one_or_zero(monkeypatch):
    from mggcn.distributed.context import DETERMINISTIC_ENV, deterministic_kernels
    from mggcn.utils.errors import ConfigError

    for value, on in ((None, False), ("0", False), ("1", True), (" 1", True)):
        if value is None:
            monkeypatch.delenv(DETERMINISTIC_ENV, raising=False)
        else:
            monkeypatch.setenv(DETERMINISTIC_ENV, value)
        assert deterministic_kernels() is on
    monkeypatch.setenv(DETERMINISTIC_ENV, "true")
    with pytest.raises(ConfigError, match=r"^MGGCN_DETERMINISTIC=true: must be 1 \(torch's deterministic kernels\) "
                                          r"or 0$"):
        deterministic_kernels()


@pytest.mark.parametrize("nprocs", [2, 3])
def test_async_works_are_kept_until_the_group_is_destroyed_where_torch_needs_it(nprocs):
    """torch before 2.8 destroys a gloo group with the GIL held while it joins gloo's threads: a thread left holding
    the last reference to an async collective's tensor waits for the GIL for ever (one `mggcn train --nprocs 2` in
    ten hung after its last line on torch 2.4). mggcn's async works stay referenced from Python until shutdown has
    destroyed the group, then are let go; where torch does not need it nothing is kept."""
    import torch

    from mggcn.distributed import context
    from mggcn.distributed.partition import make_partition
    from reference import random_graph

    assert context._GLOO_DESTROY_HOLDS_GIL == (tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 8))
    graph, part = random_graph(23, 60, directed=True, seed=1), make_partition(23, nprocs, 3)
    # not kept where torch needs it (< 2.8) would be the hang itself, at random: that case runs where it does not
    for holds in (True,) if context._GLOO_DESTROY_HOLDS_GIL else (True, False):
        for rank, held, after in run_workers(workers.held_works_worker, nprocs, (graph, part, holds), timeout_s=120):
            # per SpMM, forward and backward: a broadcast per stage (gloo; the outboxes' tokens), one all-to-all
            expected = 2 * nprocs * 2 + 2 if holds else 0
            assert len(held) == expected and set(held) <= {"Work"}, (rank, held)
            assert after == 0, rank


def test_a_job_in_a_group_the_caller_made_lets_its_works_go_at_its_end(monkeypatch):
    """The caller's own group is the caller's to destroy, at a time mggcn does not know: the works mggcn kept (and
    the buffers they hold) are let go when its job ends instead of staying referenced until then."""
    from mggcn.distributed import context

    monkeypatch.setattr(context._Joined, "group", False)  # no group of mggcn's own: the caller's, or none
    context._Joined.works.append(object())
    context.shutdown()
    assert len(context._Joined.works) == 0


_ATTEMPT = """
import sys, time
import torch, torch.distributed as dist
from mggcn.distributed.context import init_distributed, shutdown
time.sleep(float(sys.argv[1]))
ctx = init_distributed("cpu", timeout_s=30, threads=1)
total = torch.tensor([ctx.rank + 1.0])
dist.all_reduce(total)
print(int(total.item()), flush=True)
shutdown(clean=True)
"""


def test_a_restarted_job_joins_on_the_store_an_earlier_attempt_used():
    """torchrun restarts failed workers on the store its agent keeps (TORCHELASTIC_USE_AGENT_STORE): the new
    attempt's ranks must not read the keys the previous attempt's group left there. Here rank 1 of the second
    attempt starts 2 s before rank 0: with the group keyed as the previous one, it read that group's addresses, of
    sockets long closed, and failed (connection refused) or waited out its timeout."""
    import subprocess
    import sys

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # the agent's
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "WORLD_SIZE": "2",
           "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_USE_AGENT_STORE": "True",
           # torchrun sets it, and torch 2.4 reads it beside the agent's store: one count for both attempts, so that
           # torch does not keep them apart itself, which is what mggcn's own keys are to do
           "TORCHELASTIC_RESTART_COUNT": "0"}
    for delays in ((0.0, 0.0), (2.0, 0.0)):
        ranks = [subprocess.Popen([sys.executable, "-c", _ATTEMPT, str(delay)], text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
                 for r, delay in enumerate(delays)]
        try:
            outputs = [rank.communicate(timeout=120) for rank in ranks]
        finally:
            for rank in ranks:
                rank.kill()
        assert [rank.returncode for rank in ranks] == [0, 0], outputs
        assert [out.strip() for out, _ in outputs] == ["3", "3"]


# ----------------------------------------------------------------------------------------------------------------------
# A device as PyTorch users write it: cuda:K (or torch.device("cuda", K)) names one GPU, for a job of one rank per host.

def test_a_device_is_read_as_torch_spells_it_and_anything_else_is_refused_in_one_line():
    import torch

    from mggcn.utils.devices import parse_device
    from mggcn.utils.errors import ConfigError

    for given, read in (("cpu", "cpu"), ("cpu:0", "cpu"), (torch.device("cpu"), "cpu"), ("cuda", "cuda"),
                        ("cuda:0", "cuda:0"), ("cuda:01", "cuda:1"), (torch.device("cuda", 3), "cuda:3"),
                        (torch.device("cuda"), "cuda"), ("auto", "auto")):
        assert parse_device(given) == read, given
    for refused in ("CUDA", "gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:0 ", "mps", "", None, 0, torch.device("meta")):
        with pytest.raises(ConfigError) as err:
            parse_device(refused)
        assert str(err.value) == f"device must be cpu, cuda, cuda:K (GPU K) or auto, got {str(refused)!r}"
        assert err.value.option == "device"


def test_a_named_gpu_is_the_device_of_a_one_rank_host_and_refused_for_several(monkeypatch):
    import torch

    from mggcn.distributed.context import check_host_gpus, rank_placement
    from mggcn.utils.errors import ConfigError

    assert rank_placement("cuda:1", 0, 1, gpus=2) == (torch.device("cuda", 1), "nccl")
    expected = ("device cuda:0 names one GPU, and this host runs 2 ranks: use cuda (local rank i takes GPU i; "
                "CUDA_VISIBLE_DEVICES chooses which GPUs those are)")
    with pytest.raises(ConfigError) as err:
        rank_placement("cuda:0", 1, 2, gpus=2)
    assert str(err.value) == expected and err.value.option == "device"
    _fake_gpus(monkeypatch, 2)
    check_host_gpus("cuda:1", 1)
    for device, nprocs, message in (("cuda:0", 2, expected),
                                    ("cuda:2", 1, "device cuda:2: 2 GPU(s) visible to PyTorch, numbered from 0")):
        with pytest.raises(ConfigError) as err:
            check_host_gpus(device, nprocs)
        assert str(err.value) == message


def test_a_rank_given_a_named_gpu_joins_on_it(monkeypatch):
    import torch

    from mggcn.distributed.context import init_distributed
    from mggcn.utils.system import caller_settings_kept

    calls = _fake_gpus(monkeypatch, 2)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MGGCN_INIT_METHOD"):
        monkeypatch.delenv(name, raising=False)
    with caller_settings_kept():
        ctx = init_distributed(torch.device("cuda", 1), threads=1)
    assert (ctx.device, ctx.world_size) == (torch.device("cuda", 1), 1)
    assert calls == [("set_device", torch.device("cuda", 1))]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is visible")
def test_train_and_predict_take_a_named_gpu_and_say_when_none_is_visible(tmp_path):
    """On a machine without a GPU, cuda:0 gets as far as the device check: the line names the device as given."""
    import mggcn
    from cli_util import run_cli
    from mggcn.utils.errors import ConfigError

    for device in ("cuda:0", __import__("torch").device("cuda", 0)):
        with pytest.raises(ConfigError, match=r"^device cuda:0: no CUDA device is visible to PyTorch$"):
            mggcn.train("builtin:karate", epochs=1, device=device)
    model = mggcn.train("builtin:karate", epochs=1, device=__import__("torch").device("cpu"))
    model.save(str(tmp_path / "m.pt"))
    with pytest.raises(ConfigError, match=r"^device cuda:0: no CUDA device is visible to PyTorch$"):
        mggcn.predict(str(tmp_path / "m.pt"), "builtin:karate", nprocs=2, device="cuda:0")
    for command in ("train", "predict"):
        args = [command, "builtin:karate"]
        if command == "predict":
            args = [command, str(tmp_path / "m.pt"), "builtin:karate", "--out", str(tmp_path / "p.npy")]
        out = run_cli(*args, "--device", "cuda:0")
        assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == \
            f"mggcn {command}: error: --device cuda:0: no CUDA device is visible to PyTorch", out.stderr
        out = run_cli(*args, "--device", "gpu")
        assert out.returncode == 2 and "argument --device: expected cpu, cuda, cuda:K (GPU K) or auto, got 'gpu'" \
            in out.stderr, out.stderr
