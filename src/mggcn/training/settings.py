"""The one check of a training job's settings, before any data is read or any worker starts: the command line, the
Python API (:func:`mggcn.train`) and the launcher all reach it through :func:`mggcn.training.job.check_job`.

Each problem raises :class:`~mggcn.utils.errors.ConfigError` naming the setting by its library name (the command line
shows the flag); a value that is not a number, not finite, or out of its range is refused rather than trained with.
"""

from __future__ import annotations

import dataclasses
import math
from numbers import Integral, Real
from typing import Any

from mggcn.config import PRECISIONS, TrainConfig
from mggcn.nn.models import MODEL_TYPES, model_type, models_taking
from mggcn.utils.errors import ConfigError

__all__ = ["check_config", "check_job_settings", "check_timeout"]


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


def check_timeout(value: Any) -> None:
    """Seconds a rank waits for its peers (``timeout_s``): a positive, finite number."""
    _positive("timeout_s", value)


def check_config(cfg: TrainConfig) -> None:
    """Refuse a :class:`~mggcn.config.TrainConfig` that cannot train (types, ranges, finiteness, the model's own
    options)."""
    kind = model_type(cfg.model)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for option in sorted({o for cls in MODEL_TYPES.values() for o in cls.options} - set(kind.options)):
        if getattr(cfg, option) != defaults[option]:  # an option of another model, set
            raise ConfigError(f"{option} is for model {models_taking(option)}, not {cfg.model}", option)
    hidden = cfg.hidden
    iterable = not isinstance(hidden, (str, bytes)) and hasattr(hidden, "__iter__")
    if not iterable or not all(isinstance(h, Integral) and not isinstance(h, bool) for h in hidden):
        raise ConfigError(f"hidden must be a sequence of positive integers, got {hidden!r}", "hidden")
    if any(h < 1 for h in hidden):
        raise ConfigError(f"hidden sizes must be positive, got {','.join(map(str, hidden))}", "hidden")
    _at_least("epochs", cfg.epochs, 0, integer=True)
    _positive("lr", cfg.lr)
    _at_least("weight_decay", cfg.weight_decay, 0)
    _positive("eps", cfg.eps)
    if len(cfg.betas) != 2 or not all(0 <= _number("betas", b) < 1 for b in cfg.betas):
        raise ConfigError(f"betas must be two numbers in [0, 1), got {cfg.betas!r}", "betas")
    for option, p in (("dropout", cfg.dropout), ("input_dropout", cfg.input_dropout)):
        if not 0.0 <= _number(option, p) < 1.0:
            raise ConfigError(f"{option} must be in [0, 1), got {p}", option)
    _at_least("seed", cfg.seed, 0, integer=True)
    _at_least("patience", cfg.patience, 0, integer=True)
    _at_least("trace_epoch", cfg.trace_epoch, 0, integer=True)
    if cfg.tile_bytes is not None:
        _at_least("tile_bytes", cfg.tile_bytes, 0, integer=True)
    _at_least("heads", cfg.heads, 1, integer=True)
    if not 0.0 <= _number("attention_dropout", cfg.attention_dropout) < 1.0:
        raise ConfigError(f"attention_dropout must be in [0, 1), got {cfg.attention_dropout}", "attention_dropout")
    if "heads" in kind.options and any(h % cfg.heads for h in hidden):
        raise ConfigError(f"hidden sizes are totals over the heads: each must be a multiple of heads {cfg.heads}, got "
                          f"{','.join(map(str, hidden))}", "heads")
    if cfg.precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {cfg.precision!r}", "precision")


def check_job_settings(job: Any) -> None:
    """The job's own settings beside its config (a :class:`~mggcn.training.job.TrainJob`)."""
    check_config(job.config)
    check_timeout(job.timeout_s)
    _at_least("log_every", job.log_every, 1, integer=True)
    _at_least("checkpoint_every", job.checkpoint_every, 0, integer=True)
    if not (isinstance(job.resume, bool) or job.resume == "auto"):
        raise ConfigError(f"resume must be True, False or 'auto', got {job.resume!r}", "resume")
    if job.resume and not job.checkpoint_dir:
        raise ConfigError("resume needs a checkpoint directory", "resume")
    if job.checkpoint_every and not job.checkpoint_dir:
        raise ConfigError("checkpoint_every needs a checkpoint directory (checkpoint_dir)", "checkpoint_every")
