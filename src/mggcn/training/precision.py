"""``precision`` (:data:`~mggcn.config.PRECISIONS`): what a rank stores its features, activations and exchanged rows in.

* ``fp32`` — everything float32, exact (the default): the GEMMs are IEEE float32 even where the caller switched
  torch to TF32 (or, on a CPU, to bfloat16 passes) for its own work.
* ``tf32`` — float32 storage; the GEMMs may use the tensor cores' TF32 mode (CUDA only: a CPU has no such mode, so
  the setting is refused there rather than silently meaning fp32).
* ``bf16`` — the model computes in bfloat16: the features, Â's values, every activation and gradient of the epoch,
  and the rows the SpMMs exchange are bfloat16, halving the SpMM's bytes, the communication and the activation
  memory. The weights stay float32 (:class:`MasterWeights`): the model holds a bfloat16 copy that each update
  refreshes, its gradients are summed across ranks in float32, Adam's state is float32, and the loss reads the logits
  in float32. The GEMMs and SpMMs accumulate in float32 inside each kernel (cuBLAS, cuSPARSE, FBGEMM's bfloat16
  gather on a CPU) and round their result to bfloat16.

Torch's GEMM mode is a process-wide switch: it is set for the duration of the job, then restored as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from mggcn.nn.model import LayerStack
from mggcn.utils.errors import ConfigError

__all__ = ["compute_dtype", "check_precision_device", "precision_scope", "gemm_mode", "MasterWeights"]


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype features and activations are stored in under ``precision``."""
    return torch.bfloat16 if precision == "bf16" else torch.float32


def check_precision_device(precision: str, device: torch.device | str, option: str = "precision") -> None:
    """Refuse a precision the device cannot run, in one line naming both (and ``option``, the setting that asked
    for it)."""
    kind = torch.device(device).type
    if precision == "tf32" and kind != "cuda":
        raise ConfigError(f"{option} tf32 runs the GEMMs on CUDA tensor cores; the device is {kind}: use fp32 "
                          "(or bf16)", option)


@contextlib.contextmanager
def precision_scope(precision: str, device: torch.device | str) -> Iterator[None]:
    """The process-wide math settings ``precision`` needs while it trains on ``device``: torch's float32 GEMMs in
    TF32 on CUDA for tf32, else in IEEE float32 (a caller's TF32, or bfloat16 passes on a CPU, would make fp32
    inexact), restored after."""
    check_precision_device(precision, device)
    with gemm_mode(tf32=precision == "tf32"):
        yield


@contextlib.contextmanager
def gemm_mode(tf32: bool) -> Iterator[None]:
    """Torch's float32 GEMMs in TF32 on CUDA (``tf32``) or in IEEE float32 everywhere for the duration, then as they
    were. From torch 2.9 each backend has a switch of its own (``fp32_precision``), and the older process-wide one
    (``get_float32_matmul_precision``) cannot be read once a caller set those: the newer are used where they
    exist."""
    backends = [b for b in (torch.backends.cuda.matmul, getattr(torch.backends.mkldnn, "matmul", None))
                if hasattr(b, "fp32_precision")]
    if not backends:
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if tf32 else "highest")  # "high": TF32 on CUDA, float32 on a CPU
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(before)
        return
    saved = [b.fp32_precision for b in backends]
    for b in backends:
        b.fp32_precision = "tf32" if tf32 and b is torch.backends.cuda.matmul else "ieee"
    try:
        yield
    finally:
        for b, value in zip(backends, saved):
            b.fp32_precision = value


class MasterWeights:
    """The float32 weights of a model that computes in a lower precision.

    Made from a float32 ``model``, which it then casts to ``dtype``: :meth:`parameters` are the float32 copies the
    optimizer updates; after a backward, :meth:`gradients_from_model` brings the model's gradients over (in float32,
    so that the sum across ranks and Adam run in float32), and after the update :meth:`update_model` writes the new
    weights into the model. :meth:`state_dict`, :meth:`load_state_dict` and :meth:`pyg_state_dict` read and write the
    float32 weights, so checkpoints, early stopping and saved models are the same as a float32 run's.
    """

    def __init__(self, model: LayerStack, dtype: torch.dtype) -> None:
        self.model = model
        self.names = [name for name, _ in model.named_parameters()]
        self.params = [p.detach().clone() for p in model.parameters()]
        for p in self.params:
            p.grad = torch.zeros_like(p)
        model.to(dtype)

    def parameters(self) -> list[torch.Tensor]:
        return self.params

    def gradients_from_model(self) -> None:
        for master, p in zip(self.params, self.model.parameters(), strict=True):
            if p.grad is None:
                master.grad.zero_()
            else:
                master.grad.copy_(p.grad)
                p.grad = None

    @torch.no_grad()
    def update_model(self) -> None:
        for master, p in zip(self.params, self.model.parameters(), strict=True):
            p.copy_(master)

    def state_dict(self) -> dict[str, torch.Tensor]:
        masters = dict(zip(self.names, self.params, strict=True))
        return {k: masters[k] if k in masters else (v.float() if v.is_floating_point() else v)
                for k, v in self.model.state_dict().items()}

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)
        for name, master in zip(self.names, self.params, strict=True):
            master.copy_(state[name])

    def pyg_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}
