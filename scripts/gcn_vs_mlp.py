"""Test accuracy of the GCN and of an MLP (the same trainer, same features, no edges) on a dataset spec.

    python scripts/gcn_vs_mlp.py [SPEC]        # default: the built-in synthetic graph
"""

import sys

import numpy as np

from mggcn.config import TrainConfig
from mggcn.data.datasets import InMemoryDataset, load_graph
from mggcn.data.graph import Graph
from mggcn.distributed.context import DistContext
from mggcn.training.trainer import shard_for, train_shard


def main(spec: str = "synthetic") -> None:
    graph = load_graph(spec)
    no_edges = Graph(graph.num_nodes, np.zeros((2, 0), dtype=np.int64), graph.x, graph.y, graph.masks,
                     graph.num_classes, name="mlp")
    for name, g in (("GCN", graph), ("MLP", no_edges)):
        cfg = TrainConfig(trace_epoch=0)
        history = train_shard(DistContext(), shard_for(cfg, InMemoryDataset(g), DistContext()), cfg).history
        best = max(history, key=lambda r: r["val_acc"])
        print(f"{name}: test accuracy {history[-1]['test_acc']:.4f} after {len(history)} epochs, "
              f"{best['test_acc']:.4f} at the best validation epoch")


if __name__ == "__main__":
    main(*sys.argv[1:])
