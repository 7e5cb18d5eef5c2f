"""Using a trained model: class predictions, probabilities or a layer's embeddings for every vertex, in the
ORIGINAL vertex ids, on one process or on P ranks with the trainer's partition and staged SpMM.

The model file is what ``mggcn train --save-model FILE`` writes, a GCN, GraphSAGE, GIN or GAT
(:mod:`mggcn.training.outputs`, which reads it back with :func:`~mggcn.training.outputs.load_model`). A
multi-label model (its sidecar says ``"multilabel": true``) predicts a 0/1 per label (logit > 0) and gives σ per
label as its probabilities.

Launch::

    mggcn predict model.pt DATA --format edgelist --out pred.csv              # classes, one process
    mggcn predict model.pt DATA --format edgelist --out proba.npy --proba --nprocs 4
    mggcn predict model.pt DATA --format edgelist --out h1.npy --embeddings 1

Legend: m = rows of this rank, n = vertices, d = output width, L = layers.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch

from mggcn.data.catalog import named
from mggcn.data.datasets import Dataset, as_dataset, open_dataset
from mggcn.data.graph import Graph, graph_from_pyg, is_pyg
from mggcn.data.prepared.reader import PreparedDataset, is_prepared
from mggcn.distributed.context import DistContext, check_host_gpus, init_distributed, job_device, shutdown
from mggcn.distributed.launch import launch
from mggcn.distributed.parallel_layout import ParallelLayout
from mggcn.distributed.partition import check_partition
from mggcn.distributed.sharding import release_dataset
from mggcn.distributed.spmm import StagedSpMM
from mggcn.nn.batch_norm import batch_norm_
from mggcn.nn.functional import activate
from mggcn.nn.loss import predictions
from mggcn.nn.model import LayerStack
from mggcn.nn.models import operator_for
from mggcn.training.checkpoint import is_checkpoint
from mggcn.training.job import check_threads, has_random_features, share_dataset
from mggcn.training.outputs import (
    check_distinct,
    check_output,
    load_model,
    read_inputs,
    save_output,
    sidecar_path,
    table_format,
    trained_reading,
)
from mggcn.training.precision import compute_dtype, precision_scope
from mggcn.training.settings import check_timeout
from mggcn.utils.errors import ConfigError, GraphError
from mggcn.utils.system import caller_settings_kept, job_defaults
from mggcn.utils.values import plain

__all__ = ["OUTPUTS", "PredictJob", "layer_output", "check_predict", "predict_on_rank",
           "run_predict_job", "predict"]

OUTPUTS = ("classes", "proba", "embeddings")


@torch.no_grad()
def layer_output(model: LayerStack, x: torch.Tensor, adj, layer: int | None = None) -> torch.Tensor:
    """``H_layer`` [m, d_layer]: the output of layer ``layer`` (1..L, after its batch norm, if any, and its
    activation: what layer ``layer + 1`` reads; ``L`` or ``None``: the logits), in eval mode. Only the layers up to
    ``layer`` run."""
    num_layers = len(model.convs)
    layer = num_layers if layer is None else _check_layer(layer, num_layers)
    model.eval()
    # Â·X first where training computed it so (whatever the order policy): the same products, rounded alike
    x_agg = adj.run(x) if model.caches_input_aggregation else None
    if layer == num_layers:
        return model(x, adj, x_aggregated=x_agg)
    head = LayerStack(model.dims[: layer + 1], activation=model.activation, seed=model.seed).to(x.device).eval()
    head.convs = model.convs[:layer]
    norms = getattr(model, "norms", None)  # --batch-norm: a norm after each hidden layer, before σ
    if norms is None:
        return activate(head(x, adj, x_aggregated=x_agg), model.activation)
    head.norms = norms[: layer - 1]
    return activate(batch_norm_(head(x, adj, x_aggregated=x_agg), norms[layer - 1], adj, head.workspace,
                                str(layer - 1)), model.activation)


def _check_layer(layer: int | None, num_layers: int) -> int:
    if layer is None:
        raise ConfigError(f"output embeddings needs the layer whose output to give: layer= 1..{num_layers}", "layer")
    if not 1 <= layer <= num_layers:
        raise ConfigError(f"layer {layer}: the model has layers 1..{num_layers}", "layer")
    return layer


@dataclass(frozen=True)
class PredictJob:
    """What to predict with which model, for which vertices, and where the result goes.

    ``output``: ``classes`` (int64 [n]; multi-label uint8 [n, C] of 0/1, 1 where the logit is above 0), ``proba``
    (softmax, float32 [n, C]; multi-label σ of each logit) or ``embeddings`` (float32 [n, d_layer] of layer
    ``layer``). ``out``: a ``.npy`` file, or CSV for any other name but another format's
    (``.npz``, ``.gz``: refused); ``None``: return it. ``undirected``, ``dedup`` and ``read_options``'
    ``normalize_features`` left out (None) read the dataset as the model's training read its own (its sidecar's
    ``dataset.read``); False reads it as stored.
    """

    model: str
    dataset: str | Graph
    out: str | None = None
    output: str = "classes"
    layer: int | None = None
    fmt: str | None = None
    undirected: bool | None = None  # None: as the model's training read its graph (its card), else False
    dedup: bool | None = None
    read_options: dict = field(default_factory=dict)  # normalize_features None or absent: as the training read it
    norm: str | None = None
    activation: str | None = None
    kind: str | None = None  # --model: checked against the saved model's
    device: str = "cpu"
    threads: int | None = None
    timeout_s: float = 60.0


def _open(job: PredictJob, note: bool = False) -> Dataset:
    trained = trained_reading(job.model) if os.path.isfile(job.model) else {}  # the card, read once
    reading = _reading(job, trained)
    from_card = [k for k, on in reading.items() if on and _given(job)[k] is None]
    if note and from_card and os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 says it
        flags = " ".join(f"--{k.replace('_', '-')}" for k in from_card)
        print(f"mggcn: reading {_name(job.dataset)} with {flags}, as the training of {job.model} read its graph "
              f"({os.path.basename(sidecar_path(job.model))}); {flags.replace('--', '--no-')} reads it as stored",
              file=sys.stderr, flush=True)
    options = {k: v for k, v in job.read_options.items() if k != "normalize_features"}
    if reading.pop("normalize_features"):
        options["normalize_features"] = True
    dataset = open_dataset(job.dataset, job.fmt, read_options=options, **reading)
    if note:
        _check_features(job, dataset, trained.get("random_features"))
    return dataset


def _check_features(job: PredictJob, dataset: Dataset, trained: bool | None) -> None:
    """A graph read without its features file has random ones: predictions from them are noise, unless the model
    was trained on random ones too (its card's ``random_features``). Refused where the card says its training read
    given features (``trained`` False); said on stderr where the card does not say (None: a PyG model's weights,
    an older card)."""
    if not has_random_features(dataset, job.fmt, job.read_options):
        return
    if trained is False:
        if isinstance(dataset, PreparedDataset):
            raise GraphError(f"{_name(job.dataset)}: prepared without a features file, it has random features, but "
                             f"{job.model} was trained on given ones: prepare it with that file (mggcn prepare "
                             "--features)")
        raise GraphError(f"{_name(job.dataset)}: read without its features file (features=), it has random features, "
                         f"but {job.model} was trained on given ones: give that file", "features")
    if trained is None and os.environ.get("RANK", "0") == "0":
        print(f"mggcn: {_name(job.dataset)} has random features (no features file given: --features); predictions "
              "from them mean something only for a model trained on the same", file=sys.stderr, flush=True)


def _reading(job: PredictJob, trained: dict[str, bool]) -> dict[str, bool]:
    """``undirected``, ``dedup``, ``normalize_features``: as the job gives them, and where it leaves one open (None),
    as the model's training read its graph (``trained``: :func:`~mggcn.training.outputs.trained_reading`) where the
    dataset takes it: a prepared directory was transformed when it was made, and only Planetoid files normalize
    features."""
    given = _given(job)
    takes = {"undirected": True, "dedup": True, "normalize_features": _planetoid(job)}
    if isinstance(job.dataset, str) and (job.fmt == "prepared" or (job.fmt is None and is_prepared(job.dataset))):
        takes = dict.fromkeys(takes, False)
    return {k: bool(v) if v is not None else trained.get(k, False) and takes[k] for k, v in given.items()}


def _given(job: PredictJob) -> dict[str, bool | None]:
    return {"undirected": job.undirected, "dedup": job.dedup,
            "normalize_features": job.read_options.get("normalize_features")}


def _planetoid(job: PredictJob) -> bool:
    if not isinstance(job.dataset, str):
        return False
    entry = named(job.dataset) if job.fmt is None else None
    return (entry.fmt if entry is not None else job.fmt) == "planetoid"


def _name(dataset: str | Graph) -> str:
    return dataset if isinstance(dataset, str) else getattr(dataset, "name", "the graph")


def _check_fields(job: PredictJob) -> None:
    """The types of the job's fields that a caller of :func:`predict` gives and the command line's parser fixes: one
    :class:`ConfigError` naming the field, never a ``TypeError`` from deep inside."""
    for option in ("undirected", "dedup"):
        if getattr(job, option) is not None and not isinstance(getattr(job, option), bool):
            raise ConfigError(f"{option} must be True, False or None, got {getattr(job, option)!r}", option)
    for option in ("out", "fmt", "norm", "activation", "kind"):
        if getattr(job, option) is not None and not isinstance(getattr(job, option), str):
            raise ConfigError(f"{option} must be a {'path' if option == 'out' else 'name'} (str), got "
                              f"{getattr(job, option)!r}", option)
    if job.layer is not None and (isinstance(job.layer, bool) or not isinstance(job.layer, int)):
        raise ConfigError(f"layer must be an integer, got {job.layer!r}", "layer")
    if not isinstance(job.read_options, dict):
        raise ConfigError(f"read_options must be a dict of reading options, got {job.read_options!r}",
                          "read_options")


def check_predict(job: PredictJob, nprocs: int) -> Dataset:
    """Everything that can be checked before workers start: output path, model, dataset against the model, P."""
    _check_fields(job)
    if job.output not in OUTPUTS:
        raise ConfigError(f"output must be one of {', '.join(OUTPUTS)}, got '{job.output}'", "output")
    if job.layer is not None and job.output != "embeddings":  # else the classes of the last layer, as if not given
        raise ConfigError(f"layer={job.layer} is for output='embeddings' (the outputs of that layer); "
                          f"output='{job.output}' is the last layer's", "layer")
    if not isinstance(job.model, str):
        what = ("a state dict" if isinstance(job.model, dict) else "a path object (give it as str(path))"
                if isinstance(job.model, os.PathLike) else f"a {type(job.model).__name__}")
        raise ConfigError(f"model must be the path of a saved model (mggcn's --save-model, or torch.save of a "
                          f"state dict), got {what}; save it with torch.save(model.state_dict(), PATH) and give "
                          "PATH", "model")
    check_output("out", job.out)
    model_files = [("the model ", job.model), ("the model description ", sidecar_path(job.model))]
    check_distinct([("out", job.out)], [*model_files, *read_inputs(job.dataset, job.read_options)])
    if job.out is not None:
        table_format("out", job.out)
    check_timeout(job.timeout_s)
    check_threads(job.threads)
    check_host_gpus(job_device(job.device), nprocs)
    if isinstance(job.model, str) and is_checkpoint(job.model):
        raise GraphError(f"{job.model}: a training checkpoint, not a model file; to predict with its weights, resume "
                         "from it with its epoch as epochs= and save_model=FILE, then give FILE", "save_model")
    dataset = _open(job, note=True)  # its size first: the model and one activation over its vertices must fit
    model, card = load_model(job.model, job.norm, job.activation, kind=job.kind, rows=dataset.num_nodes,
                             ranks=nprocs)
    _note_another_reading(job, dataset, card.get("dataset"))
    if job.output == "embeddings":
        _check_layer(job.layer, len(model.convs))
    if dataset.num_features != model.dims[0]:
        raise GraphError(f"{job.model} takes {model.dims[0]} features per vertex; {dataset.name} has "
                         f"{dataset.num_features}")
    check_partition(dataset.num_nodes, nprocs, "random")
    return dataset


def _note_another_reading(job: PredictJob, dataset: Dataset, trained: dict | None) -> None:
    """Say so when the dataset the model's training read (its description's ``dataset``) is named as this one and
    read to other sizes: the same file read otherwise (other options, or another mggcn's reading of them) is another
    graph, whose predictions differ without an error. A graph of another name, or one in memory (whose name is no
    file's), is a graph of its own (a model trained on one graph predicts on another), said nothing of."""
    if (not isinstance(trained, dict) or not isinstance(job.dataset, str) or trained.get("name") != str(dataset.name)
            or os.environ.get("RANK", "0") != "0"):
        return
    here, there = (dataset.num_nodes, dataset.num_edges), (trained.get("num_nodes"), trained.get("num_edges"))
    if here != there:
        print(f"mggcn: note: {dataset.name} reads as {here[0]:,} vertices and {here[1]:,} edges, where the training "
              f"of {job.model} read {_count(there[0])} and {_count(there[1])} "
              f"({os.path.basename(sidecar_path(job.model))}): "
              "another graph than the model was trained on (other reading options, or another version of mggcn, "
              "read it otherwise)", file=sys.stderr, flush=True)


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else repr(value)


def predict_on_rank(ctx: DistContext, job: PredictJob, dataset: Dataset | None = None) -> np.ndarray | None:
    """This rank's part of ``job`` in a joined process group: the outputs of every vertex on rank 0 (original
    order), ``None`` elsewhere. Rank 0 writes them to ``job.out`` when it is set."""
    if dataset is None:
        dataset = _open(job)
    model, card = load_model(job.model, job.norm, job.activation, note=False)  # check_predict said it
    widths = [model.dims[i] if conv.aggregate_first else model.dims[i + 1] for i, conv in enumerate(model.convs)]
    operator = operator_for(card["model"], card["norm"])  # the Â the model was trained with
    layout = ParallelLayout(ctx.world_size, ordering="random")  # any renumbering: the rows are gathered back
    # a model trained in bf16 (or tf32, on a GPU) predicts in it, as its training measured it (its weights are
    # float32 either way)
    dtype = compute_dtype("bf16" if card.get("precision") == "bf16" else "fp32")
    shard = layout.shard(dataset, ctx, operator, max(widths)).to(ctx.device, dtype)
    release_dataset(dataset)
    del dataset
    model.to(ctx.device, dtype)
    adj = StagedSpMM(ctx, shard.adj, shard.adj_t)
    tf32 = card.get("precision") == "tf32" and torch.device(ctx.device).type == "cuda"  # a CPU has no TF32 GEMMs
    with precision_scope("tf32" if tf32 else "fp32", ctx.device):
        if job.output == "embeddings":
            rows = layer_output(model, shard.x, adj, job.layer).float()
        else:  # the logits in float32, as the loss and the accuracies read them
            rows = _read_logits(layer_output(model, shard.x, adj).float(), job.output, card.get("multilabel", False))
    out = ParallelLayout.gather_original(ctx, shard.partition, rows)
    if ctx.is_main and job.out is not None:
        save_output(job.out, out, {"proba": "p", "classes": "label"}.get(job.output, "h"))
    return out


def _read_logits(logits: torch.Tensor, output: str, multilabel: bool) -> torch.Tensor:
    """Probabilities (``output`` ``proba``) or predictions: softmax and argmax, or for a ``multilabel`` model σ and
    logit > 0 per label."""
    if output != "proba":
        return predictions(logits, multilabel)
    return logits.sigmoid() if multilabel else logits.softmax(dim=1)


def run_predict_job(job: PredictJob, dataset: Dataset | None = None) -> np.ndarray | None:
    """The body of every rank: join the job, predict, leave. Returns the outputs on rank 0 when ``job.out`` is
    ``None`` (otherwise they are written there and not carried back). In the caller's process the thread count
    and warning filters are as they were on return (:func:`mggcn.utils.system.caller_settings_kept`)."""
    with caller_settings_kept():
        ctx = init_distributed(job.device, job.timeout_s, job.threads)
        try:
            out = predict_on_rank(ctx, job, dataset)
        except BaseException:
            shutdown(clean=False)
            raise
        shutdown(clean=True)
    return out if job.out is None else None


def predict(model: str, dataset: str | Graph | Any, nprocs: int | None = None, output: str = "classes",
            layer: int | None = None, **options: Any) -> np.ndarray:
    """Outputs of the saved ``model`` for every vertex of ``dataset``, in original vertex order.

    Args:
        model: a file written by ``mggcn train --save-model`` (or :meth:`mggcn.api.TrainedModel.save`).
        dataset: a dataset spec or path (with ``fmt=``), a :class:`~mggcn.Graph`, or a PyG ``Data`` (its
            ``edge_index`` and ``x``; labels and masks are not needed).
        nprocs: local worker processes (the graph is partitioned as for training; 1 or None: in this process). In a
            script that torchrun started, each of its processes is one rank (leave ``nprocs`` out, or give torchrun's
            world size); rank 0 returns the outputs, the others None.
        output: ``classes`` -> int64 [n]; ``proba`` -> float32 [n, C]; ``embeddings`` -> float32 [n, d_layer]. A
            multi-label model (trained on labels [n, C]): ``classes`` -> uint8 [n, C] of 0/1 (logit > 0),
            ``proba`` -> σ per label.
        layer: for ``embeddings``, the layer 1..L whose output is returned.
        options: :class:`PredictJob` fields (``fmt``, ``norm``, ``activation``, ``kind``, ``device``,
            ``read_options``, ...).
    """
    unknown = sorted(set(options) - {f.name for f in fields(PredictJob)})
    if unknown:
        raise TypeError(f"mggcn.predict() got unknown options {unknown}; see help(mggcn.predict)")
    nprocs, layer, options = plain(nprocs), plain(layer), {key: plain(value) for key, value in options.items()}
    if is_pyg(dataset):  # prediction reads only the edges and features: no labels or splits needed
        dataset = graph_from_pyg(dataset, labelled=False)
    model = os.fspath(model) if isinstance(model, os.PathLike) else model
    if isinstance(options.get("out"), os.PathLike):  # a pathlib.Path, as the str the command line gives
        options["out"] = os.fspath(options["out"])
    job = PredictJob(model=model, dataset=as_dataset(dataset), output=output, layer=layer, **options)
    with job_defaults():  # the model file is read here too: as the job reads it, whatever the caller's defaults
        return launch(run_predict_job, job, check_predict, nprocs, grace_s=max(60.0, job.timeout_s),
                      share=share_dataset)
