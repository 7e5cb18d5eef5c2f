"""Full-batch training on one rank's shard: the epoch loop, the global loss and accuracies, the per-phase timing.

Loss: softmax cross-entropy averaged over the GLOBAL training set (:class:`mggcn.nn.loss.MaskedCrossEntropy`): each
rank sums over its own training rows and divides by the global count, so the all-reduced sum of the ranks' losses
is the mean and the all-reduced gradients are its gradients. Accuracies are global correct counts over global split
sizes, from whether each row's argmax is its label, which the loss finds anyway (:func:`mggcn.nn.loss.label_hits`).
Padding rows belong to no split.
The gradient all-reduce also carries the epoch's loss and correct counts: one collective per epoch for all of them.

Multi-label (``shard.y`` a 0/1 matrix [m, C]): binary cross-entropy with logits averaged over the global training
rows × C labels (:class:`mggcn.nn.loss.MaskedBinaryCrossEntropy`), and in place of each accuracy the split's micro-F1
with threshold logit > 0 (what the GraphSAINT papers report for PPI, Yelp, Amazon), exact across ranks: the ranks'
per-row numerators ``2 · |pred_r ∧ y_r|`` and denominators ``|pred_r| + |y_r|`` (:func:`mggcn.nn.loss.f1_counts`)
summed over the split's rows of every rank, then divided (0 where no row predicts or has a label). The records keep
the keys ``train_acc``, ``val_acc``, ``test_acc``; early stopping watches the validation micro-F1.

Legend: m = rows of this rank, C = classes (labels).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from mggcn.config import TrainConfig
from mggcn.data.graph import SPLITS
from mggcn.distributed.context import (
    DistContext,
    all_gather_objects,
    all_reduce_max,
    all_reduce_min,
    all_reduce_sum,
    broadcast_object,
    gather_objects,
)
from mggcn.distributed.parallel_layout import ParallelLayout
from mggcn.distributed.partition import Shard
from mggcn.distributed.spmm import SpMMOperator, StagedSpMM, keeps_training_columns
from mggcn.nn.adam import Adam
from mggcn.nn.loss import (
    MaskedBinaryCrossEntropy,
    MaskedCrossEntropy,
    f1_counts,
    label_hits,
    predictions,
    roc_auc,
)
from mggcn.nn.model import LayerStack
from mggcn.nn.models import make_model, model_options, model_type, operator_for
from mggcn.training.checkpoint import non_finite_entry
from mggcn.training.precision import MasterWeights, compute_dtype, precision_scope
from mggcn.utils.timing import PHASES, PhaseTimer, SetupClock, synchronize

__all__ = ["TrainResult", "NonFiniteLoss", "build_model", "train_shard", "predict_shard",
           "epoch_width", "epoch_tile_columns", "shard_for"]


@dataclass
class TrainResult:
    """What a rank ends with. ``model``, ``adj`` and ``x_agg`` stay in the worker (for predictions).

    ``stopped``: ``None`` when all epochs ran, ``"early"`` (patience) or ``"interrupted"`` (a stop request).
    With patience, the model holds the weights of ``best_epoch``.
    ``final``: ``train_acc``, ``val_acc``, ``test_acc`` of the weights the run ends with (after the last update, or
    with patience those of ``best_epoch``), in eval mode (no dropout). An epoch's record holds the accuracies of the
    weights at the START of that epoch, so none of them is this. A split without a vertex has None, in the records
    too.
    """

    history: list[dict] = field(default_factory=list)
    state_dict: dict[str, torch.Tensor] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    best_epoch: int | None = None
    stopped: str | None = None
    checkpoint: str | None = None
    final: dict = field(default_factory=dict)
    model: LayerStack | None = None
    adj: StagedSpMM | None = None
    x_agg: torch.Tensor | None = None


class NonFiniteLoss(FloatingPointError):
    """The loss became NaN or inf, or the trained model's outputs or tensors did; the message names the epoch, the
    first layer with non-finite output (or the tensor) and the setting to lower, ``option`` (the command line names
    it by its flag)."""

    option = "lr"


def epoch_width(cfg: TrainConfig, num_features: int, num_classes: int) -> int:
    """The widest exchange of rows (SpMM, attention) of an epoch of ``cfg``'s model
    (:meth:`~mggcn.nn.model.LayerStack.exchange_widths`)."""
    dims = cfg.dims(num_features, num_classes)
    widths = model_type(cfg.model).exchange_widths(dims, cfg.order, cfg.input_dropout == 0.0, **model_options(cfg))
    return max(widths or [dims[0]])


def epoch_tile_columns(cfg: TrainConfig, num_nodes: int, num_edges: int, num_features: int, num_classes: int,
                       nprocs: int, device: torch.device | str, local_ranks: int,
                       width: int | None = None) -> int | None:
    """Columns per tile of a rank's blocks (:meth:`mggcn.distributed.parallel_layout.ParallelLayout.tile_columns`) for
    SpMMs of ``width`` (default: the widest of an epoch of ``cfg``'s model, :func:`epoch_width`)."""
    width = epoch_width(cfg, num_features, num_classes) if width is None else width
    return ParallelLayout.of(cfg, nprocs).tile_columns(num_nodes, num_edges, width, device, local_ranks)


def shard_for(cfg: TrainConfig, dataset, ctx: DistContext) -> Shard:
    """This rank's shard of ``dataset`` as ``cfg`` trains it: partitioned by ``cfg.partition`` and ``cfg.seed``,
    its blocks tiled for ``cfg``'s SpMMs (:meth:`mggcn.distributed.parallel_layout.ParallelLayout.shard`)."""
    return ParallelLayout.of(cfg, ctx.world_size).shard(dataset, ctx, operator_for(cfg.model, cfg.norm),
                                                        epoch_width(cfg, dataset.num_features, dataset.num_classes))


def build_model(cfg: TrainConfig, num_features: int, num_classes: int,
                device: torch.device | str = "cpu") -> LayerStack:
    """The model of ``cfg`` (``cfg.model``), identically initialized on every rank."""
    return make_model(cfg.model, cfg.dims(num_features, num_classes), activation=cfg.activation,
                      dropout=cfg.dropout, input_dropout=cfg.input_dropout, order=cfg.order, seed=cfg.seed,
                      **model_options(cfg)).to(device)


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """The seed of the dropout masks of one epoch on one rank: resuming needs no generator state."""
    return (seed * 1_000_003 + epoch) * 1_009 + rank


class _Stats:
    """Indices of the per-epoch numbers summed across ranks along with the gradients: the loss, the stop request,
    then the counts of :func:`_split_counts` (each split's correct vertices; multi-label, micro-F1's numerators, then
    its denominators), each count in two parts (:func:`_pack`)."""

    LOSS, STOP, COUNTS = 0, 1, slice(2, None)
    SINGLE_LABEL_SIZE = 2 + 2 * 3


# The gradients' all-reduce sums float32, exact for integers below 2^24, which a count passes (a split of more than
# 16.8M vertices; a multi-label count, up to 2 · n · C: 1.4e8 on Yelp): each count goes as its remainder and quotient
# by _BASE, summed exactly over up to 4096 ranks for graphs of n · C < 2^35.
_BASE = 4096.0


def _pack(counts: torch.Tensor) -> torch.Tensor:
    """float64 [k] of integers -> [2k]: their remainders by :data:`_BASE`, then their quotients."""
    return torch.cat([torch.remainder(counts, _BASE), torch.floor(counts / _BASE)])


def _unpack(packed: torch.Tensor) -> torch.Tensor:
    """The counts of :func:`_pack` (or of a sum of packs) back, in float64."""
    k = packed.shape[0] // 2
    return packed[:k] + packed[k:] * _BASE


def _f1(counts: torch.Tensor) -> list[float]:
    """Micro-F1 of each split from its summed numerators and denominators ([6], :func:`_split_counts`); 0 where the
    denominator is 0 (no row of the split predicts or has a label: the numerator is 0 too)."""
    return (counts[:3] / counts[3:].clamp(min=1.0)).tolist()


def _accuracies(stats: torch.Tensor, split_sizes: torch.Tensor) -> list[float | None]:
    """The splits' accuracies from an epoch's summed :class:`_Stats`: correct / split size, or, multi-label (the
    longer stats), micro-F1; None for a split without a vertex."""
    counts = _unpack(stats[_Stats.COUNTS])
    if stats.shape[0] == _Stats.SINGLE_LABEL_SIZE:
        return _measured((counts / split_sizes.clamp(min=1)).tolist(), split_sizes)
    return _measured(_f1(counts), split_sizes)


def _measured(acc: list[float], split_sizes: torch.Tensor) -> list[float | None]:
    """``acc`` with None for each split without a vertex: nothing was measured there (a 0 would read as a model that
    gets every vertex wrong, and be plotted and compared as one)."""
    return [None if size == 0 else a for a, size in zip(acc, split_sizes.tolist(), strict=True)]


@dataclass
class _BestWeights:
    """Early stopping (``cfg.patience``): the best validation accuracy (multi-label: micro-F1) so far, the weights
    that had it, its epoch, and the epochs since. Accuracies are those of the weights before an epoch's update."""

    patience: int
    val_acc: float = -1.0
    state: dict[str, torch.Tensor] | None = None
    epoch: int | None = None
    since: int = 0
    buffers: dict[str, torch.Tensor] | None = None  # the buffers at the start of the epoch (:meth:`before_step`)

    @classmethod
    def resumed(cls, patience: int, best: dict | None) -> _BestWeights:
        """From a checkpoint's ``best`` entry (:meth:`saved`), or fresh."""
        if best is None:
            return cls(patience)
        return cls(patience, best["val_acc"], best["model"], best["epoch"], best["since"])

    def saved(self) -> dict | None:
        return None if self.state is None else {"val_acc": self.val_acc, "since": self.since, "model": self.state,
                                                "epoch": self.epoch}

    def before_step(self, model: LayerStack, weights: LayerStack | MasterWeights) -> None:
        """Keep the buffers that the step's training forward moves (batch norms' running statistics): the weights
        :meth:`update` keeps must be those the epoch measured, as they were before that forward."""
        if self.patience > 0:
            names = {name for name, _ in model.named_buffers()}
            self.buffers = {k: v.detach().clone() for k, v in weights.state_dict().items() if k in names}

    def update(self, epoch: int, val_acc: float | None, weights: LayerStack | MasterWeights) -> None:
        """After the step's backward, before its update: the parameters are still those the epoch measured."""
        if self.patience <= 0:
            return
        if val_acc is not None and val_acc > self.val_acc:
            self.val_acc, self.since, self.epoch = val_acc, 0, epoch
            self.state = {k: v.detach().clone() for k, v in weights.state_dict().items()}
            self.state.update(self.buffers or {})
        else:
            self.since += 1

    @property
    def exhausted(self) -> bool:
        return self.patience > 0 and self.since >= self.patience


def _epoch_stats(loss: torch.Tensor, stop: bool, counts: torch.Tensor, device: torch.device) -> torch.Tensor:
    """This rank's :class:`_Stats` of an epoch, float64 on ``device``: its loss, whether it was asked to stop, its
    counts (:func:`_split_counts`)."""
    stats = torch.zeros(2 + 2 * counts.shape[0], dtype=torch.float64, device=device)
    stats[_Stats.LOSS] = loss
    stats[_Stats.STOP] = float(stop)
    stats[_Stats.COUNTS] = _pack(counts)
    return stats


def _reduce_gradients(ctx: DistContext, params: list[torch.Tensor], stats: torch.Tensor) -> torch.Tensor:
    """Sum the parameters' gradients and the epoch's ``stats`` (:class:`_Stats`) over ranks in one collective; the
    gradients in place, the stats returned (float64, on the CPU)."""
    flat = torch.cat([p.grad.reshape(-1) for p in params] + [stats.to(params[0].dtype)])
    all_reduce_sum(ctx, flat)
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset: offset + p.numel()].view_as(p.grad))
        offset += p.numel()
    return flat[offset:].to(torch.float64).cpu()


@dataclass
class _Run:
    """What the epochs of :func:`train_shard` share, set up once by :func:`_setup`."""

    ctx: DistContext
    cfg: TrainConfig
    timer: PhaseTimer
    model: LayerStack
    adj: SpMMOperator
    balance: dict
    optimizer: Adam
    result: TrainResult
    best: _BestWeights
    x: torch.Tensor | None
    x_agg: torch.Tensor | None
    y: torch.Tensor
    split_masks: list[torch.Tensor]
    split_sizes: torch.Tensor
    criterion: MaskedCrossEntropy | MaskedBinaryCrossEntropy
    params: list[torch.Tensor]
    stochastic: bool  # the model evaluates differently: accuracies come from an eval forward of their own
    weights: LayerStack | MasterWeights  # what the optimizer updates and checkpoints hold: float32 (precision.py)


def _setup(ctx: DistContext, shard: Shard, cfg: TrainConfig, clock: SetupClock, resume: dict | None) -> _Run:
    """The model, the SpMM operator, the optimizer, what a checkpoint resumes, Â·X (marking ``clock``'s phases)."""
    device = ctx.device
    shard.to(device, compute_dtype(cfg.precision))
    clock.mark("device")
    timer = PhaseTimer(device)
    model = build_model(cfg, shard.x.shape[1], shard.num_classes, device)
    weights = model if cfg.precision != "bf16" else MasterWeights(model, compute_dtype(cfg.precision))
    layout = ParallelLayout.of(cfg, ctx.world_size)
    adj, transport = layout.spmm_operator(ctx, shard, epoch_width(cfg, shard.x.shape[1], shard.num_classes), timer)
    balance = partition_balance(ctx, shard, layout)
    if transport is not None:
        balance["broadcast"] = transport.name
        if transport.fallback is not None:
            balance["broadcast_fallback"] = transport.fallback
    optimizer = Adam(weights.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                     weight_decay=cfg.weight_decay)
    result = TrainResult(config=asdict(cfg))
    best = _BestWeights.resumed(cfg.patience, resume.get("best") if resume is not None else None)
    if resume is not None:
        weights.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        # the moments and step count continue; the settings are this run's (as given again, the uninterrupted run's;
        # a run resumed with another lr trains on with it, as asked)
        optimizer.lr, optimizer.betas = float(cfg.lr), tuple(cfg.betas)
        optimizer.eps, optimizer.weight_decay = float(cfg.eps), float(cfg.weight_decay)
        result.history = list(resume["history"])

    x, y = shard.x, shard.y
    clock.mark("model")
    with torch.no_grad():
        x_agg = adj.run(x) if model.caches_input_aggregation else None
        whole = None if x_agg is None else model.whole_input_aggregation(x_agg, x)
        if x_agg is not None:
            synchronize(device)
    clock.mark("A.X")
    if whole is not None:
        # no epoch reads X again: release it before the first epoch allocates its activations
        x_agg, shard.x, x = whole, None, None
    keep = keeps_training_columns(shard.split_sizes["train"], shard.partition.num_nodes, len(model.convs),
                                  cfg.train_columns)
    if keep and model.reads_training_columns:
        adj.use_training_columns(shard.masks["train"])  # the last layer's backward reads only these columns
    split_masks = [shard.masks[s] for s in SPLITS]
    split_sizes = torch.tensor([shard.split_sizes[s] for s in SPLITS], dtype=torch.float64)
    # the gradient of the logits overwrites them (the model returns them on its workspace; nothing reads them after)
    loss = MaskedBinaryCrossEntropy if y.ndim == 2 else MaskedCrossEntropy
    criterion = loss(y, shard.masks["train"], shard.split_sizes["train"], model.workspace,
                     in_place=model.workspace is not None)
    return _Run(ctx, cfg, timer, model, adj, balance, optimizer, result, best, x, x_agg, y, split_masks, split_sizes,
                criterion, list(weights.parameters()), model.evaluates_differently, weights)


def _step(run: _Run, epoch: int, stop_requested: Callable[[], bool] | None, checkpointer) -> torch.Tensor:
    """One step: forward, loss, backward, the gradients and the epoch's numbers (:class:`_Stats`) summed over ranks,
    the update; returns the summed numbers."""
    model, adj, timer, x, x_agg = run.model, run.adj, run.timer, run.x, run.x_agg
    if run.stochastic:  # accuracies of the weights at the start of the epoch, without dropout
        with torch.no_grad():
            model.eval()
            logits = model(x, adj, timer, x_agg, logits_in_workspace=True)
            counts = _split_counts(run.criterion.hits(logits.float()), run.split_masks)
            model.train()
    run.best.before_step(model, run.weights)
    run.optimizer.zero_grad(set_to_none=False)
    logits = model(x, adj, timer, x_agg, logits_in_workspace=True, loss_on_train_rows=True)
    with timer("criterion"):
        loss, hits = run.criterion(logits.float())  # a bfloat16 model's logits: the loss in float32
    loss.backward()
    if run.weights is not model:
        run.weights.gradients_from_model()
    if not run.stochastic:
        counts = _split_counts(hits, run.split_masks)
    with timer("allreduce"):
        stats = _epoch_stats(loss.detach(), bool(stop_requested and stop_requested()), counts, run.ctx.device)
        stats = _reduce_gradients(run.ctx, run.params, stats)
    if not math.isfinite(float(stats[_Stats.LOSS])):
        raise NonFiniteLoss(_non_finite_message(run.ctx, model, adj, x, x_agg, epoch, float(stats[_Stats.LOSS]),
                                                checkpointer))
    run.best.update(epoch, _accuracies(stats, run.split_sizes)[1], run.weights)
    with timer("optimizer"):
        run.optimizer.step()
        if run.weights is not model:
            run.weights.update_model()
    return stats


def _checkpoint_state(run: _Run, epoch: int, checkpoint_meta: dict | None) -> dict:
    return {"epoch": epoch, "model": run.weights.state_dict(), "optimizer": run.optimizer.state_dict(),
            "history": run.result.history, "best": run.best.saved(), "dims": run.model.dims,
            "model_kind": run.cfg.model, "config": asdict(run.cfg), "world_size": run.ctx.world_size,
            **(checkpoint_meta or {})}


def _finish(run: _Run, checkpointer=None) -> TrainResult:
    """The result: with patience the best weights restored, the final accuracies, the weights in PyG's names. A model
    whose outputs or tensors are not finite is refused: the last update diverged after finite losses, or a batch
    norm's running variance overflowed while the batches' own statistics kept the losses finite; it would predict
    one class for every vertex."""
    result, model = run.result, run.model
    result.best_epoch = run.best.epoch
    if run.best.state is not None:
        run.weights.load_state_dict(run.best.state)
    result.final, non_finite = final_accuracies(run.ctx, model, run.adj, run.x, run.x_agg, run.y, run.split_masks,
                                                run.split_sizes)
    result.state_dict = run.weights.pyg_state_dict()
    entry = non_finite_entry(result.state_dict)  # the same on every rank: weights and statistics are replicated
    if non_finite or entry:
        epoch = len(result.history)
        what = (f"{entry} holds NaN or infinite values" if entry
                else f"outputs are not finite for {non_finite:,} vertices")
        raise NonFiniteLoss(f"the trained model's {what} (after epoch {epoch}; "
                            f"{_advice(run.ctx, run.x, run.x_agg, epoch > 0)}){_last_good(checkpointer, epoch - 1)}")
    result.model, result.adj, result.x_agg = model, run.adj, run.x_agg
    return result


def train_shard(ctx: DistContext, shard: Shard, cfg: TrainConfig,
                on_epoch: Callable[[dict], None] | None = None, *,
                checkpointer=None, checkpoint_meta: dict | None = None, resume: dict | None = None,
                stop_requested: Callable[[], bool] | None = None, clock: SetupClock | None = None) -> TrainResult:
    """Train on this rank's shard up to epoch ``cfg.epochs``; every rank returns the same history and weights.

    Args:
        on_epoch: called on every rank with each epoch's record (keys ``epoch, loss, train_acc, val_acc,
            test_acc, epoch_s``, one key per phase (max over ranks), ``other``; ``timeline`` on the traced epoch).
        checkpointer: a :class:`~mggcn.training.checkpoint.Checkpointer`; rank 0 saves when it is due and on a stop
            request.
        checkpoint_meta: extra entries for every checkpoint (the dataset's identity).
        resume: a checkpoint's contents: training continues after its epoch.
        stop_requested: polled once per epoch on every rank; when any rank says yes, all stop after that epoch
            (saving a checkpoint first if a checkpointer is given).
        clock: the job's setup phases so far; marked ``device``, ``model`` and ``A.X`` here, and put in the first
            epoch's record (``setup``: its seconds and phases, this rank's).
    Raises:
        NonFiniteLoss: the global loss is NaN or inf (before that epoch's update, so the weights are the last good).

    Memory: without input dropout ``Â·X`` is computed once, and the GCN's shard's features are then released
    (``shard.x`` becomes ``None``; predictions read ``Â·X``, :attr:`TrainResult.x_agg`); GraphSAGE and GIN keep
    ``X`` (their root terms read it).
    """
    with precision_scope(cfg.precision, ctx.device):
        return _train(ctx, shard, cfg, on_epoch, checkpointer, checkpoint_meta, resume, stop_requested, clock)


def _train(ctx: DistContext, shard: Shard, cfg: TrainConfig, on_epoch: Callable[[dict], None] | None,
           checkpointer, checkpoint_meta: dict | None, resume: dict | None,
           stop_requested: Callable[[], bool] | None, clock: SetupClock | None) -> TrainResult:
    clock = clock or SetupClock()
    run = _setup(ctx, shard, cfg, clock, resume)
    result, adj = run.result, run.adj
    if run.best.exhausted:  # resumed from the epoch that stopped the run early: it has ended
        result.stopped = "early"
        return _finish(run, checkpointer)
    for epoch in range(len(result.history) + 1, cfg.epochs + 1):
        run.model.seed_dropout(epoch_seed(cfg.seed, epoch, ctx.rank))
        run.model.seed_attention(epoch_seed(cfg.seed, epoch, 0))  # the same on every rank: any P, the same masks
        run.timer.reset(trace=epoch == cfg.trace_epoch)
        moved = (adj.sent_bytes, adj.recv_bytes)
        start = time.perf_counter()
        stats = _step(run, epoch, stop_requested, checkpointer)
        epoch_s = time.perf_counter() - start

        record = _epoch_record(ctx, epoch, epoch_s, run.timer, stats, run.split_sizes, ctx.device, start,
                               adj.sent_bytes - moved[0], adj.recv_bytes - moved[1])
        record.update(run.balance)
        if clock is not None:  # the first epoch this run trains: how long it took to get there
            record["setup"], clock = clock.record(), None
        result.history.append(record)
        if on_epoch is not None:
            on_epoch(record)
        # stopping: a signal on any rank, or no better validation accuracy for cfg.patience epochs
        interrupted = stats[_Stats.STOP] > 0
        if checkpointer is not None and ctx.is_main and (checkpointer.due(epoch) or interrupted):
            result.checkpoint = checkpointer.save(_checkpoint_state(run, epoch, checkpoint_meta))
        if interrupted or run.best.exhausted:
            result.stopped = "interrupted" if interrupted else "early"
            break
    return _finish(run, checkpointer)


def _epoch_record(ctx: DistContext, epoch: int, epoch_s: float, timer: PhaseTimer, stats: torch.Tensor,
                  split_sizes: torch.Tensor, device: torch.device, start: float, sent: int, recv: int) -> dict:
    """The epoch's record. Seconds and this epoch's SpMM bytes are maxed over ranks in one collective
    (``sent_bytes`` / ``recv_bytes``); ``total_bytes`` is the sum over ranks of the bytes received."""
    most = torch.tensor([epoch_s] + [timer.seconds[p] for p in PHASES] + [sent, recv], dtype=torch.float64,
                        device=device)
    most = all_reduce_max(ctx, most).cpu().tolist()
    phases, (most_sent, most_recv) = most[:-2], most[-2:]
    total = all_reduce_sum(ctx, torch.tensor([recv], dtype=torch.float64, device=device)).item()
    acc = _accuracies(stats, split_sizes)
    record = {"epoch": epoch, "loss": float(stats[_Stats.LOSS]), "train_acc": acc[0], "val_acc": acc[1],
              "test_acc": acc[2], "epoch_s": phases[0]}
    if stats.shape[0] != _Stats.SINGLE_LABEL_SIZE:  # what the *_acc keys hold, for the plots (mggcn report)
        record["metric"] = "micro-F1"
    record.update({p: s for p, s in zip(PHASES, phases[1:])})
    record["other"] = max(0.0, phases[0] - sum(phases[1:]))
    record.update(sent_bytes=int(most_sent), recv_bytes=int(most_recv), total_bytes=int(total))
    if timer.events is not None:
        mine = [[kind, a - start, b - start] for kind, a, b in timer.events]
        record["timeline"] = all_gather_objects(ctx, mine)
    return record


def partition_balance(ctx: DistContext, shard: Shard, layout: ParallelLayout) -> dict:
    """Balance and cut of the partition, from every rank's shard (one small gather).

    ``nnz_imbalance`` / ``rows_imbalance``: max over ranks / mean of the nonzeros of Â / real rows;
    ``cut_nnz``: nonzeros of Â in off-diagonal blocks (edges whose ends lie on different ranks, directed, merged).
    """
    real_rows = int((shard.partition.order[shard.partition.rows(ctx.rank)] >= 0).sum())
    cut = sum(b.nnz for (i, j), b in zip(layout.blocks(ctx.rank), shard.adj) if j != i)
    every = np.array(all_gather_objects(ctx, (shard.nnz, real_rows, cut)), dtype=np.float64)
    nnz, rows = every[:, 0], every[:, 1]
    return {"nnz_imbalance": float(nnz.max() / max(nnz.mean(), 1.0)),
            "rows_imbalance": float(rows.max() / max(rows.mean(), 1.0)),
            "cut_nnz": int(every[:, 2].sum()), "cut_fraction": float(every[:, 2].sum() / max(nnz.sum(), 1.0))}


def format_balance(balance: dict) -> str:
    return (f"nonzeros max/mean {balance['nnz_imbalance']:.3f}, rows max/mean {balance['rows_imbalance']:.3f}, "
            f"cut {balance['cut_nnz']:,} nonzeros ({100 * balance['cut_fraction']:.1f}% of Â)")


def _non_finite_message(ctx: DistContext, model: LayerStack, adj: StagedSpMM, x: torch.Tensor,
                        x_agg: torch.Tensor | None, epoch: int, loss: float, checkpointer) -> str:
    """Find the first layer whose output is not finite on any rank (one extra forward, only on failure)."""
    outputs = []
    hooks = [conv.register_forward_hook(lambda _m, _i, out: outputs.append(bool(torch.isfinite(out).all())))
             for conv in model.convs]
    with torch.no_grad():
        model.eval()
        model(x, adj, x_aggregated=x_agg)
    for h in hooks:
        h.remove()
    bad = torch.tensor([next((i for i, ok in enumerate(outputs) if not ok), len(outputs))], dtype=torch.float64,
                       device=ctx.device)  # NCCL takes no CPU tensor
    first = int(all_reduce_min(ctx, bad).item())
    where = f"; first non-finite output: layer {first}" if first < len(outputs) else ""
    # the weights of epoch - 1's checkpoint gave this loss; those of epoch - 2's, a finite one
    return (f"epoch {epoch}: the loss is {loss}{where} ({_advice(ctx, x, x_agg, epoch > 1)})"
            f"{_last_good(checkpointer, epoch - 2)}")


def _advice(ctx: DistContext, x: torch.Tensor | None, x_agg: torch.Tensor | None, updated: bool) -> str:
    """What to change where outputs are not finite: after an update, the rate; before any, the features (the first
    weights, glorot's, are bounded), which every rank measures (a collective)."""
    if updated:
        return "try a smaller lr="
    held, named = (x, "the features") if x is not None else (x_agg, "the features aggregated (Â·X)")
    local = held.abs().max().double() if held.numel() else torch.zeros((), dtype=torch.float64, device=held.device)
    largest = float(all_reduce_max(ctx, local.reshape(1)).item())
    reach = (f"reach {largest:.3g} in absolute value, too large for float32's sums" if math.isfinite(largest)
             else "overflow float32")
    return (f"before any update, so not the learning rate: {named} {reach}; scale the features, e.g. each row "
            "divided by its sum, as normalize_features=True reads Planetoid files")


def _last_good(checkpointer, epoch: int) -> str:
    """The end of a divergence's message: the newest checkpoint of an epoch up to ``epoch``, whose weights gave
    finite outputs, and the newer ones, which hold the weights that diverged (a resume takes the newest)."""
    if checkpointer is None:
        return ""
    good, every = checkpointer.files(until=epoch), checkpointer.files()
    diverged = every[: len(every) - len(good)]
    if not good:
        return "; no checkpoint holds weights that gave finite outputs"
    newer = f" ({', '.join(diverged)} of the diverged weights: remove to resume from it)" if diverged else ""
    return f"; last good checkpoint: {good[0]}{newer}"


@torch.no_grad()
def final_accuracies(ctx: DistContext, model: LayerStack, adj, x: torch.Tensor | None, x_agg: torch.Tensor | None,
                     y: torch.Tensor, split_masks: list[torch.Tensor], split_sizes: torch.Tensor) -> tuple[dict, int]:
    """Global train/val/test accuracies (multi-label, ``y`` [m, C]: micro-F1) of the model as it stands, in eval mode
    (one forward, one all-reduce in float64: the counts stay exact), and how many vertices' outputs are not
    finite."""
    model.eval()
    with torch.no_grad():  # no graph kept; the logits on the workspace (no new m × C tensor at the end of training)
        logits = model(x, adj, x_aggregated=x_agg, logits_in_workspace=True)
    multilabel = y.ndim == 2
    scores = f1_counts(logits, y) if multilabel else label_hits(logits, y)
    non_finite = (~torch.isfinite(logits)).any(1).sum().reshape(1).to(torch.float64)
    counts = all_reduce_sum(ctx, torch.cat([_split_counts(scores, split_masks), non_finite]).to(y.device)).cpu()
    counts, non_finite = counts[:-1], int(counts[-1])
    acc = _measured(_f1(counts) if multilabel else (counts / split_sizes.clamp(min=1)).tolist(), split_sizes)
    final = {"train_acc": acc[0], "val_acc": acc[1], "test_acc": acc[2]}
    if multilabel:
        final.update(_split_roc_auc(ctx, logits, y, split_masks))
    return final, non_finite


def _split_roc_auc(ctx: DistContext, logits: torch.Tensor, y: torch.Tensor,
                   split_masks: list[torch.Tensor]) -> dict[str, float | None]:
    """Each split's ROC-AUC (:func:`~mggcn.nn.loss.roc_auc`) over every rank's rows of it, ``{split}_rocauc``: a
    ranking, which no sum of per-rank numbers gives, so each rank's scores and labels of the splits go to rank 0 in
    one gather (once, after training), which sends the results back."""
    parts = gather_objects(ctx, [(logits[mask].float().cpu(), y[mask].cpu()) for mask in split_masks])
    aucs = None if parts is None else {
        f"{s}_rocauc": roc_auc(torch.cat([p[k][0] for p in parts]), torch.cat([p[k][1] for p in parts]))
        for k, s in enumerate(SPLITS)}
    return broadcast_object(ctx, aucs)


def _split_counts(scores: torch.Tensor, split_masks: list[torch.Tensor]) -> torch.Tensor:
    """float64: single-label (``scores`` bool [m], :func:`~mggcn.nn.loss.label_hits`), the correct rows of each
    split [3]; multi-label (int64 [2, m], :func:`~mggcn.nn.loss.f1_counts`), each split's sum of micro-F1's
    numerators, then of its denominators [6]."""
    if scores.dtype == torch.bool:
        return _correct_counts(scores, split_masks)
    return torch.stack([scores[:, mask].sum(dim=1) for mask in split_masks], dim=1).reshape(-1).to(torch.float64)


def _correct_counts(hits: torch.Tensor, split_masks: list[torch.Tensor]) -> torch.Tensor:
    """Correct predictions in each split (``hits``: bool [m], :func:`~mggcn.nn.loss.label_hits`; bool masks [m], in
    :data:`SPLITS` order)."""
    return torch.stack([(hits & mask).sum() for mask in split_masks]).to(torch.float64)


@torch.no_grad()
def predict_shard(ctx: DistContext, shard: Shard, model: LayerStack, adj: StagedSpMM,
                  x_agg: torch.Tensor | None = None) -> np.ndarray | None:
    """Class predictions for every vertex in ORIGINAL vertex order (on rank 0; ``None`` elsewhere): int64 [n], or for
    a multi-label shard (``y`` [m, C]) uint8 [n, C], 1 where the logit is above 0."""
    model.eval()
    predicted = predictions(model(shard.x, adj, x_aggregated=x_agg), shard.y.ndim == 2)
    return ParallelLayout.gather_original(ctx, shard.partition, predicted)
