"""Tensors allocated once and reused every epoch: MG-GCN's per-layer and shared buffers, in PyTorch.

The model (:mod:`mggcn.nn.model`), the SpMM (:mod:`mggcn.distributed.spmm`) and the loss (:mod:`mggcn.nn.loss`) put what
they produce on named buffers of one :class:`Workspace` instead of new tensors, so that after the first epoch an epoch
allocates nothing of its size: no page faults for fresh memory, no allocator holding freed blocks, and a memory peak
that is the sum of the buffers (:mod:`mggcn.tools.plan` counts them).
"""

from __future__ import annotations

import torch

__all__ = ["Workspace", "OutSpec"]


class Workspace:
    """Named buffers, each allocated (or grown) on first use and reused by every later use.

    Besides the memory it saves, reuse saves time: a fresh multi-megabyte tensor is paid for in page faults every
    epoch (on a virtual machine about as long as the GEMM that fills it). :meth:`take` hands out ``[rows, width]``
    tensors on the buffer ``name`` (allocated, or grown, on first use); :meth:`take_grad` one on whichever of the
    two gradient buffers does not hold ``avoid`` (a gradient's producer reads the other one).

    Every tensor handed out shares its buffer's storage AND version counter (it is ``detach()`` of a view), so
    when a buffer is overwritten while autograd still keeps an older tensor of it for backward (two forward passes
    before one backward), backward raises instead of computing with overwritten values.
    """

    GRAD = ("grad a", "grad b")

    def __init__(self) -> None:
        self._flat: dict[str, torch.Tensor] = {}

    def take(self, name: str, rows: int, width: int, like: torch.Tensor) -> torch.Tensor:
        numel = rows * width
        flat = self._flat.get(name)
        if flat is None or flat.numel() < numel or flat.dtype != like.dtype or flat.device != like.device:
            flat = self._flat[name] = torch.empty(numel, dtype=like.dtype, device=like.device)
        return flat[:numel].view(rows, width).detach()

    def take_grad(self, rows: int, width: int, like: torch.Tensor, avoid: torch.Tensor) -> torch.Tensor:
        first = self._flat.get(self.GRAD[0])
        busy = first is not None and avoid.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        return self.take(self.GRAD[1] if busy else self.GRAD[0], rows, width, like)

    @property
    def sizes(self) -> dict[str, int]:
        """Bytes of each buffer."""
        return {name: f.numel() * f.element_size() for name, f in self._flat.items()}


OutSpec = tuple[Workspace, str] | None  # where a result goes: a workspace buffer, or None for a new tensor
