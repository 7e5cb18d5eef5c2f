"""GraphSAGE (mean aggregation, root weight) as plain single-device PyTorch, on the GCN's distributed SpMM.

Layer l computes PyG ``SAGEConv``'s

.. math::
    \\mathbf{h}_i' = \\mathbf{W}_l \\cdot \\mathrm{mean}_{j \\to i} \\mathbf{h}_j + \\mathbf{b}
    + \\mathbf{W}_r \\cdot \\mathbf{h}_i,

that is ``H' = Â·H·W_lᵀ + b + H·W_rᵀ`` with ``Â = D_in^-1 A`` (:func:`mggcn.nn.norm.normalize` with
``"in-mean"``: the mean over the in-edges as given, no self loop added; a vertex without in-edges aggregates to 0).
The aggregation is the one SpMM of the layer (``adj``, as for :class:`~mggcn.nn.model.GCN`); the root term
``H·W_rᵀ`` is a GEMM on this rank's rows, with no communication.

The order policy (:func:`~mggcn.nn.model.aggregate_first`) picks ``(Â·H)·W_lᵀ`` or ``Â·(H·W_lᵀ)`` per layer as for
the GCN, and the first layer's ``Â·X`` is computed once when there is no input dropout (the root term ``X·W_rᵀ``
still costs a GEMM per epoch).

Buffers: as the GCN's (:mod:`mggcn.nn.model`), plus one ``root`` buffer shared by all layers for ``H·W_rᵀ`` (read
once, by the addition). The layer's input feeds two branches (the aggregation and the root GEMM), so the two
gradients that reach it are fresh tensors, summed by autograd; writing them on the workspace's two alternating
gradient buffers could overwrite the gradient one branch still reads.

Parameter names match PyG: ``convs.{l}.lin_l.weight`` [d_out, d_in], ``convs.{l}.lin_l.bias`` [d_out],
``convs.{l}.lin_r.weight`` [d_out, d_in]: the state dict loads into
``torch_geometric.nn.models.GraphSAGE(d_0, hidden, num_layers, d_L)``.

Legend: m = rows of this rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mggcn.nn.functional import _TimedLinear
from mggcn.nn.model import (
    Adj,
    BranchedStack,
    aggregate_first,
    check_order,
    glorot_linear,
    plan_branched_backward,
)
from mggcn.nn.workspace import BufferWalk, Workspace
from mggcn.utils.timing import NULL_TIMER, PhaseTimer

__all__ = ["SAGELayer", "GraphSAGE"]


class SAGELayer(nn.Module):
    r"""One GraphSAGE layer ``Â·H·W_lᵀ + b + H·W_rᵀ`` with ``Â = D_in^-1 A`` (PyG ``SAGEConv``, mean aggregation,
    root weight, no projection, no normalization).

    Args:
        in_dim: ``d_in``. out_dim: ``d_out``.
        first: the layer reads the input features (no input gradient needed).
        order: ``auto`` (:func:`~mggcn.nn.model.aggregate_first`), ``aggregate-first`` or ``transform-first``.
        bias: ``lin_l`` adds a learnable bias (default True).
        generator: draw ``W_l`` then ``W_r`` from it (:func:`~mggcn.nn.model.glorot_linear`; :class:`GraphSAGE`
            does); None: as ``torch.nn.Linear`` does.

    Shapes: ``h`` [m, d_in] -> [m, d_out].
    """

    def __init__(self, in_dim: int, out_dim: int, first: bool = False, order: str = "auto", bias: bool = True,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        check_order(order)
        self.lin_l = glorot_linear(in_dim, out_dim, bias, generator)
        self.lin_r = glorot_linear(in_dim, out_dim, False, generator)
        self.first = first
        self.aggregate_first = aggregate_first(in_dim, out_dim, first, order)

    def forward(self, h: torch.Tensor, adj: Adj, timer: PhaseTimer = NULL_TIMER,
                h_aggregated: torch.Tensor | None = None, workspace: Workspace | None = None, key: str = "",
                output_in_workspace: bool = False) -> torch.Tensor:
        """``h_aggregated`` is a precomputed ``Â·h`` (no SpMM runs); the other arguments as
        :meth:`mggcn.nn.model.GCNLayer.forward`."""
        ws = workspace
        out = (ws, f"out {key}") if ws is not None and output_in_workspace else None
        w_l, bias, w_r = self.lin_l.weight, self.lin_l.bias, self.lin_r.weight
        if h_aggregated is not None or self.aggregate_first:
            h_agg = h_aggregated
            if h_agg is None:
                h_agg = adj(h, out=None if ws is None else (ws, f"A.H {key}"), grad_ws=None)
            z = _TimedLinear.apply(h_agg, w_l, bias, timer, out, ws)
        else:
            hw = _TimedLinear.apply(h, w_l, None, timer, None if ws is None else (ws, "H.W"), None)
            z = adj(hw, out=out, grad_ws=ws)
            if bias is not None:
                z = z.add_(bias)
        root = _TimedLinear.apply(h, w_r, None, timer, None if ws is None else (ws, "root"), None)
        return z.add_(root)


class GraphSAGE(BranchedStack):
    """A stack of :class:`SAGELayer`, σ between layers, logits out (PyG's ``GraphSAGE`` model).

    ``dims``, ``activation``, ``dropout``, ``input_dropout`` and ``reuse_buffers``: as
    :class:`~mggcn.nn.model.LayerStack`.

    Args:
        order: the order policy, see :func:`~mggcn.nn.model.aggregate_first`.
        bias: every layer adds a learnable bias (default True).
        seed: initialization seed (Glorot weights, zero biases); the same seed gives the same weights on every rank.
    """

    kind = "sage"
    pyg_name = pyg_label = "GraphSAGE"
    layer_weight = "convs.{}.lin_l.weight"

    @classmethod
    def operator(cls, norm: str) -> str:
        return "in-mean"

    @classmethod
    def linears(cls, d_in: int, d_out: int) -> list[tuple[int, int, bool]]:
        return [(d_in, d_out, False), (d_in, d_out, False)]  # W_l, W_r

    @classmethod
    def num_parameters(cls, dims: Sequence[int], train_eps: bool = False) -> int:
        return sum(2 * a * b + b for a, b in zip(dims[:-1], dims[1:], strict=True))  # W_l, b, W_r

    @classmethod
    def plan_after_gemm(cls, walk: BufferWalk, i: int, d_out: int) -> None:
        walk.take("root", d_out)  # H·W_rᵀ, read once by the addition

    @classmethod
    def plan_backward(cls, walk: BufferWalk, i: int, d_in: int, d_out: int, agg: bool, grad: str,
                      train_eps: bool) -> str:
        return plan_branched_backward(walk, i, d_in, d_out, agg, grad, root=True)

    def __init__(self, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
                 input_dropout: float = 0.0, order: str = "auto", bias: bool = True, seed: int = 0,
                 reuse_buffers: bool = True) -> None:
        super().__init__(dims, activation, dropout, input_dropout, reuse_buffers, seed=seed)
        generator = torch.Generator().manual_seed(seed)  # the layers draw their weights from it in turn
        self.convs.extend(SAGELayer(dims[i], dims[i + 1], first=(i == 0), order=order, bias=bias, generator=generator)
                          for i in range(len(dims) - 1))
