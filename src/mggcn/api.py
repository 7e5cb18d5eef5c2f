"""The Python API: train from a script or a notebook, and the layers on their own on a PyG ``Data``.

Train (one process, or P local worker processes; the same job as ``mggcn train``)::

    import mggcn
    result = mggcn.train("builtin:karate", nprocs=2, hidden=(16,), epochs=50, quiet=True)
    result.model            # a mggcn.GCN (GraphSAGE, GIN with model="sage", "gin") on CPU with the trained weights
    result.history[-1]      # the last epoch's record (loss, accuracies, per-phase seconds)
    result.predictions      # int64 [n]: the class of every vertex, in the original vertex ids
    result.save("model.pt") # for `mggcn predict` (writes model.pt and model.pt.json)

The layers in one process, as with PyG's ``GCNConv``::

    adj = mggcn.adjacency_operator(data.edge_index, data.num_nodes)       # H -> Â·H
    model = mggcn.GCN([data.num_features, 16, num_classes])
    logits = model(data.x, adj)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mggcn.config import TrainConfig
from mggcn.data.datasets import Dataset, as_dataset
from mggcn.distributed.launch import launch, refuse_unguarded_script
from mggcn.distributed.spmm import StagedSpMM, local_adj
from mggcn.kernels.tiled import csr_to_torch
from mggcn.nn.model import LayerStack
from mggcn.nn.norm import adjacency, normalize
from mggcn.training.job import TrainJob, check_job, dataset_identity, run_train_job, share_dataset
from mggcn.training.outputs import save_model
from mggcn.training.trainer import build_model
from mggcn.utils.errors import ConfigError, GraphError
from mggcn.utils.timing import SetupClock

__all__ = ["TrainedModel", "train", "adjacency_operator", "as_dataset"]

_CONFIG_KEYS = {f.name for f in dataclasses.fields(TrainConfig)}
_JOB_KEYS = {f.name for f in dataclasses.fields(TrainJob)} - {"dataset", "config", "read_options", "device"}
_READ_KEYS = ("features", "labels", "split", "normalize_features")


@dataclass
class TrainedModel:
    """What :func:`train` returns.

    Attributes:
        model: the trained :class:`~mggcn.nn.model.GCN` (:class:`~mggcn.nn.sage.GraphSAGE`,
            :class:`~mggcn.nn.gin.GIN`), on CPU, in eval mode (with patience: the best epoch's weights).
        history: one record per epoch (keys as in ``--metrics``).
        predictions: int64 [n], the predicted class of every vertex in the ORIGINAL vertex ids.
        config: the :class:`~mggcn.config.TrainConfig` it was trained with.
        dataset: the identity of the dataset (name, sizes).
        stopped: ``None`` (all epochs ran), ``"early"`` (patience) or ``"interrupted"``.
        best_epoch: with patience, the epoch whose weights were kept.
        final: ``train_acc``, ``val_acc``, ``test_acc`` of ``model`` in eval mode (an epoch's record in ``history``
            is measured before that epoch's update).
    """

    model: LayerStack
    history: list[dict]
    predictions: np.ndarray
    config: TrainConfig
    dataset: dict
    stopped: str | None = None
    best_epoch: int | None = None
    final: dict = dataclasses.field(default_factory=dict)

    @property
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under PyG's names (load into ``torch_geometric.nn.models.GCN``, ``GraphSAGE`` or ``GIN``)."""
        return self.model.pyg_state_dict()

    def save(self, path: str) -> None:
        """Write the model as ``--save-model`` does (``path`` and its sidecar ``path.json``), for ``mggcn predict``."""
        save_model(path, self.state_dict, self.config, self.dataset, epochs=len(self.history),
                   best_epoch=self.best_epoch)


def train(dataset: Any = "synthetic", nprocs: int = 1, hidden: int | Sequence[int] = (128,), epochs: int = 100,
          device: str = "cpu", **options: Any) -> TrainedModel:
    """Train a GCN (or ``model="sage"``, ``"gin"``) on ``dataset`` with ``nprocs`` local processes; the Python face
    of ``mggcn train``.

    Args:
        dataset: a spec (``"synthetic:n=10000"``, ``"builtin:karate"``), a path (with ``fmt=``), a
            :class:`~mggcn.Graph`, or a PyG ``Data`` with ``x``, ``y`` and ``train/val/test_mask``.
        nprocs: worker processes (1: in this process; more: spawned, like ``--nprocs``).
        hidden: hidden layer sizes, e.g. ``(128, 128)`` for a 3-layer GCN.
        epochs: epochs to train (fewer with ``patience``).
        device: ``cpu``, ``cuda`` (one GPU per process) or ``auto``.
        options: any :class:`~mggcn.config.TrainConfig` field (``model``, ``gin_train_eps``, ``lr``,
            ``weight_decay``, ``dropout``, ``norm``,
            ``activation``, ``patience``, ``seed``, ...), any :class:`~mggcn.training.job.TrainJob` field (``fmt``,
            ``undirected``, ``metrics``, ``save_model``, ``quiet``, ``log_every``, ``checkpoint_dir``, ``resume``:
            ``True`` continues from the newest intact checkpoint and refuses when there is none, ``"auto"`` starts
            at epoch 1 then, ...), and
            ``features``/``labels``/``split`` files for ``fmt="mtx"`` or ``"edgelist"``, ``normalize_features=True``
            for ``fmt="planetoid"``.

    Returns:
        a :class:`TrainedModel`.

    Raises:
        GraphError: bad dataset or options, before any worker starts.
        mggcn.utils.files.OutputError: an output could not be written (an ``OSError`` naming the file).
        mggcn.distributed.launch.WorkerError: a worker failed.
    """
    if isinstance(nprocs, int) and nprocs > 1:
        refuse_unguarded_script()  # a worker re-running an unguarded script: it ends here, the launcher says why
    unknown = sorted(set(options) - _CONFIG_KEYS - _JOB_KEYS - set(_READ_KEYS))
    if unknown:
        raise TypeError(f"mggcn.train() got unknown options {unknown}; see help(mggcn.train)")
    if isinstance(hidden, int):
        hidden = (hidden,)
    elif not isinstance(hidden, (str, bytes)):  # a string is refused whole by the settings' check
        hidden = tuple(hidden) if hasattr(hidden, "__iter__") else hidden
    config = TrainConfig(hidden=hidden, epochs=epochs, **{k: v for k, v in options.items() if k in _CONFIG_KEYS})
    read_options = {k: _read_option(k, options[k]) for k in _READ_KEYS if options.get(k) is not None}
    job_options = {"keep_predictions": True, **{k: _path(v) for k, v in options.items() if k in _JOB_KEYS}}
    job = TrainJob(dataset=as_dataset(dataset), config=config, read_options=read_options, device=device,
                   clock=SetupClock(), **job_options)  # checked with the command line's job (check_job)
    identity: dict = {}

    def note_identity(dataset: Dataset, _: int) -> None:
        identity.update(dataset_identity(dataset))

    grace_s = max(60.0, job.timeout_s) if isinstance(job.timeout_s, (int, float)) else 60.0  # refused when bad
    result = launch(run_train_job, job, check_job, nprocs, grace_s=grace_s, torchrun=False,
                    on_checked=note_identity, share=share_dataset)
    predictions = result.predictions
    model = build_model(config, identity["num_features"], identity["num_classes"])
    model.load_state_dict(result.state_dict)
    return TrainedModel(model.eval(), result.history, predictions, config, identity, result.stopped, result.best_epoch,
                        result.final)


def _path(value: Any) -> Any:
    """A ``pathlib.Path`` given for an output as the ``str`` the command line gives (anything else as it is, for
    the job's check to refuse)."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _read_option(option: str, value: Any) -> Any:
    """A reader's file (``features``, ``labels``, ``split``) as a path, ``normalize_features`` a boolean."""
    if option == "normalize_features":
        if not isinstance(value, bool):
            raise ConfigError(f"normalize_features must be True or False, got {value!r}", option)
        return value
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{option} must be a path, got {value!r}", option)
    return os.fspath(value)


def adjacency_operator(edge_index: Any, num_nodes: int, norm: str = "sym",
                       device: torch.device | str = "cpu") -> StagedSpMM:
    r"""The normalized adjacency as an operator ``H -> Â·H`` (with autograd), for :class:`~mggcn.nn.model.GCN` and
    :class:`~mggcn.nn.model.GCNLayer` in a single process.

    .. math::
        \hat{A} = \hat{D}^{-1/2} (A + I) \hat{D}^{-1/2} \quad (\text{sym}), \qquad
        \hat{A} = \hat{D}^{-1} (A + I) \quad (\text{mean}), \qquad \hat{D}_{ii} = \textstyle\sum_j (A + I)_{ij}

    with ``A[target, source]`` the number of edges ``source -> target`` (PyG's ``gcn_norm`` with
    ``flow="source_to_target"``; input self loops are replaced by one loop of weight 1). A layer then computes
    ``H' = Â · H · Wᵀ + b``, which is PyG's ``GCNConv`` for ``sym``.

    Args:
        edge_index: ``[2, E]`` int tensor or array, row 0 the sources, row 1 the targets, ids in ``[0, num_nodes)``.
        num_nodes: ``n``.
        norm: ``"sym"`` (default) or ``"mean"``; ``"in-mean"`` (``D_in^-1 A``, for
            :class:`~mggcn.nn.sage.GraphSAGE`) or ``"sum"`` (``A``, for :class:`~mggcn.nn.gin.GIN`): the edges as
            given, no self loop added (:func:`mggcn.nn.models.operator_for`).
        device: where Â and Âᵀ are kept (the operand of the operator must be there too).

    Shapes:
        ``H`` [n, d] -> ``Â·H`` [n, d]; the backward computes ``Âᵀ·G`` with a CSR of Âᵀ built here, once.
    """
    ei = np.asarray(edge_index.detach().cpu() if isinstance(edge_index, torch.Tensor) else edge_index, dtype=np.int64)
    if ei.size == 0:
        ei = ei.reshape(2, 0)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise GraphError(f"adjacency_operator: edge_index must have shape [2, E], got {list(ei.shape)}")
    if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
        raise GraphError(f"adjacency_operator: edge ids must be in [0, {num_nodes}), got "
                         f"[{int(ei.min())}, {int(ei.max())}]")
    adj_hat = normalize(adjacency(ei, num_nodes), norm)
    return local_adj(csr_to_torch(adj_hat, device), csr_to_torch(adj_hat.T.tocsr(), device))
