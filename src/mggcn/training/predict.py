"""Using a trained model: class predictions, probabilities or a layer's embeddings for every vertex, in the
ORIGINAL vertex ids, on one process or on P ranks with the trainer's partition and staged SpMM.

The model file is what ``mggcn train --save-model FILE`` writes: a state dict under PyG's names
(``convs.{l}.lin.weight`` [d_out, d_in], ``convs.{l}.bias`` [d_out]), from whose shapes the layer sizes follow, and
a sidecar ``FILE.json`` with what the shapes do not tell (activation, normalization) and the dataset it was trained
on. Without the sidecar (e.g. weights from PyG), ``norm`` and ``activation`` must be given or default to the
trainer's defaults.

Launch::

    mggcn predict model.pt DATA --format edgelist --out pred.csv              # classes, one process
    mggcn predict model.pt DATA --format edgelist --out proba.npy --proba --nprocs 4
    mggcn predict model.pt DATA --format edgelist --out h1.npy --embeddings 1

Legend: m = rows of this rank, n = vertices, d = output width, L = layers.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mggcn.config import ACTIVATIONS, NORMS, TrainConfig
from mggcn.data.datasets import Dataset, open_dataset
from mggcn.data.graph import Graph, GraphError
from mggcn.distributed.context import DistContext, init_distributed, shutdown
from mggcn.distributed.launch import run_workers
from mggcn.distributed.spmm import StagedSpMM
from mggcn.nn.model import GCN, activate
from mggcn.training.job import atomic_write, check_output, check_threads, save_predictions
from mggcn.training.trainer import gather_original, shard_tile_columns

__all__ = ["OUTPUTS", "PredictJob", "model_dims", "save_model", "load_model", "gather_original", "layer_output",
           "check_predict", "predict_on_rank", "run_predict_job", "predict"]

OUTPUTS = ("classes", "proba", "embeddings")
CARD_FORMAT = "mggcn-model"
CARD_VERSION = 1
_DEFAULTS = TrainConfig()


def sidecar_path(path: str) -> str:
    return path + ".json"


def model_dims(state_dict: dict[str, torch.Tensor], source: str = "model") -> list[int]:
    """``[d_0, ..., d_L]`` from the shapes of ``convs.{l}.lin.weight`` (layers numbered 0..L-1 without gaps)."""
    dims: list[int] = []
    layer = 0
    while f"convs.{layer}.lin.weight" in state_dict:
        d_out, d_in = state_dict[f"convs.{layer}.lin.weight"].shape
        if dims and dims[-1] != d_in:
            raise GraphError(f"{source}: layer {layer} takes {d_in} inputs but layer {layer - 1} gives {dims[-1]}")
        dims = dims or [int(d_in)]
        dims.append(int(d_out))
        layer += 1
    if not layer:
        raise GraphError(f"{source}: not a GCN state dict (no convs.0.lin.weight); "
                         "give a file written by `mggcn train --save-model`")
    return dims


def save_model(path: str, state_dict: dict[str, torch.Tensor], config: TrainConfig, dataset: dict,
               **extra: Any) -> None:
    """Write the weights to ``path`` and the sidecar ``path.json`` (dims, activation, norm, dataset identity)."""
    card = {"format": CARD_FORMAT, "version": CARD_VERSION, "dims": model_dims(state_dict, path),
            "activation": config.activation, "norm": config.norm, "dataset": dataset, **extra}
    atomic_write(path, lambda tmp: torch.save(state_dict, tmp))

    def write_card(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(card, f, indent=1)
            f.write("\n")

    atomic_write(sidecar_path(path), write_card)


def _read_card(path: str) -> dict | None:
    card_path = sidecar_path(path)
    if not os.path.exists(card_path):
        return None
    try:
        with open(card_path, encoding="utf-8") as f:
            card = json.load(f)
    except (OSError, ValueError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise GraphError(f"{card_path}: unreadable model description ({' '.join(str(err).split())[:100]})") from None
    except RecursionError:  # nesting deeper than the parser's recursion
        raise GraphError(f"{card_path}: unreadable model description (JSON nested too deep)") from None
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise GraphError(f"{card_path}: not a model description written by `mggcn train --save-model`")
    return card


def load_model(path: str, norm: str | None = None, activation: str | None = None,
               note: bool = True) -> tuple[GCN, dict]:
    """The model of ``path`` on CPU in eval mode, and its description (``dims``, ``activation``, ``norm``, ...).

    ``norm`` and ``activation`` are used where the sidecar ``path.json`` is missing (``note``: say on stderr which
    defaults stand in for missing ones); where it is present they must agree with it (a model is only right with
    the normalization and activation it was trained with).
    """
    if not os.path.isfile(path):
        raise GraphError(f"{path}: no such model file")
    try:
        state_dict = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises many kinds on a bad file
        raise GraphError(f"{path}: not a model file ({type(err).__name__}: {err})") from None
    if not isinstance(state_dict, dict):
        raise GraphError(f"{path}: not a state dict")
    dims = model_dims(state_dict, path)
    card = _read_card(path)
    if card is None:
        card = {"dims": dims, "activation": activation or _DEFAULTS.activation, "norm": norm or _DEFAULTS.norm}
        if note and (norm is None or activation is None):
            print(f"mggcn: {path}: no {os.path.basename(sidecar_path(path))}; assuming --norm {card['norm']} "
                  f"--activation {card['activation']}", file=sys.stderr, flush=True)
    else:
        if card.get("dims") != dims:
            raise GraphError(f"{sidecar_path(path)} describes layers {card.get('dims')} but {path} has {dims}")
        for option, given in (("norm", norm), ("activation", activation)):
            if given is not None and given != card.get(option):
                raise GraphError(f"--{option} {given}: the model was trained with --{option} {card.get(option)} "
                                 f"({sidecar_path(path)}); drop --{option}")
    for key, known in (("norm", NORMS), ("activation", ACTIVATIONS)):
        if card.get(key) not in known:
            where = sidecar_path(path) if os.path.exists(sidecar_path(path)) else path
            what = f"{key} {card[key]!r} is not" if key in card else f"no {key!r}, which must be"
            raise GraphError(f"{where}: {what} one of {', '.join(known)}")
    model = GCN(dims, activation=card["activation"])
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if missing or unexpected:
        raise GraphError(f"{path}: missing {missing} / unexpected {unexpected} entries for a GCN of layers {dims}")
    return model.eval(), card


@torch.no_grad()
def layer_output(model: GCN, x: torch.Tensor, adj, layer: int | None = None) -> torch.Tensor:
    """``H_layer`` [m, d_layer]: the output of layer ``layer`` (1..L, after its activation; ``L`` or ``None``: the
    logits), in eval mode. Only the layers up to ``layer`` run."""
    num_layers = len(model.convs)
    layer = num_layers if layer is None else _check_layer(layer, num_layers)
    model.eval()
    if layer == num_layers:
        return model(x, adj)
    head = GCN(model.dims[: layer + 1], activation=model.activation).to(x.device).eval()
    head.convs = model.convs[:layer]
    return activate(head(x, adj), model.activation)


def _check_layer(layer: int | None, num_layers: int) -> int:
    if layer is None or not 1 <= layer <= num_layers:
        raise GraphError(f"--embeddings {layer}: the model has layers 1..{num_layers}")
    return layer


@dataclass(frozen=True)
class PredictJob:
    """What to predict with which model, for which vertices, and where the result goes.

    ``output``: ``classes`` (int64 [n]), ``proba`` (softmax, float32 [n, C]) or ``embeddings`` (float32
    [n, d_layer] of layer ``layer``). ``out``: a ``.npy`` file, or CSV for any other name; ``None``: return it.
    """

    model: str
    dataset: str | Graph
    out: str | None = None
    output: str = "classes"
    layer: int | None = None
    fmt: str | None = None
    undirected: bool = False
    dedup: bool = False
    read_options: dict = field(default_factory=dict)
    norm: str | None = None
    activation: str | None = None
    device: str = "cpu"
    threads: int | None = None
    timeout_s: float = 60.0


def _open(job: PredictJob) -> Dataset:
    return open_dataset(job.dataset, job.fmt, job.undirected, job.dedup, job.read_options)


def check_predict(job: PredictJob, nprocs: int) -> Dataset:
    """Everything that can be checked before workers start: output path, model, dataset against the model, P."""
    if job.output not in OUTPUTS:
        raise GraphError(f"output must be one of {', '.join(OUTPUTS)}, got '{job.output}'")
    check_output("--out", job.out)
    check_threads(job.threads)
    model, _ = load_model(job.model, job.norm, job.activation)
    if job.output == "embeddings":
        _check_layer(job.layer, len(model.convs))
    dataset = _open(job)
    if dataset.num_features != model.dims[0]:
        raise GraphError(f"{job.model} takes {model.dims[0]} features per vertex; {dataset.name} has "
                         f"{dataset.num_features}")
    dataset.partition(nprocs, 0, "random")  # raises for P > n
    return dataset


def predict_on_rank(ctx: DistContext, job: PredictJob, dataset: Dataset | None = None) -> np.ndarray | None:
    """This rank's part of ``job`` in a joined process group: the outputs of every vertex on rank 0 (original
    order), ``None`` elsewhere. Rank 0 writes them to ``job.out`` when it is set."""
    if dataset is None:
        dataset = _open(job)
    model, card = load_model(job.model, job.norm, job.activation, note=False)  # check_predict said it
    part = dataset.partition(ctx.world_size, 0, "random")
    widths = [conv.lin.in_features if conv.aggregate_first else conv.lin.out_features for conv in model.convs]
    tiles = shard_tile_columns(_DEFAULTS, dataset, ctx, max(widths))
    shard = dataset.shard(part, ctx.rank, card["norm"], tile_cols=tiles).to(ctx.device)
    del dataset
    model.to(ctx.device)
    adj = StagedSpMM(ctx, shard.adj, shard.adj_t)
    if job.output == "embeddings":
        rows = layer_output(model, shard.x, adj, job.layer)
    else:
        logits = layer_output(model, shard.x, adj)
        rows = logits.softmax(dim=1) if job.output == "proba" else logits.argmax(dim=1)
    out = gather_original(ctx, shard, rows)
    if ctx.is_main and job.out is not None:
        save_output(job.out, out, "p" if job.output == "proba" else "h")
    return out


def run_predict_job(job: PredictJob, dataset: Dataset | None = None) -> np.ndarray | None:
    """The body of every rank: join the job, predict, leave. Returns the outputs on rank 0 when ``job.out`` is
    ``None`` (otherwise they are written there and not carried back)."""
    ctx = init_distributed(job.device, job.timeout_s, job.threads)
    try:
        out = predict_on_rank(ctx, job, dataset)
    except BaseException:
        shutdown(clean=False)
        raise
    shutdown(clean=True)
    return out if job.out is None else None


def save_output(path: str, values: np.ndarray, column: str = "h") -> None:
    """``.npy`` as is; otherwise CSV with a ``vertex`` column: ``vertex,prediction`` for classes,
    ``vertex,{column}0,{column}1,...`` for a matrix."""
    if values.ndim == 1:
        save_predictions(path, values)
        return
    if path.endswith(".npy"):
        atomic_write(path, lambda tmp: np.save(tmp, values))
        return

    def write_csv(tmp: str) -> None:
        header = ",".join(["vertex"] + [f"{column}{k}" for k in range(values.shape[1])])
        table = np.concatenate([np.arange(values.shape[0])[:, None], values], axis=1)
        fmt = ["%d"] + ["%.7g"] * values.shape[1]
        np.savetxt(tmp, table, fmt=fmt, delimiter=",", header=header, comments="")

    atomic_write(path, write_csv)


def predict(model: str, dataset: str | Graph | Any, nprocs: int = 1, output: str = "classes",
            layer: int | None = None, **options: Any) -> np.ndarray:
    """Outputs of the saved ``model`` for every vertex of ``dataset``, in original vertex order.

    Args:
        model: a file written by ``mggcn train --save-model`` (or :meth:`mggcn.api.TrainedModel.save`).
        dataset: a dataset spec or path (with ``fmt=``), a :class:`~mggcn.Graph`, or a PyG ``Data``.
        nprocs: local worker processes (the graph is partitioned as for training).
        output: ``classes`` -> int64 [n]; ``proba`` -> float32 [n, C]; ``embeddings`` -> float32 [n, d_layer].
        layer: for ``embeddings``, the layer 1..L whose output is returned.
        options: :class:`PredictJob` fields (``fmt``, ``norm``, ``activation``, ``device``, ``read_options``, ...).
    """
    from mggcn.api import as_dataset

    job = PredictJob(model=model, dataset=as_dataset(dataset), output=output, layer=layer, **options)
    checked = check_predict(job, nprocs)
    if nprocs == 1:
        return run_predict_job(job, checked)
    del checked
    return run_workers(run_predict_job, nprocs, (job,), grace_s=max(60.0, job.timeout_s))[0]
