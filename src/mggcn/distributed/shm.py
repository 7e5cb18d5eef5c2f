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
the memory goes back to the system with the last mapping. Their pages are reserved when they are created
(``posix_fallocate``), so a too small ``/dev/shm`` fails there with a clear error, never with a SIGBUS mid-epoch.

Memory: the outboxes take the place of gloo's two receive buffers, the same 2·m·d per rank. A rank's RSS also counts
the pages of the other ranks' outboxes it reads; :meth:`SharedOutboxes.peer_resident_bytes` says how many (the
bench subtracts them: they are counted where they are owned).
"""

from __future__ import annotations

import os
import socket
import uuid

import torch
import torch.distributed as dist

from mggcn.config import SHM_MODES
from mggcn.distributed.context import DistContext, all_gather_objects

__all__ = ["SHM_MODES", "SHM_DIR", "SharedOutboxes", "ShmUnavailable", "host_outboxes", "one_host"]

SHM_DIR = "/dev/shm"  # MGGCN_SHM_DIR overrides it (e.g. a container whose /dev/shm is 64 MB)


class ShmUnavailable(RuntimeError):
    """Shared-memory broadcast was asked for (``--shm on``) but cannot be set up; the message says why."""


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
        in ``directory`` (default ``$MGGCN_SHM_DIR`` or :data:`SHM_DIR`). Raises :class:`ShmUnavailable` on every
        rank, naming the rank and the file, when any rank cannot; nothing is left in ``directory`` then."""
        directory = directory or os.environ.get("MGGCN_SHM_DIR") or SHM_DIR
        prefix = all_gather_objects(ctx, f"mggcn-outbox-{uuid.uuid4().hex[:12]}")[0]
        paths = [os.path.join(directory, f"{prefix}-{r}") for r in range(ctx.world_size)]
        numel = 2 * rows * width
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        mine, error = paths[ctx.rank], None
        try:
            fd = os.open(mine, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.posix_fallocate(fd, 0, max(nbytes, 1))
            finally:
                os.close(fd)
        except OSError as e:
            error = (f"cannot create {nbytes / 2**20:.0f} MiB of shared memory in {mine}: {e.strerror} "
                     "(set MGGCN_SHM_DIR to a larger tmpfs, or --shm off)")
        maps: list[torch.Tensor] = []
        try:
            error = _agree(ctx, error)
            if error is None:
                try:
                    maps = [torch.from_file(p, shared=True, size=max(numel, 1), dtype=dtype) for p in paths]
                except RuntimeError as e:
                    error = f"cannot map the outboxes in {directory}: {str(e).splitlines()[0]}"
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
                    head = line.split(maxsplit=6)
                    if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                        counting = len(head) >= 6 and os.path.basename(head[5]) in peers
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
        return dist.broadcast(self._tokens[stage], src=stage, group=self.ctx.group, async_op=True)


def host_outboxes(ctx: DistContext, mode: str, rows: int, width: int,
                  dtype: torch.dtype) -> tuple[SharedOutboxes | None, str]:
    """The outboxes a job's broadcast SpMM uses under ``--shm mode`` (collective), None for the backend's own
    broadcast; and how the broadcast goes, in words (the job's log says it).

    ``auto``: shared memory where every rank is a CPU process of this host and it can be set up (else gloo, and the
    words say why); ``on``: shared memory or :class:`ShmUnavailable`; ``off``: gloo. A world of one needs neither.
    """
    if mode not in SHM_MODES:
        raise ValueError(f"--shm must be one of {', '.join(SHM_MODES)}, got '{mode}'")
    backend = "nccl" if ctx.device.type == "cuda" else "gloo"
    if ctx.world_size == 1:
        return None, "one rank"
    if mode == "off":
        return None, backend
    if not one_host(ctx):
        if mode == "on":
            raise ShmUnavailable("--shm on needs every rank on one host and on the CPU")
        return None, backend
    try:
        return SharedOutboxes.create(ctx, rows, width, dtype), "shared memory"
    except ShmUnavailable as e:
        if mode == "on":
            raise
        return None, f"{backend}, no shared memory: {e}"
