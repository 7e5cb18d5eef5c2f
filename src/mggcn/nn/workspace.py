"""Tensors allocated once and reused every epoch: MG-GCN's per-layer and shared buffers, in PyTorch.

The model (:mod:`mggcn.nn.model`), the SpMM (:mod:`mggcn.distributed.spmm`) and the loss (:mod:`mggcn.nn.loss`) put what
they produce on named buffers of one :class:`Workspace` instead of new tensors, so that after the first epoch an epoch
allocates nothing of its size: no page faults for fresh memory, no allocator holding freed blocks, and a memory peak
that is the sum of the buffers (:mod:`mggcn.tools.plan` counts them).
"""

from __future__ import annotations

import weakref

import torch

__all__ = ["Workspace", "WorkspaceClaims", "OutSpec", "GradSpec", "grad_destination", "BufferWalk"]


class Workspace:
    """Named buffers, each allocated (or grown) on first use and reused by every later use.

    Besides the memory it saves, reuse saves time: a fresh multi-megabyte tensor is paid for in page faults every
    epoch (on a virtual machine about as long as the GEMM that fills it). :meth:`take` hands out ``[rows, width]``
    tensors on the buffer ``name`` (allocated, or grown, on first use); :meth:`take_grad` one on whichever of the
    two gradient buffers does not hold ``avoid`` (a gradient's producer reads the other one). A gradient may also go
    on the buffer of the tensor it is the gradient of, once backward no longer reads that tensor (MG-GCN's reuse of a
    layer's output buffer for its gradient): see :data:`GradSpec`.

    Every tensor handed out shares its buffer's storage AND version counter (it is ``detach()`` of a view), so
    when a buffer is overwritten while autograd still keeps an older tensor of it for backward, backward raises
    instead of computing with overwritten values. A model does not let that happen to a graph that may still be
    backpropagated: a forward made while one is (:class:`WorkspaceClaims`) runs on a workspace of its own.
    """

    GRAD = ("grad a", "grad b")

    def __init__(self) -> None:
        self._flat: dict[str, torch.Tensor] = {}

    def __getstate__(self) -> dict:
        return {}  # scratch: a copy or a pickle of a model starts without buffers, as a new model does

    def __setstate__(self, state: dict) -> None:
        self._flat = {}

    def take(self, name: str, rows: int, width: int, like: torch.Tensor,
             dtype: torch.dtype | None = None) -> torch.Tensor:
        """A ``[rows, width]`` tensor on the buffer ``name``, of ``like``'s device and dtype (or ``dtype``)."""
        numel, dtype = rows * width, like.dtype if dtype is None else dtype
        flat = self._flat.get(name)
        if flat is None or flat.numel() < numel or flat.dtype != dtype or flat.device != like.device:
            flat = self._flat[name] = torch.empty(numel, dtype=dtype, device=like.device)
        return flat[:numel].view(rows, width).detach()

    def take_grad(self, rows: int, width: int, like: torch.Tensor, avoid: torch.Tensor) -> torch.Tensor:
        return self.take(self.GRAD[1] if self.holds(self.GRAD[0], avoid) else self.GRAD[0], rows, width, like)

    def holds(self, name: str, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lies on the buffer ``name``."""
        flat = self._flat.get(name)
        return flat is not None and tensor.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()

    @property
    def sizes(self) -> dict[str, int]:
        """Bytes of each buffer."""
        return {name: f.numel() * f.element_size() for name, f in self._flat.items()}


class _Claim:
    """A forward's hold on its workspace: the node its logits' graph ends in (while that graph lives) and whether
    its backward has run."""

    def __init__(self) -> None:
        self.node: weakref.ref | None = None
        self.backpropagated = False

    @property
    def held(self) -> bool:
        return not self.backpropagated and self.node is not None and self.node() is not None


class _Hold(torch.autograd.Function):
    """The identity on the logits, whose graph node tells the logits' :class:`_Claim` that its graph lives and when
    its backward has run (the first of the model's backward, as it is the last of its forward)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, claim: _Claim) -> torch.Tensor:  # type: ignore[override]
        claim.node, ctx.claim = weakref.ref(ctx), claim
        return logits.detach()  # not a view: the caller may change the logits in place, as a layer's output

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        if ctx.claim.backpropagated:  # retain_graph=True, then another backward of the same forward
            raise RuntimeError(BACKPROPAGATED_ONCE)
        ctx.claim.backpropagated = True
        return grad, None


BACKPROPAGATED_ONCE = ("this forward's graph was backpropagated already: the model's backward writes gradients over "
                       "its forward's buffers, so a forward backpropagates once, retain_graph or not; for several "
                       "backward passes of one forward, build the model with reuse_buffers=False")


class WorkspaceClaims:
    """Which workspace each forward of a model writes on, so that two forward passes before one backward work as
    they do in torch: a graph that may still be backpropagated (its logits, or a loss of them, alive, and its
    backward not yet run) keeps its buffers, and a forward made meanwhile takes a workspace of its own, kept while
    such a graph holds it. Training (forward, backward, then forwards without autograd) only ever uses the model's
    own workspace, so its memory is what :mod:`mggcn.tools.plan` counts."""

    def __init__(self) -> None:
        self._claims: list[tuple[Workspace, _Claim]] = []

    def __getstate__(self) -> dict:
        return {}  # the graphs of this process's forwards: a copy or a pickle of the model has none

    def __setstate__(self, state: dict) -> None:
        self._claims = []

    def free(self, own: Workspace) -> Workspace:
        """A workspace no live graph holds: ``own`` where none does (other free ones are then let go), else a spare
        one, made if needed."""
        if not any(ws is own and claim.held for ws, claim in self._claims):
            self._claims = [(ws, claim) for ws, claim in self._claims if claim.held]
            return own
        spare = next((ws for ws, claim in self._claims if not claim.held), None)
        if spare is None:
            spare = Workspace()
            self._claims.append((spare, _Claim()))
        return spare

    def hold(self, ws: Workspace, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` (of a forward on ``ws``) with ``ws`` held while their graph may be backpropagated."""
        if not (torch.is_grad_enabled() and logits.requires_grad):
            return logits
        claim = _Claim()
        self._claims = [(w, c) for w, c in self._claims if w is not ws] + [(ws, claim)]
        return _Hold.apply(logits, claim)


OutSpec = tuple[Workspace, str] | None  # where a result goes: a workspace buffer, or None for a new tensor
# where a backward puts the gradient of its input: a workspace's alternating gradient buffers, one named buffer (the
# input's own, when nothing reads the input after this backward), or None for a new tensor
GradSpec = Workspace | tuple[Workspace, str] | None


def grad_destination(spec: GradSpec, rows: int, width: int, like: torch.Tensor,
                     avoid: torch.Tensor) -> torch.Tensor | None:
    """The ``[rows, width]`` tensor ``spec`` names for a gradient (None: the caller makes a new one); ``avoid`` is
    the tensor the producer reads (the incoming gradient), which a gradient buffer must not be."""
    if spec is None:
        return None
    if isinstance(spec, Workspace):
        return spec.take_grad(rows, width, like, avoid)
    dest = spec[0].take(spec[1], rows, width, like)
    if dest.data_ptr() == avoid.data_ptr():
        raise RuntimeError(f"the gradient buffer '{spec[1]}' holds the gradient it is computed from")
    return dest


FLOAT_BYTES = 4


class BufferWalk:
    """The bytes an epoch holds, followed tensor by tensor as the code allocates and drops them (what
    :func:`mggcn.tools.plan.activation_peak` walks, and each model's ``plan_*`` hooks describe): workspace buffers
    (``ws:`` names, each as large as its widest use, kept from one epoch to the next in ``ws``) and live tensors.

    ``peak`` and ``alive`` hold the largest total so far and what made it up.
    """

    def __init__(self, rows: int, ws: dict[str, int], device: str = "cpu", float_bytes: int = FLOAT_BYTES) -> None:
        self.rows, self.ws, self.device = rows, ws, device
        self.float_bytes = float_bytes  # bytes of an activation's element (precision: 4, or 2 in bfloat16)
        self.live: dict[str, int] = {}
        self.peak, self.alive = 0, {}

    def _note(self) -> None:
        total = sum(self.ws.values()) + sum(self.live.values())
        if total > self.peak:
            self.peak, self.alive = total, {**{f"ws:{k}": v for k, v in self.ws.items()}, **self.live}

    def alloc(self, name: str, width: int, item: int | None = None) -> str:
        """A new tensor ``[rows, width]`` of ``item`` bytes per element (default: an activation's)."""
        return self.alloc_bytes(name, self.rows * width * (self.float_bytes if item is None else item))

    def alloc_bytes(self, name: str, nbytes: int) -> str:
        """A new tensor (or several held together) of ``nbytes`` bytes, whatever its shape."""
        self.live[name] = nbytes
        self._note()
        return name

    def take(self, name: str, width: int, item: int | None = None, rows: int | None = None) -> str:
        """The workspace buffer ``name`` at ``[rows, width]`` (grown if narrower), ``item`` as :meth:`alloc`."""
        rows = self.rows if rows is None else rows
        self.ws[name] = max(self.ws.get(name, 0), rows * width * (self.float_bytes if item is None else item))
        self._note()
        return f"ws:{name}"

    def take_grad(self, width: int, avoid: str) -> str:
        """The gradient buffer that does not hold ``avoid`` (:meth:`Workspace.take_grad`)."""
        return self.take("grad b" if avoid == "ws:grad a" else "grad a", width)

    def free(self, *names: str) -> None:
        for name in names:
            self.live.pop(name, None)
