"""The package's architecture, checked from its own source: every module imports, no import cycle (imports inside
functions included), lower layers never import higher ones, and what ``mggcn prepare`` and ``mggcn --help`` need
loads no torch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mggcn

PACKAGE = Path(mggcn.__file__).parent
SRC = PACKAGE.parent
# lowest first; a module may import its own layer and the ones below (the order of mggcn/__init__'s docstring)
LAYERS = ("config", "utils", "data", "kernels", "nn", "distributed", "training", "tools", "api")
TOP = ("mggcn", "mggcn.__main__")  # the lazy namespace and the entry point sit above every layer
NO_TORCH = ("mggcn", "mggcn.data", "mggcn.data.graph", "mggcn.data.datasets", "mggcn.data.formats",
            "mggcn.data.prepared.writer", "mggcn.tools.cli")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The mggcn modules ``name`` imports anywhere in its source (top level, functions, TYPE_CHECKING blocks)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def module_of(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        out.update(m for t in targets if t.split(".")[0] == "mggcn" and (m := module_of(t)) and m != name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> int:
    if module in TOP:
        return len(LAYERS)
    return LAYERS.index(module.split(".")[1])  # mggcn.config and mggcn.api are layers of one module each


def test_the_layers_cover_every_module():
    for module in _modules():
        if module not in TOP:
            assert module.split(".")[1] in LAYERS, f"{module}: in no layer of {LAYERS}"


def test_no_import_cycle():
    graph = _graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_lower_layers_never_import_higher_ones():
    bad = [f"{a} -> {b}" for a, targets in sorted(_graph().items()) for b in sorted(targets) if _layer(b) > _layer(a)]
    assert not bad, "imports against the layer order " + " < ".join(LAYERS) + ":\n" + "\n".join(bad)


def test_the_checker_sees_function_level_imports_and_cycles(tmp_path):
    """The graph above is built from the source itself, imports inside functions included."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from mggcn.training.job import run_train_job\n")
    assert _imports("mggcn.nn.model", source, _modules()) == {"mggcn.training.job"}
    assert _layer("mggcn.training.job") > _layer("mggcn.nn.model")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(m for m in _modules() if m != "mggcn.__main__")  # __main__ runs the command line
    done = _run(f"""
        import importlib
        for name in {names!r}:
            importlib.import_module(name)
        """)
    assert done.returncode == 0, done.stderr


def test_importing_the_package_and_what_prepare_needs_loads_no_torch():
    done = _run(f"""
        import importlib, json, sys
        loaded = {{}}
        for name in {list(NO_TORCH)!r}:
            importlib.import_module(name)
            loaded[name] = "torch" in sys.modules
        print(json.dumps(loaded))
        """)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert not any(loaded.values()), f"torch loaded by {[m for m, t in loaded.items() if t]}"


def _cli_torch(args: list[str], cwd: Path) -> tuple[int, bool, str]:
    """Run ``mggcn ARGS`` in a fresh interpreter; whether torch was loaded when it ended."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import atexit, sys
            atexit.register(lambda: print("TORCH", "torch" in sys.modules, file=sys.stderr))
            from mggcn.tools.cli import main
            sys.exit(main(sys.argv[1:]))
            """)] + args, capture_output=True, text=True, timeout=600, cwd=cwd,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    return done.returncode, "TORCH True" in done.stderr, done.stdout + done.stderr


def test_help_and_prepare_load_no_torch(tmp_path):
    code, torch_loaded, out = _cli_torch(["--help"], tmp_path)
    assert code == 0 and "prepare" in out and not torch_loaded, out
    code, torch_loaded, out = _cli_torch(["prepare", "builtin:karate", str(tmp_path / "karate"), "--quiet"],
                                         tmp_path)
    assert code == 0, out
    assert (tmp_path / "karate" / "manifest.json").is_file()
    assert not torch_loaded, out


# a branch on a model's name: compared with one, tested for membership, or a table keyed by the names
_NAME = r"[\"'](?:gcn|sage|gin)[\"']"
_MODEL_BRANCH = (rf"(?:==|!=)\s*{_NAME}", rf"{_NAME}\s*(?:==|!=)", rf"{_NAME}\s*:\s", rf"\bin\s*[(\[{{]\s*{_NAME}")


def test_no_code_outside_nn_branches_on_a_models_name():
    """What differs between models lives in their classes (mggcn.nn: LayerStack's attributes and plan hooks), so
    that a model added in one file (tests/nn/test_toy_model.py) works everywhere; elsewhere a model's name may only
    be passed on, or be a default."""
    import re

    found = []
    for name, path in _modules().items():
        if name.startswith("mggcn.nn"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(re.search(pattern, line) for pattern in _MODEL_BRANCH):
                found.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
    assert re.search(_MODEL_BRANCH[0], 'if model == "gin":') and re.search(_MODEL_BRANCH[2], '{"gcn": "GCNConv"}')


MAX_FUNCTION_LINES = 60  # a function read whole on one screen
MAX_MODULE_LINES = 600  # a module read through in one sitting


def _over_length(path: Path) -> list[str]:
    """The functions of ``path`` over :data:`MAX_FUNCTION_LINES` lines (``def`` to last line, docstring included,
    decorators not) and the module itself over :data:`MAX_MODULE_LINES`."""
    source = path.read_text(encoding="utf-8")
    found = []
    if len(source.splitlines()) > MAX_MODULE_LINES:
        found.append(f"{path.name}: {len(source.splitlines())} lines")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{path.name}:{node.lineno}: {node.name}, {lines} lines")
    return found


def test_no_function_over_60_lines_and_no_module_over_600():
    """Functions and modules short enough to read whole; a longer one is split by meaning (ruff's C901 and PLR0915
    bound their branches and statements, pyproject.toml)."""
    found = [f"{path.relative_to(SRC).parent}/{line}" for path in _modules().values() for line in _over_length(path)]
    assert not found, f"over {MAX_FUNCTION_LINES} lines a function or {MAX_MODULE_LINES} a module:\n" + "\n".join(found)


def test_the_length_check_sees_long_functions_and_modules(tmp_path):
    source = tmp_path / "m.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    source.write_text(f"def fits():\n{body}\n\nclass C:\n    async def long(self):\n{textwrap.indent(body, '    ')}"
                      "        pass\n")
    assert _over_length(source) == [f"m.py:{MAX_FUNCTION_LINES + 4}: long, {MAX_FUNCTION_LINES + 1} lines"]
    source.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _over_length(source) == [f"m.py: {MAX_MODULE_LINES + 1} lines"]


# the public API: mggcn's lazy names and mggcn.api say where each name is defined (docs/api.md shows it there)
PUBLIC = ("mggcn", "mggcn.api")


def _passed_on(path: Path) -> set[str]:
    """The names ``path`` imports from mggcn modules (not the standard library's or others', which tests patch
    through the module that uses them)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "mggcn"):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _reexports(paths: list[Path], modules: dict[str, Path]) -> list[str]:
    """Names used through a module that imported them from another mggcn module: ``from M import name`` or
    ``M.name`` on a module bound by an import, in ``paths``. A package's ``__init__`` (its face:
    ``mggcn.data.formats`` lists the readers of its modules) and :data:`PUBLIC` may pass names on."""
    modules = {m: p for m, p in modules.items() if p.name != "__init__.py" and m not in PUBLIC}
    imported = {m: _passed_on(p) for m, p in modules.items()}

    def through(module: str, name: str) -> bool:
        return module in modules and name in imported[module]

    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound = {}  # local name -> module, for `import mggcn.a.b as m` and `from mggcn.a import b`
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if through(node.module, alias.name):
                        found.append(f"{path.name}:{node.lineno}: {alias.name} through {node.module}")
                    if f"{node.module}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                bound.update((alias.asname, alias.name) for alias in node.names if alias.asname)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and not node.attr.startswith("__") and through(bound[node.value.id], node.attr)):
                found.append(f"{path.name}:{node.lineno}: {node.attr} through {bound[node.value.id]}")
    return found


def test_no_name_is_used_through_a_module_that_does_not_define_it():
    """A name is imported from where it is defined, so that moving it breaks no import that merely passed it on."""
    root = SRC.parent
    paths = [*_modules().values(), *sorted((root / "tests").rglob("*.py")), *sorted((root / "scripts").rglob("*.py"))]
    found = _reexports(paths, _modules())
    assert not found, "\n".join(found)


def test_the_reexport_check_sees_imports_and_attributes(tmp_path):
    user = tmp_path / "user.py"
    user.write_text("from mggcn.nn.model import ORDERS\nfrom mggcn.nn import model\nmodel.ACTIVATIONS\n"
                    "from mggcn.nn.model import GCN\nmodel.LayerStack\nimport mggcn.nn.norm as norm\nnorm.NORMS\n"
                    "from mggcn.data.formats import read_mtx\nfrom mggcn import train\n")
    assert _reexports([user], _modules()) == ["user.py:1: ORDERS through mggcn.nn.model",
                                              "user.py:3: ACTIVATIONS through mggcn.nn.model",
                                              "user.py:7: NORMS through mggcn.nn.norm"]
