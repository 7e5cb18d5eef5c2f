"""The ``mggcn`` command.

Launch, on one machine (P local workers, gloo on CPU or one GPU each with NCCL)::

    mggcn train                                   # built-in synthetic graph, one process
    mggcn train synthetic:n=100000 --nprocs 4     # 4 local workers
    mggcn train DATA --format ogb --device cuda --nprocs 8

Under torchrun, one node or many (each process is a rank; ``--nprocs`` is not needed)::

    torchrun --nproc-per-node 4 -m mggcn train DATA --format ogb --device cuda
    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 -m mggcn train DATA --format ogb --device cuda
"""

from __future__ import annotations

import argparse
import os
import sys

from mggcn.datasets import DEFAULT_DATASET
from mggcn.graph import GraphError
from mggcn.model import ACTIVATIONS, ORDERS
from mggcn.norm import NORMS
from mggcn.partition import ORDERINGS
from mggcn.train import TrainConfig

__all__ = ["main", "build_parser"]

_DEFAULTS = TrainConfig()


class _Parser(argparse.ArgumentParser):
    """Errors in one line (and a pointer to -h), not the whole usage block."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 128,128, got '{text}'")
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"hidden sizes must be positive, got '{text}'")
    return sizes


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return value


def _add_train_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?", default=DEFAULT_DATASET,
                   help="synthetic[:n=...,classes=...], rmat:..., builtin:karate|digits, or a path with --format "
                        f"(default: {DEFAULT_DATASET})")
    p.add_argument("--format", dest="fmt", default=None, help="layout of a dataset path (see `mggcn prepare -h`)")
    p.add_argument("--features", default=None, help="mtx/edgelist: features .npy [n, F] (default: random)")
    p.add_argument("--labels", default=None, help="mtx/edgelist: labels .npy [n], -1 = unlabelled (default: random)")
    p.add_argument("--split", default=None,
                   help="mtx/edgelist: split .npy of 0/1/2/-1 (train/val/test/none) or .npz of masks "
                        "(default: random 50/25/25)")
    p.add_argument("--undirected", action="store_true", help="add the reverse of every edge")
    p.add_argument("--dedup", action="store_true", help="drop duplicate edges")
    p.add_argument("--nprocs", type=_positive_int, default=None,
                   help="local worker processes to start (default 1; not used under torchrun)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"),
                   help="cpu (gloo) or cuda (one GPU per rank, NCCL); auto picks cuda when visible (default cpu)")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="CPU threads per rank (default: cores / local ranks)")
    p.add_argument("--epochs", type=int, default=_DEFAULTS.epochs)
    p.add_argument("--hidden", type=_hidden, default=_DEFAULTS.hidden,
                   help="hidden layer sizes, e.g. 128,128 for a 3-layer GCN (default 128)")
    p.add_argument("--lr", type=float, default=_DEFAULTS.lr)
    p.add_argument("--weight-decay", type=float, default=_DEFAULTS.weight_decay)
    p.add_argument("--dropout", type=float, default=_DEFAULTS.dropout, help="dropout between layers")
    p.add_argument("--input-dropout", type=float, default=_DEFAULTS.input_dropout,
                   help="dropout on the input features (0 lets Â·X be computed once)")
    p.add_argument("--activation", choices=ACTIVATIONS, default=_DEFAULTS.activation)
    p.add_argument("--norm", choices=NORMS, default=_DEFAULTS.norm,
                   help="sym: D^-1/2 (A+I) D^-1/2 (PyG GCNConv); mean: D^-1 (A+I) (original MG-GCN)")
    p.add_argument("--order", choices=ORDERS, default=_DEFAULTS.order,
                   help="per layer, aggregate before or after multiplying by W (auto: the narrower SpMM)")
    p.add_argument("--no-overlap", dest="overlap", action="store_false",
                   help="finish each broadcast before its multiply (to measure what overlap buys)")
    p.add_argument("--partition", choices=ORDERINGS, default=_DEFAULTS.partition,
                   help="vertex order before the row split: random permutation or the original order")
    p.add_argument("--seed", type=int, default=_DEFAULTS.seed)
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a collective may wait for a peer before the job is declared hung (default 60; raise "
                        "it where loading the graph or one epoch takes longer)")
    p.add_argument("--metrics", default=None, help="write one JSON object per epoch to this file")
    p.add_argument("--save-model", default=None, help="write the weights as a PyG GCNConv-compatible state dict")
    p.add_argument("--save-predictions", default=None,
                   help="write one predicted class per ORIGINAL vertex (.npy, or CSV 'vertex,prediction')")
    p.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    p.add_argument("--log-every", type=_positive_int, default=1, help="print every K-th epoch (default 1)")
    p.add_argument("--patience", type=int, default=_DEFAULTS.patience,
                   help="stop after K epochs without a better validation accuracy and keep the best weights "
                        "(default 0: off)")
    p.add_argument("--trace-epoch", type=int, default=_DEFAULTS.trace_epoch,
                   help="record a per-rank timeline of this epoch in --metrics (default 2; 0: none)")
    p.add_argument("--checkpoint-dir", default=None, help="write checkpoints here")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="checkpoint every K epochs (default 0: only when stopped by a signal)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest intact checkpoint in --checkpoint-dir (--epochs is the total)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mggcn", description="Full-batch GCN training across processes and GPUs.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    train = sub.add_parser("train", help="train a GCN", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_train_options(train)
    return parser


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MGGCN_INIT_METHOD" not in os.environ)


def _train(args: argparse.Namespace) -> int:
    from mggcn.job import TrainJob, check_job, run_train_job
    from mggcn.launch import WorkerError, run_workers

    cfg = TrainConfig(hidden=args.hidden, epochs=args.epochs, lr=args.lr, weight_decay=args.weight_decay,
                      dropout=args.dropout, input_dropout=args.input_dropout, activation=args.activation,
                      norm=args.norm, order=args.order, overlap=args.overlap, partition=args.partition,
                      seed=args.seed, patience=args.patience, trace_epoch=args.trace_epoch)
    read_options = {k: getattr(args, k) for k in ("features", "labels", "split") if getattr(args, k) is not None}
    if read_options and args.fmt not in ("mtx", "edgelist"):
        raise GraphError(f"--{next(iter(read_options))} is for --format mtx or edgelist; "
                         "other formats carry their vertex data")
    job = TrainJob(dataset=args.dataset, config=cfg, fmt=args.fmt, undirected=args.undirected, dedup=args.dedup,
                   read_options=read_options,
                   device=args.device, threads=args.threads, timeout_s=args.timeout, metrics=args.metrics,
                   save_model=args.save_model, save_predictions=args.save_predictions, quiet=args.quiet,
                   log_every=args.log_every, checkpoint_dir=args.checkpoint_dir,
                   checkpoint_every=args.checkpoint_every, resume=args.resume)
    if _under_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if args.nprocs is not None and args.nprocs != world:
            raise GraphError(f"--nprocs {args.nprocs} disagrees with torchrun's world size {world}; drop --nprocs")
        check_job(job, world)
        return _exit_status(run_train_job(job))
    nprocs = args.nprocs or 1
    if args.device != "cpu":
        import torch

        from mggcn.dist import resolve_device

        if resolve_device(args.device) == "cuda" and nprocs > torch.cuda.device_count():
            raise GraphError(f"--nprocs {nprocs} needs {nprocs} GPUs, {torch.cuda.device_count()} visible")
    dataset = check_job(job, nprocs)
    if not args.quiet:
        print(f"mggcn: {dataset.name}: {dataset.num_nodes} vertices, {dataset.num_edges} edges, "
              f"{dataset.num_features} features, {dataset.num_classes} classes; {nprocs} worker(s) on "
              f"{args.device}", flush=True)
    if nprocs == 1:
        return _exit_status(run_train_job(job, dataset))
    del dataset
    try:
        results = run_workers(run_train_job, nprocs, (job,), grace_s=max(60.0, args.timeout))
    except WorkerError as err:
        print(f"mggcn: {err}", file=sys.stderr)
        return 1
    return _exit_status(results[0])


def _exit_status(result) -> int:
    """0, or 130 when a signal stopped training (the shell's code for an interrupted command)."""
    return 130 if result.stopped == "interrupted" else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
    except (GraphError, ValueError) as err:  # bad input or options, CheckpointError included
        print(f"mggcn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except FloatingPointError as err:  # NonFiniteLoss
        print(f"mggcn {args.command}: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
