"""Optional dependencies (mggcn.utils.optional): each feature that needs one says, when it is missing, in one line, what
to install and with which extra (the command exits with status 2, no traceback); and pyproject.toml's lists match the
imports of src/mggcn: top-level imports are core dependencies, the others are in an extra, and ``test`` has them all.

A package is made missing by putting None in ``sys.modules`` for it and its submodules (``import`` then raises
ImportError), undone by monkeypatch after each test."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mggcn
from mggcn.tools.cli import main
from mggcn.utils.optional import MissingDependency, distribution, require

PACKAGE = Path(mggcn.__file__).parent
ROOT = PACKAGE.parent.parent
TESTS = Path(__file__).parent
FEATURES = ("datasets", "bench", "plots", "metis", "progress")  # the extras named for what they enable


def _absent(monkeypatch, *names: str) -> None:
    """As if ``names`` were not installed: they and every submodule already imported fail to import."""
    for name in names:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")] + [name]:
            monkeypatch.setitem(sys.modules, key, None)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --- the helper ---------------------------------------------------------------------------------------------------


def test_require_returns_the_module_or_names_the_extra(monkeypatch):
    assert require("json", "none", "x") is sys.modules["json"]
    _absent(monkeypatch, "sklearn")
    with pytest.raises(MissingDependency) as info:
        require("sklearn.neighbors", "datasets", "builtin:digits")
    err = info.value
    assert str(err) == "builtin:digits needs scikit-learn: pip install 'mggcn[datasets]' (or pip install scikit-learn)"
    assert (err.package, err.extra, err.option) == ("scikit-learn", "datasets", None)
    assert isinstance(err, ValueError)  # a ConfigError: the command line's one line and status 2


def test_a_package_that_is_there_but_fails_to_import_is_not_called_missing(monkeypatch, tmp_path):
    (tmp_path / "brokenpkg_for_mggcn").mkdir()
    (tmp_path / "brokenpkg_for_mggcn" / "__init__.py").write_text("import a_dependency_nobody_has_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingDependency, match="brokenpkg-for-mggcn, whose import failed: .*a_dependency_nobody"):
        require("brokenpkg_for_mggcn", "bench", "a feature")


def test_distribution_names():
    assert [distribution(m) for m in ("sklearn.neighbors", "torch_geometric.nn", "networkx", "pymetis")] == \
        ["scikit-learn", "torch-geometric", "networkx", "pymetis"]


# --- each optional package, missing, at its user-facing entry --------------------------------------------------------


@pytest.mark.parametrize("spec, module, package", [("builtin:karate", "networkx", "networkx"),
                                                   ("builtin:digits", "sklearn", "scikit-learn")])
def test_builtin_dataset_without_its_package(spec, module, package, tmp_path, monkeypatch, capsys):
    _absent(monkeypatch, module)
    out = tmp_path / "out"
    assert main(["prepare", spec, str(out)]) == 2
    assert _one_line_error(capsys) == (f"mggcn prepare: error: {spec} needs {package}: pip install 'mggcn[datasets]' "
                                       f"(or pip install {package})")
    assert not out.exists()
    from mggcn.data.generators.spec import parse_spec

    with pytest.raises(MissingDependency, match=re.escape(f"{spec} needs {package}")):
        parse_spec(spec)


def test_train_on_karate_without_networkx(monkeypatch, capsys):
    _absent(monkeypatch, "networkx")
    assert main(["train", "builtin:karate", "--epochs", "1", "--quiet"]) == 2
    assert _one_line_error(capsys) == ("mggcn train: error: builtin:karate needs networkx: pip install "
                                       "'mggcn[datasets]' (or pip install networkx)")


def test_partition_metis_without_pymetis(monkeypatch, capsys):
    _absent(monkeypatch, "pymetis")
    assert main(["train", "synthetic:n=200", "--partition", "metis", "--nprocs", "2", "--epochs", "1"]) == 2
    assert _one_line_error(capsys) == ("mggcn train: error: --partition metis needs pymetis: pip install "
                                       "'mggcn[metis]' (or pip install pymetis)")
    from mggcn.distributed.metis import require_pymetis

    with pytest.raises(MissingDependency) as info:
        require_pymetis()
    assert (info.value.option, info.value.extra) == ("partition", "metis")


def test_report_without_matplotlib(tmp_path, monkeypatch, capsys):
    metrics = tmp_path / "run.jsonl"
    metrics.write_text("".join(f'{{"epoch": {e}, "loss": 1.0, "train_acc": 0.5, "val_acc": 0.5, "test_acc": 0.5}}\n'
                               for e in (1, 2)))
    _absent(monkeypatch, "matplotlib")
    out = tmp_path / "plots"
    assert main(["report", str(metrics), "--out", str(out)]) == 2
    assert _one_line_error(capsys) == ("mggcn report: error: plotting needs matplotlib: pip install 'mggcn[plots]' "
                                       "(or pip install matplotlib)")
    assert main(["report", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2  # said before the file is read
    assert "needs matplotlib" in _one_line_error(capsys)
    from mggcn.tools.report import write_report

    with pytest.raises(MissingDependency, match=r"mggcn\[plots\]"):
        write_report(str(metrics), str(out))
    assert not out.exists()


def test_bench_without_torch_geometric(monkeypatch, capsys):
    _absent(monkeypatch, "torch_geometric")
    assert main(["bench", "--small", "--nprocs", "1"]) == 2
    assert _one_line_error(capsys) == ("mggcn bench: error: the PyG baseline needs torch-geometric: pip install "
                                       "'mggcn[bench]' (or leave it out: --no-pyg)")
    from mggcn.tools.cli.bench import check_pyg

    check_pyg(False)  # --no-pyg: the bench runs without it
    with pytest.raises(MissingDependency):
        check_pyg(True)


def test_progress_without_tqdm_prints_plain_lines(monkeypatch, capsys):
    _absent(monkeypatch, "tqdm")
    from mggcn.utils.progress import epoch_progress

    with epoch_progress(2, line=lambda r: f"epoch {r['epoch']}", bar=True) as progress:  # a bar was asked for
        assert not progress.shows_bar
        for epoch in (1, 2):
            progress.update({"epoch": epoch, "loss": 1.0, "train_acc": 0.5, "val_acc": 0.5})
    assert capsys.readouterr().out.splitlines() == ["epoch 1", "epoch 2"]


def test_the_real_command_says_one_line(tmp_path):
    """``python -m mggcn``'s own process (its settings, its exit status), networkx missing."""
    code = "import sys; sys.modules['networkx'] = None; import runpy; runpy.run_module('mggcn', run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", code, "prepare", "builtin:karate", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == ["mggcn prepare: error: builtin:karate needs networkx: pip install "
                                       "'mggcn[datasets]' (or pip install networkx)"]


# --- pyproject.toml against the imports ------------------------------------------------------------------------------


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's tomllib reads pyproject.toml")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _third_party(module: str) -> str | None:
    top = module.partition(".")[0]
    return None if top in sys.stdlib_module_names or top in ("mggcn", "__future__") else distribution(module)


def _imports(root: Path, requires: bool = True) -> tuple[dict[str, set[str]], dict[str, set[str]],
                                                         list[tuple[str, str, str]]]:
    """The third-party packages imported at module level (``top``) and elsewhere (``lazy``: in functions, under
    ``try``, by ``pytest.importorskip`` or, with ``requires``, through :func:`require`), each with where; and every
    ``require(module, extra, ...)`` call."""
    top: dict[str, set[str]] = {}
    lazy: dict[str, set[str]] = {}
    calls = []

    def visit(node: ast.AST, path: Path, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Try))
            modules = []
            if isinstance(child, ast.Import):
                modules = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and not child.level and child.module:
                modules = [child.module]
            elif requires and isinstance(child, ast.Call) and getattr(child.func, "id", None) == "require" and \
                    all(isinstance(a, ast.Constant) for a in child.args[:2]):
                module, extra = (a.value for a in child.args[:2])
                calls.append((f"{path.name}:{child.lineno}", module, extra))
                modules, inner = [module], True
            elif isinstance(child, ast.Call) and getattr(child.func, "attr", None) == "importorskip":
                modules, inner = [child.args[0].value], True
            for module in modules:
                if (package := _third_party(module)) is not None:
                    (lazy if inner else top).setdefault(package, set()).add(f"{path.relative_to(root)}:{child.lineno}")
            visit(child, path, inner)

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text(encoding="utf-8")), path, False)
    return top, lazy, calls


def test_core_dependencies_are_what_the_top_level_imports():
    top, lazy, _ = _imports(PACKAGE)
    core = {_name(r) for r in _project()["dependencies"]}
    assert core == set(top), f"imported at module level: {top}"  # nothing optional imported on the way, none unused
    assert core == {"torch", "numpy", "scipy"}


def test_every_lazy_import_is_in_an_extra_and_test_has_them_all():
    project = _project()
    core = {_name(r) for r in project["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    assert set(FEATURES) | {"all", "test", "docs"} == set(extras)  # docs: the site's tools, imported by no module
    _, lazy, _ = _imports(PACKAGE)
    optional = set(lazy) - core
    assert set().union(*(extras[f] for f in FEATURES)) == optional, f"imported lazily: {lazy}"
    assert extras["all"] == optional
    assert extras["test"] >= extras["all"]
    # one version bound per package, wherever it is listed
    bounds: dict[str, set[str]] = {}
    for requirements in [project["dependencies"], *project["optional-dependencies"].values()]:
        for r in requirements:
            bounds.setdefault(_name(r), set()).add(r)
    assert {k: v for k, v in bounds.items() if len(v) > 1} == {}


def test_every_require_names_an_extra_that_installs_it():
    extras = {k: {_name(r) for r in v} for k, v in _project()["optional-dependencies"].items()}
    _, _, calls = _imports(PACKAGE)
    assert {module.partition(".")[0] for _, module, _ in calls} >= {"networkx", "sklearn", "pymetis", "matplotlib",
                                                                     "torch_geometric"}
    for where, module, extra in calls:
        assert extra in FEATURES and distribution(module) in extras[extra], (where, module, extra)


def test_the_test_extra_has_what_the_tests_import():
    project = _project()
    installed = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]}
    top, lazy, _ = _imports(TESTS, requires=False)  # this file's require calls are of made-up packages
    local = {p.stem for p in TESTS.rglob("*.py")}
    needed = {p for p in set(top) | set(lazy) if p.replace("-", "_") not in local}
    assert needed <= installed, needed - installed
