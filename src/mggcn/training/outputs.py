"""What a job writes and reads back: predictions, model files, and the one atomic writer they all go through.

Files are written whole or not at all: :func:`mggcn.utils.files.write_output` writes a temporary file next to the
target and renames it into place, so a reader (or a crash) never sees half a file; a special file (``/dev/null``, a
FIFO) is written to where it is, and a write that fails raises :class:`~mggcn.utils.files.OutputError` naming the
file.

The model file is what ``mggcn train --save-model FILE`` writes: a state dict under the names of PyG's ``GCN``,
``GraphSAGE`` or ``GIN`` (``convs.{l}.lin.weight``, ``convs.{l}.lin_l.weight`` or ``convs.{l}.nn.lins.0.weight``
[d_out, d_in], ...), from whose names the model follows and from whose shapes the layer sizes, and a sidecar
``FILE.json`` with the model (``gcn``, ``sage``, ``gin``), what the shapes do not tell (activation, normalization)
and the dataset it was trained on. Without the sidecar (e.g. weights from PyG), ``norm`` and ``activation`` must be
given or default to the trainer's defaults. A model trained on a multi-label dataset says so in its sidecar
(``"multilabel": true``): its predictions are then a 0/1 per label (logit > 0) and its probabilities σ per label; a
file without that entry (or without a sidecar) is single-label (argmax, softmax).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mggcn.config import ACTIVATIONS, NORMS, PRECISIONS, TrainConfig
from mggcn.data.formats.checks import check_memory
from mggcn.data.prepared.reader import MANIFEST, is_prepared
from mggcn.nn.model import LayerStack
from mggcn.nn.models import MODEL_TYPES, make_model, operator_for
from mggcn.training.checkpoint import Checkpointer, complex_entry, non_finite_entry
from mggcn.utils.errors import ConfigError, GraphError, unpickling_reason
from mggcn.utils.files import (
    check_not_held,
    check_writable,
    clipped,
    is_special,
    link_to_nothing,
    name_limit,
    same_file,
    write_output,
    written_in_place,
)

__all__ = ["CARD_FORMAT", "READING", "check_distinct", "check_output", "layers_as_convs", "load_model", "model_dims",
           "model_kind", "model_multilabel", "read_inputs", "save_model", "save_output", "save_predictions",
           "sidecar_path", "table_format", "trained_reading"]

CARD_FORMAT = "mggcn-model"
CARD_VERSION = 2  # 2: may say "multilabel"; a single-label model's description is still written as version 1
_DEFAULTS = TrainConfig()


def check_output(option: str, path: str | None, sidecar: bool = False) -> None:
    """Raise :class:`ConfigError` (naming ``option``, e.g. ``save_model``) unless a file can be written at ``path``:
    its directory exists and takes a new file, and it is not a directory; or it is a special file (``/dev/null``, a
    FIFO), written to where it is. ``sidecar``: the model's ``path.json`` too (:func:`save_model`)."""
    if path is None:
        return
    if not path:  # the working directory's name, to the calls that take a path: no file
        raise ConfigError(f"{option} '': an empty path names no file", option)
    if path.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):  # open() would write the file without it
        raise ConfigError(f"{option} {path}: ends in '{path[-1]}', the name of a directory; give the file's name",
                          option)
    for target in (path, sidecar_path(path)) if sidecar and not written_in_place(path) else (path,):
        if written_in_place(target):
            _check_in_place(option, path, target)
            continue
        parent = os.path.dirname(os.path.realpath(target))  # where the temporary file goes (a link's target's)
        if not os.path.isdir(parent):
            nothing = link_to_nothing(target)  # a link on the way that loops (realpath stops there) or leads nowhere
            if nothing is not None:
                raise ConfigError(f"{option} {path}: {nothing}", option)
            why = "is a file, not a directory" if os.path.exists(parent) else "does not exist"
            raise ConfigError(f"{option} {path}: the directory {parent} {why}", option)
        if os.path.isdir(target):
            what = "is a directory" if target == path else f"its model description {target} is a directory"
            raise ConfigError(f"{option} {path}: {what}", option)
        name, limit = os.fsencode(os.path.basename(target)), name_limit(parent)
        if len(name) > limit:  # the rename of the finished file would fail, after the training
            what = "its name" if target == path else "the name of its model description"
            raise ConfigError(f"{option} {clipped(path)}: {what} is {len(name)} bytes long, and names in {parent} "
                              f"may have at most {limit}", option)
        check_writable(option, path, parent)
        check_not_held(option, target)


def _check_in_place(option: str, path: str, target: str) -> None:
    """A file written where it is that no one may write (``/proc/version``; root's ``access()`` says yes to it, and
    its write fails only after the training)."""
    mode = os.stat(target).st_mode
    if stat.S_ISREG(mode) and not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(f"{option} {path}: is read-only (mode {stat.S_IMODE(mode):04o}), written where it is",
                          option)


def check_distinct(outputs: Sequence[tuple[str, str | None]], inputs: Sequence[tuple[str, str | None]] = ()) -> None:
    """Raise :class:`ConfigError`, naming both, when two of ``outputs`` (``(setting, path)``; ``save_model`` with its
    description ``path.json``) are one file, or an output is a file this run reads, one of ``inputs``
    (``(label, path)``, the label written before the path: ``"features="`` for a setting, ``"the dataset "``;
    :func:`read_inputs`). Files compare as what they are: links followed, hard links by their inode, a path not
    there yet by its absolute form. A special file (``/dev/null``, a FIFO) is written where it is, and may take
    several outputs."""
    files: list[tuple[str, str, str]] = []
    for option, path in outputs:
        if not path or written_in_place(path):
            continue
        for file in (path, sidecar_path(path)) if option == "save_model" else (path,):
            subject = f"{option} {path}: " + ("" if file == path else f"its model description {file} ")
            for other, other_path, other_file in files:
                if same_file(file, other_file):
                    of = "" if other_file == other_path else "the model description of "
                    raise ConfigError(f"{subject}is the same file as {of}{other}={other_path}; give each output a "
                                      "path of its own", option)
            for label, source in inputs:
                if source and os.path.isfile(source) and same_file(file, source):
                    raise ConfigError(f"{subject}would replace {label}{source}, which this run reads; give the output "
                                      "another path", option)
            files.append((option, path, file))
    _check_checkpoint_names(outputs)


def _check_checkpoint_names(outputs: Sequence[tuple[str, str | None]]) -> None:
    """An output in the checkpoint directory by a checkpoint's name (``ckpt-000004.pt``) would replace a checkpoint
    of this run, or be replaced by one, and a resume would take it for one: refused, naming both."""
    directory = dict(outputs).get("checkpoint_dir")
    if not directory:
        return
    for option, path in outputs:
        if (option != "checkpoint_dir" and path and re.fullmatch(r"ckpt-\d+\.pt", os.path.basename(path))
                and same_file(os.path.dirname(os.path.abspath(path)), directory)):
            raise ConfigError(f"{option} {path}: has a checkpoint's name (ckpt-N.pt) in checkpoint_dir={directory}, "
                              "where this run writes its checkpoints; give the output another name", option)


def read_inputs(dataset: Any, read_options: Any = None, checkpoint_dir: str | None = None) -> list[tuple[str, str]]:
    """The files a job reads that an output could replace (:func:`check_distinct`): the dataset's file, or the
    manifest and arrays of a prepared directory; the reader's ``features``/``labels``/``split``; the checkpoints of
    ``checkpoint_dir``. Other files in those directories are left to the user (an earlier run's model beside its
    checkpoints is replaced by the next run as it should be)."""
    inputs = []
    if isinstance(dataset, str):
        inputs.append(("the dataset ", dataset))
        try:
            names = sorted(n for n in os.listdir(dataset) if n == MANIFEST or n.endswith(".npy"))
        except OSError:  # not a directory, or one that cannot be listed: its reader says what is wrong
            names = []
        if is_prepared(dataset):
            inputs += [("the prepared dataset's ", os.path.join(dataset, n)) for n in names]
    options = read_options if isinstance(read_options, dict) else {}
    inputs += [(f"{k}=", v) for k, v in options.items() if k in ("features", "labels", "split") and isinstance(v, str)]
    if isinstance(checkpoint_dir, str) and os.path.isdir(checkpoint_dir):
        inputs += [("the checkpoint ", f) for f in Checkpointer(checkpoint_dir).files()]
    return inputs


# Names whose extension says another format than the two outputs are written in (.npy, CSV): written as CSV, such a
# file is one that numpy or pandas cannot read by its name (pandas decompresses a .gz by its name).
_OTHER_FORMATS = (".npz", ".pt", ".pth", ".pkl", ".pickle", ".parquet", ".feather", ".arrow", ".h5", ".hdf5",
                  ".json", ".jsonl", ".xlsx", ".xls", ".mat", ".gz", ".bz2", ".xz", ".zip", ".zst", ".tar")


_SEPARATORS = {"csv": ",", "tsv": "\t"}


def table_format(option: str, path: str) -> str:
    """``npy`` for a ``.npy`` name (any case), ``tsv`` (tab-separated) for ``.tsv`` or ``.tab``, ``csv`` for any
    other but those of :data:`_OTHER_FORMATS`, which raise :class:`ConfigError` naming ``option``."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npy":
        return "npy"
    if ext in (".tsv", ".tab"):
        return "tsv"
    if ext in _OTHER_FORMATS:
        raise ConfigError(f"{option} {path}: {ext} is not a format the outputs are written in; give a .npy file, "
                          "a .tsv for tab-separated text, or a .csv (any other name) for CSV", option)
    return "csv"


def save_predictions(path: str, predictions: np.ndarray) -> None:
    """``.npy``: the array indexed by original vertex id (int64 [n]; multi-label uint8 [n, C]); otherwise CSV
    ``vertex,prediction`` lines, or multi-label ``vertex,label0,label1,...`` lines of a 0/1 per label (the layout of
    the probabilities, :func:`save_output`)."""
    if predictions.ndim == 2:
        save_output(path, predictions, "label", "save_predictions")
        return
    fmt = table_format("save_predictions", path)
    if fmt == "npy":
        write_output(path, lambda f: np.save(f, predictions))
        return
    sep = _SEPARATORS[fmt]

    def write_csv(f) -> None:
        f.write(f"vertex{sep}prediction\n")
        np.savetxt(f, np.stack([np.arange(predictions.shape[0]), predictions], axis=1), fmt="%d", delimiter=sep)

    write_output(path, write_csv, text=True)


def save_output(path: str, values: np.ndarray, column: str = "h", option: str = "out") -> None:
    """``.npy`` as is; otherwise CSV with a ``vertex`` column: ``vertex,prediction`` for classes,
    ``vertex,{column}0,{column}1,...`` for a matrix (integers as such: a multi-label prediction's 0/1)."""
    if values.ndim == 1:
        save_predictions(path, values)
        return
    table_fmt = table_format(option, path)
    if table_fmt == "npy":
        write_output(path, lambda f: np.save(f, values))
        return
    sep = _SEPARATORS[table_fmt]

    def write_csv(f) -> None:
        header = sep.join(["vertex"] + [f"{column}{k}" for k in range(values.shape[1])])
        table = np.concatenate([np.arange(values.shape[0])[:, None], values], axis=1)
        fmt = ["%d"] + ["%d" if values.dtype.kind in "iub" else "%.7g"] * values.shape[1]
        np.savetxt(f, table, fmt=fmt, delimiter=sep, header=header, comments="")

    write_output(path, write_csv, text=True)


def sidecar_path(path: str | os.PathLike) -> str:
    return os.fspath(path) + ".json"


def model_kind(state_dict: dict[str, torch.Tensor], source: str = "model") -> str:
    """The name of the model whose parameter names ``state_dict`` has: of the models all of whose first layer's
    names (:meth:`~mggcn.nn.model.LayerStack.state_keys`) it holds, the one with the most (a GAT's layer has a GCN's
    names and its attention vectors)."""
    if "convs.0.att" in state_dict and "convs.0.lin_l.weight" in state_dict:  # a SAGE layer's names and more
        raise GraphError(f"{source}: the state dict of a GATv2 (PyG's GATv2Conv: lin_l, lin_r and att), which mggcn "
                         "does not train; its GAT is PyG's GATConv (lin, att_src, att_dst)", "save_model")
    found = [(len(cls.state_keys()), kind) for kind, cls in MODEL_TYPES.items()
             if all(key.format(0) in state_dict for key in cls.state_keys())]
    if found:
        return max(found)[1]
    sequential = next((key for key in state_dict if re.search(r"(^|\.)nn\.\d+\.weight$", key)), None)
    if sequential is not None:  # GINConv(torch.nn.Sequential(Linear, ReLU, Linear)), as many tutorials write it
        raise GraphError(f"{source}: {sequential} is a GIN layer's MLP as a torch.nn.Sequential; mggcn reads GIN "
                         "layers in the layout of PyG's GIN model (nn.lins.0.weight, nn.lins.1.weight: "
                         "torch_geometric.nn.MLP), whose weights these can be copied into", "save_model")
    names = ", ".join(f"{cls.__name__} ({cls.layer_weight.format(0)})" for cls in MODEL_TYPES.values())
    raise GraphError(f"{source}: not the state dict of a model mggcn trains (none of the weights of {names}); give a "
                     "file written by save_model=", "save_model")


def layers_as_convs(state_dict: dict[str, torch.Tensor], source: str = "model") -> dict[str, torch.Tensor]:
    """``state_dict`` with its layers under the names of PyG's models (``convs.{l}.``), for the weights of a model a
    user wrote around PyG's layers: PyG's own examples name them ``conv1``, ``conv2``; a ``ModuleList`` ``layers.0``;
    DistributedDataParallel adds ``module.``; one layer's own state dict has no prefix. A layer is where a model's
    first weight name (``lin.weight``, ``lin_l.weight``, ``nn.lins.0.weight``) sits; layers numbered alike
    (``conv1``, ``conv2``, ...) go in their numbers' order, others in the order the model made them (the state
    dict's). Tensors outside every layer (a final ``Linear``, a norm between layers) are in no model mggcn runs:
    refused in one line. A state dict that already has ``convs.0.`` is returned as it is, less the prefix that
    DistributedDataParallel (``module.``) or ``torch.compile`` (``_orig_mod.``) put before every key."""
    state_dict = _shared_gat_weight(_unwrapped(state_dict), source)
    if any(key.startswith("convs.0.") for key in state_dict):
        count = len({key.split(".")[1] for key in state_dict if key.startswith("convs.")})
        _refuse_outside(source, [key for key in state_dict if not key.startswith(("convs.", "norms."))],
                        f"convs.0 to convs.{count - 1}", " (PyG's models end in a Linear with jk=)")
        return state_dict
    ends = {cls.layer_weight.format(0).removeprefix("convs.0.") for cls in MODEL_TYPES.values()}
    layers: list[str] = []
    for key in state_dict:
        for end in ends:
            if key == end or key.endswith("." + end):
                prefix = key[: len(key) - len(end)]  # with its dot, or empty
                if prefix not in layers:
                    layers.append(prefix)
    if len(layers) > 1 and "" in layers:  # a top-level lin.weight beside layers is a Linear of the model's own
        layers.remove("")
    if not layers:
        return state_dict
    numbered = [re.fullmatch(r"(.*?)(\d+)\.", p) for p in layers]
    if all(numbered) and len({m.group(1) for m in numbered}) == 1:
        layers = [p for _, p in sorted((int(m.group(2)), p) for m, p in zip(numbered, layers))]
    renamed, outside = {}, []
    for key, tensor in state_dict.items():
        layer = max((p for p in layers if key.startswith(p)), key=len, default=None)
        if layer is None:
            outside.append(key)
        else:
            renamed[f"convs.{layers.index(layer)}.{key[len(layer):]}"] = tensor
    _refuse_outside(source, outside, ", ".join(p.rstrip(".") or "(top)" for p in layers))
    return renamed


def _refuse_outside(source: str, outside: list[str], layers: str, why: str = "") -> None:
    """Refuse the tensors ``outside`` every layer (``layers``, as said) in one line, if any."""
    if outside:
        shown = ", ".join(outside[:4]) + (", ..." if len(outside) > 4 else "")
        raise GraphError(f"{source}: {shown} belong to none of the layers {layers}{why}; mggcn's models are their "
                         "graph convolutions, with PyG's batch norms between them (norms.0, norms.1, ...) and nothing "
                         "else", "save_model")


_WRAPPERS = ("module.", "_orig_mod.")  # DistributedDataParallel's, torch.compile's


def _shared_gat_weight(state_dict: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """``state_dict`` with the weight of each GAT layer saved by PyG before 2.5 under ``lin.weight``: its GATConv
    wrote the one linear map of a layer twice, as ``lin_src.weight`` and ``lin_dst.weight``. Two different maps
    are a layer for bipartite graphs (``in_channels=(source, target)``), which mggcn's GAT does not have: refused."""
    gat_layers = {key.removesuffix("att_src") for key in state_dict if key.endswith("att_src")}
    shared = {key.removesuffix("lin_src.weight") for key in state_dict
              if key.endswith("lin_src.weight") and key.removesuffix("lin_src.weight") in gat_layers}
    renamed = {}
    for key, tensor in state_dict.items():
        prefix = key.removesuffix("lin_src.weight")
        if prefix in shared and key != prefix:
            dst = state_dict.get(f"{prefix}lin_dst.weight")
            if dst is not None and not torch.equal(tensor, dst):
                raise GraphError(f"{source}: {prefix}lin_src and {prefix}lin_dst differ: a GATConv for bipartite "
                                 "graphs (in_channels=(source, target)), which mggcn's GAT, one weight per layer, "
                                 "does not run", "save_model")
            renamed[f"{prefix}lin.weight"] = tensor
        elif not (key.endswith("lin_dst.weight") and key.removesuffix("lin_dst.weight") in shared):
            renamed[key] = tensor
    return renamed


def _unwrapped(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` without the wrappers' prefixes that every one of its keys has (one inside another too)."""
    while state_dict:
        wrapper = next((w for w in _WRAPPERS if all(key.startswith(w) for key in state_dict)), None)
        if wrapper is None:
            break
        state_dict = {key[len(wrapper):]: tensor for key, tensor in state_dict.items()}
    return state_dict


def model_dims(state_dict: dict[str, torch.Tensor], source: str = "model") -> list[int]:
    """``[d_0, ..., d_L]`` from the shapes of each layer's weights (layers numbered 0..L-1 without gaps), as the
    model of ``state_dict`` reads them (:meth:`~mggcn.nn.model.LayerStack.state_dims`)."""
    try:
        return MODEL_TYPES[model_kind(state_dict, source)].state_dims(state_dict)
    except ValueError as err:
        raise GraphError(f"{source}: {err}") from None


def save_model(path: str, state_dict: dict[str, torch.Tensor], config: TrainConfig, dataset: dict,
               **extra: Any) -> None:
    """Write the weights to ``path`` and the sidecar ``path.json`` (model, dims, activation, norm, dataset
    identity); none when ``path`` is a special file (``/dev/null``, a FIFO)."""
    card = {"format": CARD_FORMAT, "version": 1, "model": config.model,
            "dims": model_dims(state_dict, path), "activation": config.activation, "norm": config.norm,
            "precision": config.precision, "dataset": dataset, **extra}
    if dataset.get("multilabel"):  # its outputs are read per label (σ, logit > 0), which an mggcn reading version 1
        card.update(version=2, multilabel=True)  # alone would take for classes: it refuses version 2
    buffer = io.BytesIO()
    torch.save(state_dict, buffer)
    weights = buffer.getvalue()
    card["weights_sha256"] = hashlib.sha256(weights).hexdigest()  # the weights it describes (load_model checks)
    write_output(path, lambda f: f.write(weights))
    if written_in_place(path):  # weights streamed to a device or a pipe: no file beside it to describe them
        return

    def write_card(f) -> None:
        json.dump(card, f, indent=1)
        f.write("\n")

    write_output(sidecar_path(path), write_card, text=True)


def _read_card(path: str) -> dict | None:
    card_path = sidecar_path(path)
    if not os.path.exists(card_path):
        return None
    if is_special(card_path):  # a FIFO's open would wait for a writer, a device's read never end
        raise GraphError(f"{card_path}: is a device, FIFO or socket, not a model description")
    try:
        with open(card_path, encoding="utf-8") as f:
            card = json.load(f)
    except (OSError, ValueError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise GraphError(f"{card_path}: unreadable model description ({' '.join(str(err).split())[:100]})") from None
    except RecursionError:  # nesting deeper than the parser's recursion
        raise GraphError(f"{card_path}: unreadable model description (JSON nested too deep)") from None
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise GraphError(f"{card_path}: not a model description written by save_model=", "save_model")
    # a later version than this mggcn writes may mean what this one cannot read
    version = card.get("version", CARD_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise GraphError(f"{card_path}: version {version!r} is not a model description's version")
    if version > CARD_VERSION:
        raise GraphError(f"{card_path}: written by a newer mggcn (model description version {version}, this one "
                         f"reads up to {CARD_VERSION}); upgrade mggcn")
    if not isinstance(card.get("multilabel", False), bool):
        raise GraphError(f"{card_path}: multilabel {card['multilabel']!r} is not true or false")
    if card.get("precision", "fp32") not in PRECISIONS:  # predict computes in the precision the model trained in
        raise GraphError(f"{card_path}: precision {str(card['precision'])[:40]!r} is not one of "
                         f"{', '.join(PRECISIONS)}")
    return card


# how a model's training read its graph, in its card: its switches, and whether its features were synthesized (an
# edge list or Matrix Market file without its features file)
READING = ("undirected", "dedup", "normalize_features", "random_features")


def trained_reading(path: str) -> dict[str, bool]:
    """How the training of the model file ``path`` read its dataset (its sidecar's ``dataset.read``: ``undirected``,
    ``dedup``, ``normalize_features``, ``random_features``); empty where the sidecar is missing or does not say
    (a card written before ``random_features`` was recorded lacks that one)."""
    card = _read_card(path)
    read = card.get("dataset", {}).get("read", {}) if card is not None and isinstance(card.get("dataset"), dict) \
        else {}
    if not isinstance(read, dict) or not all(isinstance(read.get(k, False), bool) for k in READING):
        raise GraphError(f"{sidecar_path(path)}: dataset.read {read!r} is not a map of {', '.join(READING)} to true "
                         "or false")
    return {k: read[k] for k in READING if k in read}


def model_multilabel(path: str) -> bool:
    """Whether the model file ``path`` was trained multi-label (its sidecar says ``"multilabel": true``); a file
    without a sidecar is single-label."""
    card = _read_card(path)
    return card is not None and card.get("multilabel", False)


def load_model(path: str, norm: str | None = None, activation: str | None = None,
               note: bool = True, kind: str | None = None, rows: int = 0, ranks: int = 1) -> tuple[LayerStack, dict]:
    """The model of ``path`` on CPU in eval mode, and its description (``model``, ``dims``, ``activation``,
    ``norm``, ...).

    The model (``gcn``, ``sage``, ``gin``) is the one the parameter names say; ``kind``, when given, must agree.
    ``norm`` and ``activation`` are used where the sidecar ``path.json`` is missing (``note``: say on stderr which
    defaults stand in for missing ones); where it is present they must agree with it (a model is only right with
    the normalization and activation it was trained with). A model that ``ranks`` copies of, with one activation
    of its widest layer over ``rows`` vertices, would not fit this machine's memory is refused before it is made
    (:func:`_build`).
    """
    if not os.path.isfile(path):
        what = ("a directory" if os.path.isdir(path) else "a device, FIFO or socket" if os.path.exists(path)
                else None)
        raise GraphError(f"{path}: is {what}, not a model file" if what else f"{path}: no such model file")
    try:
        with open(path, "rb") as f:
            data = f.read()
        state_dict = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises many kinds on a bad file
        reason = unpickling_reason(err)
        if reason.startswith(("it calls ", "it builds ")):  # torch.save(model): objects, which are not unpickled
            raise GraphError(f"{path}: a pickled object, not a state dict ({reason}); mggcn reads a model's weights "
                             "alone: save them with torch.save(model.state_dict(), path)") from None
        raise GraphError(f"{path}: not a model file written by torch.save ({reason})") from None
    if not isinstance(state_dict, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                   for k, v in state_dict.items()):
        raise GraphError(f"{path}: not a state dict (names and tensors); give a file written by save_model=",
                         "save_model")
    complex_name = complex_entry(state_dict)
    if complex_name is not None:
        raise GraphError(f"{path}: {complex_name} holds complex numbers; a model's weights are real")
    state_dict = layers_as_convs(state_dict, path)
    found = model_kind(state_dict, path)
    dims = model_dims(state_dict, path)
    if kind is not None and kind != found:  # the file is not the model asked for
        raise GraphError(f"{path} holds a {found} model, not a {kind} one; leave the model kind out or give {found}")
    card = _card_of(path, found, dims, norm, activation, note)
    model = _build(path, found, dims, card["activation"], state_dict, rows, ranks).eval()
    non_finite = non_finite_entry(state_dict)  # after _build's memory check: a stride-0 view claims gigabytes
    if non_finite is not None:
        raise GraphError(f"{path}: {non_finite} holds NaN or infinite values; the model would predict NaN")
    if card.get("weights_sha256", None) not in (None, hashlib.sha256(data).hexdigest()):  # older ones say none
        raise GraphError(f"{sidecar_path(path)} describes other weights than {path} holds (replaced since, or the two "
                         f"written by two runs): save the model again, or delete {sidecar_path(path)} to read the "
                         "weights without it")
    return model, card


def _card_of(path: str, found: str, dims: list[int], norm: str | None, activation: str | None,
             note: bool) -> dict:
    """The description of the model of ``path`` (a ``found`` model of layers ``dims``): its sidecar, checked against
    the weights' shapes and the options given, or one made of those options and the defaults where there is none."""
    card = _read_card(path)
    if card is None:
        card = {"model": found, "dims": dims, "activation": activation or _DEFAULTS.activation,
                "norm": norm or _DEFAULTS.norm}
        # a model whose Â is its own whatever --norm says (GraphSAGE's, GIN's, GAT's) assumes no norm
        normed = len({operator_for(found, norm) for norm in NORMS}) > 1
        if note and ((normed and norm is None) or activation is None):
            assumed = f"norm {card['norm']} and " if normed else ""
            print(f"mggcn: {path}: no {os.path.basename(sidecar_path(path))}; assuming {assumed}activation "
                  f"{card['activation']}", file=sys.stderr, flush=True)
    else:
        if card.get("model", "gcn") != found:
            raise GraphError(f"{sidecar_path(path)} describes a {card.get('model', 'gcn')} model but {path} holds "
                             f"a {found} model")
        card.setdefault("model", found)
        if card.get("dims") != dims:
            raise GraphError(f"{sidecar_path(path)} describes layers {card.get('dims')} but {path} has {dims}")
        for option, given in (("norm", norm), ("activation", activation)):
            if given is not None and given != card.get(option):
                raise ConfigError(f"{option} {given}: the model was trained with {option} {card.get(option)} "
                                  f"({sidecar_path(path)}); leave {option} unset", option)
    for key, known in (("norm", NORMS), ("activation", ACTIVATIONS)):
        if card.get(key) not in known:
            where = sidecar_path(path) if os.path.exists(sidecar_path(path)) else path
            what = f"{key} {card[key]!r} is not" if key in card else f"no {key!r}, which must be"
            raise GraphError(f"{where}: {what} one of {', '.join(known)}")
    if card.get("model") not in MODEL_TYPES:
        raise GraphError(f"{sidecar_path(path)}: model {card.get('model')!r} is not one of {', '.join(MODEL_TYPES)}")
    return card


def _build(path: str, found: str, dims: list[int], activation: str, state_dict: dict[str, torch.Tensor],
           rows: int, ranks: int) -> LayerStack:
    """The model of ``state_dict``. Its tensors' shapes are what a file claims (a view of one element can claim
    gigabytes): a model larger than memory is refused before it is allocated, and a tensor of another shape than
    its layer's is said in one line."""
    need = 4 * (ranks * sum(t.numel() for t in state_dict.values()) + rows * max(dims))
    check_memory(path, need, f"layers of {dims}, their weights and one activation,")
    # GIN: ε, learnt or not, is read as a value; GAT: its heads from the attention vectors' shape
    model = make_model(found, dims, activation=activation, **MODEL_TYPES[found].state_options(state_dict))
    try:
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
    except RuntimeError as err:  # a tensor of another shape than the model's
        text = " ".join(str(err).split())
        raise GraphError(f"{path}: {text.split(': ', 1)[-1][:300]}") from None
    if missing or unexpected:
        said = [f"{what} {', '.join(names[:4])}{', ...' if len(names) > 4 else ''}"
                for what, names in (("no", missing), ("unexpected", unexpected)) if names]
        raise GraphError(f"{path}: {' and '.join(said)} for a {found} of layers {dims}: mggcn reads the tensors of "
                         f"PyG's {MODEL_TYPES[found].pyg_name} model as its default options build it")
    return model
