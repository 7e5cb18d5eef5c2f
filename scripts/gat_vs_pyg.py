"""One process, CPU: the epoch time (forward, loss, backward) of mggcn's GAT against PyG's GAT with the same weights
on a random graph, the two runs interleaved epoch by epoch so that a busy machine slows both alike.

    python scripts/gat_vs_pyg.py [--nodes 20000] [--edges 400000] [--features 128] [--hidden 64] [--heads 8]
                                 [--classes 40] [--epochs 6] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GAT as PygGAT

from mggcn.data.graph import Graph
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.distributed.spmm import local_adj
from mggcn.nn.gat import GAT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("nodes", 20_000), ("edges", 400_000), ("features", 128), ("hidden", 64), ("heads", 8),
                          ("classes", 40), ("epochs", 6), ("threads", 2)):
        p.add_argument(f"--{name}", type=int, default=default)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    n, rng = args.nodes, np.random.default_rng(0)
    edge_index = np.stack([rng.integers(0, n, args.edges), rng.integers(0, n, args.edges)])
    x = torch.from_numpy(rng.standard_normal((n, args.features)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, args.classes, n))
    masks = {"train": np.ones(n, bool), "val": np.zeros(n, bool), "test": np.zeros(n, bool)}
    graph = Graph(n, edge_index, x.numpy(), y.numpy(), masks, num_classes=args.classes, name="random")
    shard = build_shard(graph, make_partition(n, 1, ordering="none"), 0, "gat")
    adj = local_adj(shard.adj[0], shard.adj_t[0])
    model = GAT([args.features, args.hidden, args.classes], heads=args.heads)
    pyg = PygGAT(args.features, args.hidden, 2, args.classes, heads=args.heads)
    pyg.load_state_dict(model.pyg_state_dict(), strict=True)
    edges = torch.from_numpy(edge_index)
    runs = {"mggcn": (model, lambda: model(x, adj)), "pyg": (pyg, lambda: pyg(x, edges))}

    def epoch(name: str) -> tuple[float, float]:
        net, run = runs[name]
        net.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss = F.cross_entropy(run(), y)
        loss.backward()
        return time.perf_counter() - start, loss.item()

    first = {name: epoch(name)[1] for name in runs}  # a warm-up epoch each; the same weights give the same loss
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.epochs):
        for name in runs:
            times[name].append(epoch(name)[0])
    for name, ts in times.items():
        print(f"{name}: median {np.median(ts):.3f} s, min {min(ts):.3f} s per epoch (first loss {first[name]:.6f})")
    print(f"PyG / mggcn (medians): {np.median(times['pyg']) / np.median(times['mggcn']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
