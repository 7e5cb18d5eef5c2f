"""The models mggcn trains (``--model``), by name: what each builds and which PyG model its weights load into.

=========  ==================================  ======================  =========================================
``gcn``    :class:`~mggcn.nn.model.GCN`        Â by ``--norm``         ``torch_geometric.nn.models.GCN``
``sage``   :class:`~mggcn.nn.sage.GraphSAGE`   ``D_in^-1 A``           ``torch_geometric.nn.models.GraphSAGE``
``gin``    :class:`~mggcn.nn.gin.GIN`          ``A`` (+ ``(1+ε) I``)   ``torch_geometric.nn.models.GIN``
``gat``    :class:`~mggcn.nn.gat.GAT`          attention on ``A + I``  ``torch_geometric.nn.models.GAT``
=========  ==================================  ======================  =========================================
"""

from __future__ import annotations

from collections.abc import Sequence

from mggcn.config import MODELS, TrainConfig
from mggcn.nn.gat import GAT
from mggcn.nn.gin import GIN
from mggcn.nn.model import GCN, LayerStack
from mggcn.nn.sage import GraphSAGE
from mggcn.utils.errors import ConfigError

__all__ = ["MODEL_TYPES", "model_type", "register_model", "make_model", "model_options", "models_taking",
           "num_parameters", "operator_for", "option_keyword"]

# Every model by its --model name. A model class carries what the rest of mggcn knows about it (its Â, PyG
# counterpart, parameters, GEMMs, the plan's buffers: see LayerStack), so registering it is all a new model needs.
MODEL_TYPES: dict[str, type[LayerStack]] = {cls.kind: cls for cls in (GCN, GraphSAGE, GIN, GAT)}
assert tuple(MODEL_TYPES) == MODELS  # the names the command line offers (mggcn.config, which loads no torch)


def register_model(cls: type[LayerStack]) -> type[LayerStack]:
    """Make the model class ``cls`` trainable by its name ``cls.kind`` (``mggcn.train(model=...)``,
    :class:`~mggcn.config.TrainConfig`); usable as a class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, LayerStack) and cls.kind):
        raise ValueError(f"{cls!r}: a model is a LayerStack subclass with a kind (its name)")
    MODEL_TYPES[cls.kind] = cls
    return cls


def model_type(kind: str) -> type[LayerStack]:
    """The class of the model named ``kind``."""
    try:
        return MODEL_TYPES[kind]
    except (KeyError, TypeError):
        raise ConfigError(f"model must be one of {', '.join(MODEL_TYPES)}, got '{kind}'", "model") from None


def operator_for(model: str, norm: str = "sym") -> str:
    """The Â that ``model`` aggregates with: the GCN's ``norm``, GraphSAGE's ``in-mean``, GIN's ``sum``, GAT's
    ``gat``."""
    return model_type(model).operator(norm)


def make_model(kind: str, dims: Sequence[int], activation: str = "relu", dropout: float = 0.0,
               input_dropout: float = 0.0, order: str = "auto", seed: int = 0, train_eps: bool = False,
               reuse_buffers: bool = True, **options) -> LayerStack:
    """The model ``kind`` (a name of :data:`MODEL_TYPES`) with layer sizes ``dims``; ``train_eps`` is GIN's only,
    ``options`` the model's own others (GAT's ``heads``, ``attention_dropout``: :func:`model_options`)."""
    return model_type(kind).build(dims, train_eps=train_eps, activation=activation, dropout=dropout,
                                  input_dropout=input_dropout, order=order, seed=seed, reuse_buffers=reuse_buffers,
                                  **options)


def models_taking(option: str) -> str:
    """The names of the models whose own settings include ``option`` (a message's "is for model ...")."""
    return ", ".join(kind for kind, cls in MODEL_TYPES.items() if option in cls.options)


def option_keyword(option: str) -> str:
    """The :func:`make_model` keyword of the model's own setting ``option`` (a :class:`~mggcn.config.TrainConfig`
    field): GIN's ``gin_`` settings drop the prefix."""
    return option.removeprefix("gin_")


def model_options(cfg: TrainConfig) -> dict:
    """The settings of ``cfg`` that only its model takes (its class's ``options``), as :func:`make_model`'s
    keywords (:func:`option_keyword`: GIN's ``gin_train_eps`` is its ``train_eps``)."""
    return {option_keyword(o): getattr(cfg, o) for o in model_type(cfg.model).options}


def num_parameters(dims: Sequence[int], model: str = "gcn", train_eps: bool = False, **options) -> int:
    """Trained parameters of ``model`` with layer sizes ``dims`` (:meth:`~mggcn.nn.model.LayerStack.num_parameters`:
    per layer ``d_in·d_out + d_out`` for the GCN, ``2·d_in·d_out + d_out`` for GraphSAGE (W_l, b, W_r),
    ``d_in·d_out + d_out² + 2·d_out`` (+ 1 for a learnable ε) for GIN's MLP, ``(d_in + 3)·d_out`` for a hidden GAT
    layer and ``(d_in + 2)·H·C + C`` for its last); ``options``: the model's own (GAT's ``heads``, the norms)."""
    norms = 2 * sum(dims[1:-1]) if options.pop("batch_norm", False) else 0  # γ and β after each hidden layer
    return model_type(model).num_parameters(dims, train_eps, **options) + norms
