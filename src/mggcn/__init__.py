"""mggcn: full-batch GCN training across several GPUs or processes, the MG-GCN way.

Python API: ``mggcn.train(...)`` returns a ``TrainedModel``; the layers run on their own in one process as
``GCN`` / ``GCNLayer`` with ``adjacency_operator``. See ``mggcn.api``.

The package is laid out by layer, lowest first:

- ``mggcn.utils``        timing, progress, units, the process settings a worker changes
- ``mggcn.data``         the graph, dataset specs, synthetic and built-in graphs, file formats, prepared datasets
- ``mggcn.nn``           normalization, layers and the order policy, the loss, the buffer workspace
- ``mggcn.distributed``  the distributed context, partitioning, the staged SpMM and its transports, launching
- ``mggcn.training``     the trainer, checkpoints, the train and predict jobs and their outputs
- ``mggcn.tools``        the command line, bench, plan, roofline, report

Importing ``mggcn`` loads no torch: the names below are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "Graph": "mggcn.data.graph",
    "GraphError": "mggcn.data.graph",
    "SPLITS": "mggcn.data.graph",
    "GCN": "mggcn.nn.model",
    "GCNLayer": "mggcn.nn.model",
    "TrainConfig": "mggcn.config",
    "TrainedModel": "mggcn.api",
    "adjacency_operator": "mggcn.api",
    "train": "mggcn.api",
}

__all__ = ["GCN", "GCNLayer", "Graph", "GraphError", "SPLITS", "TrainConfig", "TrainedModel", "adjacency_operator",
           "train"]

if TYPE_CHECKING:  # pragma: no cover
    from mggcn.api import TrainedModel, adjacency_operator, train
    from mggcn.config import TrainConfig
    from mggcn.data.graph import SPLITS, Graph, GraphError
    from mggcn.nn.model import GCN, GCNLayer


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mggcn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
