"""``mggcn train``: train a model on a dataset, in this process, on P local workers, or as one rank of torchrun."""

from __future__ import annotations

import argparse
import os
import sys

from mggcn.config import (
    ACTIVATIONS,
    COMM_MODES,
    DEFAULT_DATASET,
    GATHER_BYTES,
    MMAP_THRESHOLD,
    MODELS,
    NORMS,
    ORDERINGS,
    ORDERS,
    SHM_MODES,
    TILE_BYTES,
    TIMEOUT_MAX,
    TRAIN_COLUMNS,
    TrainConfig,
)
from mggcn.tools.cli.common import (
    add_dataset_options,
    add_precision_option,
    byte_size,
    device_arg,
    exit_status,
    flag_message,
    hidden_sizes,
    job_failure_status,
    mmap_threshold_size,
    node_speaker,
    path_arg,
    positive_int,
    rank_zero,
    read_options,
)
from mggcn.utils.errors import GraphError
from mggcn.utils.launcher import under_torchrun

HELP = "train a GCN, GraphSAGE, GIN or GAT"
DESCRIPTION = """Train a GCN (GraphSAGE, GIN, GAT with --model) on the whole graph every epoch, its rows split across P
worker processes (gloo on CPUs, one GPU each with NCCL). Prints one line per epoch, then the accuracies of the
trained model.

DATASET is a built-in graph (synthetic, rmat:..., builtin:karate, builtin:digits), a directory written by
`mggcn prepare`, or a file or directory in another layout given with --format.

examples:
  mggcn train                                          # the built-in synthetic graph, one process
  mggcn train synthetic:n=100000 --nprocs 4            # 4 local worker processes
  mggcn train mygraph --nprocs 2                       # a prepared directory
  mggcn train gcn/data/ind.cora --format planetoid --normalize-features   # Cora, as the GCN paper
  mggcn train DATA --format ogb --device cuda --nprocs 8
  torchrun --nproc-per-node 4 -m mggcn train DATA --format ogb --device cuda    # one rank per process

Under torchrun, rank 0 writes --metrics, --save-model, --save-predictions and the checkpoints. torchrun's c10d
rendezvous (--rdzv-backend c10d) numbers the ranks itself, whatever --node-rank says: give those paths on a file
system every node shares, or use the static rendezvous (--master-addr, --master-port, --node-rank) to keep rank 0
on node 0. An error is said on every node; a node that is lost is one line in the others' logs.
"""

DEFAULTS = TrainConfig()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?", default=None, metavar="DATASET",
                   help="synthetic[:n=...,classes=...], rmat:..., builtin:karate|digits, a prepared directory, or a "
                        f"path with --format (default: {DEFAULT_DATASET})")
    add_dataset_options(p)
    p.add_argument("--nprocs", type=positive_int, default=None, metavar="P",
                   help="local worker processes to start (default 1; not used under torchrun)")
    p.add_argument("--device", default="cpu", type=device_arg,
                   help="cpu (gloo) or cuda (one GPU per rank, NCCL; more ranks than GPUs only with "
                        "MGGCN_SHARE_DEVICE=1 set: they share them over gloo, for testing); cuda:K: GPU K, for one "
                        "rank per host; auto picks cuda when visible (default cpu)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="CPU threads per rank (default: cores / local ranks)")
    _add_model_options(p)
    _add_execution_options(p)
    _add_output_options(p)


def _add_model_options(p: argparse.ArgumentParser) -> None:
    """The model, its training and its optimizer."""
    p.add_argument("--model", choices=MODELS, default=DEFAULTS.model,
                   help="gcn: PyG GCNConv layers; sage: SAGEConv (mean over in-neighbours + root weight); gin: "
                        "GINConv with a 2-layer MLP; gat: GATConv (attention over in-neighbours, --heads) "
                        "(default gcn)")
    p.add_argument("--gin-train-eps", action="store_true",
                   help="--model gin: learn ε in (1 + ε)·h_i (default: fixed at 0)")
    p.add_argument("--batch-norm", action="store_true",
                   help="a batch norm after each hidden layer, before σ, its statistics over all vertices (PyG's "
                        "GCN/GraphSAGE/GIN(..., norm='batch_norm'); with --model gin add --gin-mlp-batch-norm for "
                        "PyG's GIN)")
    p.add_argument("--gin-mlp-batch-norm", action="store_true",
                   help="--model gin: batch-normalize each MLP's hidden layer over all vertices (PyG's "
                        "MLP(norm='batch_norm')); GIN's sum grows with the degree, and without it GIN may not train "
                        "on graphs with hubs")
    p.add_argument("--heads", type=positive_int, default=DEFAULTS.heads,
                   help="--model gat: attention heads per layer; hidden layers concatenate them (--hidden is their "
                        f"total, e.g. 64 = 8 heads of 8), the last layer averages them (default {DEFAULTS.heads})")
    p.add_argument("--output-heads", type=positive_int, default=None, metavar="H",
                   help="--model gat: the last layer's heads (default: --heads, as PyG's GAT model; 1 as PyG's GAT "
                        "example and the GAT paper's Cora model)")
    p.add_argument("--attention-dropout", type=float, default=DEFAULTS.attention_dropout, metavar="P",
                   help="--model gat: dropout on the attention coefficients (default 0)")
    p.add_argument("--epochs", type=int, default=DEFAULTS.epochs, help="epochs to train; with --resume, the total")
    p.add_argument("--hidden", type=hidden_sizes, default=DEFAULTS.hidden, metavar="SIZES",
                   help="hidden layer sizes, e.g. 128,128 for a 3-layer GCN (default 128; '' for none: one layer)")
    p.add_argument("--lr", type=float, default=DEFAULTS.lr, help="Adam's learning rate")
    p.add_argument("--weight-decay", type=float, default=DEFAULTS.weight_decay, help="Adam's weight decay (L2)")
    p.add_argument("--dropout", type=float, default=DEFAULTS.dropout, help="dropout between layers")
    p.add_argument("--input-dropout", type=float, default=DEFAULTS.input_dropout,
                   help="dropout on the input features (0 lets Â·X be computed once)")
    p.add_argument("--activation", choices=ACTIVATIONS, default=DEFAULTS.activation,
                   help="after every layer but the last")
    p.add_argument("--norm", choices=NORMS, default=DEFAULTS.norm,
                   help="--model gcn: sym: D^-1/2 (A+I) D^-1/2 (PyG GCNConv); mean: D^-1 (A+I) (original MG-GCN)")
    p.add_argument("--order", choices=ORDERS, default=DEFAULTS.order,
                   help="per layer, aggregate before or after multiplying by W (auto: the narrower SpMM)")
    add_precision_option(p)


def _add_execution_options(p: argparse.ArgumentParser) -> None:
    """How the ranks split and run the work: the partition, the SpMM's exchange and memory, the seed, the timeout."""
    p.add_argument("--no-overlap", dest="overlap", action="store_false",
                   help="finish each broadcast before its multiply (to measure what overlap buys)")
    p.add_argument("--partition", choices=ORDERINGS, default=DEFAULTS.partition,
                   help="vertex order before the row split: random-local (default: random parts, the original "
                        "order inside each), random (a random permutation), none (the original order), or metis "
                        "(needs pymetis)")
    p.add_argument("--comm", choices=COMM_MODES, default=DEFAULTS.comm,
                   help="SpMM exchange: broadcast every row block (MG-GCN), send only the rows each block "
                        "references (sparse), or per rank pair whichever fits (auto)")
    p.add_argument("--shm", choices=SHM_MODES, default=DEFAULTS.shm,
                   help="CPU ranks of one host broadcast through shared memory instead of gloo's loopback TCP "
                        "(auto: where every rank is on this host; on: or fail; off: gloo)")
    p.add_argument("--train-columns", choices=TRAIN_COLUMNS, default=DEFAULTS.train_columns,
                   help="the last layer's backward SpMM on a copy of Âᵀ with only the training vertices' columns "
                        "(the loss's gradient is zero elsewhere): auto: when at most half the vertices train; on; "
                        "off: no copy (mggcn plan counts it)")
    p.add_argument("--tile-bytes", type=byte_size, default=DEFAULTS.tile_bytes, metavar="SIZE",
                   help="CPU SpMM: bytes of the dense operand each column tile of Â reads, e.g. 4M (default: "
                        f"whole blocks for the gather kernel where the operand fits {GATHER_BYTES >> 20}M per machine "
                        f"on x86 CPUs but Intel's, else {TILE_BYTES >> 20}M, shared by the machine's ranks; 0: no "
                        "tiling)")
    p.add_argument("--mmap-threshold", type=mmap_threshold_size, default=MMAP_THRESHOLD, metavar="SIZE",
                   help="host memory blocks above this size go back to the system when freed (glibc; default 1M, at "
                        "most 32M; 0: glibc's own threshold, which keeps freed blocks of up to 32 MiB resident)")
    p.add_argument("--seed", type=int, default=DEFAULTS.seed,
                   help="seeds the weights, the vertex permutation and the dropout masks")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="seconds a collective may wait for a peer before the job is declared hung (default 60, at "
                        f"most {TIMEOUT_MAX}; raise it where loading the graph or one epoch takes longer)")


def _add_output_options(p: argparse.ArgumentParser) -> None:
    """What the run writes and prints, early stopping, checkpoints."""
    p.add_argument("--metrics", type=path_arg, default=None, metavar="FILE",
                   help="write one JSON object per epoch to this file")
    p.add_argument("--tensorboard", type=path_arg, default=None, metavar="DIR",
                   help="also write the epoch records as TensorBoard scalars to DIR (needs tensorboard)")
    p.add_argument("--save-model", type=path_arg, default=None, metavar="FILE",
                   help="write the weights as a state dict that loads into PyG's GCN, GraphSAGE, GIN or GAT model")
    p.add_argument("--save-predictions", type=path_arg, default=None, metavar="FILE",
                   help="write one predicted class per ORIGINAL vertex (.npy; .tsv or .tab: tab-separated; CSV "
                        "'vertex,prediction' for any other name but another format's: .npz, .parquet, .gz, ... are "
                        "refused)")
    p.add_argument("--quiet", action="store_true", help="no per-epoch lines: only the final accuracies")
    p.add_argument("--log-every", type=positive_int, default=1, metavar="K", help="print every K-th epoch (default 1)")
    p.add_argument("--patience", type=int, default=DEFAULTS.patience, metavar="K",
                   help="stop after K epochs without a better validation accuracy and keep the best weights "
                        "(default 0: off)")
    p.add_argument("--trace-epoch", type=int, default=DEFAULTS.trace_epoch, metavar="EPOCH",
                   help="record a per-rank timeline of this epoch in --metrics (default 2; 0: none)")
    p.add_argument("--checkpoint-dir", type=path_arg, default=None, metavar="DIR", help="write checkpoints here")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                   help="checkpoint every K epochs (default 0: only when stopped by a signal)")
    resume = p.add_mutually_exclusive_group()
    resume.add_argument("--resume", action="store_const", const=True, default=False,
                        help="continue from the newest intact checkpoint in --checkpoint-dir (--epochs is the "
                             "total); refused when there is none (no file, or all corrupt). Checkpoints of other "
                             "runs and corrupt files there are never deleted")
    resume.add_argument("--resume-or-start", dest="resume", action="store_const", const="auto",
                        help="as --resume, but start at epoch 1 when there is nothing to resume from (a job that "
                             "may be restarting after preemption)")


def _check_tensorboard(args: argparse.Namespace) -> None:
    """--tensorboard without tensorboard installed: say so before training, and train anyway."""
    if args.tensorboard:
        import importlib.util

        if importlib.util.find_spec("tensorboard") is None:
            print("mggcn: --tensorboard: tensorboard is not installed (pip install tensorboard); "
                  "skipping TensorBoard logging", file=sys.stderr, flush=True)
            args.tensorboard = None


def _finish_train(args: argparse.Namespace, result) -> int:
    """--quiet: rank 0 still says the final accuracies (the one line a quiet run prints); --tensorboard: rank 0 writes
    the run's records as TensorBoard scalars. Returns the exit status."""
    if args.quiet and int(os.environ.get("RANK", "0")) == 0 and result.final:
        from mggcn.training.job import format_final

        print(format_final(result.history, result.final, result.best_epoch if args.patience > 0 else None),
              flush=True)
    if args.tensorboard and int(os.environ.get("RANK", "0")) == 0:
        from mggcn.tools.report import TensorBoardMissing, write_tensorboard

        try:
            write_tensorboard(result.history, args.tensorboard)
        except TensorBoardMissing as err:
            print(f"mggcn: --tensorboard: {err}; skipping TensorBoard logging", file=sys.stderr, flush=True)
    return exit_status(result)


def run(args: argparse.Namespace) -> int:
    from mggcn.distributed.launch import WorkerError, launch
    from mggcn.distributed.shm import ShmUnavailable
    from mggcn.training.job import TrainJob, check_job, format_labels, run_train_job, share_dataset
    from mggcn.training.outputs import check_distinct, read_inputs
    from mggcn.training.settings import train_outputs
    from mggcn.utils.timing import SetupClock, process_start

    if args.dataset is None:
        if args.fmt is not None:
            raise GraphError(f"--format {args.fmt} needs a dataset path: mggcn train PATH --format {args.fmt}")
        args.dataset = DEFAULT_DATASET

    cfg = TrainConfig(model=args.model, gin_train_eps=args.gin_train_eps, gin_mlp_batch_norm=args.gin_mlp_batch_norm,
                      batch_norm=args.batch_norm,
                      heads=args.heads, output_heads=args.output_heads,
                      attention_dropout=args.attention_dropout, precision=args.precision,
                      hidden=args.hidden, epochs=args.epochs,
                      lr=args.lr, weight_decay=args.weight_decay,
                      dropout=args.dropout, input_dropout=args.input_dropout, activation=args.activation,
                      norm=args.norm, order=args.order, overlap=args.overlap, partition=args.partition,
                      seed=args.seed, patience=args.patience, trace_epoch=args.trace_epoch, comm=args.comm,
                      tile_bytes=args.tile_bytes, shm=args.shm, train_columns=args.train_columns)
    reader_options = read_options(args)
    job = TrainJob(dataset=args.dataset, config=cfg, fmt=args.fmt, undirected=args.undirected, dedup=args.dedup,
                   read_options=reader_options,
                   device=args.device, threads=args.threads, timeout_s=args.timeout,
                   mmap_threshold=args.mmap_threshold or None, metrics=args.metrics,
                   save_model=args.save_model, save_predictions=args.save_predictions, quiet=args.quiet,
                   log_every=args.log_every, checkpoint_dir=args.checkpoint_dir,
                   checkpoint_every=args.checkpoint_every, resume=args.resume, clock=SetupClock(process_start()))
    # the job's own check compares its outputs; TensorBoard's directory is the command line's alone
    check_distinct([*train_outputs(job), ("tensorboard", args.tensorboard)],
                   read_inputs(job.dataset, reader_options, job.checkpoint_dir))
    torchrun = under_torchrun()
    if args.tensorboard and rank_zero():  # the rank that writes it
        from mggcn.tools.report import check_tensorboard_dir

        check_tensorboard_dir(args.tensorboard)
    if not torchrun:
        _check_tensorboard(args)

    def announce(dataset, nprocs: int) -> None:  # under torchrun, once: rank 0's log says what the job trains
        if not args.quiet and (not torchrun or rank_zero()):
            workers = f"{nprocs} rank(s) under torchrun" if torchrun else f"{nprocs} worker(s)"
            print(f"mggcn: {dataset.name}: {dataset.num_nodes} vertices, {dataset.num_edges} edges, "
                  f"{dataset.num_features} features, {format_labels(dataset)}; {workers} on {args.device}",
                  flush=True)

    try:
        result = launch(run_train_job, job, check_job, args.nprocs, grace_s=max(60.0, args.timeout),
                        on_checked=announce, share=share_dataset)
    except ShmUnavailable as err:  # --shm on, under torchrun: every rank has the same error; each node says it once
        if node_speaker():
            print(f"mggcn train: error: {flag_message(err)}", file=sys.stderr, flush=True)
        return 2
    except WorkerError as err:  # JobInterrupted too: a signal before the workers could stop by themselves
        return job_failure_status(err)
    return _finish_train(args, result)
