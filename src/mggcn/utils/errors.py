"""The errors library code raises for what a user gave: a setting that cannot be used (:class:`ConfigError`) and a
dataset that cannot be trained on (:class:`GraphError`). The command line prints either as one line and exits 2."""

from __future__ import annotations

__all__ = ["InputError", "ConfigError", "GraphError"]


class InputError(ValueError):
    """What a user gave that cannot be used; ``option``, when given, the setting the message concerns, by its library
    name (``fmt``, ``num_nodes``), which the command line names by its flag instead
    (:func:`mggcn.tools.cli.common.flag_message`)."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class ConfigError(InputError):
    """A setting that cannot be used (a norm, an order, a count out of range, a size that does not parse, ...).

    The message starts with the setting's library name, ``option`` (``norm``, ``nprocs``, ``memory_limit``); the
    command line names it by its flag instead (``--norm``, ``--nprocs``, ``--memory-limit``) and exits with status 2.
    """


class GraphError(InputError):
    """A dataset that cannot be trained on; the message names the source and what is wrong, and ``option``, when
    given, the setting that would mean it otherwise (``fmt``, ``num_nodes``)."""
