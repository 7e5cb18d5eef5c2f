"""mggcn: full-batch GCN training across several GPUs or processes, the MG-GCN way."""

from mggcn.graph import SPLITS, Graph, GraphError

__all__ = ["Graph", "GraphError", "SPLITS"]
__version__ = "0.1.0"
