"""The one check of a training job's settings, before any data is read or any worker starts: the command line, the
Python API (:func:`mggcn.train`) and the launcher all reach it through :func:`mggcn.training.job.check_job`.

Each problem raises :class:`~mggcn.utils.errors.ConfigError` naming the setting by its library name (the command line
shows the flag); a value that is not a number, not finite, or out of its range is refused rather than trained with.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping, Sequence, Set
from numbers import Integral, Real
from typing import Any

from mggcn.config import MMAP_THRESHOLD_MAX, PRECISIONS, TIMEOUT_MAX, TrainConfig
from mggcn.data.generators.spec import physical_memory
from mggcn.nn.models import MODEL_TYPES, model_options, model_type, models_taking, num_parameters
from mggcn.training.outputs import check_distinct, read_inputs
from mggcn.utils.errors import ConfigError
from mggcn.utils.launcher import under_torchrun

__all__ = ["check_config", "check_job_settings", "check_switch", "check_timeout", "seed_limit", "train_outputs"]

# Adam's weights, its state and the loss are float32: a step or a term beyond its largest value overflows in torch
# itself (a RuntimeError) instead of making the loss non-finite, which the trainer says in one line
_FLOAT32_MAX = 3.4028234663852886e38
# a seed's epochs and ranks draw their dropout masks from torch generators, whose seeds are 64-bit: the seed must
# leave room for this many epochs and ranks (mggcn.training.trainer.epoch_seed)
_SEEDED_EPOCHS, _SEEDED_RANKS = 2**32, 2**20


def _number(option: str, value: Any, integer: bool = False) -> float:
    kind = Integral if integer else Real
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigError(f"{option} must be {'an integer' if integer else 'a number'}, got {value!r}", option)
    if not math.isfinite(value):
        raise ConfigError(f"{option} must be finite, got {value!r}", option)
    return value


def _at_least(option: str, value: Any, low: float, integer: bool = False) -> None:
    if _number(option, value, integer) < low:
        raise ConfigError(f"{option} must be at least {low}, got {value!r}", option)


def _positive(option: str, value: Any) -> None:
    if _number(option, value) <= 0:
        raise ConfigError(f"{option} must be positive, got {value!r}", option)


def _at_most(option: str, value: Any, high: float, why: str) -> None:
    if value > high:
        limit = high if isinstance(high, int) else f"{high:.4g}"
        raise ConfigError(f"{option} must be at most {limit} ({why}), got {value!r}", option)


def check_timeout(value: Any) -> None:
    """Seconds a rank waits for its peers (``timeout_s``): a positive, finite number of at most
    :data:`~mggcn.config.TIMEOUT_MAX`."""
    _positive("timeout_s", value)
    _at_most("timeout_s", value, TIMEOUT_MAX, "seconds, about 24 days: the longest wait the launcher can count")


@functools.cache
def seed_limit() -> int:
    """The largest seed whose every epoch's and rank's dropout seed (:func:`~mggcn.training.trainer.epoch_seed`) a
    torch generator takes (below 2**64), for :data:`_SEEDED_EPOCHS` epochs and :data:`_SEEDED_RANKS` ranks."""
    from mggcn.training.trainer import epoch_seed

    low, high = 0, 2**64  # epoch_seed grows with the seed: the largest that fits, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if epoch_seed(middle, _SEEDED_EPOCHS, _SEEDED_RANKS) < 2**64 else (low, middle - 1)
    return low


def check_switch(option: str, value: Any) -> None:
    """A switch is a bool: one given "False" (a non-empty string, truthy) would be on."""
    if not isinstance(value, bool):
        raise ConfigError(f"{option} must be True or False, got {value!r}", option)


def _check_optimizer(cfg: TrainConfig) -> None:
    """Adam's settings: finite, in range, and a first step (``lr / (1 - β₁)``, the largest, as ``1 - β₁ᵗ`` grows
    with ``t``) and a weight decay that a float32 holds."""
    _positive("lr", cfg.lr)
    _at_least("weight_decay", cfg.weight_decay, 0)
    _positive("eps", cfg.eps)
    betas = cfg.betas
    pair = isinstance(betas, Sequence) and not isinstance(betas, str) and len(betas) == 2
    if not pair or not all(isinstance(b, Real) and not isinstance(b, bool) and 0 <= b < 1 for b in betas):
        raise ConfigError(f"betas must be two numbers in [0, 1), got {betas!r}", "betas")
    largest = "float32's largest value"
    _at_most("lr", cfg.lr, _FLOAT32_MAX * (1 - cfg.betas[0]),
             f"Adam's first step, lr / {1 - cfg.betas[0]:g}, must be at most {largest}, {_FLOAT32_MAX:.4g}")
    _at_most("weight_decay", cfg.weight_decay, _FLOAT32_MAX, largest)
    _at_most("eps", cfg.eps, _FLOAT32_MAX, largest)


def check_config(cfg: TrainConfig) -> None:
    """Refuse a :class:`~mggcn.config.TrainConfig` that cannot train (types, ranges, finiteness, the model's own
    options)."""
    kind = model_type(cfg.model)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for option, default in defaults.items():
        if isinstance(default, bool):
            check_switch(option, getattr(cfg, option))
    for option in sorted({o for cls in MODEL_TYPES.values() for o in cls.options} - set(kind.options)):
        if getattr(cfg, option) != defaults[option]:  # an option of another model, set
            raise ConfigError(f"{option} is for model {models_taking(option)}, not {cfg.model}", option)
    if cfg.norm != defaults["norm"] and kind.operator(cfg.norm) == kind.operator(defaults["norm"]):
        takes = ", ".join(k for k, cls in MODEL_TYPES.items() if cls.operator(cfg.norm) != cls.operator("sym"))
        raise ConfigError(f"norm is for model {takes}, not {cfg.model} (which has an aggregation of its own)", "norm")
    hidden = cfg.hidden
    iterable = not isinstance(hidden, (str, bytes, Mapping, Set)) and hasattr(hidden, "__iter__")  # in order
    if not iterable or not all(isinstance(h, Integral) and not isinstance(h, bool) for h in hidden):
        raise ConfigError(f"hidden must be a sequence of positive integers, got {hidden!r}", "hidden")
    if any(h < 1 for h in hidden):
        raise ConfigError(f"hidden sizes must be positive, got {','.join(map(str, hidden))}", "hidden")
    _at_least("epochs", cfg.epochs, 0, integer=True)
    between = ("dropout", "batch_norm") + (() if kind.activation_inside_layers else ("activation",))
    for option in between if not hidden else ():
        if getattr(cfg, option) != defaults[option]:  # it acts on hidden layers: a one-layer model would ignore it
            raise ConfigError(f"{option} acts between layers, and the model has one (no hidden layer): it would "
                              "have no effect", option)
    _check_optimizer(cfg)
    for option, p in (("dropout", cfg.dropout), ("input_dropout", cfg.input_dropout)):
        if not 0.0 <= _number(option, p) < 1.0:
            raise ConfigError(f"{option} must be in [0, 1), got {p}", option)
    _at_least("seed", cfg.seed, 0, integer=True)
    _at_most("seed", cfg.seed, seed_limit(), "the seeds of its epochs' dropout masks must fit in 64 bits")
    _at_least("patience", cfg.patience, 0, integer=True)
    _at_least("trace_epoch", cfg.trace_epoch, 0, integer=True)
    if cfg.trace_epoch != defaults["trace_epoch"] and cfg.trace_epoch > cfg.epochs:  # the default may pass a short run
        raise ConfigError(f"trace_epoch {cfg.trace_epoch} is after the last epoch (epochs={cfg.epochs}): no epoch "
                          "would be traced", "trace_epoch")
    if cfg.tile_bytes is not None:
        _at_least("tile_bytes", cfg.tile_bytes, 0, integer=True)
    _at_least("heads", cfg.heads, 1, integer=True)
    if cfg.output_heads is not None:
        _at_least("output_heads", cfg.output_heads, 1, integer=True)
    if not 0.0 <= _number("attention_dropout", cfg.attention_dropout) < 1.0:
        raise ConfigError(f"attention_dropout must be in [0, 1), got {cfg.attention_dropout}", "attention_dropout")
    if "heads" in kind.options and any(h % cfg.heads for h in hidden):
        raise ConfigError(f"hidden sizes are totals over the heads: each must be a multiple of heads {cfg.heads}, got "
                          f"{','.join(map(str, hidden))}", "heads")
    if cfg.precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {cfg.precision!r}", "precision")


def check_tile_bytes(tile_bytes: int | None, device: str) -> None:
    """``tile_bytes`` sizes a CPU's column tiles: on a GPU, which multiplies whole blocks, it would change nothing."""
    if tile_bytes is not None and device != "cpu":
        raise ConfigError(f"tile_bytes is for device=cpu (a GPU multiplies whole blocks), and the device is {device}",
                          "tile_bytes")


def check_job_settings(job: Any) -> None:
    """The job's own settings beside its config (a :class:`~mggcn.training.job.TrainJob`)."""
    check_config(job.config)
    check_timeout(job.timeout_s)
    if getattr(job, "mmap_threshold", None) is not None:
        _at_most("mmap_threshold", job.mmap_threshold, MMAP_THRESHOLD_MAX, "bytes, glibc's largest")
    _at_least("log_every", job.log_every, 1, integer=True)
    _at_least("checkpoint_every", job.checkpoint_every, 0, integer=True)
    if not (isinstance(job.resume, bool) or job.resume == "auto"):
        raise ConfigError(f"resume must be True, False or 'auto', got {job.resume!r}", "resume")
    if job.resume and not job.checkpoint_dir:
        raise ConfigError("resume needs a checkpoint directory (checkpoint_dir=)", "resume")
    if job.checkpoint_every and not job.checkpoint_dir:
        raise ConfigError("checkpoint_every needs a checkpoint directory (checkpoint_dir=)", "checkpoint_every")
    options = job.read_options if isinstance(job.read_options, dict) else {}
    for option in ("features", "labels", "split"):
        if options.get(option) == "":  # the working directory's name, to the calls that take a path: no file
            raise ConfigError(f"{option} '': an empty path names no file", option)
    check_distinct(train_outputs(job), read_inputs(job.dataset, job.read_options, job.checkpoint_dir))


def train_outputs(job: Any) -> list[tuple[str, str | None]]:
    """What a training job writes, by setting (:func:`~mggcn.training.outputs.check_distinct`)."""
    return [(option, getattr(job, option)) for option in ("metrics", "save_model", "save_predictions",
                                                          "checkpoint_dir")]


def check_model_size(cfg: TrainConfig, features: int, classes: int, num_nodes: int, nprocs: int) -> None:
    """Refuse layer sizes no machine of this one's memory can train, before anything that large is allocated: the
    float32 weights with their gradient and Adam's two moments, and one activation of the widest layer over a rank's
    rows, for each rank this host runs. A size within memory is left to the run (the plan's other buffers and the
    system's own use decide the rest), so only a size that cannot be meant is refused, never a tight one."""
    memory = physical_memory()
    if memory is None:
        return
    dims = [features, *cfg.hidden, classes]
    local = int(os.environ.get("LOCAL_WORLD_SIZE", nprocs)) if under_torchrun() else nprocs

    def need(**changed) -> int:
        options = {**model_options(cfg), **changed}
        weights = 4 * 4 * num_parameters(dims, cfg.model, options.pop("train_eps", False), **options)
        return local * (weights + 4 * -(-num_nodes // nprocs) * max(dims))

    total = need()
    if total > memory:
        sizes = ",".join(str(h) for h in cfg.hidden)
        option, given = ("heads", f"heads {cfg.heads} (hidden '{sizes}')") if cfg.model == "gat" else \
            ("hidden", f"hidden {sizes}")
        if cfg.output_heads is not None and need(output_heads=None) <= memory:
            option, given = "output_heads", f"output_heads {cfg.output_heads}"
        raise ConfigError(f"{given}: layers of {dims} need {total / 2**30:,.1f} GiB for weights, Adam's state "
                          f"and one activation per rank, more than this machine's {memory / 2**30:,.1f} GiB", option)
