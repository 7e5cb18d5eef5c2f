"""Full-batch training on one rank's shard: the epoch loop, the global loss and accuracies, the per-phase timing.

Loss: softmax cross-entropy averaged over the GLOBAL training set: each rank sums over its own training rows and
divides by the global count, so the all-reduced sum of the ranks' losses is the mean and the all-reduced gradients
are its gradients. Accuracies are global correct counts over global split sizes. Padding rows belong to no split.
The gradient all-reduce also carries the epoch's loss and correct counts: one collective per epoch for all of them.

Legend: m = rows of this rank, C = classes.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from mggcn.dist import DistContext, all_gather_rows, all_reduce_max, all_reduce_sum
from mggcn.graph import SPLITS
from mggcn.model import GCN, aggregate_first
from mggcn.partition import Shard
from mggcn.spmm import BroadcastBuffers, StagedSpMM
from mggcn.timing import PHASES, PhaseTimer

__all__ = ["TrainConfig", "TrainResult", "train_shard", "predict_shard", "spmm_widths"]


@dataclass(frozen=True)
class TrainConfig:
    """Every training option and its default, in one place (the CLI's flags mirror these names)."""

    hidden: tuple[int, ...] = (128,)
    epochs: int = 100
    lr: float = 1e-2
    weight_decay: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    dropout: float = 0.0
    input_dropout: float = 0.0
    activation: str = "relu"
    norm: str = "sym"
    order: str = "auto"
    overlap: bool = True
    partition: str = "random"
    seed: int = 0

    def dims(self, num_features: int, num_classes: int) -> list[int]:
        return [num_features, *self.hidden, num_classes]


@dataclass
class TrainResult:
    """What a rank ends with. ``model``, ``adj`` and ``x_agg`` stay in the worker (for predictions)."""

    history: list[dict] = field(default_factory=list)
    state_dict: dict[str, torch.Tensor] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    model: GCN | None = None
    adj: StagedSpMM | None = None
    x_agg: torch.Tensor | None = None


def spmm_widths(dims: list[int], order: str, caches_input: bool) -> list[int]:
    """The width of every SpMM an epoch runs (forward and backward), for sizing buffers and counting traffic."""
    widths = []
    for i in range(len(dims) - 1):
        agg = aggregate_first(dims[i], dims[i + 1], i == 0, order)
        if i == 0 and agg:
            widths += [] if caches_input else [dims[0]]
        else:
            width = dims[i] if agg else dims[i + 1]
            widths += [width, width]
    return widths


def _build_model(cfg: TrainConfig, shard: Shard, device: torch.device) -> GCN:
    return GCN(cfg.dims(shard.x.shape[1], shard.num_classes), activation=cfg.activation, dropout=cfg.dropout,
               input_dropout=cfg.input_dropout, order=cfg.order, seed=cfg.seed).to(device)


def train_shard(ctx: DistContext, shard: Shard, cfg: TrainConfig,
                on_epoch: Callable[[dict], None] | None = None) -> TrainResult:
    """Train on this rank's shard for ``cfg.epochs`` epochs; every rank returns the same history and weights.

    ``on_epoch`` is called on every rank with the epoch's record (keys ``epoch, loss, train_acc, val_acc,
    test_acc, epoch_s`` and one key per phase, the max over ranks).
    """
    device = ctx.device
    shard.to(device)
    timer = PhaseTimer(device)
    model = _build_model(cfg, shard, device)
    widths = spmm_widths(model.dims, cfg.order, model.caches_input_aggregation) or [model.dims[0]]
    buffers = BroadcastBuffers(shard.x.shape[0], max(widths), shard.x.dtype, device) if ctx.world_size > 1 else None
    adj = StagedSpMM(ctx, shard.adj, shard.adj_t, buffers=buffers, overlap=cfg.overlap, timer=timer)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                 weight_decay=cfg.weight_decay)
    torch.manual_seed(cfg.seed * 1000 + ctx.rank)  # dropout masks: per rank, so they depend on P

    x, y = shard.x, shard.y
    with torch.no_grad():
        x_agg = adj.run(x) if model.caches_input_aggregation else None
    split_rows = {s: shard.masks[s].nonzero().squeeze(1) for s in SPLITS}
    split_sizes = torch.tensor([max(shard.split_sizes[s], 1) for s in SPLITS], dtype=torch.float64)
    num_train = shard.split_sizes["train"]
    params = list(model.parameters())
    stochastic = model.training and (cfg.dropout > 0 or cfg.input_dropout > 0)
    result = TrainResult(config=asdict(cfg))

    for epoch in range(1, cfg.epochs + 1):
        timer.reset()
        start = time.perf_counter()
        if stochastic:  # accuracies of the weights at the start of the epoch, without dropout
            with torch.no_grad():
                model.eval()
                correct = _correct_counts(model(x, adj, timer, x_agg), y, split_rows)
                model.train()
        optimizer.zero_grad(set_to_none=False)
        logits = model(x, adj, timer, x_agg)
        with timer("criterion"):
            rows = split_rows["train"]
            loss = F.cross_entropy(logits[rows], y[rows], reduction="sum") / num_train
        loss.backward()
        if not stochastic:
            correct = _correct_counts(logits.detach(), y, split_rows)
        with timer("allreduce"):
            stats = torch.cat([loss.detach().reshape(1).to(torch.float64), correct]).to(device)
            flat = torch.cat([p.grad.reshape(-1) for p in params] + [stats.to(params[0].dtype)])
            all_reduce_sum(ctx, flat)
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset: offset + p.numel()].view_as(p.grad))
                offset += p.numel()
            if ctx.world_size > 1:
                stats = flat[offset:].to(torch.float64)
        with timer("optimizer"):
            optimizer.step()
        epoch_s = time.perf_counter() - start

        phases = torch.tensor([epoch_s] + [timer.seconds[p] for p in PHASES], dtype=torch.float64, device=device)
        phases = all_reduce_max(ctx, phases).cpu().tolist()
        stats = stats.cpu()
        acc = (stats[1:] / split_sizes).tolist()
        record = {"epoch": epoch, "loss": float(stats[0]), "train_acc": acc[0], "val_acc": acc[1],
                  "test_acc": acc[2], "epoch_s": phases[0]}
        record.update({p: s for p, s in zip(PHASES, phases[1:])})
        record["other"] = max(0.0, phases[0] - sum(phases[1:]))
        result.history.append(record)
        if on_epoch is not None:
            on_epoch(record)

    result.state_dict = model.gcnconv_state_dict()
    result.model, result.adj, result.x_agg = model, adj, x_agg
    return result


def _correct_counts(logits: torch.Tensor, y: torch.Tensor, split_rows: dict[str, torch.Tensor]) -> torch.Tensor:
    pred = logits.argmax(dim=1)
    return torch.stack([(pred[r] == y[r]).sum() for r in split_rows.values()]).to(torch.float64)


@torch.no_grad()
def predict_shard(ctx: DistContext, shard: Shard, model: GCN, adj: StagedSpMM,
                  x_agg: torch.Tensor | None = None) -> np.ndarray | None:
    """Class predictions for every vertex in ORIGINAL vertex order (on rank 0; ``None`` elsewhere)."""
    model.eval()
    pred = model(shard.x, adj, x_aggregated=x_agg).argmax(dim=1)
    every = all_gather_rows(ctx, pred).cpu().numpy()
    if not ctx.is_main:
        return None
    part = shard.partition
    out = np.empty(part.num_nodes, dtype=np.int64)
    real = part.order >= 0
    out[part.order[real]] = every[real]
    return out


def write_metrics_line(path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
