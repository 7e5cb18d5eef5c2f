"""The error a setting raises when it cannot be used; :class:`mggcn.data.graph.GraphError` is its sibling for data."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A setting that cannot be used (a norm, an order, a count out of range, a size that does not parse, ...).

    The message starts with the setting's library name, ``option`` (``norm``, ``nprocs``, ``memory_limit``); the
    command line names it by its flag instead (``--norm``, ``--nprocs``, ``--memory-limit``) and exits with status 2.
    """

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option
