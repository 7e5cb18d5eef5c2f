"""mggcn: full-batch GCN training across several GPUs or processes, the MG-GCN way.

Python API: ``mggcn.train(...)`` returns a ``TrainedModel``; the layers run on their own in one process as
``GCN`` / ``GCNLayer`` (``GraphSAGE``, ``GIN``, ``GAT``) with ``adjacency_operator``. See ``mggcn.api``.

The package is laid out by layer, lowest first; a module imports only from its own layer and the ones below it
(imports inside functions included), and no two modules import each other, even through others
(tests/test_layout.py checks both from the source):

- ``mggcn.config``       every training option, its default and its allowed values (no torch)
- ``mggcn.utils``        errors (ConfigError), units, timing, progress, and ``system``: the one module that changes
                         the process (allocator, threads, warning filters, signal handlers), only for a rank
- ``mggcn.data``         the graph, dataset specs and the arrays a rank reads its rows of, synthetic and built-in
                         graphs, file formats, prepared datasets (no torch)
- ``mggcn.kernels``      the local sparse kernels (CSR column tiles, the CPU gather kernel) and which runs on which
                         device
- ``mggcn.nn``           normalization, the models (GCN, GraphSAGE, GIN, GAT), their layers and the order policy
                         (with the SpMM widths it implies), dropout from a seeded generator, the loss, the buffer
                         workspace
- ``mggcn.distributed``  the distributed context (the run's device decisions), the parallel layout (who holds which
                         blocks, which exchange), partitioning (+ METIS) and the one shard builder, the SpMM operators
                         (staged broadcast, sparse exchange; shared-memory transport), launching
- ``mggcn.training``     the trainer, checkpoints, the train and predict jobs, their outputs (the one atomic writer)
- ``mggcn.tools``        the command line (one module per command), bench, plan, roofline, report
- ``mggcn.api``          ``mggcn.train`` and the layers on their own

Library code raises typed errors with plain messages (:class:`~mggcn.utils.errors.GraphError` for data,
:class:`~mggcn.utils.errors.ConfigError` for settings); only the command line names flags and chooses exit codes.

Importing ``mggcn`` loads no torch: the names below are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mggcn.config import __version__  # noqa: F401  (no torch: options and defaults only)

# public name -> module that defines it
_EXPORTS = {
    "ConfigError": "mggcn.utils.errors",
    "Graph": "mggcn.data.graph",
    "GraphError": "mggcn.utils.errors",
    "SPLITS": "mggcn.data.graph",
    "GCN": "mggcn.nn.model",
    "GCNLayer": "mggcn.nn.model",
    "GraphSAGE": "mggcn.nn.sage",
    "GIN": "mggcn.nn.gin",
    "GAT": "mggcn.nn.gat",
    "TrainConfig": "mggcn.config",
    "TrainedModel": "mggcn.api",
    "adjacency_operator": "mggcn.api",
    "train": "mggcn.api",
    "predict": "mggcn.training.predict",
}

__all__ = ["ConfigError", "GAT", "GCN", "GCNLayer", "GIN", "Graph", "GraphError", "GraphSAGE", "SPLITS",
           "TrainConfig", "TrainedModel", "adjacency_operator", "predict", "train"]

if TYPE_CHECKING:  # pragma: no cover
    from mggcn.api import TrainedModel, adjacency_operator, train
    from mggcn.config import TrainConfig
    from mggcn.data.graph import SPLITS, Graph
    from mggcn.nn.gat import GAT
    from mggcn.nn.gin import GIN
    from mggcn.nn.model import GCN, GCNLayer
    from mggcn.nn.sage import GraphSAGE
    from mggcn.training.predict import predict
    from mggcn.utils.errors import ConfigError, GraphError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mggcn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
