"""Distributed state, in one small frozen dataclass passed explicitly, and the few collectives mggcn uses.

The run's device decisions live here: which device a rank drives (:func:`resolve_device`, :func:`rank_placement`),
which backend (gloo on CPU and for ranks sharing a GPU, NCCL on CUDA: :attr:`DistContext.backend`, which the rest
reads instead of deciding again), whether more ranks than GPUs may share them (:data:`SHARE_DEVICE_ENV`), whether
torch's deterministic kernels are asked for (:data:`DETERMINISTIC_ENV`), how many CPU threads it may use (set
through :mod:`mggcn.utils.system`, with the host allocator's threshold); waiting for a device's queued work is
:func:`mggcn.utils.timing.synchronize`. Which local sparse kernel runs on which device is
:mod:`mggcn.kernels.policy`'s. Library code never calls ``dist.get_rank()``; it receives a :class:`DistContext`. A
world of size 1 needs no process group: every collective below is then the identity.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from mggcn.config import MMAP_THRESHOLD
from mggcn.distributed.network import GLOO_IFNAME_ENV, gloo_interface
from mggcn.utils.devices import gpu_index, parse_device
from mggcn.utils.errors import ConfigError
from mggcn.utils.launcher import under_torchrun
from mggcn.utils.parallel import available_cores
from mggcn.utils.system import enter_rank, native_log_held

__all__ = ["DistContext", "init_distributed", "shutdown", "all_reduce_sum", "all_reduce_max", "all_reduce_min",
           "all_gather_objects", "all_gather_rows", "parse_device", "resolve_device", "SHARE_DEVICE_ENV",
           "shares_devices", "check_gpus", "check_gpu_index", "check_host_gpus", "job_device", "rank_placement",
           "DETERMINISTIC_ENV", "deterministic_kernels", "RANK_ENV", "rank_environment", "RendezvousUnreachable",
           "held_until_shutdown"]

# Set to 1, it lets a host run more CUDA ranks than it has GPUs (rank r on GPU r mod G, the job over gloo): the
# multi-rank CUDA path runs where one GPU is all there is. For testing: the ranks share the GPU's time and memory.
SHARE_DEVICE_ENV = "MGGCN_SHARE_DEVICE"
# Set to 1, every rank runs torch.use_deterministic_algorithms(True): kernels that would add with atomics on CUDA
# (GAT's edge sums: docs/benchmarks.md, reproducible runs) take their deterministic, slower form.
DETERMINISTIC_ENV = "MGGCN_DETERMINISTIC"
# Where a rank of a torchrun-style job is told its place; mggcn's own launcher sets them for its workers too.
RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")

@dataclass(frozen=True)
class DistContext:
    """Where this rank sits: rank, world size, the device it computes on, the backend and the process group."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    backend: str = "gloo"
    local_rank: int = 0
    local_world_size: int = 1
    group: Any = None  # None = the default (world) group

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def rank_environment() -> tuple[int, int, int, int]:
    """This process's place in its job from :data:`RANK_ENV`: rank, world size, local rank, local world size;
    ``(0, 1, 0, 1)`` where none is set, and ``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` default to ``RANK``/``WORLD_SIZE``.

    Raises :class:`ConfigError` naming the variable, before anything reads it: a value that is not a whole number
    (``int()``'s own words name no variable), ``RANK`` without ``WORLD_SIZE`` or the reverse (a process that is
    neither a rank nor a job of its own: with ``RANK=1`` alone a one-process job would run as rank 1 of 1, and a
    launcher would not print rank 0's lines; ``WORLD_SIZE`` alone waits for a rendezvous), or values that do not
    fit together (a rank outside its world reads the rows of no partition, or waits for peers that never come)."""
    values = {}
    for name in RANK_ENV:
        raw = os.environ.get(name)
        if raw is not None:
            # digits only, as torchrun writes them: the command line compares RANK with "0" as a string
            if not (raw.isascii() and raw.isdigit() and str(int(raw)) == raw):
                raise ConfigError(f"{name}={raw!r}: must be a whole number (torchrun sets it for each rank)", name)
            values[name] = int(raw)
    if ("RANK" in values) != ("WORLD_SIZE" in values):
        given, missing = ("RANK", "WORLD_SIZE") if "RANK" in values else ("WORLD_SIZE", "RANK")
        raise ConfigError(f"{given}={values[given]} is set but {missing} is not: a rank of a torchrun-style job "
                          f"needs both (unset {given} to run a job of its own)", given)
    world, rank = values.get("WORLD_SIZE", 1), values.get("RANK", 0)
    local_world, local_rank = values.get("LOCAL_WORLD_SIZE", world), values.get("LOCAL_RANK", rank)
    for fits, name, message in ((world >= 1, "WORLD_SIZE", f"WORLD_SIZE={world}: must be at least 1"),
                                (rank < world, "RANK", f"RANK={rank}: must be less than WORLD_SIZE={world}"),
                                (1 <= local_world <= world, "LOCAL_WORLD_SIZE",
                                 f"LOCAL_WORLD_SIZE={local_world}: must be between 1 and WORLD_SIZE={world}"),
                                (local_rank < local_world, "LOCAL_RANK",
                                 f"LOCAL_RANK={local_rank}: must be less than LOCAL_WORLD_SIZE={local_world}")):
        if not fits:
            raise ConfigError(f"{message} (torchrun sets these for each rank)", name)
    port = os.environ.get("MASTER_PORT")
    if world > 1 and port is not None and "MGGCN_INIT_METHOD" not in os.environ and \
            not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):  # int()'s or torch's words name none
        raise ConfigError(f"MASTER_PORT={port!r}: must be a port number from 1 to 65535 (rank 0 serves the job's "
                          "rendezvous there)", "MASTER_PORT")
    return rank, world, local_rank, local_world


def resolve_device(kind: Any) -> str:
    """``kind`` (:func:`parse_device`) where this process runs: ``auto`` means CUDA where a GPU is visible, else
    CPU; a GPU asked for must be visible."""
    kind = parse_device(kind)
    if kind == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if kind != "cpu" and not torch.cuda.is_available():
        raise ConfigError(f"device {kind}: no CUDA device is visible to PyTorch", "device")
    index = gpu_index(kind)
    if index is not None and index >= torch.cuda.device_count():
        raise ConfigError(f"device {kind}: {torch.cuda.device_count()} GPU(s) visible to PyTorch, numbered from 0",
                          "device")
    return kind


def _switch(name: str, meaning: str, option: str | None) -> bool:
    """The environment switch ``name``: ``1`` on, ``0`` or unset off, else one line saying what 1 means."""
    value = os.environ.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise ConfigError(f"{name}={value}: must be 1 ({meaning}) or 0", option)
    return value == "1"


def shares_devices() -> bool:
    """Whether :data:`SHARE_DEVICE_ENV` lets ranks share a GPU."""
    return _switch(SHARE_DEVICE_ENV, "ranks may share a GPU", "nprocs")


def deterministic_kernels() -> bool:
    """Whether :data:`DETERMINISTIC_ENV` asks for torch's deterministic kernels."""
    return _switch(DETERMINISTIC_ENV, "torch's deterministic kernels", None)


def check_gpus(nprocs: int, gpus: int | None = None, share: bool | None = None) -> bool:
    """Whether ``nprocs`` CUDA ranks of one host must share its ``gpus`` (default: those visible), which
    ``share`` (default: :func:`shares_devices`) must allow; else one line naming the switch."""
    gpus = torch.cuda.device_count() if gpus is None else gpus
    if nprocs <= gpus:
        return False
    if not (shares_devices() if share is None else share):
        raise ConfigError(f"nprocs {nprocs} needs {nprocs} GPUs, {gpus} visible (or set {SHARE_DEVICE_ENV}=1 to "
                          "run ranks that share a GPU, over gloo: for testing)", "nprocs")
    return True


def job_device(kind: Any) -> str:
    """A job's device (:func:`parse_device`) with ``auto`` decided by the GPUs visible here."""
    device = parse_device(kind)
    return resolve_device(device) if device == "auto" else device


def check_host_gpus(device: str, nprocs: int) -> None:
    """A job of ``nprocs`` ranks on this host can have the GPUs ``device`` asks for: some visible, one per rank
    (:func:`check_gpus`), none named for several ranks (:func:`check_gpu_index`). Under torchrun each rank checks its
    own host's as it starts (:func:`init_distributed`), so the launching process does not."""
    if device != "cpu" and not under_torchrun():
        resolve_device(device)  # no GPU visible: that line first
        check_gpu_index(device, nprocs)
        check_gpus(nprocs)  # more ranks than GPUs only with MGGCN_SHARE_DEVICE=1 (torchrun: per node)


def check_gpu_index(device: str, local_world: int) -> int | None:
    """The GPU that ``device`` names (:func:`gpu_index`), refused in one line for a host of several ranks."""
    index = gpu_index(device)
    if index is not None and local_world > 1:
        raise ConfigError(f"device {device} names one GPU, and this host runs {local_world} ranks: use cuda (local "
                          "rank i takes GPU i; CUDA_VISIBLE_DEVICES chooses which GPUs those are)", "device")
    return index


def rank_placement(device: str, local_rank: int, local_world: int, gpus: int | None = None,
                   share: bool | None = None) -> tuple[torch.device, str]:
    """The device that local rank ``local_rank`` of this host's ``local_world`` ranks computes on, and the job's
    backend. ``device`` ``cpu``: the CPU, gloo. ``cuda``: GPU ``local_rank``, NCCL; with fewer GPUs than ranks
    (:func:`check_gpus`), GPU ``local_rank mod gpus`` and gloo, whose collectives take CUDA tensors through host
    memory: NCCL refuses two ranks on one GPU. Every rank of the host decides the same backend."""
    if device == "cpu":
        return torch.device("cpu"), "gloo"
    if check_gpu_index(device, local_world) is not None:
        return torch.device(device), "nccl"
    gpus = torch.cuda.device_count() if gpus is None else gpus
    if check_gpus(local_world, gpus, share):
        return torch.device("cuda", local_rank % gpus), "gloo"
    return torch.device("cuda", local_rank), "nccl"


def init_distributed(device: str = "cpu", timeout_s: float = 300.0, threads: int | None = None,
                     mmap_threshold: int | None = MMAP_THRESHOLD, refusal: Exception | None = None) -> DistContext:
    """Join the job described by the torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, ...:
    :func:`rank_environment`, which refuses values that do not fit together).

    Without those variables this is a single-process run. ``MGGCN_INIT_METHOD`` (set by mggcn's own launcher)
    overrides the rendezvous, which otherwise is torchrun's ``env://``. The device and backend are
    :func:`rank_placement`'s (more local ranks than GPUs are refused unless :data:`SHARE_DEVICE_ENV` allows);
    with :data:`DETERMINISTIC_ENV` set to 1 the process runs torch's deterministic kernels from here on. Each
    rank uses ``cores / local ranks`` threads unless ``threads`` says otherwise, so that local workers don't fight
    over cores. ``mmap_threshold``: the host allocator's (:data:`mggcn.config.MMAP_THRESHOLD`; ``None``: glibc's
    default), set only in a process mggcn owns (:func:`mggcn.utils.system.enter_rank`; a job run in the caller's
    process puts the rest back on return: :func:`mggcn.utils.system.caller_settings_kept`).

    Before the process group is made, the ranks hold a roll call through the store (:func:`_roll_call`): a rank
    that refuses the job (``refusal``: what its own check raised; or this host's device, threads or switches) tells
    the others, and every rank raises — the refusing rank its own error, the others its (after a line naming the
    rank and its host) — instead of the others waiting out ``timeout_s`` for it and then blaming a lost peer.
    """
    rank, world_size, local_rank, local_world = rank_environment()
    cores = available_cores()
    try:
        device = resolve_device(device)
        if threads is not None and not 1 <= threads <= cores:
            # Not clamped: a thread pool once told to start 10^5 threads crashes the process (SIGSEGV) at its next
            # parallel region, even after being told fewer again; refuse before torch hears of it.
            raise ConfigError(f"threads {threads}: must be between 1 and the {cores} core(s) this process may "
                              "use", "threads")
        dev, backend = rank_placement(device, local_rank, local_world)  # a refusal leaves the process as it was
        deterministic = deterministic_kernels()
    except ConfigError as err:  # this host's: the other ranks hear of it instead of waiting out the timeout
        if world_size > 1 and not dist.is_initialized():
            try:
                _join(None, rank, world_size, timeout_s, {}, refusal or err, local_rank)
            except Exception:  # noqa: BLE001 - this rank's own refusal is the error to raise
                pass
        raise
    if refusal is not None and world_size > 1 and not dist.is_initialized():
        _join(None, rank, world_size, timeout_s, {}, refusal, local_rank)  # raises: the refusal, told
    enter_rank(threads or max(1, cores // max(1, local_world)), mmap_threshold)
    if deterministic:  # for the rest of the process: the caller asked it of the process's environment
        # the workspace setting torch requires of cuBLAS in this mode; read when the first cuBLAS handle is made
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)

    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world_size > 1 and not dist.is_initialized():
        if backend == "gloo" and local_world < world_size:
            _bind_gloo_off_loopback(local_rank)
        _join(backend, rank, world_size, timeout_s, {"device_id": dev} if backend == "nccl" else {}, None,
              local_rank)
    return DistContext(rank=rank, world_size=world_size, device=dev, backend=backend,
                       local_rank=local_rank, local_world_size=local_world)


class RendezvousUnreachable(RuntimeError):
    """This rank could not connect to the job's rendezvous (the store that rank 0 serves) in time."""


# torch before 2.8 destroys a gloo group holding the GIL while it joins the group's worker threads. A worker that
# is left to drop the last reference to a tensor Python made (an async collective's buffer, which Python let go of
# once it had waited) must take the GIL to free it: the process then hangs in shutdown for ever. mggcn keeps its
# own async collectives' works referenced until the group is gone (:func:`held_until_shutdown`), and lets the
# workers run with the GIL released before the group is destroyed (a synchronous collective's temporary, made
# inside torch, is freed then).
_GLOO_DESTROY_HOLDS_GIL = tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 8)
_HELD_WORKS = 32  # works of the latest SpMMs: a worker thread that has yet to let go of one ran it moments ago
_WORKERS_SETTLE_S = 0.05


class _Joined:
    group = False  # whether this process's default group is the one :func:`init_distributed` made
    tokens: set = set()  # the names of the groups this process joined as a rank other than 0 (_fresh_prefix)
    works: deque = deque(maxlen=_HELD_WORKS)  # async gloo works, referenced until the group is destroyed


def held_until_shutdown(ctx: DistContext, work: Any) -> Any:
    """``work`` (an async collective's, returned as it is), referenced from Python until :func:`shutdown` has
    destroyed the group, on torch versions whose gloo group needs it (see ``_GLOO_DESTROY_HOLDS_GIL``)."""
    if _GLOO_DESTROY_HOLDS_GIL and ctx.backend == "gloo":
        _Joined.works.append(work)
    return work


def _join(backend: str | None, rank: int, world_size: int, timeout_s: float, kwargs: dict[str, Any],
          refusal: Exception | None = None, local_rank: int = 0) -> None:
    """Join the process group. The rendezvous (connecting to the store rank 0 serves) runs with torch's C++ log held
    back (:func:`mggcn.utils.system.native_log_held`: a rendezvous that cannot be reached logs each failed try with
    its stack), and one that cannot be reached is said in one line; the group is then made on that store.

    Each group has keys of its own in the store, under a name rank 0 draws for it (:func:`_fresh_prefix`): the
    store outlives the groups (torchrun's agent serves it, and keeps it when it restarts failed workers), and a group
    keyed as an earlier one (this process's, the caller's own default group, destroyed before, or the previous
    attempt's of a restarted job) would read that group's addresses there, of sockets long closed."""
    init_method = os.environ.get("MGGCN_INIT_METHOD", "env://")
    timeout = timedelta(seconds=timeout_s)
    unreachable = _unreachable(init_method, rank, timeout_s)
    try:
        with native_log_held():
            store, rank, world_size = _awaited(lambda: next(dist.rendezvous(init_method, rank, world_size,
                                                                            timeout=timeout)),
                                               timeout_s, unreachable)
    except RuntimeError as err:
        if type(err).__name__ != "DistNetworkError":
            raise
        raise unreachable(f"torch said: {' '.join(str(err).split())[:200]}") from err
    store.set_timeout(timeout)
    prefix = _awaited(lambda: _fresh_prefix(store, rank, world_size, timeout_s), timeout_s,
                      lambda said: getattr(dist, "DistStoreError", RuntimeError)(
                          f"rank {rank}: the other ranks did not all join within {timeout_s:g} s ({said})"))
    store = dist.PrefixStore(prefix, store)
    verdict = _awaited(lambda: _roll_call(store, rank, world_size, refusal), timeout_s,
                       lambda said: getattr(dist, "DistStoreError", RuntimeError)(
                           f"rank {rank}: the other ranks did not all answer the roll call within {timeout_s:g} s "
                           f"({said})"))
    if verdict is not None:
        if refusal is not None:
            raise refusal
        refused, host, error = verdict
        if local_rank == 0:
            print(f"mggcn: rank {refused} (on {host}) refused the job; its reason:", file=sys.stderr, flush=True)
        raise error
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout, **kwargs)
    _Joined.group = True


def _unreachable(init_method: str, rank: int, timeout_s: float) -> Callable[[str], RendezvousUnreachable]:
    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}" \
        if init_method == "env://" else init_method
    return lambda said: RendezvousUnreachable(
        f"rank {rank} could not connect to the job's rendezvous at {where} within {timeout_s:g} s: rank 0 (on "
        f"node 0), which serves it, was not started, failed, or listens elsewhere (MASTER_ADDR, MASTER_PORT); {said}")


_OVERRUN_S = 5.0  # past its own timeout, how long a wait in torch's store may go on before it is given up


def _awaited(work: Callable[[], Any], timeout_s: float, late: Callable[[str], Exception]) -> Any:
    """``work()`` (a wait on the job's store), done in a thread of its own while the main thread waits for it in
    short slices: torch's store waits block in C++, where Python's signal handlers cannot run, so a rank waiting for
    a peer that never comes would ignore SIGINT and SIGTERM (torchrun's or a scheduler's stop) until its timeout;
    and a connection retried to an address that drops packets runs well past that timeout. A signal now ends the
    wait as it ends any other part of the job, and a wait still going :data:`_OVERRUN_S` past ``timeout_s`` raises
    ``late(...)``. The thread left waiting is a daemon: it ends with the process. Outside the main thread, which
    alone receives signals, ``work()`` runs where it is."""
    if threading.current_thread() is not threading.main_thread():
        return work()
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = work()
        except BaseException as err:  # noqa: BLE001 - raised again in the waiting thread
            done["error"] = err

    waiter = threading.Thread(target=run, name="mggcn-rendezvous", daemon=True)
    waiter.start()
    deadline = time.monotonic() + timeout_s + _OVERRUN_S
    while waiter.is_alive() and time.monotonic() < deadline:
        waiter.join(0.2)
    if waiter.is_alive():
        raise late(f"no answer after {timeout_s + _OVERRUN_S:g} s")
    if "error" in done:
        raise done["error"]
    return done["value"]


_ASK_S = 1.0  # how long a rank waits for rank 0 to answer a name that may be an earlier group's before reading again


def _fresh_prefix(store: Any, rank: int, world_size: int, timeout_s: float) -> str:
    """``mggcn-TOKEN``: a name for this group's keys that no earlier group on ``store`` had, the same on every rank.

    Rank 0 draws the token and posts it (``mggcn-leader``); that key may still hold an earlier group's token when
    another rank reads it (a restarted torchrun job reuses the store, and attempts count differently on different
    nodes, so no environment variable names the attempt). So each rank asks under the token it read, with a nonce of
    its own, and takes it only once rank 0 answers that nonce; rank 0 answers the asks under its token alone. The
    keys are named by the new token or nonce, which no earlier group wrote. A rank that gets no answer reads the
    token again, until ``timeout_s``: then a ``DistStoreError``, as a rendezvous that timed out raises."""
    if world_size == 1:
        return f"mggcn-{uuid.uuid4().hex}"
    if rank == 0:
        token = uuid.uuid4().hex
        store.set("mggcn-leader", token)
        for other in range(1, world_size):
            nonce = store.get(f"mggcn-ask/{token}/{other}").decode()  # waits at most the store's timeout
            store.set(f"mggcn-answer/{nonce}", token)
            _forget(store, f"mggcn-ask/{token}/{other}")
        return f"mggcn-{token}"
    # polled (store.wait would log each timeout in torch's C++ log), every 10 ms at first, then less often: a
    # thousand ranks waiting on rank 0's store must not flood it
    nonce, deadline, pause = uuid.uuid4().hex, time.monotonic() + timeout_s, 0.01
    while time.monotonic() < deadline:
        token = store.get("mggcn-leader").decode()
        if token not in _Joined.tokens:  # a group this process was in: rank 0 has not posted the new one yet
            store.set(f"mggcn-ask/{token}/{rank}", nonce)
            asked = time.monotonic()
            while time.monotonic() - asked < _ASK_S:
                if store.check([f"mggcn-answer/{nonce}"]):
                    _Joined.tokens.add(token)
                    _forget(store, f"mggcn-answer/{nonce}")
                    return f"mggcn-{token}"
                time.sleep(pause)
                pause = min(2 * pause, 0.1)
        else:
            time.sleep(pause)
            pause = min(2 * pause, 0.1)
    raise getattr(dist, "DistStoreError", RuntimeError)(
        f"rank {rank}: rank 0 did not name the group within {timeout_s:g} s")


_VERDICT_READ_S = 10.0  # how long rank 0 waits for the others to read a refusal before it goes on to raise it


def _roll_call(store: Any, rank: int, world_size: int, refusal: Exception | None) -> tuple | None:
    """Every rank's outcome of its checks, through the group's keys of ``store``: each rank posts its own (None, or
    its host and ``refusal`` as another rank can raise it), rank 0 reads them all and posts the verdict, the first
    refusal by rank as ``(rank, host, error)`` or None, which every rank returns. Rank 0's reads are one per rank,
    so a thousand ranks make a thousand requests of its store, not a million. Before it returns a refusal, rank 0
    waits (a few seconds at most) for the others to have read it: the store may be its own, and end with it."""
    mine = None if refusal is None else (socket.gethostname(), _sendable(refusal))
    if rank != 0:
        store.set(f"mggcn-outcome/{rank}", pickle.dumps(mine))
        verdict = pickle.loads(store.get("mggcn-verdict"))
        if verdict is not None:
            store.add("mggcn-verdict-read", 1)
        return verdict
    verdict = None if mine is None else (0, *mine)
    for other in range(1, world_size):
        outcome = pickle.loads(store.get(f"mggcn-outcome/{other}"))
        _forget(store, f"mggcn-outcome/{other}")
        if verdict is None and outcome is not None:
            verdict = (other, *outcome)
    store.set("mggcn-verdict", pickle.dumps(verdict))
    deadline = time.monotonic() + _VERDICT_READ_S
    while verdict is not None and store.add("mggcn-verdict-read", 0) < world_size - 1 \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    return verdict


def _forget(store: Any, key: str) -> None:
    """Delete ``key``: a store that outlives many jobs (torchrun's agent's) keeps no two keys per rank of each."""
    try:
        store.delete_key(key)
    except (RuntimeError, NotImplementedError, AttributeError):  # a store without deletion keeps it
        pass


def refuse_together(job: Any, failure: Exception | None) -> None:
    """Join torchrun's group once this rank has checked the ``job`` (``failure``: what its check raised, None if it
    passed) and learn every rank's outcome. Each rank checks on its own node (its files, its memory), before it
    joins: a rank whose check failed would end alone while the others waited out ``job.timeout_s`` to join it and
    then blamed a lost peer. Here the rank that failed returns, for its caller to raise its own error, once the
    others know it; they raise that error too (after a line naming the rank and its host), so that every node's log
    says why the job ended, at once. Returns when every rank's check passed."""
    if rank_environment()[1] == 1:
        return
    try:
        init_distributed(job.device, job.timeout_s, job.threads, getattr(job, "mmap_threshold", MMAP_THRESHOLD),
                         failure)
    except Exception:
        if failure is None:
            raise
        # its own error is the one to tell (told to the others, or the rendezvous could not be reached)


def _sendable(error: Exception) -> Exception:
    """``error`` as another rank can raise it: itself where it pickles and unpickles (mggcn's errors keep the option
    they name), else a RuntimeError with its words."""
    try:
        return pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - an exception class whose arguments do not round-trip
        return RuntimeError(f"{type(error).__name__}: {error}")


def _bind_gloo_off_loopback(local_rank: int) -> None:
    """A job over several hosts whose host name resolves to a loopback address: gloo bound there would tell the
    other hosts an address they cannot reach, and the job would wait out its timeout. Bind it to the interface
    toward the rendezvous host instead (:func:`mggcn.distributed.network.gloo_interface`), saying so once per
    host."""
    interface = gloo_interface()
    if interface is None:
        return
    os.environ[GLOO_IFNAME_ENV] = interface
    if local_rank == 0:
        print(f"mggcn: this host's name resolves to a loopback address; gloo uses {interface}, the interface toward "
              f"MASTER_ADDR (set {GLOO_IFNAME_ENV} to choose another)", file=sys.stderr, flush=True)


def shutdown(clean: bool = True) -> None:
    """Leave the process group that :func:`init_distributed` made. After a clean run all ranks meet first: gloo
    aborts a process that tears its group down while a peer still talks to it. After a failure no barrier (the
    peers may be gone). A group the caller had made before the job is the caller's: it is left as it is."""
    if not _Joined.group:
        _Joined.works.clear()  # the caller's group, which the caller destroys when it will: the job's buffers go now
        return
    _Joined.group = False
    if dist.is_available() and dist.is_initialized():
        try:
            if clean:
                dist.barrier()
        finally:  # a barrier that failed (a peer gone) still leaves the group: a next job makes its own
            if _GLOO_DESTROY_HOLDS_GIL and dist.get_backend() == "gloo":
                time.sleep(_WORKERS_SETTLE_S)  # with the GIL released: see _GLOO_DESTROY_HOLDS_GIL
            dist.destroy_process_group()
            _Joined.works.clear()


def all_reduce_sum(ctx: DistContext, tensor: torch.Tensor) -> torch.Tensor:
    """In-place sum over ranks; returns ``tensor``."""
    if ctx.world_size > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=ctx.group)
    return tensor


def all_reduce_max(ctx: DistContext, tensor: torch.Tensor) -> torch.Tensor:
    if ctx.world_size > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=ctx.group)
    return tensor


def all_reduce_min(ctx: DistContext, tensor: torch.Tensor) -> torch.Tensor:
    if ctx.world_size > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=ctx.group)
    return tensor


def all_gather_objects(ctx: DistContext, obj: Any) -> list[Any]:
    """Every rank's ``obj`` (small, picklable), in rank order."""
    if ctx.world_size == 1:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj, group=ctx.group)
    return out


def gather_objects(ctx: DistContext, obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` (picklable), in rank order, on rank 0; None on the others."""
    if ctx.world_size == 1:
        return [obj]
    out: list[Any] | None = [None] * ctx.world_size if ctx.is_main else None
    dist.gather_object(obj, out, dst=0, group=ctx.group)
    return out


def broadcast_object(ctx: DistContext, obj: Any) -> Any:
    """Rank 0's ``obj`` (picklable) on every rank; the other ranks' ``obj`` is not read."""
    if ctx.world_size == 1:
        return obj
    box = [obj if ctx.is_main else None]
    dist.broadcast_object_list(box, src=0, group=ctx.group)
    return box[0]


def all_gather_rows(ctx: DistContext, local: torch.Tensor) -> torch.Tensor:
    """Concatenate equally sized row blocks of every rank, in rank order (the partition's row order)."""
    if ctx.world_size == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(ctx.world_size)]
    dist.all_gather(parts, local.contiguous(), group=ctx.group)
    return torch.cat(parts)
