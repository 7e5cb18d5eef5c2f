"""The docs site (mkdocs.yml, built strictly by .ci/run): its navigation holds every page of docs/, the API reference
page holds every public name, and every public name, method and property has a docstring for it to show (mkdocstrings
shows an empty entry without a warning, so the strict build alone would not catch a missing one)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import mggcn
import mggcn.api

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API_PAGE = DOCS / "api.md"


def public_api() -> dict[str, object]:
    """Every public name, by the dotted path of where it is defined: ``mggcn.__all__`` and ``mggcn.api.__all__``."""
    found = {}
    for module, names in (("mggcn", mggcn.__all__), ("mggcn.api", mggcn.api.__all__)):
        for name in names:
            obj = getattr(importlib.import_module(module), name)
            home = mggcn._EXPORTS[name] if module == "mggcn" else getattr(obj, "__module__", module)
            found[f"{home}.{name}"] = obj
    return found


def nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text()
    return re.findall(r"^\s+- [^:\n]+: (\S+\.md)$", text[text.index("\nnav:"):], re.M)


def test_nav_holds_every_page_once():
    pages = nav_pages()
    assert pages[0] == "index.md"  # README.md, put there by docs/site_hooks.py
    assert sorted(pages[1:]) == sorted(p.name for p in DOCS.glob("*.md")), pages
    assert len(set(pages)) == len(pages)


def test_api_page_holds_every_public_name():
    shown = set(re.findall(r"^::: (\S+)$", API_PAGE.read_text(), re.M))
    assert shown == set(public_api()), (shown ^ set(public_api()))


def undocumented(path: str, obj: object) -> list[str]:
    """``path`` and its public members (methods, class and static methods, properties) without a docstring, own or
    inherited (the site shows the inherited one)."""
    if isinstance(obj, tuple | str | int | float):
        return []  # a constant: the page shows its value
    missing = [] if (obj.__doc__ or "").strip() else [path]  # a class's own: the page shows no base's
    if inspect.isclass(obj):
        for name, member in vars(obj).items():
            if name.startswith("_") or not (callable(member) or isinstance(member, property | classmethod |
                                                                                staticmethod)):
                continue
            if not inspect.getdoc(getattr(obj, name)):
                missing.append(f"{path}.{name}")
    return missing


def test_public_api_has_docstrings():
    missing = [m for path, obj in public_api().items() for m in undocumented(path, obj)]
    assert missing == [], f"public names without a docstring (the API reference shows them empty): {missing}"


class Documented:
    """A class."""

    def method(self) -> None:
        """A method."""


class Bare(Documented):
    def method(self) -> None:  # inherits the docstring
        pass

    @property
    def size(self) -> int:
        return 0


def test_undocumented_finds_what_lacks_one():
    assert undocumented("Documented", Documented) == []
    assert undocumented("Bare", Bare) == ["Bare", "Bare.size"]


def test_site_output_is_ignored():
    assert "/site/" in (ROOT / ".gitignore").read_text().splitlines()
    assert "mkdocs build --strict" in (ROOT / ".ci" / "run").read_text()
