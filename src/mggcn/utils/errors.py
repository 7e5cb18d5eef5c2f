"""The errors library code raises for what a user gave: a setting that cannot be used (:class:`ConfigError`) and a
dataset that cannot be trained on (:class:`GraphError`). The command line prints either as one line and exits 2."""

from __future__ import annotations

__all__ = ["ConfigError", "GraphError"]


class ConfigError(ValueError):
    """A setting that cannot be used (a norm, an order, a count out of range, a size that does not parse, ...).

    The message starts with the setting's library name, ``option`` (``norm``, ``nprocs``, ``memory_limit``); the
    command line names it by its flag instead (``--norm``, ``--nprocs``, ``--memory-limit``) and exits with status 2.
    """

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class GraphError(ValueError):
    """A dataset that cannot be trained on; the message names the source and what is wrong."""
