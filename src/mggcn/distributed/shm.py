"""The staged broadcast through shared memory, for CPU ranks that all run on one host.

gloo broadcasts over loopback TCP: every stage copies the root's rows through the kernel into each receiver's buffer,
at 2-3 GB/s, and keeps the cores it shares with the multiplies busy doing it. Ranks of one host can instead read
each other's rows where they lie: each rank owns two *outboxes* (rows × width, in ``/dev/shm``) that every rank of the
job maps. In stage j, rank j copies its rows ``B_j`` into its outbox once and broadcasts a one-byte token; the
other ranks wait for the token, then multiply ``Â[i, j]`` straight out of rank j's outbox — one copy per SpMM on the
root, none on the receivers.

Why two outboxes, used by alternate SpMM calls, are enough: rank j rewrites the outbox of call k in call k+2, after
it has received every rank's token of call k+1, and each rank sends that token only after it finished call k's
multiplies, the last reads of call k's outboxes. The tokens go through gloo, so the kernel orders the root's copy
before every receiver's read.

The files are unlinked as soon as every rank has mapped them: nothing is left in ``/dev/shm`` when a rank dies, and
the memory goes back to the system with the last mapping. Each file starts with a header (the job's nonce and the
owner's rank) that every peer checks before using it, and a peer's file is only opened, never created: ranks that
do not see the same files (two containers, a private ``/dev/shm``) find out when the job starts and fall back to
gloo (``--shm auto``) or stop (``--shm on``), instead of multiplying zeros. Their pages are reserved when they are
created (``posix_fallocate``), so a too small ``/dev/shm`` fails there with a clear error, never with a SIGBUS
mid-epoch.

Memory: the outboxes take the place of gloo's two receive buffers, the same 2·m·d per rank. A rank's RSS also counts
the pages of the other ranks' outboxes it reads; :meth:`SharedOutboxes.peer_resident_bytes` says how many (the
bench subtracts them: they are counted where they are owned).
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
import time
import uuid
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mggcn.config import SHM_MODES
from mggcn.distributed.context import DistContext, all_gather_objects, held_until_shutdown
from mggcn.utils.errors import ConfigError
from mggcn.utils.units import format_bytes

__all__ = ["SHM_MODES", "SHM_DIR", "SharedOutboxes", "ShmUnavailable", "Transport", "host_outboxes", "one_host",
           "sweep_outboxes"]

SHM_DIR = "/dev/shm"  # MGGCN_SHM_DIR overrides it (e.g. a container whose /dev/shm is 64 MB)


class ShmUnavailable(ConfigError):
    """Shared-memory broadcast was asked for (``shm="on"``) but cannot be set up; the message says why, and names
    the setting ``option`` (``shm=off``) where another value of it would do (the command line names its flag). A
    setting that cannot be used here, as any :class:`ConfigError`: the command line exits 2, whether the launcher's
    workers or torchrun's ranks found it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "shm")


def _host_id() -> str:
    """This host's identity: its name and, on Linux, the boot id (two containers may share a host name)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def one_host(ctx: DistContext) -> bool:
    """Whether every rank of the job runs on this host, on the CPU (collective: every rank must call it)."""
    return len(set(all_gather_objects(ctx, (_host_id(), ctx.device.type == "cpu")))) == 1 and \
        ctx.device.type == "cpu"


def _agree(ctx: DistContext, error: str | None) -> str | None:
    """Every rank's error so far, the first one named with its rank (collective)."""
    errors = [(r, e) for r, e in enumerate(all_gather_objects(ctx, error)) if e]
    return None if not errors else f"rank {errors[0][0]}: {errors[0][1]}"


_PREFIX = "mggcn-outbox-"
_PAUSE_ENV = "MGGCN_TEST_SHM_PAUSE_S"  # tests only: seconds between creating an outbox and the handshake


def _proc_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat's 22nd field), or None where it does not
    run (or there is no /proc). With the pid it names one process for as long as the system runs: a pid is reused
    only by a process that started later."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) ": comm may hold spaces and parentheses
    return fields[19].decode() if len(fields) > 19 else None


def _owner_tag() -> str | None:
    """Who owns an outbox this process creates, as its file's name says it: the boot id (this kernel), the pid
    namespace (what the pid means), the pid and its start time; None without Linux's /proc."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip().replace("-", "")
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    start = _proc_start(os.getpid())
    return None if start is None else f"{boot}.{namespace}.{os.getpid()}.{start}"


def sweep_outboxes(directory: str | None = None) -> list[str]:
    """Remove the outboxes in ``directory`` (default ``$MGGCN_SHM_DIR`` or :data:`SHM_DIR`) whose owner process is
    gone: a rank killed between creating its outbox and the handshake, after which every rank unlinks it, leaves it
    behind. Only what is provably this user's and dead goes: a file named by :func:`_owner_tag` with this kernel's
    boot id and this pid namespace, owned by this user, whose pid runs no more or runs a process started at another
    time (the pid was reused). Files of other containers, namespaces, users or formats stay. Returns the paths
    removed."""
    directory = directory or os.environ.get("MGGCN_SHM_DIR") or SHM_DIR
    mine = _owner_tag()
    try:
        names = [n for n in os.listdir(directory) if n.startswith(_PREFIX)]
    except OSError:
        return []
    if mine is None or not names:
        return []
    boot, namespace = mine.split(".")[:2]
    removed = []
    for name in names:
        owner = name[len(_PREFIX):].split("-")[0].split(".")
        if len(owner) != 4 or owner[:2] != [boot, namespace] or not owner[2].isdigit():
            continue
        if _proc_start(int(owner[2])) == owner[3]:
            continue  # its owner runs: a job's outbox in its handshake
        path = os.path.join(directory, name)
        try:
            if os.lstat(path).st_uid == os.getuid():
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass  # gone already (another rank swept it), or not ours to remove
    return removed


HEADER_BYTES = 4096  # an outbox file's header: a page, so that the rows after it stay page-aligned
_MAGIC = b"mggcn-outbox-v1\n"
_HEADER = struct.Struct(f"<{len(_MAGIC)}s16sqq")  # magic, the job's nonce, the owner's rank, the file's size


def _header(nonce: bytes, rank: int, size: int) -> bytes:
    return _HEADER.pack(_MAGIC, nonce, rank, size)


def _map_outbox(path: str, nonce: bytes, rank: int, size: int, numel: int, dtype: torch.dtype) -> torch.Tensor:
    """``rank``'s outbox at ``path``, mapped shared, after checking that its header is this job's and ``rank``'s.
    Opens the file without creating it: a missing outbox is an error, never an empty file of zeros."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as e:
        raise ShmUnavailable(f"cannot open rank {rank}'s outbox {path}: {e.strerror} (the ranks do not share "
                             f"{os.path.dirname(path)}: a private /dev/shm, or MGGCN_SHM_DIR differs)") from None
    try:
        header = os.pread(fd, _HEADER.size, 0)
        found = _HEADER.unpack(header) if len(header) == _HEADER.size else None
        if found is None or found[0] != _MAGIC or found[1] != nonce or found[2] != rank or found[3] != size:
            raise ShmUnavailable(f"{path} is not rank {rank}'s outbox of this job (its header names another job, "
                                 "rank or size: the ranks do not see the same files)")
        if os.fstat(fd).st_size != size:
            raise ShmUnavailable(f"{path}: {os.fstat(fd).st_size} bytes, expected {size}")
        area = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as e:
        raise ShmUnavailable(f"cannot map rank {rank}'s outbox {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    # the tensor keeps the mapping alive; the mapping outlives the file, which is unlinked once all have mapped it
    return torch.frombuffer(area, dtype=dtype, count=numel, offset=HEADER_BYTES)


class SharedOutboxes:
    """Every rank's two outboxes of ``rows × width`` elements, mapped in this process; build with :meth:`create`.

    ``outbox(rank, call, width)`` is the (rows × width) view of ``rank``'s outbox for SpMM call number ``call``;
    ``token(stage)`` the one-element tensor stage ``stage`` broadcasts.
    """

    def __init__(self, ctx: DistContext, rows: int, width: int, dtype: torch.dtype, maps: list[torch.Tensor],
                 paths: list[str]) -> None:
        self.ctx, self.rows, self.width, self.dtype = ctx, rows, width, dtype
        self._maps, self._paths = maps, paths
        self._tokens = [torch.zeros(1, dtype=torch.uint8) for _ in range(ctx.world_size)]
        self.calls = 0  # SpMM calls served so far (their parity picks the outbox)

    @classmethod
    def create(cls, ctx: DistContext, rows: int, width: int, dtype: torch.dtype,
               directory: str | None = None) -> SharedOutboxes:
        """Create, size and map every rank's outboxes (collective; every rank on this host, see :func:`one_host`)
        in ``directory`` (default ``$MGGCN_SHM_DIR`` or :data:`SHM_DIR`), and prove that the ranks share them:
        each rank reads every peer's header (:data:`HEADER_BYTES` before its rows: the job's nonce, drawn by rank 0,
        and the owner's rank). A peer's file is only ever opened, never created, so ranks that do not see the same
        directory (a private ``/dev/shm``, another ``MGGCN_SHM_DIR``) fail here instead of multiplying zeros.

        Raises :class:`ShmUnavailable` on every rank, naming the rank and the file, when any rank cannot create,
        find or verify an outbox; nothing is left in ``directory`` then."""
        directory = directory or os.environ.get("MGGCN_SHM_DIR") or SHM_DIR
        sweep_outboxes(directory)  # what killed ranks of earlier jobs left
        nonce, owners = zip(*all_gather_objects(ctx, (uuid.uuid4().bytes, _owner_tag() or "-")))
        nonce = nonce[0]  # rank 0's: the job's
        paths = [os.path.join(directory, f"{_PREFIX}{owner}-{nonce.hex()[:12]}-{r}") for r, owner in enumerate(owners)]
        numel = max(2 * rows * width, 1)
        size = HEADER_BYTES + numel * torch.empty((), dtype=dtype).element_size()
        mine, error = paths[ctx.rank], None
        try:
            fd = os.open(mine, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
                os.pwrite(fd, _header(nonce, ctx.rank, size), 0)
            finally:
                os.close(fd)
            if os.environ.get(_PAUSE_ENV):
                time.sleep(float(os.environ[_PAUSE_ENV]))
        except OSError as e:
            error = (f"cannot create {format_bytes(size)} of shared memory in {mine}: {e.strerror} "
                     "(set MGGCN_SHM_DIR to a larger tmpfs, or shm=off)")
        maps: list[torch.Tensor] = []
        try:
            error = _agree(ctx, error)
            if error is None:
                try:
                    maps = [_map_outbox(p, nonce, r, size, numel, dtype) for r, p in enumerate(paths)]
                except ShmUnavailable as e:
                    error = str(e)
                error = _agree(ctx, error)
        finally:
            if os.path.exists(mine):
                os.unlink(mine)  # the others have mapped it (or given up): the mappings keep it alive
        all_gather_objects(ctx, None)  # every rank has unlinked its file: none is left once this returns
        if error is not None:
            raise ShmUnavailable(error)
        return cls(ctx, rows, width, dtype, maps, paths)

    def fits(self, b: torch.Tensor) -> bool:
        return b.shape[0] == self.rows and b.shape[1] <= self.width and b.dtype == self.dtype

    def outbox(self, rank: int, call: int, width: int) -> torch.Tensor:
        half = self.rows * self.width
        start = (call % 2) * half
        return self._maps[rank][start: start + self.rows * width].view(self.rows, width)

    def token(self, stage: int) -> torch.Tensor:
        return self._tokens[stage]

    @property
    def nbytes(self) -> int:
        """The bytes of this rank's own two outboxes."""
        return self._maps[self.ctx.rank].numel() * self._maps[self.ctx.rank].element_size()

    def peer_resident_bytes(self) -> int | None:
        """Resident bytes of the other ranks' outboxes in this process (from ``/proc/self/smaps``; None without
        it). They are in this process's RSS although their owners hold them."""
        peers = {os.path.basename(p) for r, p in enumerate(self._paths) if r != self.ctx.rank}
        total, counting = 0, False
        try:
            with open("/proc/self/smaps") as f:
                for line in f:
                    head = line.split(maxsplit=5)  # a mapping's path is the rest of its line (spaces kept)
                    if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                        path = head[5].rstrip("\n").removesuffix(" (deleted)") if len(head) >= 6 else ""
                        counting = os.path.basename(path) in peers
                    elif counting and head[0] == "Rss:":
                        total += int(head[1]) * 1024
        except OSError:
            return None
        return total

    def publish(self, b: torch.Tensor, call: int) -> None:
        """Copy this rank's rows into its outbox of ``call``."""
        self.outbox(self.ctx.rank, call, b.shape[1]).copy_(b)

    def signal(self, stage: int) -> dist.Work:
        """Stage ``stage``'s token: the root's rows are in its outbox once this completes."""
        work = dist.broadcast(self._tokens[stage], src=stage, group=self.ctx.group, async_op=True)
        return held_until_shutdown(self.ctx, work)


@dataclass(frozen=True)
class Transport:
    """How a job's broadcast goes: ``name`` (``shared memory``, ``gloo``, ``nccl``, ``one rank``), and ``fallback``,
    why shared memory could not be used when ``auto`` asked for it (None otherwise)."""

    name: str
    fallback: str | None = None

    def __str__(self) -> str:
        return self.name if self.fallback is None else f"{self.name}, no shared memory: {self.fallback}"


def host_outboxes(ctx: DistContext, mode: str, rows: int, width: int,
                  dtype: torch.dtype) -> tuple[SharedOutboxes | None, Transport]:
    """The outboxes a job's broadcast SpMM uses under ``--shm mode`` (collective), None for the backend's own
    broadcast; and how the broadcast goes (the job's log says it).

    ``auto``: shared memory where every rank is a CPU process of this host and it can be set up (else gloo, and the
    words say why); ``on``: shared memory or :class:`ShmUnavailable`; ``off``: gloo. A world of one needs neither.
    """
    if mode not in SHM_MODES:
        raise ConfigError(f"shm must be one of {', '.join(SHM_MODES)}, got '{mode}'", "shm")
    backend = ctx.backend  # the context decided it (gloo on CPU, NCCL on CUDA)
    if ctx.world_size == 1:
        return None, Transport("one rank")
    if mode == "off":
        return None, Transport(backend)
    if not one_host(ctx):
        if mode == "on":
            raise ShmUnavailable("shm on needs every rank on one host and on the CPU")
        return None, Transport(backend)
    try:
        return SharedOutboxes.create(ctx, rows, width, dtype), Transport("shared memory")
    except ShmUnavailable as e:
        if mode == "on":
            raise
        return None, Transport(backend, fallback=str(e))
