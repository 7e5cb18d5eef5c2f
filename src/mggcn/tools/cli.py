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

from mggcn.data.datasets import DEFAULT_DATASET
from mggcn.data.graph import GraphError
from mggcn.distributed.context import MMAP_THRESHOLD
from mggcn.distributed.exchange import COMM_MODES
from mggcn.distributed.partition import ORDERINGS
from mggcn.distributed.shm import SHM_MODES
from mggcn.distributed.tiled import TILE_BYTES
from mggcn.nn.model import ACTIVATIONS, ORDERS
from mggcn.nn.norm import NORMS
from mggcn.training.trainer import TrainConfig

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


def _bytes(text: str) -> int:
    from mggcn.tools.plan import parse_bytes

    try:
        value = parse_bytes(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 4M or 512K, got '{text}'")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a size of at least 0, got '{text}'")
    return value


def _byte_list(text: str) -> tuple[int, ...]:
    return tuple(_bytes(t) for t in text.split(",") if t.strip())


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return value


def _add_dataset_options(p: argparse.ArgumentParser) -> None:
    """How a DATASET path is read (train and predict)."""
    p.add_argument("--format", dest="fmt", default=None, help="layout of a dataset path (see `mggcn prepare -h`)")
    p.add_argument("--features", default=None, help="mtx/edgelist: features .npy [n, F] (default: random)")
    p.add_argument("--labels", default=None, help="mtx/edgelist: labels .npy [n], -1 = unlabelled (default: random)")
    p.add_argument("--split", default=None,
                   help="mtx/edgelist: split .npy of 0/1/2/-1 (train/val/test/none) or .npz of masks "
                        "(default: random 50/25/25)")
    p.add_argument("--undirected", action="store_true", help="add the reverse of every edge")
    p.add_argument("--dedup", action="store_true", help="drop duplicate edges")


def _add_train_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?", default=DEFAULT_DATASET,
                   help="synthetic[:n=...,classes=...], rmat:..., builtin:karate|digits, or a path with --format "
                        f"(default: {DEFAULT_DATASET})")
    _add_dataset_options(p)
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
                   help="vertex order before the row split: random permutation, the original order, or "
                        "random-local (random parts, original order inside each), or metis (needs pymetis)")
    p.add_argument("--comm", choices=COMM_MODES, default=_DEFAULTS.comm,
                   help="SpMM exchange: broadcast every row block (MG-GCN), send only the rows each block "
                        "references (sparse), or per rank pair whichever fits (auto)")
    p.add_argument("--shm", choices=SHM_MODES, default=_DEFAULTS.shm,
                   help="CPU ranks of one host broadcast through shared memory instead of gloo's loopback TCP "
                        "(auto: where every rank is on this host; on: or fail; off: gloo)")
    p.add_argument("--tile-bytes", type=_bytes, default=_DEFAULTS.tile_bytes,
                   help="CPU SpMM: bytes of the dense operand each column tile of Â reads, e.g. 4M (default "
                        f"{TILE_BYTES >> 20}M per machine, shared by its ranks; 0: no tiling)")
    p.add_argument("--mmap-threshold", type=_bytes, default=MMAP_THRESHOLD,
                   help="host memory blocks above this size go back to the system when freed (glibc; default 1M; "
                        "0: glibc's own threshold, which keeps freed blocks of up to 32 MiB resident)")
    p.add_argument("--seed", type=int, default=_DEFAULTS.seed)
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a collective may wait for a peer before the job is declared hung (default 60; raise "
                        "it where loading the graph or one epoch takes longer)")
    p.add_argument("--metrics", default=None, help="write one JSON object per epoch to this file")
    p.add_argument("--tensorboard", default=None, metavar="DIR",
                   help="also write the epoch records as TensorBoard scalars to DIR (needs tensorboard)")
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
    _add_prepare_parsers(sub)
    _add_report_parsers(sub)
    _add_bench_parsers(sub)
    return parser


_PREPARE_DOC = """Write a dataset once as a prepared directory; `mggcn train DIR --nprocs P` then reads, on each rank,
only that rank's rows. Edge lists and generated graphs stream through in chunks (out of core, bounded by
--memory-limit); the other formats are read whole first. Examples:

    mggcn prepare data/ogbn_products prod --format ogb
    mggcn prepare data/flickr flickr --format saint
    mggcn prepare data/reddit reddit --format dgl-reddit
    mggcn prepare web.mtx web --format mtx --features x.npy --labels y.npy --split split.npy
    mggcn prepare edges.csv.gz g --format edgelist --undirected --dedup --memory-limit 2G
    mggcn prepare mggcn_reddit/ reddit --format mggcn-bin
    mggcn prepare rmat:scale=20,edge_factor=16 rmat20
    mggcn prepare synthetic:n=10000000 big
"""


def _add_prepare_parsers(sub) -> None:
    from mggcn.data.formats import FORMATS

    p = sub.add_parser("prepare", help="write a dataset once, for any number of workers to read their share of",
                       description=_PREPARE_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a file or directory with --format, or synthetic:..., rmat:..., builtin:...")
    p.add_argument("out_dir", help="the directory to create")
    p.add_argument("--format", dest="fmt", default=None, choices=FORMATS, help="layout of SOURCE when it is a path")
    p.add_argument("--undirected", action="store_true", help="add the reverse of every edge")
    p.add_argument("--dedup", action="store_true", help="drop duplicate edges")
    p.add_argument("--features", default=None, help="mtx/edgelist: features .npy [n, F] (default: random)")
    p.add_argument("--labels", default=None, help="mtx/edgelist: labels .npy [n], -1 = unlabelled (default: random)")
    p.add_argument("--split", default=None,
                   help="mtx/edgelist: split .npy of 0/1/2/-1 or .npz of train/val/test masks (default: random)")
    p.add_argument("--num-nodes", type=_positive_int, default=None,
                   help="edgelist: vertex count (default: largest id + 1)")
    p.add_argument("--memory-limit", default=None,
                   help="memory for edge chunks and sorting, e.g. 512M or 2G (default 2G); vertex arrays come on top")
    p.add_argument("--overwrite", action="store_true", help="replace OUT_DIR if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")
    info = sub.add_parser("info", help="what a prepared dataset holds",
                          description="Sizes, degree statistics, split sizes and per-P nonzero balance of a "
                                      "directory written by `mggcn prepare`.")
    info.add_argument("dir", help="a prepared dataset directory")
    info.add_argument("--verify", action="store_true", help="also check every checksum and value (reads it all)")


def _read_options(args: argparse.Namespace) -> dict:
    """The reader keywords of mtx/edge-list sources (``--features/--labels/--split``, and ``--num-nodes`` where
    the command has it); refused for formats that carry their own vertex data."""
    names = ("features", "labels", "split", "num_nodes")
    options = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    if options and args.fmt not in ("mtx", "edgelist"):
        raise GraphError(f"--{next(iter(options)).replace('_', '-')} is for --format mtx or edgelist; "
                         "other sources carry their vertex data")
    if "num_nodes" in options and args.fmt != "edgelist":
        raise GraphError("--num-nodes is for --format edgelist (a Matrix Market header gives n)")
    return options


def _prepare(args: argparse.Namespace) -> int:
    from mggcn.data.prepared.reader import PreparedDataset, describe
    from mggcn.data.prepared.writer import prepare

    read_options = _read_options(args)
    out = prepare(args.source, args.out_dir, fmt=args.fmt, undirected=args.undirected, dedup=args.dedup,
                  memory_limit=args.memory_limit, progress=not args.quiet, overwrite=args.overwrite,
                  **read_options)
    if not args.quiet:
        print(describe(PreparedDataset(out)))
    return 0


def _info(args: argparse.Namespace) -> int:
    from mggcn.data.prepared.reader import PreparedDataset, describe

    print(describe(PreparedDataset(args.dir, verify=args.verify)))
    return 0


def _add_report_parsers(sub) -> None:
    report = sub.add_parser("report", help="plot a run from its --metrics file",
                            description="PNG plots of a run: loss and accuracies per epoch (curves.png), the "
                                        "per-phase time of every epoch (phases.png), and the traced epoch's "
                                        "timeline per rank, broadcasts against multiplications (timeline.png).")
    report.add_argument("metrics", help="a file written by `mggcn train --metrics`")
    report.add_argument("--out", required=True, help="the directory to write the PNGs to (created if missing)")
    report.add_argument("--epoch", type=int, default=None,
                        help="the traced epoch to draw (default: the first one traced, see --trace-epoch)")

    predict = sub.add_parser("predict", help="predict every vertex with a saved model",
                             description="Class predictions (or probabilities, or a layer's embeddings) for every "
                                         "vertex, in the ORIGINAL vertex ids, on one process or --nprocs workers. "
                                         "MODEL is a file written by `mggcn train --save-model`; its sidecar "
                                         "MODEL.json gives the normalization and activation.")
    predict.add_argument("model", help="a file written by `mggcn train --save-model`")
    predict.add_argument("dataset", help="as for `mggcn train`: a spec, a prepared directory, or a path with --format")
    predict.add_argument("--out", required=True,
                         help=".npy, or CSV for any other name ('vertex,prediction' or 'vertex,p0,p1,...')")
    what = predict.add_mutually_exclusive_group()
    what.add_argument("--proba", action="store_true", help="class probabilities (softmax) instead of classes")
    what.add_argument("--embeddings", type=_positive_int, default=None, metavar="LAYER",
                      help="the output of layer LAYER (1..L, after its activation) instead of classes")
    _add_dataset_options(predict)
    predict.add_argument("--norm", choices=NORMS, default=None, help="when MODEL has no MODEL.json (default sym)")
    predict.add_argument("--activation", choices=ACTIVATIONS, default=None,
                         help="when MODEL has no MODEL.json (default relu)")
    predict.add_argument("--nprocs", type=_positive_int, default=None, help="local worker processes (default 1)")
    predict.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    predict.add_argument("--threads", type=_positive_int, default=None, help="CPU threads per rank")
    predict.add_argument("--timeout", type=float, default=60.0, help="seconds a collective may wait for a peer")


def _report(args: argparse.Namespace) -> int:
    from mggcn.tools.report import write_report

    for path in write_report(args.metrics, args.out, args.epoch):
        print(path)
    return 0


def _predict(args: argparse.Namespace) -> int:
    from mggcn.distributed.launch import WorkerError, run_workers
    from mggcn.training.predict import PredictJob, check_predict, run_predict_job

    read_options = _read_options(args)
    output = "proba" if args.proba else "embeddings" if args.embeddings else "classes"
    job = PredictJob(model=args.model, dataset=args.dataset, out=args.out, output=output, layer=args.embeddings,
                     fmt=args.fmt, undirected=args.undirected, dedup=args.dedup, read_options=read_options,
                     norm=args.norm, activation=args.activation, device=args.device, threads=args.threads,
                     timeout_s=args.timeout)
    if _under_torchrun():
        check_predict(job, int(os.environ["WORLD_SIZE"]))
        run_predict_job(job)
        return 0
    nprocs = args.nprocs or 1
    dataset = check_predict(job, nprocs)
    if nprocs == 1:
        run_predict_job(job, dataset)
        return 0
    del dataset
    try:
        run_workers(run_predict_job, nprocs, (job,), grace_s=max(60.0, args.timeout))
    except WorkerError as err:
        print(f"mggcn: {err}", file=sys.stderr)
        return 1
    return 0


def _check_tensorboard(args: argparse.Namespace) -> None:
    """--tensorboard without tensorboard installed: say so before training, and train anyway."""
    if args.tensorboard:
        import importlib.util

        if importlib.util.find_spec("tensorboard") is None:
            print("mggcn: --tensorboard: tensorboard is not installed (pip install tensorboard); "
                  "skipping TensorBoard logging", file=sys.stderr, flush=True)
            args.tensorboard = None


def _finish_train(args: argparse.Namespace, result) -> int:
    """--tensorboard: rank 0 writes the run's records as TensorBoard scalars. Returns the exit status."""
    if args.tensorboard and int(os.environ.get("RANK", "0")) == 0:
        from mggcn.tools.report import TensorBoardMissing, write_tensorboard

        try:
            write_tensorboard(result.history, args.tensorboard)
        except TensorBoardMissing as err:
            print(f"mggcn: --tensorboard: {err}; skipping TensorBoard logging", file=sys.stderr, flush=True)
    return _exit_status(result)


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MGGCN_INIT_METHOD" not in os.environ)


def _train(args: argparse.Namespace) -> int:
    from mggcn.distributed.launch import WorkerError, run_workers
    from mggcn.training.job import TrainJob, check_job, run_train_job

    cfg = TrainConfig(hidden=args.hidden, epochs=args.epochs, lr=args.lr, weight_decay=args.weight_decay,
                      dropout=args.dropout, input_dropout=args.input_dropout, activation=args.activation,
                      norm=args.norm, order=args.order, overlap=args.overlap, partition=args.partition,
                      seed=args.seed, patience=args.patience, trace_epoch=args.trace_epoch, comm=args.comm,
                      tile_bytes=args.tile_bytes, shm=args.shm)
    read_options = _read_options(args)
    job = TrainJob(dataset=args.dataset, config=cfg, fmt=args.fmt, undirected=args.undirected, dedup=args.dedup,
                   read_options=read_options,
                   device=args.device, threads=args.threads, timeout_s=args.timeout,
                   mmap_threshold=args.mmap_threshold or None, metrics=args.metrics,
                   save_model=args.save_model, save_predictions=args.save_predictions, quiet=args.quiet,
                   log_every=args.log_every, checkpoint_dir=args.checkpoint_dir,
                   checkpoint_every=args.checkpoint_every, resume=args.resume)
    if _under_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if args.nprocs is not None and args.nprocs != world:
            raise GraphError(f"--nprocs {args.nprocs} disagrees with torchrun's world size {world}; drop --nprocs")
        check_job(job, world)
        return _finish_train(args, run_train_job(job))
    _check_tensorboard(args)
    nprocs = args.nprocs or 1
    if args.device != "cpu":
        import torch

        from mggcn.distributed.context import resolve_device

        if resolve_device(args.device) == "cuda" and nprocs > torch.cuda.device_count():
            raise GraphError(f"--nprocs {nprocs} needs {nprocs} GPUs, {torch.cuda.device_count()} visible")
    dataset = check_job(job, nprocs)
    if not args.quiet:
        print(f"mggcn: {dataset.name}: {dataset.num_nodes} vertices, {dataset.num_edges} edges, "
              f"{dataset.num_features} features, {dataset.num_classes} classes; {nprocs} worker(s) on "
              f"{args.device}", flush=True)
    if nprocs == 1:
        return _finish_train(args, run_train_job(job, dataset))
    del dataset
    try:
        results = run_workers(run_train_job, nprocs, (job,), grace_s=max(60.0, args.timeout))
    except WorkerError as err:
        print(f"mggcn: {err}", file=sys.stderr)
        return 1
    return _finish_train(args, results[0])


def _int_list(text: str) -> tuple[int, ...]:
    sizes = _hidden(text)
    if not sizes:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers such as 1,2, got '{text}'")
    return sizes


def _orderings(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in ORDERINGS]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected orderings among {', '.join(ORDERINGS)}, got '{text}'")
    return names


def _add_bench_parsers(sub) -> None:
    from mggcn.tools import bench, plan

    d = bench.BenchOptions()
    b = sub.add_parser("bench", help="mggcn at P = 1, 2 (overlap on and off) against PyG's GCNConv, in one run",
                       description=bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--small", action="store_true", help="a tiny graph and model that run in seconds")
    b.add_argument("--saint-graph", action="store_true",
                   help="write the graph as a GraphSAINT directory that every configuration reads as `mggcn train "
                        "DIR --format saint` does; defaults: 100,000 vertices, degree 50 (5.0M nonzeros), "
                        "P = 1,2,4, partition random, 1+3 epochs (with --small: the small graph)")
    b.add_argument("--nodes", type=_positive_int, help=f"vertices (default {d.nodes:,})")
    b.add_argument("--degree", type=float, help=f"mean degree: nonzeros = nodes x degree (default {d.degree:g})")
    b.add_argument("--features", type=_positive_int, help=f"default {d.features}")
    b.add_argument("--classes", type=_positive_int, help=f"default {d.classes}")
    b.add_argument("--hidden", type=_hidden, help="hidden layer sizes (default 128)")
    b.add_argument("--epochs", type=_positive_int, help=f"timed epochs after the warm-up (default {d.epochs})")
    b.add_argument("--warmup", type=int, help=f"untimed epochs first (default {d.warmup})")
    b.add_argument("--repeats", type=_positive_int,
                   help="rounds over the mggcn configurations, interleaved; each row reports the median round "
                        f"(default {d.repeats})")
    b.add_argument("--threads", type=_positive_int, help="CPU threads per configuration (default: the cores)")
    b.add_argument("--nprocs", type=_int_list, help="process counts to run (default 1,2)")
    b.add_argument("--partition", dest="partitions", type=_orderings,
                   help="orderings, the first being the main one (default random-local,random)")
    b.add_argument("--ids", choices=("clustered", "random"), help="vertex ids of the graph (default clustered)")
    b.add_argument("--device", choices=("cpu", "cuda"), help="default cpu")
    b.add_argument("--no-pyg", dest="pyg", action="store_false", default=None, help="skip the PyG baseline")
    b.add_argument("--pyg-adj", choices=bench.PYG_ADJ, help="what PyG's GCNConv is given (default csr)")
    b.add_argument("--seed", type=int)
    b.add_argument("--graph-cache", help="an .npz holding the graph: reused when it exists, written when not")
    b.add_argument("--timeout", dest="timeout_s", type=float, help="seconds per configuration (default 3600)")
    b.add_argument("--mmap-threshold", type=_bytes,
                   help="one glibc M_MMAP_THRESHOLD for every configuration, e.g. 1M (0: glibc's dynamic one); "
                        "default: mggcn 1M, PyG glibc's")
    b.add_argument("--tile-bytes", type=_bytes, help="mggcn's --tile-bytes for every mggcn configuration (0: untiled)")
    b.add_argument("--compare-tiles", type=_byte_list,
                   help="more --tile-bytes values, e.g. 0,1M: each also runs at P = 1 for every --partition")
    b.add_argument("--shm", choices=SHM_MODES, help="mggcn's --shm for every mggcn configuration (default auto)")
    b.add_argument("--compare-shm", action="store_true", default=None,
                   help="also run P > 1 through gloo's broadcast (--shm off), overlap on and off, in the same rounds")
    b.add_argument("--out", help="write the report as JSON")
    p = sub.add_parser("plan", help="per-rank memory and communication of a training run, before running it",
                       description=plan.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=sorted(plan.PRESETS), help="sizes of a known dataset (other options override)")
    p.add_argument("--nodes", type=_positive_int)
    p.add_argument("--edges", type=int, help="nonzeros of A: both directions of an undirected edge, no self loops")
    p.add_argument("--features", type=_positive_int)
    p.add_argument("--classes", type=_positive_int)
    p.add_argument("--hidden", type=_hidden, default=_DEFAULTS.hidden, help="hidden layer sizes (default 128)")
    p.add_argument("--nprocs", type=_int_list, default=(1,), help="ranks, or a list such as 1,2,4,8 (default 1)")
    p.add_argument("--memory", type=plan.parse_bytes, default=None, help="memory per device, e.g. 80G or 141G")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda (default): one GPU per rank, whole blocks; cpu: the ranks share one machine, blocks "
                        "cut in column tiles (--tile-bytes)")
    p.add_argument("--tile-bytes", type=_bytes, default=None, help="with --device cpu: as for mggcn train")
    p.add_argument("--train", type=float, default=None, help="fraction of vertices in the training split")
    p.add_argument("--order", choices=ORDERS, default=_DEFAULTS.order)
    p.add_argument("--input-dropout", type=float, default=0.0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--directed", action="store_true",
                   help="Â differs from Âᵀ (a directed graph, or --norm mean): the blocks of Âᵀ are stored too")


def _bench(args: argparse.Namespace) -> int:
    from mggcn.tools.bench import format_table, options_from, run_bench, write_report

    keys = ("nodes", "degree", "features", "classes", "hidden", "epochs", "warmup", "repeats", "threads", "nprocs",
            "partitions", "ids", "device", "pyg", "pyg_adj", "seed", "graph_cache", "timeout_s", "mmap_threshold",
            "tile_bytes", "compare_tiles", "shm", "compare_shm")
    opts = options_from(args.small, saint=args.saint_graph, **{k: getattr(args, k) for k in keys})
    report = run_bench(opts, log=lambda line: print(line, flush=True))
    print(format_table(report))
    if args.out:
        write_report(report, args.out)
    return 0


def _plan(args: argparse.Namespace) -> int:
    from mggcn.tools.plan import PRESETS, format_plan, plan_memory
    from mggcn.training.trainer import epoch_tile_columns

    preset = PRESETS.get(args.dataset)
    sizes = {k: getattr(args, k) if getattr(args, k) is not None else getattr(preset, k, None)
             for k in ("nodes", "edges", "features", "classes", "train")}
    missing = [k for k in ("nodes", "edges", "features", "classes") if sizes[k] is None]
    if missing:
        raise GraphError(f"give --dataset or --{' --'.join(missing)}")
    if preset is not None:
        print(f"{preset.name}: {preset.source}")
    cfg = TrainConfig(hidden=args.hidden, order=args.order, input_dropout=args.input_dropout,
                      tile_bytes=args.tile_bytes)
    for nprocs in args.nprocs:
        tiles = epoch_tile_columns(cfg, sizes["nodes"], sizes["edges"], sizes["features"], sizes["classes"], nprocs,
                                   args.device, nprocs)
        plan = plan_memory(sizes["nodes"], sizes["edges"], sizes["features"], sizes["classes"], args.hidden,
                           nprocs, order=args.order, dropout=args.dropout, input_dropout=args.input_dropout,
                           train=sizes["train"] if sizes["train"] is not None else 0.5,
                           symmetric=not args.directed, tile_cols=tiles)
        print(format_plan(plan, preset.name if preset else "graph", args.memory))
    return 0


def _exit_status(result) -> int:
    """0, or 130 when a signal stopped training (the shell's code for an interrupted command)."""
    return 130 if result.stopped == "interrupted" else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"train": _train, "prepare": _prepare, "info": _info, "report": _report, "predict": _predict,
                "bench": _bench, "plan": _plan}
    try:
        return commands[args.command](args)
    except (GraphError, ValueError) as err:  # bad input or options, CheckpointError included
        print(f"mggcn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except FloatingPointError as err:  # NonFiniteLoss
        print(f"mggcn {args.command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
