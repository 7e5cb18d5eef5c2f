"""The models mggcn trains (``--model``), by name: what each builds and which PyG model its weights load into.

=========  ==================================  ======================  =========================================
``gcn``    :class:`~mggcn.nn.model.GCN`        Â by ``--norm``         ``torch_geometric.nn.models.GCN``
``sage``   :class:`~mggcn.nn.sage.GraphSAGE`   ``D_in^-1 A``           ``torch_geometric.nn.models.GraphSAGE``
``gin``    :class:`~mggcn.nn.gin.GIN`          ``A`` (+ ``(1+ε) I``)   ``torch_geometric.nn.models.GIN``
=========  ==================================  ======================  =========================================
"""

from __future__ import annotations

from collections.abc import Sequence

from mggcn.config import MODELS, operator_for
from mggcn.nn.gin import GIN
from mggcn.nn.model import GCN, LayerStack
from mggcn.nn.sage import GraphSAGE
from mggcn.utils.errors import ConfigError

__all__ = ["MODELS", "PYG_MODELS", "make_model", "operator_for"]

PYG_MODELS = {"gcn": "GCN", "sage": "GraphSAGE", "gin": "GIN"}  # in torch_geometric.nn.models


def make_model(kind: str, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
               input_dropout: float = 0.0, order: str = "auto", seed: int = 0, train_eps: bool = False,
               reuse_buffers: bool = True) -> LayerStack:
    """The model ``kind`` (one of :data:`MODELS`) with layer sizes ``dims``; ``train_eps`` is GIN's only."""
    common = dict(activation=activation, dropout=dropout, input_dropout=input_dropout, order=order, seed=seed,
                  reuse_buffers=reuse_buffers)
    if kind == "gcn":
        return GCN(dims, **common)
    if kind == "sage":
        return GraphSAGE(dims, **common)
    if kind == "gin":
        return GIN(dims, train_eps=train_eps, **common)
    raise ConfigError(f"model must be one of {', '.join(MODELS)}, got '{kind}'", "model")
