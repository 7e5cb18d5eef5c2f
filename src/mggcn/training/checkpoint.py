"""Checkpoints: model, optimizer, epoch, history and the identity of the dataset and model (its ``model`` and
layer sizes), written atomically.

A checkpoint file is ``ckpt-EEEEEE.pt`` in the checkpoint directory: one line ``mggcn-checkpoint <sha256>`` and then
the ``torch.save`` payload, so a truncated or corrupted file is recognised and skipped on resume (the previous one
is used). The payload holds only tensors, numbers, strings, lists and dicts, and is read with
``torch.load(weights_only=True)``: a file that asks the unpickler for anything else (code) is refused, unrun.
Files are written to a temporary name and renamed, so a crash during a write leaves the previous checkpoint intact;
the newest ``keep`` files are kept. The rotation deletes only checkpoints of this run: the files it wrote and, when
it resumed, the intact checkpoints it continues (the one it resumed from and older ones that still pass the checksum).
A corrupt file, a file that is not a checkpoint, or one of another run in the same directory is never deleted; one
in the way of a checkpoint this run writes is renamed aside (``ckpt-000006.pt.kept``), never replaced.

Loading checks the contents too: every entry must have the type training reads from it (tensors where tensors belong,
numbers, lists of records), and :func:`check_fits` checks the weights and the optimizer's state against the model of
this run, so a crafted or foreign file is refused naming it, before training starts.

Weights and Adam state are replicated (identical on every rank), so rank 0 alone writes, and a checkpoint resumes at
any number of ranks. Dropout masks are drawn from a seed derived from (seed, epoch, rank), so no generator state
has to be carried: a resumed run repeats the uninterrupted one epoch by epoch.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import io
import math
import os
import re
import socket
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

from mggcn.config import TrainConfig
from mggcn.distributed.context import DistContext, all_gather_objects
from mggcn.nn.models import model_type
from mggcn.utils.errors import ConfigError, InputError, unpickling_reason
from mggcn.utils.files import OutputError, write_output

__all__ = ["CheckpointError", "Checkpointer", "check_compatible", "check_fits", "check_resumed_from_the_newest",
           "is_checkpoint", "resume_line"]

_FILE_NAME = re.compile(r"ckpt-(\d+)\.pt")  # Checkpointer.path's names: the epoch after which it was saved

_MAGIC = b"mggcn-checkpoint "
FORMAT_VERSION = 1
_DEFAULTS = {"norm": TrainConfig.norm, "activation": TrainConfig.activation}


class CheckpointError(InputError):
    """A checkpoint that cannot be resumed from here (other dataset, other model shape, unreadable); ``option``, when
    given, the setting that differs from the checkpoint's (``model``)."""


class Checkpointer:
    """Writes and finds checkpoints in ``directory``.

    Args:
        directory: where ``ckpt-*.pt`` files go (created if missing).
        every: save after every ``every``-th epoch (0: only when asked, e.g. on interruption).
        keep: how many of the newest checkpoints to keep (at least 2, so one survives a corrupted newest).
    """

    def __init__(self, directory: str, every: int = 0, keep: int = 2, resumed_from: str | None = None) -> None:
        self.directory, self.every, self.keep = directory, every, max(2, keep)
        self.resumed_from = resumed_from  # the checkpoint this run continues: it and its intact elders are the run's
        # this run's files, by path, with the identity (device, inode) of the file it wrote there: another run
        # writing into the same directory may replace one by its own, which is then that run's, never deleted here
        self._written: dict[str, tuple[int, int] | None] = {}
        self._lineage: list[str] | None = None

    def due(self, epoch: int) -> bool:
        return self.every > 0 and epoch % self.every == 0

    def path(self, epoch: int) -> str:
        return os.path.join(self.directory, f"ckpt-{epoch:06d}.pt")

    def save(self, state: dict) -> str:
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as err:
            raise OutputError(self.directory, f"cannot make the checkpoint directory: {err.strerror}",
                              err.errno) from None
        buffer = io.BytesIO()
        torch.save({**state, "format": FORMAT_VERSION}, buffer)
        payload = buffer.getvalue()
        path = self.path(state["epoch"])
        self._keep_aside(path)

        def write(f) -> None:
            f.write(_MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n")
            f.write(payload)

        write_output(path, write, sync=True)
        self._written[os.path.abspath(path)] = _identity(path)
        for old in self._own()[self.keep:]:
            try:
                os.unlink(old)
            except FileNotFoundError:  # removed by someone else since
                pass
            self._written.pop(old, None)
        return path

    def _keep_aside(self, path: str) -> None:
        """A file by the name of the checkpoint about to be written that this run did not write (a corrupt one, one
        of another run) is renamed, not replaced: ``ckpt-000006.pt.kept`` (``.kept.1``, ... if taken)."""
        if not os.path.lexists(path) or self._is_own(os.path.abspath(path)):
            return
        aside, n = f"{path}.kept", 0
        while os.path.lexists(aside):
            n += 1
            aside = f"{path}.kept.{n}"
        try:
            os.rename(path, aside)
        except OSError as err:
            raise OutputError(path, f"cannot keep the file of that name aside as {aside}: {err.strerror}",
                              err.errno) from None
        print(f"mggcn: {path} was not written by this run: kept as {aside}", file=sys.stderr, flush=True)

    def _own(self) -> list[str]:
        """This run's checkpoints, newest first: those it wrote, and those it continues (checked once)."""
        if self._lineage is None:
            self._lineage = []
            if self.resumed_from is not None:
                resumed = os.path.basename(self.resumed_from)
                self._lineage = [f for f in self.files() if os.path.basename(f) <= resumed and _intact(f)]
            for f in self._lineage:
                self._written.setdefault(os.path.abspath(f), _identity(f))
        return sorted((p for p in self._written if self._is_own(p)), key=os.path.basename, reverse=True)

    def _is_own(self, path: str) -> bool:
        """Whether the file at ``path`` is the one this run wrote (or continues) there."""
        return self._written.get(path) is not None and _identity(path) == self._written[path]

    def files(self, until: int | None = None) -> list[str]:
        """Checkpoint files, newest epoch first (of epochs up to ``until``, where given)."""
        found = glob.glob(os.path.join(self.directory, "ckpt-*.pt"))
        return sorted((f for f in found if _FILE_NAME.fullmatch(os.path.basename(f))
                       and (until is None or _epoch_of(os.path.basename(f)) <= until)), reverse=True)

    def latest(self, report: Callable[[str], None] | None = None) -> tuple[dict, str] | None:
        """The newest checkpoint that reads back intact, or None; corrupt ones are reported and skipped."""
        for path in self.files():
            try:
                return load(path), path
            except CheckpointError as err:
                if report is not None:
                    report(f"skipping {err}")
        return None


def _epoch_of(name: str) -> int:
    """The epoch of a checkpoint file's name (one :meth:`Checkpointer.files` lists)."""
    return int(_FILE_NAME.fullmatch(name).group(1))


def check_resumed_from_the_newest(ctx: DistContext, directory: str, resumed: int, asked: bool | str = True) -> None:
    """Rank 0 alone finds the checkpoint a job resumes from (epoch ``resumed``; 0: none, it starts at epoch 1), in
    its own ``directory``; torchrun's c10d rendezvous numbers the ranks itself, so the rank 0 of a restarted job may
    be on another node than the one that wrote the checkpoints. Every rank refuses, before training, where a rank
    with another directory (another host, or another path) holds a newer checkpoint file than the one resumed:
    the job would start over, or go back, without a word. ``asked``: the job's ``resume`` (True, or ``"auto"``)."""
    if ctx.world_size == 1:
        return
    files = Checkpointer(directory).files()
    here = (socket.gethostname(), os.path.realpath(directory))
    seen = all_gather_objects(ctx, (*here, os.path.basename(files[0]) if files else None))
    newer = [(rank, host, name) for rank, (host, path, name) in enumerate(seen)
             if name is not None and (host, path) != seen[0][:2] and _epoch_of(name) > resumed]
    if newer:
        rank, host, name = newer[0]
        start = f"resumes from epoch {resumed}" if resumed else "found nothing to resume from"
        setting = "resume" if asked is True else f"resume={asked!r}"
        raise ConfigError(f"{setting}: rank 0 (on {seen[0][0]}) {start} in its {directory}, but rank {rank} (on "
                          f"{host}) holds {name}, newer, in its own: rank 0 alone reads and writes checkpoints, and "
                          "torchrun's c10d rendezvous may put rank 0 on another node when a job restarts; give every "
                          "node one shared checkpoint directory (or use torchrun's static rendezvous, --master-addr), "
                          f"or move {name} aside to go on from rank 0's", "resume")


def _identity(path: str) -> tuple[int, int] | None:
    """The file at ``path`` (device, inode), or None where there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _verified_payload(path: str) -> bytes:
    """The payload of ``path`` once its header and checksum say it is an intact mggcn checkpoint."""
    try:
        with open(path, "rb") as f:
            header = f.readline()
            payload = f.read()
    except OSError as err:
        raise CheckpointError(f"{path}: unreadable ({err.strerror})") from None
    if not header.startswith(_MAGIC):
        raise CheckpointError(f"{path}: not an mggcn checkpoint")
    if hashlib.sha256(payload).hexdigest().encode() != header[len(_MAGIC):].strip():
        raise CheckpointError(f"{path}: corrupt (checksum mismatch; truncated or overwritten)")
    return payload


def is_checkpoint(path: str) -> bool:
    """Whether ``path`` is a regular file that starts as a checkpoint file does (its header line), intact or not
    (a FIFO's open would wait for a writer)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


def _intact(path: str) -> bool:
    try:
        _verified_payload(path)
    except CheckpointError:
        return False
    return True


def load(path: str) -> dict:
    payload = _verified_payload(path)
    try:
        # weights_only: tensors, numbers, strings and containers only; a pickle that names any other class or
        # function (a crafted __reduce__) is refused before anything in it runs. The checksum is no defence
        # against such a file: whoever writes the payload writes its header too.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on an unusual pickle protocol: the error below says it
            state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - the unpickler raises many kinds on a bad or crafted payload
        raise CheckpointError(f"{path}: refused: not plain tensors and data ({unpickling_reason(err)})") from None
    if not isinstance(state, dict) or not _is_int(state.get("epoch")):
        raise CheckpointError(f"{path}: not an mggcn checkpoint (no epoch)")
    if not _is_int(state.get("format", 0)):
        raise CheckpointError(f"{path}: not an mggcn checkpoint (format {state['format']!r})")
    if state.get("format", 0) > FORMAT_VERSION:
        raise CheckpointError(f"{path}: written by a newer mggcn (format {state['format']}); upgrade mggcn")
    _check_types(state, path)
    return state


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: object) -> str:
    return type(value).__name__


# Each check says what is wrong with an entry, or None: what training reads from a checkpoint must have the type it
# reads (the checksum says nothing of that: whoever writes the payload writes its header too).
def _tensors(value: object) -> str | None:
    if not isinstance(value, dict):
        return f"not a dict of tensors (a {_kind(value)})"
    bad = next((k for k, v in value.items() if not (isinstance(k, str) and isinstance(v, torch.Tensor))), None)
    return None if bad is None else f"not a dict of tensors ({bad!r} is a {_kind(value[bad])})"


def _history(value: object) -> str | None:
    if not isinstance(value, list):
        return f"not a list of epoch records (a {_kind(value)})"
    for i, r in enumerate(value):
        if not (isinstance(r, dict) and _is_int(r.get("epoch"))):
            return f"not a list of epoch records (record {i} has no integer epoch)"
        bad = next((k for k in ("loss", "train_acc", "val_acc", "test_acc")
                    if not (_is_number(r.get(k)) or (k != "loss" and k in r and r[k] is None))), None)
        if bad is not None:  # an accuracy is None for a split without a vertex
            return f"not a list of epoch records (record {i}'s {bad} is not a number)"
    return None


def _optimizer_state(value: object) -> str | None:
    if not isinstance(value, dict) or not isinstance(value.get("param_groups"), list) or not all(
            isinstance(g, dict) and isinstance(g.get("params"), list) for g in value["param_groups"]):
        return "not an optimizer state (no list of param_groups)"
    for i, group in enumerate(value["param_groups"]):
        wrong = _param_group(group)
        if wrong is not None:
            return f"not an optimizer state (param group {i}'s {wrong})"
    state = value.get("state")
    if not isinstance(state, dict) or not all(isinstance(p, dict) for p in state.values()):
        return "not an optimizer state (no dict of per-parameter states)"
    ids = {pid for group in value["param_groups"] for pid in group["params"]}
    stray = next((key for key in state if key not in ids), None)
    if stray is not None:
        return f"not an optimizer state (a state for parameter {stray!r}, which no param group holds)"
    for key, entries in state.items():
        bad = next((k for k, v in entries.items() if not (isinstance(v, torch.Tensor) or _is_number(v))), None)
        if bad is not None:
            return f"not an optimizer state (parameter {key}'s {bad!r} is a {_kind(entries[bad])})"
    return None


def _param_group(group: dict) -> str | None:
    """What is wrong with an Adam param group's settings (None: nothing); the optimizer takes them as the run's:
    a finite non-negative lr, eps and weight decay, two betas in [0, 1), integer parameter ids."""
    for key in ("lr", "eps", "weight_decay"):
        v = group.get(key)
        if not (_is_number(v) and math.isfinite(v) and v >= 0):
            return f"{key} {v!r} is not a finite number >= 0"
    betas = group.get("betas")
    if not (isinstance(betas, (list, tuple)) and len(betas) == 2
            and all(_is_number(b) and 0 <= b < 1 for b in betas)):
        return f"betas {betas!r} are not two numbers in [0, 1)"
    if not all(_is_int(pid) for pid in group["params"]):
        return "params are not integer ids"
    return None


def _best(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"not the best weights (a {_kind(value)})"
    if not (_is_number(value.get("val_acc")) and _is_int(value.get("since")) and _is_int(value.get("epoch"))):
        return "not the best weights (val_acc, since and epoch must be numbers)"
    return _tensors(value.get("model"))


def _typed(check: Callable[[object], bool], what: str) -> Callable[[object], str | None]:
    return lambda value: None if check(value) else f"not {what} (a {_kind(value)})"


_ENTRIES: dict[str, Callable[[object], str | None]] = {
    "model": _tensors, "optimizer": _optimizer_state, "history": _history, "best": _best,
    "dims": _typed(lambda v: isinstance(v, list) and all(_is_int(d) and d > 0 for d in v), "a list of layer sizes"),
    "model_kind": _typed(lambda v: isinstance(v, str), "a model name"),
    "config": _typed(lambda v: isinstance(v, dict), "a dict of settings"),
    "dataset": _typed(lambda v: isinstance(v, dict), "a dict describing the dataset"),
}


def _check_types(state: dict, path: str) -> None:
    missing = [k for k in ("model", "optimizer", "history") if k not in state]
    if missing:
        raise CheckpointError(f"{path}: not an mggcn checkpoint (no {', '.join(missing)})")
    for key, check in _ENTRIES.items():
        wrong = check(state[key]) if key in state else None
        if wrong is not None:
            raise CheckpointError(f"{path}: refused: its {key!r} is {wrong}")


def complex_entry(value: Any) -> str | None:
    """The name of the first complex tensor in ``value`` (dicts and lists searched), None if there is none: torch
    copies a complex tensor into a real parameter or moment with a warning, dropping its imaginary part."""
    return _first_entry(value, lambda t: t.is_complex())


def non_finite_entry(value: Any) -> str | None:
    """The name of the first floating tensor in ``value`` holding a NaN or an infinity, None if there is none:
    training never saves one (a non-finite loss or model stops it first), and a model that holds one predicts NaN."""
    return _first_entry(value, lambda t: t.is_floating_point() and not bool(torch.isfinite(t).all()))


def _first_entry(value: Any, found: Callable[[torch.Tensor], bool], name: str = "") -> str | None:
    if isinstance(value, torch.Tensor):
        return name if found(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list | tuple) else ()
    return next((hit for key, item in items if (hit := _first_entry(item, found, f"{name}.{key}" if name else
                                                                    str(key))) is not None), None)


def check_fits(state: dict, path: str, model: torch.nn.Module) -> None:
    """Refuse a checkpoint whose weights (and best weights) or optimizer state do not fit ``model``, a fresh model
    of this run (its names and shapes; the layer sizes a checkpoint claims may not be those it holds), or hold
    complex numbers, NaN or infinities."""
    for key in ("model", "best", "optimizer"):
        found = complex_entry(state.get(key))
        if found is not None:
            raise CheckpointError(f"{path}: refused: its {key} entry {found} holds complex numbers, not real ones")
    for key, weights in (("weights", state["model"]), ("best weights", (state.get("best") or {}).get("model"))):
        if weights is None:
            continue
        try:
            model.load_state_dict(weights)
        except (RuntimeError, TypeError, ValueError) as err:
            raise CheckpointError(f"{path}: refused: its {key} do not fit this model ({_first_line(err)})") from None
    params = list(model.parameters())
    optimizer = torch.optim.Adam(params)
    try:
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, TypeError, ValueError, KeyError, IndexError) as err:
        raise CheckpointError(f"{path}: refused: its optimizer state does not fit this model "
                              f"({_first_line(err)})") from None
    for i, param in enumerate(params):
        for name, value in optimizer.state.get(param, {}).items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                raise CheckpointError(f"{path}: refused: its optimizer's {name} of parameter {i} has shape "
                                      f"{list(value.shape)}, the parameter {list(param.shape)}")
    for key in ("model", "best", "optimizer"):  # once they fit: a crafted stride-0 view may claim gigabytes
        found = non_finite_entry(state.get(key))
        if found is not None:
            raise CheckpointError(f"{path}: refused: its {key} entry {found} holds NaN or infinite values")


# Settings a resumed run may change (a smaller lr after a divergence), with which its epochs from the checkpoint on
# are another run's than the uninterrupted one's; the seed and the partition too where dropout draws masks by them
_TRAINING_SETTINGS = ("lr", "weight_decay", "betas", "eps", "dropout", "input_dropout", "attention_dropout",
                      "precision")
_MASK_SETTINGS = ("seed", "partition", "processes")


def resume_line(state: dict, path: str, config: TrainConfig, world_size: int) -> str:
    """The line a resumed run starts with: the checkpoint and its epoch, then this run's settings that differ from
    those its run recorded, with which the epochs from here are not the uninterrupted run's (``world_size``: this
    run's processes, by whose ranks dropout draws its masks too)."""
    saved = dict(state.get("config") or {}, processes=state.get("world_size"))
    ours = dict(dataclasses.asdict(config), processes=world_size)
    dropout = max(config.dropout, config.input_dropout, config.attention_dropout) > 0
    names = _TRAINING_SETTINGS + (_MASK_SETTINGS if dropout else ())
    changed = [f"{name} {ours[name]} (its run's: {saved[name]})" for name in names
               if _plain(saved.get(name)) is not None and _plain(saved[name]) != _plain(ours[name])]
    line = f"mggcn: resuming from {path} (epoch {state['epoch']})"
    if changed:
        line += f"; settings other than its run's, so the epochs from here are another run's: {', '.join(changed)}"
    return line


def _plain(value: Any) -> Any:
    """A recorded setting as compared: a number or a name, a sequence of them (Adam's betas) as a list whether saved
    as a tuple or a list; None for anything else (not recorded, or a crafted file's tensor)."""
    plain = (str, int, float)
    if isinstance(value, list | tuple):
        return list(value) if all(isinstance(v, plain) for v in value) else None
    return value if isinstance(value, plain) else None


def _first_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text[:200] or type(err).__name__


def _check_same_labels(theirs: bool, ours: bool, path: str) -> None:
    if theirs != ours:
        kinds = {True: "multi-label (binary cross-entropy)", False: "single-label (cross-entropy)"}
        raise CheckpointError(f"{path}: the checkpoint is of a {kinds[theirs]} model, this dataset is "
                              f"{kinds[ours].split(' (')[0]}; give another checkpoint_dir, or train from epoch 1")


def check_compatible(state: dict, path: str, dataset: dict, dims: list[int], model: str = "gcn",
                     options: dict | None = None, function: dict | None = None) -> None:
    """Refuse to resume against another dataset, another model (``model``; a checkpoint without one is a GCN's),
    another setting of the model's own ``options`` (the :class:`~mggcn.config.TrainConfig` fields it alone takes,
    e.g. ``gin_train_eps``), another of the settings in ``function`` that decide what the weights compute (``norm``,
    ``activation``: a checkpoint without them has TrainConfig's defaults), or another model shape. Datasets are
    compared by content where both identities carry a ``fingerprint`` (sizes and a hash of the arrays), by name and
    sizes otherwise. A checkpoint of a single-label run (its dataset without ``multilabel``) does not resume on a
    multi-label dataset, nor the reverse: the same weights would be trained under another loss."""
    theirs = state.get("dataset", {})
    _check_same_labels(bool(theirs.get("multilabel", False)), bool(dataset.get("multilabel", False)), path)
    by_content = "fingerprint" in theirs and "fingerprint" in dataset
    for key, value in dataset.items():
        if key == "name" and by_content:
            continue  # the same content read from another path (or spelled another way) is the same dataset
        if key in theirs and theirs[key] != value:
            same_name = theirs.get("name") == dataset.get("name")  # the same file (or spec) changed, or read otherwise
            why = ("; its contents differ: the file changed since, or reads otherwise (other reading options, or "
                   "another version of mggcn)" if key == "fingerprint" else
                   "; the same name read otherwise (other reading options, or another version of mggcn) is another "
                   "dataset" if same_name else "")
            raise CheckpointError(f"{path}: the checkpoint was trained on another dataset ({key} {theirs[key]!r}, "
                                  f"this one has {value!r}){why}")
    theirs_model = state.get("model_kind", "gcn")
    if theirs_model != model:
        raise CheckpointError(f"{path}: the checkpoint is of a {theirs_model} model, this run trains a {model} "
                              "(check model=)", "model")
    kind = model_type(model)
    ours = kind.same_model_options(dict(options or {}))
    saved_config = state.get("config", {})
    theirs = {option: saved_config.get(option, getattr(TrainConfig, option, False)) for option in ours}  # or default
    theirs_same = kind.same_model_options(theirs)
    for option, value in ours.items():
        if theirs_same[option] != value:  # said as each model has it
            said = (kind.same_model_options(theirs, explicit=True)[option],
                    kind.same_model_options(dict(options or {}), explicit=True)[option])
            raise CheckpointError(f"{path}: the checkpoint's {model} has {option} {said[0]!r}, this run "
                                  f"{said[1]!r} (check {option}=)", option)
    # weights trained under one Â or σ compute another function under another: training on would silently start over
    for option, value in (function or {}).items():
        saved = state.get("config", {}).get(option, _DEFAULTS.get(option))
        if saved != value:
            raise CheckpointError(f"{path}: the checkpoint's {model} was trained with {option} {saved!r}, this run "
                                  f"{value!r} (check {option}=)", option)
    if state.get("dims") != list(dims):
        raise CheckpointError(f"{path}: the checkpoint's model has layer sizes {state.get('dims')}, this run "
                              f"{list(dims)} (check the hidden layer sizes)")
