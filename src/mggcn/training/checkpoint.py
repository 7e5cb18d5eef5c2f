"""Checkpoints: model, optimizer, epoch, history and the identity of the dataset and model (its ``--model`` and
layer sizes), written atomically.

A checkpoint file is ``ckpt-EEEEEE.pt`` in the checkpoint directory: one line ``mggcn-checkpoint <sha256>`` and then
the ``torch.save`` payload, so a truncated or corrupted file is recognised and skipped on resume (the previous one
is used). The payload holds only tensors, numbers, strings, lists and dicts, and is read with
``torch.load(weights_only=True)``: a file that asks the unpickler for anything else (code) is refused, unrun.
Files are written to a temporary name and renamed, so a crash during a write leaves the previous checkpoint intact;
the newest ``keep`` files are kept.

Weights and Adam state are replicated (identical on every rank), so rank 0 alone writes, and a checkpoint resumes at
any number of ranks. Dropout masks are drawn from a seed derived from (seed, epoch, rank), so no generator state
has to be carried: a resumed run repeats the uninterrupted one epoch by epoch.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import re
import warnings
from collections.abc import Callable

import torch

from mggcn.utils.files import atomic_write

__all__ = ["CheckpointError", "Checkpointer", "check_compatible"]

_MAGIC = b"mggcn-checkpoint "
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from here (other dataset, other model shape, unreadable)."""


class Checkpointer:
    """Writes and finds checkpoints in ``directory``.

    Args:
        directory: where ``ckpt-*.pt`` files go (created if missing).
        every: save after every ``every``-th epoch (0: only when asked, e.g. on interruption).
        keep: how many of the newest checkpoints to keep (at least 2, so one survives a corrupted newest).
    """

    def __init__(self, directory: str, every: int = 0, keep: int = 2) -> None:
        self.directory, self.every, self.keep = directory, every, max(2, keep)

    def due(self, epoch: int) -> bool:
        return self.every > 0 and epoch % self.every == 0

    def path(self, epoch: int) -> str:
        return os.path.join(self.directory, f"ckpt-{epoch:06d}.pt")

    def save(self, state: dict) -> str:
        os.makedirs(self.directory, exist_ok=True)
        buffer = io.BytesIO()
        torch.save({**state, "format": FORMAT_VERSION}, buffer)
        payload = buffer.getvalue()
        path = self.path(state["epoch"])

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n")
                f.write(payload)

        atomic_write(path, write, sync=True)
        for old in self.files()[self.keep:]:
            os.unlink(old)
        return path

    def files(self) -> list[str]:
        """Checkpoint files, newest epoch first."""
        found = glob.glob(os.path.join(self.directory, "ckpt-*.pt"))
        return sorted((f for f in found if re.fullmatch(r"ckpt-\d+\.pt", os.path.basename(f))), reverse=True)

    def latest(self, report: Callable[[str], None] | None = None) -> tuple[dict, str] | None:
        """The newest checkpoint that reads back intact, or None; corrupt ones are reported and skipped."""
        for path in self.files():
            try:
                return load(path), path
            except CheckpointError as err:
                if report is not None:
                    report(f"skipping {err}")
        return None


def load(path: str) -> dict:
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
    try:
        # weights_only: tensors, numbers, strings and containers only; a pickle that names any other class or
        # function (a crafted __reduce__) is refused before anything in it runs. The checksum is no defence
        # against such a file: whoever writes the payload writes its header too.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on an unusual pickle protocol: the error below says it
            state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - the unpickler raises many kinds on a bad or crafted payload
        raise CheckpointError(f"{path}: refused: not plain tensors and data ({_unpickling_reason(err)})") from None
    if not isinstance(state, dict) or not isinstance(state.get("epoch"), int):
        raise CheckpointError(f"{path}: not an mggcn checkpoint (no epoch)")
    if state.get("format", 0) > FORMAT_VERSION:
        raise CheckpointError(f"{path}: written by a newer mggcn (format {state['format']}); upgrade mggcn")
    return state


def _unpickling_reason(err: Exception) -> str:
    """What torch's weights-only unpickler refused, in a few words (its message wraps that in advice to load the
    file with ``weights_only=False``, which is exactly what must not be done with a file of unknown origin)."""
    text = str(err)
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return f"it calls {found.group(1)}"
    found = re.search(r"Unsupported operand (\d+)", text)
    if found:
        return f"unsupported pickle operation {found.group(1)}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first if first and "weights_only" not in first.lower() and len(first) < 200 else type(err).__name__


def check_compatible(state: dict, path: str, dataset: dict, dims: list[int], model: str = "gcn",
                     options: dict | None = None) -> None:
    """Refuse to resume against another dataset, another model (``--model``; a checkpoint without one is a GCN's),
    another setting of the model's own ``options`` (the :class:`~mggcn.config.TrainConfig` fields it alone takes,
    e.g. ``gin_train_eps``), or another model shape. Datasets are compared by content where
    both identities carry a ``fingerprint`` (sizes and a hash of the arrays), by name and sizes otherwise."""
    theirs = state.get("dataset", {})
    by_content = "fingerprint" in theirs and "fingerprint" in dataset
    for key, value in dataset.items():
        if key == "name" and by_content:
            continue  # the same content read from another path (or spelled another way) is the same dataset
        if key in theirs and theirs[key] != value:
            raise CheckpointError(f"{path}: the checkpoint was trained on another dataset ({key} {theirs[key]!r}, "
                                  f"this one has {value!r})")
    theirs_model = state.get("model_kind", "gcn")
    if theirs_model != model:
        raise CheckpointError(f"{path}: the checkpoint is of a {theirs_model} model, this run trains a {model} "
                              f"(check --model)")
    for option, value in (options or {}).items():
        saved = state.get("config", {}).get(option, False)
        if saved != value:
            raise CheckpointError(f"{path}: the checkpoint's {model} has {option} {saved!r}, this run {value!r} "
                                  f"(check --{option.replace('_', '-')})")
    if state.get("dims") != list(dims):
        raise CheckpointError(f"{path}: the checkpoint's model has layer sizes {state.get('dims')}, this run "
                              f"{list(dims)} (check the hidden layer sizes)")
