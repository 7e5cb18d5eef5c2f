"""The Python API: train from a script or a notebook, and the layers on their own on a PyG ``Data``.

Train (one process, or P local worker processes; the same job as ``mggcn train``)::

    import mggcn
    result = mggcn.train("builtin:karate", nprocs=2, hidden=(16,), epochs=50, quiet=True)
    result.model            # a mggcn.GCN (or GraphSAGE, GIN, GAT: model="sage", ...) on CPU, the trained weights
    result.history[-1]      # the last epoch's record (loss, accuracies, per-phase seconds)
    result.predictions      # int64 [n]: the class of every vertex, in the original vertex ids
                            # (a multi-label dataset, labels [n, C] of 0/1: uint8 [n, C], logit > 0)
    result.save("model.pt") # for `mggcn predict` (writes model.pt and model.pt.json)

The layers in one process, as with PyG's ``GCNConv``::

    adj = mggcn.adjacency_operator(data.edge_index, data.num_nodes)       # H -> Â·H
    model = mggcn.GCN([data.num_features, 16, num_classes])
    logits = model(data.x, adj)
"""

from __future__ import annotations

import collections
import dataclasses
import numbers
import os
import warnings
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mggcn.config import TrainConfig
from mggcn.data.datasets import Dataset, as_dataset
from mggcn.data.formats.checks import check_memory
from mggcn.data.graph import graph_from_pyg, int64_array, is_pyg
from mggcn.distributed.context import DistContext
from mggcn.distributed.launch import launch, refuse_unguarded_script
from mggcn.distributed.spmm import StagedSpMM
from mggcn.kernels.tiled import TiledCSR, csr_to_torch
from mggcn.nn.model import LayerStack
from mggcn.nn.norm import adjacency, normalize
from mggcn.training.job import TrainJob, check_job, dataset_identity, dataset_reading, run_train_job, share_dataset
from mggcn.training.outputs import save_model
from mggcn.training.trainer import build_model
from mggcn.utils.errors import ConfigError, GraphError
from mggcn.utils.system import job_defaults, stop_signal_passed_on
from mggcn.utils.timing import SetupClock
from mggcn.utils.values import plain

__all__ = ["TrainedModel", "train", "adjacency_operator", "as_dataset"]

_CONFIG_KEYS = {f.name for f in dataclasses.fields(TrainConfig)}
# the job's own fields a caller gives; clock and read_as are the launcher's, set on the job it hands its workers
_JOB_KEYS = {f.name for f in dataclasses.fields(TrainJob)} - {"dataset", "config", "read_options", "device", "clock",
                                                              "read_as"}
_READ_KEYS = ("features", "labels", "split", "normalize_features")


class _StateDict(dict):
    """A state dict that may also be called: ``result.state_dict`` and torch's ``result.state_dict()`` both work."""

    def __call__(self) -> _StateDict:
        return self

    def __reduce__(self) -> tuple:
        # pickled (torch.save) as the OrderedDict torch's own state_dict() gives, so that torch.load(...,
        # weights_only=True) reads it anywhere, with or without mggcn
        return collections.OrderedDict, (), None, None, iter(self.items())


@dataclass
class TrainedModel:
    """What :func:`train` returns.

    Attributes:
        model: the trained :class:`~mggcn.nn.model.GCN` (:class:`~mggcn.nn.sage.GraphSAGE`,
            :class:`~mggcn.nn.gin.GIN`, :class:`~mggcn.nn.gat.GAT`), on CPU, in eval mode (with patience: the best
            epoch's weights).
        history: one record per epoch (keys as in ``--metrics``; for a multi-label dataset the ``*_acc`` keys hold
            micro-F1).
        predictions: int64 [n], the predicted class of every vertex in the ORIGINAL vertex ids; for a multi-label
            dataset (labels [n, C] of 0/1) uint8 [n, C], 1 where the logit is above 0.
        config: the :class:`~mggcn.config.TrainConfig` it was trained with.
        dataset: the identity of the dataset (name, sizes).
        stopped: ``None`` (all epochs ran), ``"early"`` (patience) or ``"interrupted"``: Ctrl-C or SIGTERM stopped
            training at an epoch's end (its checkpoint and outputs written). The signal is then passed on to the
            handler the caller had, as ``train`` returns: a Python handler of yours is called, the default SIGTERM
            ends the process as it would have (``SystemExit(143)``, after the outputs); Ctrl-C's default is not
            raised again.
        best_epoch: with patience, the epoch whose weights were kept.
        final: ``train_acc``, ``val_acc``, ``test_acc`` of ``model`` in eval mode (an epoch's record in ``history``
            is measured before that epoch's update); micro-F1 (threshold logit > 0) for a multi-label dataset; None
            for a split without a vertex (in ``history`` too).
    """

    model: LayerStack
    history: list[dict]
    predictions: np.ndarray
    config: TrainConfig
    dataset: dict
    stopped: str | None = None
    best_epoch: int | None = None
    final: dict = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        """One line: the model, how training ended and the final accuracies, not every epoch's record and
        prediction (a notebook shows the repr of what a cell returns)."""
        predictions = None if self.predictions is None else \
            f"{self.predictions.dtype}{list(self.predictions.shape)}"
        final = {k: v if v is None else round(float(v), 4) for k, v in self.final.items()}
        return (f"TrainedModel(model={type(self.model).__name__}{list(self.model.dims)}, "
                f"dataset={self.dataset.get('name')!r}, epochs={len(self.history)}, stopped={self.stopped!r}, "
                f"best_epoch={self.best_epoch!r}, final={final}, predictions={predictions})")

    @property
    def multilabel(self) -> bool:
        """Whether the model was trained multi-label (binary cross-entropy; read its logits with σ, not softmax)."""
        return bool(self.dataset.get("multilabel", False))

    @property
    def state_dict(self) -> _StateDict:
        """The weights under PyG's names (load into ``torch_geometric.nn.models.GCN``, ``GraphSAGE``, ``GIN`` or
        ``GAT(..., heads=H)``); ``state_dict()`` gives the same, as torch spells it."""
        return _StateDict(self.model.pyg_state_dict())

    def save(self, path: str | os.PathLike) -> None:
        """Write the model as ``--save-model`` does (``path`` and its sidecar ``path.json``, which records a
        multi-label model as such), for ``mggcn predict``."""
        save_model(os.fspath(path), self.model.pyg_state_dict(), self.config, self.dataset, epochs=len(self.history),
                   best_epoch=self.best_epoch, stopped=self.stopped)


def train(dataset: Any = "synthetic", nprocs: int | None = None, hidden: int | Sequence[int] = (128,),
          epochs: int = 100, device: str = "cpu", **options: Any) -> TrainedModel:
    """Train a GCN (or ``model="sage"``, ``"gin"``, ``"gat"``) on ``dataset`` with ``nprocs`` local processes; the
    Python face of ``mggcn train``.

    Args:
        dataset: a spec (``"synthetic:n=10000"``, ``"builtin:karate"``), a path (with ``fmt=``), a
            :class:`~mggcn.Graph` (``y`` [n, C] of 0/1: multi-label, one 1 per row: one-hot), or a PyG ``Data``
            with ``x``, ``y`` ([n] or [n, 1]; -1: unlabelled, outside the splits) and ``train/val/test_mask``: bool
            masks, vertex ids (integer tensors, as torch indexing reads them), or ``[n, k]`` masks (WikiCS,
            geom-gcn) with ``split=`` the column to use; without ``val_mask`` and ``test_mask`` (KarateClub's Data)
            those splits are empty. ``edge_weight`` other than 1 is refused (Â weighs every edge 1); ``edge_attr``
            is not read (a warning says so).
        nprocs: worker processes (1 or None: in this process; more: spawned, like ``--nprocs``). In a script that
            torchrun started, each of its processes is one rank of the job (leave ``nprocs`` out, or give torchrun's
            world size), and every rank returns the model; ``predictions`` are rank 0's (None on the others). Rank 0
            writes the outputs (``save_model=``, ...) before any rank returns.
        hidden: hidden layer sizes, e.g. ``(128, 128)`` for a 3-layer GCN.
        epochs: epochs to train (fewer with ``patience``).
        device: ``cpu``, ``cuda`` (one GPU per process), ``cuda:K`` (GPU K, one process) or ``auto``.
        options: any :class:`~mggcn.config.TrainConfig` field (``model``, ``gin_train_eps``, ``lr``,
            ``weight_decay``, ``dropout``, ``norm``,
            ``activation``, ``patience``, ``seed``, ...), a :class:`~mggcn.training.job.TrainJob` field (``fmt``,
            ``undirected``, ``metrics``, ``save_model``, ``quiet``, ``log_every``, ``checkpoint_dir``, ``resume``:
            ``True`` continues from the newest intact checkpoint and refuses when there is none, ``"auto"`` starts
            at epoch 1 then, ...; not the launcher's ``clock`` and ``read_as``), and
            ``features``/``labels``/``split`` files for ``fmt="mtx"`` or ``"edgelist"``, ``normalize_features=True``
            for ``fmt="planetoid"``.

    Returns:
        a :class:`TrainedModel`.

    Raises:
        mggcn.utils.errors.InputError: bad dataset or options, before any worker starts (a ``ValueError``:
            :class:`~mggcn.utils.errors.GraphError` for the data, :class:`~mggcn.utils.errors.ConfigError` for a
            setting); ``TypeError`` for an option ``train`` does not take.
        mggcn.utils.files.OutputError: an output could not be written (an ``OSError`` naming the file).
        FloatingPointError: the loss or the trained model is not finite (``WorkerNonFiniteLoss`` from workers).
        mggcn.distributed.launch.WorkerError: a worker failed (one that refused its input is also a ``ValueError``).
    """
    nprocs = plain(nprocs)  # numpy's ints, 0-d tensors (and the others': _train_job)
    if isinstance(nprocs, int) and nprocs > 1:
        refuse_unguarded_script()  # a worker re-running an unguarded script: it ends here, the launcher says why
    dataset = graph_from_pyg(dataset, options.pop("split", None)) if is_pyg(dataset) else dataset  # split: a column
    job = _train_job(dataset, hidden, epochs, device, options)
    identity: dict = {}

    def note_identity(dataset: Dataset, _: int) -> None:
        identity.update(dataset_identity(dataset), read=dataset_reading(job, dataset))  # predict reads it so again

    grace_s = max(60.0, job.timeout_s) if isinstance(job.timeout_s, (int, float)) else 60.0  # refused when bad
    # a SIGTERM that stopped the job reaches the caller's handler once it is done; the model is the one trained, of
    # float32 on the CPU, whatever default dtype or device the caller set
    with stop_signal_passed_on(), job_defaults():
        result = launch(run_train_job, job, check_job, nprocs, grace_s=grace_s, on_checked=note_identity,
                        share=share_dataset)
        model = build_model(job.config, identity["num_features"], identity["num_classes"])
        model.load_state_dict(result.state_dict)
    return TrainedModel(model.eval(), result.history, result.predictions, job.config, identity, result.stopped,
                        result.best_epoch, result.final)


def _train_job(dataset: Any, hidden: Any, epochs: Any, device: str, options: dict[str, Any]) -> TrainJob:
    """The job of ``mggcn.train``'s arguments (checked with the command line's job: ``check_job``)."""
    unknown = sorted(set(options) - _CONFIG_KEYS - _JOB_KEYS - set(_READ_KEYS))
    if unknown:
        raise TypeError(f"mggcn.train() got unknown options {unknown}; see help(mggcn.train)")
    hidden, epochs, device = plain(hidden), plain(epochs), plain(device)  # one width as a 0-d tensor or array too
    options = {key: plain(value) for key, value in options.items()}
    if isinstance(hidden, numbers.Integral) and not isinstance(hidden, bool):  # numpy's ints too
        hidden = (hidden,)
    elif not isinstance(hidden, (str, bytes, Mapping, Set)):  # refused whole by the settings' check: no order
        hidden = tuple(plain(h) for h in hidden) if hasattr(hidden, "__iter__") else hidden
    config = TrainConfig(hidden=hidden, epochs=epochs, **{k: v for k, v in options.items() if k in _CONFIG_KEYS})
    read_options = {k: _read_option(k, options[k]) for k in _READ_KEYS if options.get(k) is not None}
    job_options = {"keep_predictions": True, **{k: _path(v) for k, v in options.items() if k in _JOB_KEYS}}
    return TrainJob(dataset=as_dataset(dataset), config=config, read_options=read_options, device=device,
                    clock=SetupClock(), **job_options)


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
                       device: torch.device | str = "cpu", dtype: torch.dtype | None = None) -> StagedSpMM:
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
            given, no self loop added; ``"gat"`` (``A + I``, edge counts, for :class:`~mggcn.nn.gat.GAT`, whose
            attention weighs them). A model refuses the operator of another's norm
            (:func:`mggcn.nn.models.operator_for` names each model's).
        device: where Â and Âᵀ are kept (the operand of the operator must be there too).
        dtype: of Â's values and of the rows it multiplies: ``torch.float32``, or ``torch.float64`` /
            ``torch.bfloat16`` for a model cast with ``.double()`` / ``.bfloat16()`` (Â is normalized in float64 for
            float64, else in float32 as training does, then cast). Rows of another dtype are refused in one line.
            None (default): torch's default dtype, as the models make their parameters (float32 unless set).

    Shapes:
        ``H`` [n, d] -> ``Â·H`` [n, d]; the backward computes ``Âᵀ·G`` with a CSR of Âᵀ built here, once.
    """
    num_nodes = _num_nodes(num_nodes)
    ei = _edge_index(edge_index)
    if ei.size == 0:
        ei = ei.reshape(2, 0)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise GraphError(f"adjacency_operator: edge_index must have shape [2, E], got {list(ei.shape)}", "edge_index")
    if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
        raise GraphError(f"adjacency_operator: edge ids must be in [0, {num_nodes}), got "
                         f"[{int(ei.min())}, {int(ei.max())}]", "edge_index")
    device = _operator_device(device)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    _check_dtype(dtype)
    # Â and Âᵀ with their self loops: row offsets, degrees and scaling per vertex, an id and a value per nonzero
    check_memory("adjacency_operator", _OPERATOR_VERTEX_BYTES * num_nodes + _OPERATOR_EDGE_BYTES * ei.shape[1],
                 f"num_nodes={num_nodes:,}: Â and Âᵀ")
    double = dtype == torch.float64  # Â's values then carry no float32 rounding
    adj_hat = normalize(adjacency(ei, num_nodes), norm, np.float64 if double else np.float32)
    blocks = [TiledCSR.from_torch(csr_to_torch(a, device, double).to(dtype)) for a in (adj_hat, adj_hat.T.tocsr())]
    op = _Operator(DistContext(), blocks[:1], blocks[1:])
    op.norm = norm
    return op


def _operator_device(given: Any) -> torch.device:
    """The device ``adjacency_operator`` keeps Â on, checked before Â is built: one torch can name and use here
    (its support built in, a device of its kind visible), holding values (not meta); else a ConfigError."""
    try:
        device = torch.device(given)
        if device.type == "meta":  # shapes without values: the operator's forward reads Â's
            raise RuntimeError("a meta tensor holds no values, and the operator multiplies by Â's")
    except (RuntimeError, TypeError, ValueError, OverflowError) as err:
        raise ConfigError(f"device must be a torch device such as 'cpu' or 'cuda', got {given!r} "
                          f"({' '.join(str(err).split())[:120]})", "device") from None
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as err:
        raise ConfigError(f"device {str(device)!r} cannot be used here ({' '.join(str(err).split())[:120]})",
                          "device") from None
    return device


_OPERATOR_DTYPES = (torch.float32, torch.float64, torch.bfloat16)  # those the CPU's and GPU's sparse products take


def _check_dtype(dtype: Any) -> None:
    """``dtype`` one of :data:`_OPERATOR_DTYPES`, else a :class:`ConfigError` naming ``dtype``."""
    if not isinstance(dtype, torch.dtype):
        raise ConfigError(f"dtype must be a torch.dtype such as torch.float64, got {dtype!r}", "dtype")
    if dtype not in _OPERATOR_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in _OPERATOR_DTYPES)
        raise ConfigError(f"dtype must be a floating dtype mggcn's sparse products run in ({names}), got "
                          f"{str(dtype).removeprefix('torch.')}", "dtype")


class _Operator(StagedSpMM):
    """:func:`adjacency_operator`'s ``H -> Â·H`` in one process: rows of another dtype than Â's values are refused
    in one line naming the fix, where the sparse product would fail deep in torch ("expected scalar type Double but
    found Float"). An ``accumulator`` (GAT's attention) reads Â's pattern and casts its values itself: any dtype."""

    def __init__(self, ctx: DistContext, adj: list[TiledCSR], adj_t: list[TiledCSR]) -> None:
        super().__init__(ctx, adj, adj_t)
        self.dtype = adj[0].tiles[0].dtype

    def run(self, b: torch.Tensor, transpose: bool = False, out: torch.Tensor | None = None,
            train_columns: bool = False, accumulator: Any = None) -> torch.Tensor:
        if b.dtype != self.dtype and accumulator is None:
            mine, given = (str(d).removeprefix("torch.") for d in (self.dtype, b.dtype))
            fix = (f"for a {given} model build adj with dtype=torch.{given}, or give the model and x in {mine}"
                   if b.dtype in _OPERATOR_DTYPES else
                   f"mggcn's sparse products do not run in {given}: give the model and x in {mine}, or in "
                   f"{' or '.join(str(d).removeprefix('torch.') for d in _OPERATOR_DTYPES if d != self.dtype)} "
                   "with an adj of that dtype")
            raise ValueError(f"adj multiplies {mine} rows (mggcn.adjacency_operator(..., dtype=torch.{mine})) and x "
                             f"is {given}: {fix}")
        return super().run(b, transpose, out, train_columns, accumulator)


_OPERATOR_VERTEX_BYTES = 64  # bytes per vertex while Â and Âᵀ are built, at most (int64 offsets, float64 degrees)
_OPERATOR_EDGE_BYTES = 48  # bytes per edge: its ids and values in both CSRs and their temporaries


def _num_nodes(num_nodes: Any) -> int:
    """``num_nodes`` as an ``int`` (a Python or numpy integer, or a one-element integer tensor), else refused."""
    if isinstance(num_nodes, torch.Tensor) and num_nodes.numel() == 1 and not num_nodes.is_floating_point():
        num_nodes = num_nodes.item()
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)) or num_nodes < 0:
        raise ConfigError(f"num_nodes must be a non-negative int, got {num_nodes!r}", "num_nodes")
    return int(num_nodes)


def _edge_index(edge_index: Any) -> np.ndarray:
    """``edge_index`` (a dense integer tensor or array, or nested lists) as int64, refused in one line otherwise:
    not wrapped (uint64), truncated (0.5) or read from booleans."""
    if isinstance(edge_index, torch.Tensor):
        if edge_index.is_meta or edge_index.layout != torch.strided:
            raise GraphError(f"adjacency_operator: edge_index must be a dense [2, E] tensor with data, got a "
                             f"{'meta' if edge_index.is_meta else edge_index.layout} tensor", "edge_index")
        edge_index = edge_index.detach().cpu().numpy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy 1 makes ragged lists an object array, with a warning only
            array = np.asarray(edge_index)
    except (ValueError, Warning) as err:  # ragged lists
        raise GraphError(f"adjacency_operator: edge_index is not a [2, E] array ({err})"[:200], "edge_index") from None
    if array.size and array.dtype.kind not in "iuf":
        raise GraphError(f"adjacency_operator: edge_index must hold integer vertex ids, got dtype {array.dtype}",
                         "edge_index")
    return int64_array(array, "vertex id", "adjacency_operator", kinds="iuf")
