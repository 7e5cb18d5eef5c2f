"""Bytes moved per epoch and epoch time of each ``--comm`` / ``--partition`` combination on one dataset spec.

    python scripts/comm_volume.py [SPEC] [--nprocs 4] [--epochs 5] [--warmup 1]
        [--runs random:broadcast,metis:auto,...] [--hidden 128] [--out volume.json]

``mggcn bench`` builds its partitions from the vertex count alone (no METIS), so the volume lives here. Each
combination trains the same graph (generated once, passed to the workers) with the same model and seed in fresh
processes; reported: the median epoch time after the warm-up epochs, the bytes received per epoch summed over ranks
(``total``) and the most any rank received (``max rank``), the nonzero and row imbalance (max/mean over ranks) and
the cut (nonzeros of Â in off-diagonal blocks). Losses agree across combinations (the exchange is exact).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from mggcn.config import TrainConfig
from mggcn.data.datasets import InMemoryDataset, load_graph
from mggcn.distributed.context import init_distributed
from mggcn.distributed.launch import run_workers
from mggcn.distributed.parallel_layout import ParallelLayout
from mggcn.nn.models import operator_for
from mggcn.training.trainer import epoch_width, train_shard

DEFAULT_RUNS = "random:broadcast,random:sparse,random:auto,metis:broadcast,metis:sparse,metis:auto"


def volume_worker(graph, cfg: TrainConfig) -> dict:
    ctx = init_distributed("cpu", timeout_s=600)
    dataset = InMemoryDataset(graph)
    start = time.perf_counter()
    layout = ParallelLayout.of(cfg, ctx.world_size)
    part = layout.partition(dataset)
    partition_s = time.perf_counter() - start
    shard = layout.shard(dataset, ctx, operator_for(cfg.model, cfg.norm),
                         epoch_width(cfg, dataset.num_features, dataset.num_classes), part)
    history = train_shard(ctx, shard, cfg).history
    return {"history": history, "partition_s": partition_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", nargs="?", default="synthetic:n=100000,degree=20")
    ap.add_argument("--nprocs", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--runs", default=DEFAULT_RUNS, help="PARTITION:COMM pairs, comma-separated")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--out", default=None, help="also write the rows as JSON")
    args = ap.parse_args()
    graph = load_graph(args.spec)
    print(f"{args.spec}: {graph.num_nodes:,} vertices, {graph.num_edges:,} edges, P = {args.nprocs}")
    rows = []
    for pair in args.runs.split(","):
        partition, comm = pair.split(":")
        cfg = TrainConfig(hidden=(args.hidden,), epochs=args.warmup + args.epochs, partition=partition, comm=comm,
                          trace_epoch=0)
        result = run_workers(volume_worker, args.nprocs, (graph, cfg), timeout_s=3600)[0]
        timed = result["history"][args.warmup:]
        first = timed[0]
        row = {"partition": partition, "comm": comm, "epoch_s": statistics.median(r["epoch_s"] for r in timed),
               "total_bytes": first["total_bytes"], "max_recv_bytes": first["recv_bytes"],
               "nnz_imbalance": first["nnz_imbalance"], "rows_imbalance": first["rows_imbalance"],
               "cut_fraction": first["cut_fraction"], "partition_s": result["partition_s"],
               "final_loss": result["history"][-1]["loss"]}
        rows.append(row)
        print(f"{partition:>7} {comm:>9}: {row['epoch_s']:.3f} s/epoch, {row['total_bytes'] / 1e6:9.1f} MB/epoch "
              f"(max rank {row['max_recv_bytes'] / 1e6:.1f} MB), nnz max/mean {row['nnz_imbalance']:.3f}, "
              f"cut {100 * row['cut_fraction']:.1f}%, partition {row['partition_s']:.1f} s, "
              f"loss {row['final_loss']:.5f}", flush=True)
    base = next((r for r in rows if r["partition"] == "random" and r["comm"] == "broadcast"), None)
    if base is not None:
        for r in rows:
            print(f"{r['partition']}:{r['comm']} moves {100 * r['total_bytes'] / base['total_bytes']:.1f}% of "
                  f"random:broadcast, epoch time x{r['epoch_s'] / base['epoch_s']:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
