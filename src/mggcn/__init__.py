"""mggcn: full-batch GCN training across several GPUs or processes, the MG-GCN way.

Python API: :func:`train` (returns a :class:`TrainedModel`), and the layers on their own in one process:
:class:`GCN`, :class:`GCNLayer` with :func:`adjacency_operator`. See :mod:`mggcn.api`.
"""

from mggcn.graph import SPLITS, Graph, GraphError
from mggcn.model import GCN, GCNLayer
from mggcn.train import TrainConfig

# Bound last: importing the API imports the submodule ``mggcn.train``, and ``mggcn.train`` must be the function.
from mggcn.api import TrainedModel, adjacency_operator, train  # noqa: E402

__all__ = ["Graph", "GraphError", "SPLITS", "GCN", "GCNLayer", "TrainConfig", "TrainedModel", "adjacency_operator",
           "train"]
__version__ = "0.1.0"
