"""The repository's scripts/ files as modules, for tests that call their functions."""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def load_script(name: str) -> ModuleType:
    """``scripts/NAME.py``, executed as a fresh module of that name (not in sys.modules: each call its own)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
