"""Optional dependencies: the packages only some features need, each installed with an extra of mggcn.

``mggcn train``, ``prepare``, ``predict``, ``plan`` and ``info`` need only torch, numpy and scipy (the core
dependencies). The rest is imported where it is used, through :func:`require`, which says in one line what is missing
and which extra installs it (pyproject.toml's ``[project.optional-dependencies]``):

* ``datasets`` — networkx and scikit-learn: the built-in graphs ``builtin:karate`` and ``builtin:digits``;
* ``bench`` — torch-geometric: ``mggcn bench``'s PyG baseline;
* ``plots`` — matplotlib: ``mggcn report``;
* ``metis`` — pymetis: ``--partition metis``;
* ``progress`` — tqdm: a progress bar on a terminal (without it, plain lines: :mod:`mggcn.utils.progress`).

``all`` installs every one of them; ``test`` all of them and what the test suite runs with (pytest, psutil, ruff).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from mggcn.utils.errors import ConfigError

__all__ = ["DISTRIBUTIONS", "MissingDependency", "distribution", "require"]

# The import name's package as pip names it, where the two differ.
DISTRIBUTIONS = {"sklearn": "scikit-learn", "torch_geometric": "torch-geometric"}


def distribution(module: str) -> str:
    """What ``pip install`` calls the package of ``module`` (``sklearn.neighbors`` -> ``scikit-learn``)."""
    top = module.partition(".")[0]
    return DISTRIBUTIONS.get(top, top.replace("_", "-"))


class MissingDependency(ConfigError):
    """An optional package that a feature needs cannot be imported. ``package`` is its pip name, ``extra`` the extra
    of mggcn that installs it. A :class:`~mggcn.utils.errors.ConfigError`: the ``mggcn`` command says it in one line
    and exits with status 2."""

    def __init__(self, message: str, package: str, extra: str, option: str | None = None) -> None:
        super().__init__(message, option)
        self.package, self.extra = package, extra


def require(module: str, extra: str, what: str, *, option: str | None = None, hint: str | None = None) -> ModuleType:
    """Import ``module`` and return it, or raise :class:`MissingDependency` with one line that names the package and
    the extra to install, e.g. ``builtin:karate needs networkx: pip install 'mggcn[datasets]' (or pip install
    networkx)``.

    Args:
        module: what to import (``networkx``, ``sklearn.neighbors``).
        extra: the extra of mggcn that installs it (``datasets``).
        what: the feature that needs it, the message's subject (``builtin:karate``); with ``option``, it starts with
            the option's library name (``partition metis``), which the command line replaces by its flag.
        option: the setting that asked for the feature (:class:`~mggcn.utils.errors.ConfigError`'s ``option``).
        hint: the parenthesized alternative at the end (default: ``or pip install PACKAGE``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = distribution(module)
        missing = (exc.name or "").partition(".")[0]
        if missing and missing != module.partition(".")[0]:
            # the package is there, but something it imports is not: say so rather than "install it"
            raise MissingDependency(f"{what} needs {package}, whose import failed: {exc}; reinstall it with pip "
                                    f"install 'mggcn[{extra}]'", package, extra, option) from exc
        hint = hint if hint is not None else f"or pip install {package}"
        raise MissingDependency(f"{what} needs {package}: pip install 'mggcn[{extra}]' ({hint})", package, extra,
                                option) from None
