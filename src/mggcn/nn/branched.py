"""What GraphSAGE (:mod:`mggcn.nn.sage`) and GIN (:mod:`mggcn.nn.gin`) share beyond the GCN's
:class:`~mggcn.nn.model.LayerStack`: a layer whose input feeds two branches (the aggregation and a GEMM or a local
term of the input) is one autograd function that runs its SpMMs itself through the operator's ``run``, so that the
input gets one gradient, on the workspace; and a PyG counterpart with one hidden width.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mggcn.nn.model import Adj, LayerStack, plan_input_grad
from mggcn.nn.workspace import BufferWalk

__all__ = ["BranchedStack", "check_operator", "pyg_model_convs"]


def check_operator(adj: Adj) -> None:
    """A layer that runs its SpMMs itself calls the operator's ``run`` (and reads its ``rows``): ``adj`` must be an
    :class:`~mggcn.distributed.spmm.SpMMOperator`, or a :class:`~mggcn.nn.model.TrainRowsAdj` of one."""
    if not hasattr(adj, "run"):
        raise TypeError(f"this layer runs its SpMMs itself: adj must be an SpMMOperator, got {type(adj).__name__}")


def pyg_model_convs(name: str, dims: Sequence[int], state: dict[str, torch.Tensor]) -> nn.ModuleList:
    """The layers of ``torch_geometric.nn.models.<name>(d_0, d_1, L, d_L)`` (one hidden width) holding ``state``."""
    from torch_geometric.nn import models

    model = getattr(models, name)(dims[0], dims[1], len(dims) - 1, dims[-1])
    model.load_state_dict(state, strict=True)
    return model.convs


class BranchedStack(LayerStack):
    """What GraphSAGE and GIN share beyond :class:`LayerStack`: layers whose input feeds two branches (so forward
    reads ``x`` even when given ``Â·x``, but for a GIN with a fixed ε), each layer one autograd node that gives its
    input one gradient, an Â without self loops, and a PyG counterpart in ``torch_geometric.nn.models`` with one
    hidden width whose layers aggregate first, on unweighted edges."""

    takes_input_activation = True
    options: tuple[str, ...] = ("batch_norm",)

    @classmethod
    def plan_output_backward(cls, walk: BufferWalk, i: int, d_out: int, agg: bool, grad: str,
                             train_eps: bool) -> None:
        """Layer ``i``'s tensors in backward between its output's gradient ``grad`` and its aggregation's (GIN: its
        MLP's σ)."""

    @classmethod
    def plan_backward(cls, walk: BufferWalk, i: int, d_in: int, d_out: int, agg: bool, grad: str,
                      train_eps: bool) -> str:
        # The layer's node reads the incoming gradient until ∂H is whole (its second branch's GEMM), so ∂H goes on
        # the gradient buffer that does not hold it; the aggregation's gradient goes over Â·H (aggregating first)
        # or over H·W (multiplying first), as the GCN's.
        cls.plan_output_backward(walk, i, d_out, agg, grad, train_eps)
        transform = None if agg else cls.plan_transform_buffer(i, train_eps)
        if transform is not None:
            walk.take(transform, d_out)
        if i == 0:
            return grad
        if agg:
            return walk.take_grad(d_in, avoid=grad)
        return plan_input_grad(walk, i, d_in, avoid=grad)

    pyg_one_hidden_width = True
    self_loops = False

    @classmethod
    def reads_input(cls, train_eps: bool = False) -> bool:
        return True

    @classmethod
    def pyg_spmm_widths(cls, d_in: int, d_out: int, first: bool) -> list[int]:
        return [d_in] * (1 if first else 2)  # aggregate first; the first layer needs no Âᵀ·∂

    @classmethod
    def pyg_edge_weight(cls, edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, None]:
        return edge_index, None

    @classmethod
    def pyg_convs(cls, dims: Sequence[int], state: dict[str, torch.Tensor], normalize: bool) -> nn.ModuleList:
        return pyg_model_convs(cls.pyg_name, dims, state)
