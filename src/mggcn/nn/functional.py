"""The kernels of the models' layers (:mod:`mggcn.nn.model`, :mod:`mggcn.nn.sage`, :mod:`mggcn.nn.gin`): autograd
functions that keep only what their backward reads and put their results and gradients where a
:class:`~mggcn.nn.workspace.Workspace` says — a GEMM timed as the ``gemm`` phase (:class:`_TimedLinear`), σ in place
(:class:`_InplaceActivation`, :func:`activate`), a GEMM, σ and the next GEMM a block of rows at a time
(:class:`_GemmActGemm`), dropout from a seeded generator (:func:`dropout`). The block sizes they run at on each
device, and whether a CPU's threads take the blocks as they are free (:mod:`mggcn.kernels.shared`), are
:mod:`mggcn.kernels.policy`'s.
Why the buffers are shared this way: :mod:`mggcn.nn.model`'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from mggcn.config import NORMS
from mggcn.kernels.policy import chain_rows, cpu_kernels, mask_chunk_rows, shared_threads, weight_grad_parts
from mggcn.kernels.shared import run_items
from mggcn.nn.workspace import GradSpec, OutSpec, Workspace, grad_destination
from mggcn.utils.autograd import once_differentiable
from mggcn.utils.timing import PhaseTimer

__all__ = ["dropout", "weight_grad", "activate", "sigma_", "check_inputs", "LEAKY_SLOPE"]

LEAKY_SLOPE = 0.01  # LeakyReLU's negative slope, torch's and PyG's default
ALIGN_ELEMENTS = 16  # float32 elements in 64 bytes, the alignment of torch's CPU allocations


def _grad_over_activation(products: Sequence[tuple[torch.Tensor, torch.Tensor]], h: torch.Tensor, sigma: str,
                          ws: Workspace) -> torch.Tensor:
    """``∂H = (Σ_k grad_k · W_k) ⊙ σ'`` (``products``: the pairs ``(grad_k, W_k)``, one per GEMM that read ``H``)
    written over ``H``, the output of σ (``sigma``, an activation's name): a block of rows at a time, the GEMMs' rows
    go to the workspace buffer ``sigma block`` (:func:`~mggcn.kernels.policy.mask_chunk_rows` rows, in cache), then
    σ's backward — the very aten op of :class:`_InplaceActivation`'s backward — reads those rows of ``H``, still σ's
    output, and writes the gradient over them. Nothing else of σ is kept: ``H`` is read once and written once.
    With shared kernels (:func:`~mggcn.kernels.policy.shared_threads`) each thread takes blocks of its own share of
    the buffer."""
    m, d = h.shape
    threads = shared_threads(h.device)
    buffer_rows = mask_chunk_rows(m, d, h.device)
    flat = ws.take("sigma block", buffer_rows, d, h).view(-1)
    # each worker's share starts 64 bytes apart (the buffer's start is aligned so): MKL's GEMM may round another way
    # into an output aligned otherwise, and an item's result must not depend on the worker that takes it
    share = flat.numel() // threads // ALIGN_ELEMENTS * ALIGN_ELEMENTS
    rows = share // d if threads > 1 else buffer_rows
    if rows == 0:
        threads, rows = 1, buffer_rows
    (grad, weight), *more = products

    def step(k: int, worker: int) -> None:
        r = k * rows
        c = min(rows, m - r)
        block = flat[worker * share: worker * share + c * d].view(c, d)
        part, out = torch.mm(grad[r:r + c], weight, out=block), h[r:r + c]
        for g, w in more:
            part.addmm_(g[r:r + c], w)
        _activation_backward(part, out, sigma, out)

    run_items(-(-m // rows), step, threads)
    return h


def sigma_(z: torch.Tensor, sigma: str) -> torch.Tensor:
    """σ (``sigma``: ``relu``, ``leaky_relu`` of slope :data:`LEAKY_SLOPE` or ``elu`` of α 1) over ``z``, in place."""
    if sigma == "relu":
        return z.relu_()
    return F.elu_(z) if sigma == "elu" else F.leaky_relu_(z, LEAKY_SLOPE)


def _activation_backward(grad: torch.Tensor, out: torch.Tensor, sigma: str,
                         dest: torch.Tensor | None = None) -> torch.Tensor:
    """σ's backward from its output ``out`` into ``dest`` (None: a new tensor). Each σ is increasing with its output
    of the input's sign, so the output tells its derivative: 1 where positive; else 0 (ReLU), the slope (LeakyReLU),
    or ``out + 1`` (ELU: ``exp(x) = elu(x) + 1``)."""
    if sigma == "relu":
        op, args = torch.ops.aten.threshold_backward, (out, 0.0)
    elif sigma == "elu":  # α, scale, input scale, is_result
        op, args = torch.ops.aten.elu_backward, (1.0, 1.0, 1.0, True, out)
    else:
        op, args = torch.ops.aten.leaky_relu_backward, (out, LEAKY_SLOPE, True)
    return op(grad, *args) if dest is None else op.grad_input(grad, *args, grad_input=dest)


def input_grad(products: Sequence[tuple[torch.Tensor, torch.Tensor]], h: torch.Tensor, sigma: str | None,
               grad_ws: GradSpec, avoid: torch.Tensor) -> torch.Tensor:
    """``∂H = Σ_k grad_k · W_k``, the gradient of an input ``H`` that the GEMMs ``H·W_kᵀ`` read, as one tensor:
    with ``sigma`` (σ's name; ``H`` is that σ's output, read by nothing else) σ's backward included, over ``H``
    (:func:`_grad_over_activation`, on the workspace ``grad_ws``); else where ``grad_ws`` says
    (:func:`~mggcn.nn.workspace.grad_destination`; ``avoid``: the incoming gradient, which the producer reads)."""
    if sigma is not None:
        return _grad_over_activation(products, h, sigma, grad_ws)
    (grad, weight), *more = products
    dest = grad_destination(grad_ws, grad.shape[0], weight.shape[1], like=grad, avoid=avoid)
    total = grad @ weight if dest is None else torch.mm(grad, weight, out=dest)
    for g, w in more:
        total.addmm_(g, w)
    return total


def masked_grad(grad: torch.Tensor, weight: torch.Tensor, h: torch.Tensor, sigma: str,
                ws: Workspace | None) -> torch.Tensor:
    """``(grad · W) ⊙ σ'`` for ``H = σ(...)`` read by the GEMM ``H·Wᵀ`` alone (a layer's inner σ): over ``H`` with a
    workspace (:func:`_grad_over_activation`), else a new tensor (``H`` may be read by another backward)."""
    if ws is not None:
        return _grad_over_activation([(grad, weight)], h, sigma, ws)
    return _activation_backward(grad @ weight, h, sigma)


class _Dropout(torch.autograd.Function):
    """Dropout whose mask comes from ``generator``, never from torch's global RNG. The same bits as
    ``F.dropout`` after ``torch.manual_seed`` with the generator's seed (the mask is ``bernoulli(1 - p) / (1 - p)``,
    drawn and applied the same way); like it, backward keeps only a bool mask."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
        noise = torch.empty_like(h).bernoulli_(1 - p, generator=generator)
        noise.div_(1 - p)
        ctx.p = p
        ctx.save_for_backward(noise != 0)
        return h * noise

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return grad * keep.to(grad.dtype).div_(1 - ctx.p), None, None


def dropout(h: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Zero each entry of ``h`` with probability ``p`` and scale the rest by ``1 / (1 - p)``, drawing the mask
    from ``generator`` (on ``h``'s device)."""
    return _Dropout.apply(h, p, generator)


def _linear(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """``h·Wᵀ (+ b)`` into ``out`` (None: a new tensor), the bias added inside the GEMM."""
    return torch.mm(h, weight.t(), out=out) if bias is None else torch.addmm(bias, h, weight.t(), out=out)


class _TimedLinear(torch.autograd.Function):
    """``H·Wᵀ (+ b)`` whose forward and backward GEMMs are accounted as the ``gemm`` phase.

    Keeps ``H`` (read by ``∂W``) and ``W`` (a parameter, no extra memory); the bias is fused into the GEMM.
    ``out`` puts the result on a workspace buffer; ``grad_ws`` (a :data:`~mggcn.nn.workspace.GradSpec`) says where
    ``∂H`` goes. With ``sigma`` (σ's name), ``H`` is the output of a σ whose backward this one does (see
    :func:`activate`): ``∂W`` first, then ``∂H`` over ``H`` itself, times σ' that the values ``H`` had tell, a block
    of rows at a time (:func:`_grad_over_activation`, through a block buffer on the workspace ``grad_ws``), so one
    ``m × d`` buffer holds the activation and then its gradient.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,  # type: ignore[override]
                timer: PhaseTimer, out: OutSpec, grad_ws: GradSpec, sigma: str | None = None) -> torch.Tensor:
        ctx.save_for_backward(h, weight)
        ctx.timer, ctx.grad_ws, ctx.sigma = timer, grad_ws, sigma
        dest = None if out is None else out[0].take(out[1], h.shape[0], weight.shape[0], h)
        with timer("gemm"):
            return _linear(h, weight, bias, dest)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        h, weight = ctx.saved_tensors
        with ctx.timer("gemm"):
            grad_h, grad_w, grad_b = _linear_backward(grad, h, weight, ctx.needs_input_grad[:3], ctx.grad_ws, ctx.sigma)
        return grad_h, grad_w, grad_b, None, None, None, None


def weight_grad(grad: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``gradᵀ·h`` (``∂W`` of ``h·Wᵀ``), a sum over the rows. On a CPU the rows are cut into parts whose partial
    products are then added: MKL's GEMM splits the small ``d_out × d_in`` result among the threads instead, and each
    of them then reads all of both operands. With ``shared`` kernels each part is an item the threads take as they
    are free (:func:`~mggcn.kernels.shared.run_items`), the same parts at any thread count; with ``static`` two parts
    per thread are multiplied by one ``bmm``. The sum is taken in another order than the GEMM's: float rounding
    apart, the same result. How many parts (none: the GEMM): :func:`~mggcn.kernels.policy.weight_grad_parts`."""
    rows = grad.shape[0]
    parts = weight_grad_parts(rows, grad.shape[1] * h.shape[1] * grad.element_size(), grad.device)
    if parts < 2 or not grad.is_contiguous() or not h.is_contiguous():
        return grad.t() @ h
    if cpu_kernels() == "shared":
        step = -(-rows // parts)
        partial = grad.new_empty(-(-rows // step), grad.shape[1], h.shape[1])

        def item(k: int, _worker: int) -> None:
            torch.mm(grad[k * step:(k + 1) * step].t(), h[k * step:(k + 1) * step], out=partial[k])

        run_items(partial.shape[0], item, shared_threads(grad.device))
        return partial.sum(0)
    n = rows - rows % parts
    a = grad[:n].view(parts, n // parts, grad.shape[1]).transpose(1, 2)
    out = torch.bmm(a, h[:n].view(parts, n // parts, h.shape[1])).sum(0)
    return out if n == rows else out.addmm_(grad[n:].t(), h[n:])


def _linear_backward(grad: torch.Tensor, h: torch.Tensor, weight: torch.Tensor, needs: Sequence[bool],
                     grad_ws: GradSpec, sigma: str | None):
    """``∂H, ∂W, ∂b`` of ``H·Wᵀ + b`` (each None unless ``needs`` it, in that order): ``∂W`` first, since ``∂H`` may
    overwrite ``H`` (with ``sigma``, see :class:`_TimedLinear`); ``∂H`` goes where ``grad_ws`` says."""
    grad_h = grad_w = grad_b = None
    if needs[1]:
        grad_w = weight_grad(grad, h)
    if needs[2]:
        grad_b = grad.sum(0)
    if needs[0]:
        grad_h = input_grad([(grad, weight)], h, sigma, grad_ws, avoid=grad)
    return grad_h, grad_w, grad_b


class _InplaceActivation(torch.autograd.Function):
    """σ (``sigma``: :func:`sigma_`) overwriting a layer's fresh output; backward overwrites the gradient.

    Keeps only the output (all that backward reads: :func:`_activation_backward`). The incoming gradient is always
    one the next layer's backward (its GEMM, SpMM or dropout) made for it alone, a new tensor or a workspace gradient
    buffer, read by nothing else, so it is reused for σ's gradient.
    ``deferred``: the GEMM that reads the output does this backward too (:class:`_TimedLinear` with ``sigma``);
    then nothing is kept here and the gradient passes through.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, sigma: str, deferred: bool) -> torch.Tensor:  # type: ignore[override]
        ctx.mark_dirty(z)
        ctx.sigma, ctx.deferred = sigma, deferred
        out = sigma_(z, sigma)
        if not deferred:
            ctx.save_for_backward(out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        if ctx.deferred:
            return grad, None, None
        (out,) = ctx.saved_tensors
        grad = grad.contiguous()
        return _activation_backward(grad, out, ctx.sigma, grad), None, None


def hooked_module(module: torch.nn.Module) -> bool:
    """Whether a hook (the module's own or a global one, forward or backward) would see ``module``'s calls: a
    forward hook's output is kept by user code, and a full backward hook makes the output a view that σ must not
    change in place; so a model runs the module by itself (never fused with the next), gives it a tensor of its own
    and runs σ on a copy."""
    hooks = torch.nn.modules.module
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks or hooks._global_forward_hooks or hooks._global_forward_pre_hooks
                or hooks._global_backward_hooks or hooks._global_backward_pre_hooks)


def activate(z: torch.Tensor, activation: str, deferred: bool = False) -> torch.Tensor:
    """σ of a layer's output ``z``, in place (``z`` must be a fresh tensor that nothing else reads).

    ``deferred``: the only reader of the result is a GCN layer's GEMM given ``input_activation=activation``, which
    does σ's backward itself, writing the gradient over the result (see :class:`_TimedLinear`)."""
    if torch.is_grad_enabled() and z.requires_grad:
        return _InplaceActivation.apply(z, activation, deferred)
    return sigma_(z, activation)


class _GemmActGemm(torch.autograd.Function):
    """``σ(A·W₁ᵀ + b₁)·W₂ᵀ``: a layer that ends with its GEMM, σ, and the next layer's GEMM (a layer that multiplies
    first), a block of :func:`chain_rows` rows at a time, so that σ and the second GEMM read each block of the first
    GEMM's output while it is in cache instead of in two more passes over memory. σ's output goes on the workspace
    buffer ``out {key}`` (the first layer's output, as without the fusion) and is kept for backward, which is the two
    GEMMs' own backwards: the second one's ``∂W₂`` and its ``∂H`` with σ's backward over σ's output
    (:func:`_linear_backward` with σ), then the first one's ``∂W₁``, ``∂b₁`` and, where ``A`` needs one,
    ``∂A`` (where ``grad_ws`` says)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None,  # type: ignore[override]
                w2: torch.Tensor, sigma: str, timer: PhaseTimer, ws: Workspace, key: str,
                grad_ws: GradSpec) -> torch.Tensor:
        m, d1, d2 = a.shape[0], w1.shape[0], w2.shape[0]
        h, hw = ws.take(f"out {key}", m, d1, a), ws.take("H.W", m, d2, a)
        rows = chain_rows(m, max(d1, d2), a.device)

        def step(k: int, _worker: int) -> None:
            r = k * rows
            block = _linear(a[r:r + rows], w1, b1, h[r:r + rows])
            sigma_(block, sigma)
            torch.mm(block, w2.t(), out=hw[r:r + rows])

        with timer("gemm"):
            run_items(-(-m // rows), step, shared_threads(a.device))
        ctx.save_for_backward(a, w1, h, w2)
        ctx.sigma, ctx.timer, ctx.ws, ctx.grad_ws = sigma, timer, ws, grad_ws
        return hw

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        a, w1, h, w2 = ctx.saved_tensors
        needs = ctx.needs_input_grad
        grad_a = grad_w1 = grad_b1 = None
        with ctx.timer("gemm"):
            grad_h, grad_w2, _ = _linear_backward(grad, h, w2, (any(needs[:3]), needs[3], False), ctx.ws, ctx.sigma)
            if grad_h is not None:
                grad_a, grad_w1, grad_b1 = _linear_backward(grad_h, a, w1, needs[:3], ctx.grad_ws, None)
        return grad_a, grad_w1, grad_b1, grad_w2, None, None, None, None, None


def check_width(h: torch.Tensor, in_dim: int) -> None:
    """A layer's input (or its precomputed Â·h) of another width is said as the model says it, not as a GEMM's
    shapes."""
    if h.dim() != 2 or h.shape[1] != in_dim:
        raise ValueError(f"h must be a [m, {in_dim}] tensor (the layer's in_dim), got {list(h.shape)}")


def check_inputs(x: torch.Tensor, adj: Callable[..., torch.Tensor], features: int, dtype: torch.dtype,
                 model: type | None = None) -> None:
    """One line for what a PyG user gives first: ``model(x, edge_index)`` (a tensor is no operator), rows that are
    not the operator's (the SpMM would read only its own), features of another width or dtype, and an operator
    that says it applies another Â (its ``norm``) than the ``model`` class aggregates with (a GraphSAGE given the
    GCN's Â would run, on the wrong numbers)."""
    if isinstance(adj, torch.Tensor) or not callable(adj):
        raise TypeError(f"adj must be an operator, e.g. mggcn.adjacency_operator(edge_index, num_nodes), not a "
                        f"{type(adj).__name__}" + (" (an edge_index is not one)" if isinstance(adj, torch.Tensor)
                                                   else ""))
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != features:
        shape = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a [n, {features}] tensor (the model's input width), got {shape}")
    rows = getattr(adj, "rows", None)
    if isinstance(rows, int) and x.shape[0] != rows:
        raise ValueError(f"x has {x.shape[0]} rows but adj is over {rows} vertices")
    if x.dtype != dtype:
        raise ValueError(f"x must be {str(dtype).removeprefix('torch.')} (the model's dtype), got "
                         f"{str(x.dtype).removeprefix('torch.')}; give x.to({dtype})")
    norm = getattr(adj, "norm", None)
    if model is not None and isinstance(norm, str) and norm not in (wanted := [model.operator(n) for n in NORMS]):
        raise ValueError(f"{model.__name__} aggregates with the operator of norm={wanted[0]!r}, not {norm!r}: give "
                         f"mggcn.adjacency_operator(edge_index, num_nodes, norm={wanted[0]!r})")
