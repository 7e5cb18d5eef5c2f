"""``mggcn predict``: classes, probabilities or embeddings of every vertex from a saved model."""

from __future__ import annotations

import argparse
import os
import sys

from mggcn.config import ACTIVATIONS, DEVICES, NORMS
from mggcn.tools.cli.common import add_dataset_options, positive_int, read_options, under_torchrun

HELP = "predict every vertex with a saved model"
DESCRIPTION = ("Class predictions (or probabilities, or a layer's embeddings) for every vertex, in the ORIGINAL "
               "vertex ids, on one process or --nprocs workers. MODEL is a file written by `mggcn train "
               "--save-model`; its sidecar MODEL.json gives the normalization and activation.\n\nexamples:\n"
               "  mggcn predict model.pt mygraph --out predictions.csv --nprocs 2\n"
               "  mggcn predict model.pt mygraph --out proba.npy --proba")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a file written by `mggcn train --save-model`")
    p.add_argument("dataset", help="as for `mggcn train`: a spec, a prepared directory, or a path with --format")
    p.add_argument("--out", required=True,
                   help=".npy, or CSV for any other name ('vertex,prediction' or 'vertex,p0,p1,...')")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--proba", action="store_true", help="class probabilities (softmax) instead of classes")
    what.add_argument("--embeddings", type=positive_int, default=None, metavar="LAYER",
                help="the output of layer LAYER (1..L, after its activation) instead of classes")
    add_dataset_options(p)
    p.add_argument("--norm", choices=NORMS, default=None, help="when MODEL has no MODEL.json (default sym)")
    p.add_argument("--activation", choices=ACTIVATIONS, default=None,
                   help="when MODEL has no MODEL.json (default relu)")
    p.add_argument("--nprocs", type=positive_int, default=None, help="local worker processes (default 1)")
    p.add_argument("--device", default="cpu", choices=DEVICES)
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads per rank")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a collective may wait for a peer")


def run(args: argparse.Namespace) -> int:
    from mggcn.distributed.launch import WorkerError, run_workers
    from mggcn.training.predict import PredictJob, check_predict, run_predict_job

    reader_options = read_options(args)
    output = "proba" if args.proba else "embeddings" if args.embeddings else "classes"
    job = PredictJob(model=args.model, dataset=args.dataset, out=args.out, output=output, layer=args.embeddings,
                     fmt=args.fmt, undirected=args.undirected, dedup=args.dedup, read_options=reader_options,
                     norm=args.norm, activation=args.activation, device=args.device, threads=args.threads,
                     timeout_s=args.timeout)
    if under_torchrun():
        num_nodes = check_predict(job, int(os.environ["WORLD_SIZE"])).num_nodes
        run_predict_job(job)
        if int(os.environ.get("RANK", "0")) == 0:
            _say_written(args, num_nodes)
        return 0
    nprocs = args.nprocs or 1
    dataset = check_predict(job, nprocs)
    num_nodes = dataset.num_nodes
    if nprocs == 1:
        run_predict_job(job, dataset)
        _say_written(args, num_nodes)
        return 0
    del dataset
    try:
        run_workers(run_predict_job, nprocs, (job,), grace_s=max(60.0, args.timeout))
    except WorkerError as err:
        if err.detail.startswith("BrokenPipeError"):  # rank 0's reader went away (| head): stop quietly
            raise BrokenPipeError from None
        print(f"mggcn: {err}", file=sys.stderr)
        return 1
    _say_written(args, num_nodes)
    return 0


def _say_written(args: argparse.Namespace, num_nodes: int) -> None:
    what = ("the class probabilities" if args.proba else f"layer {args.embeddings}'s output" if args.embeddings
            else "the predicted class")
    print(f"mggcn: wrote {what} of each of {num_nodes} vertices to {args.out}", flush=True)
