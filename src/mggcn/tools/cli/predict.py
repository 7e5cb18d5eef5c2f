"""``mggcn predict``: classes, probabilities or embeddings of every vertex from a saved model."""

from __future__ import annotations

import argparse

from mggcn.config import ACTIVATIONS, MODELS, NORMS, TIMEOUT_MAX
from mggcn.tools.cli.common import (
    add_dataset_options,
    device_arg,
    job_failure_status,
    path_arg,
    positive_int,
    rank_zero,
    read_options,
)

HELP = "predict every vertex with a saved model"
DESCRIPTION = ("Class predictions (or probabilities, or a layer's embeddings) for every vertex, in the ORIGINAL "
               "vertex ids, on one process or --nprocs workers. MODEL is a file written by `mggcn train "
               "--save-model`; its sidecar MODEL.json gives the normalization and activation, and says whether the "
               "model is multi-label (then a 0/1 per label, logit > 0, and σ per label with --proba)."
               "\n\nexamples:\n"
               "  mggcn predict model.pt mygraph --out predictions.csv --nprocs 2\n"
               "  mggcn predict model.pt mygraph --out proba.npy --proba")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", type=path_arg, help="a file written by `mggcn train --save-model`")
    p.add_argument("dataset", help="as for `mggcn train`: a spec, a prepared directory, or a path with --format")
    p.add_argument("--out", type=path_arg, required=True,
                   help=".npy; .tsv or .tab: tab-separated; CSV for any other name ('vertex,prediction', multi-label "
                        "'vertex,label0,label1,...', or 'vertex,p0,p1,...') but another format's (.npz, .parquet, "
                        ".gz, ... are refused)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--proba", action="store_true",
                      help="class probabilities (softmax; a multi-label model: σ per label) instead of classes")
    what.add_argument("--embeddings", type=positive_int, default=None, metavar="LAYER",
                help="the output of layer LAYER (1..L, after its activation) instead of classes")
    add_dataset_options(p, as_trained=True)
    p.add_argument("--model", dest="kind", choices=MODELS, default=None,
                   help="check that MODEL is a gcn, sage, gin or gat model (default: read from MODEL's parameter "
                        "names)")
    p.add_argument("--norm", choices=NORMS, default=None, help="when MODEL has no MODEL.json (default sym)")
    p.add_argument("--activation", choices=ACTIVATIONS, default=None,
                   help="when MODEL has no MODEL.json (default relu)")
    p.add_argument("--nprocs", type=positive_int, default=None, help="local worker processes (default 1)")
    p.add_argument("--device", default="cpu", type=device_arg,
                   help="cpu or cuda (one GPU per rank, as for train); cuda:K: GPU K, for one rank per host; auto "
                        "picks cuda when visible (default cpu)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="CPU threads per rank (default: cores / local ranks)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help=f"seconds a collective may wait for a peer (at most {TIMEOUT_MAX})")


def run(args: argparse.Namespace) -> int:
    from mggcn.distributed.launch import WorkerError, launch
    from mggcn.training.job import share_dataset
    from mggcn.training.predict import PredictJob, check_predict, run_predict_job

    reader_options = read_options(args)
    if args.normalize_features is False:  # --no-normalize-features: not as the model's training read it
        reader_options["normalize_features"] = False
    output = "proba" if args.proba else "embeddings" if args.embeddings else "classes"
    job = PredictJob(model=args.model, dataset=args.dataset, out=args.out, output=output, layer=args.embeddings,
                     fmt=args.fmt, undirected=args.undirected, dedup=args.dedup, read_options=reader_options,
                     norm=args.norm, activation=args.activation, kind=args.kind, device=args.device,
                     threads=args.threads,
                     timeout_s=args.timeout)
    sizes: dict[str, int] = {}

    def note_size(dataset, _: int) -> None:
        sizes["num_nodes"] = dataset.num_nodes

    try:
        launch(run_predict_job, job, check_predict, args.nprocs, grace_s=max(60.0, args.timeout), on_checked=note_size,
               share=share_dataset)
    except WorkerError as err:  # JobInterrupted too: a signal before the workers could stop by themselves
        return job_failure_status(err, "predict")
    if rank_zero():  # under torchrun, rank 0 says it
        _say_written(args, sizes["num_nodes"])
    return 0


def _say_written(args: argparse.Namespace, num_nodes: int) -> None:
    from mggcn.training.outputs import model_multilabel

    multilabel = not args.embeddings and model_multilabel(args.model)
    what = (f"layer {args.embeddings}'s output" if args.embeddings else
            ("the label probabilities" if multilabel else "the class probabilities") if args.proba else
            "the predicted labels" if multilabel else "the predicted class")
    print(f"mggcn: wrote {what} of each of {num_nodes} vertices to {args.out}", flush=True)
