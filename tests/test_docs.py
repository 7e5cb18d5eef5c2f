"""The code of README.md and of every page under docs/ runs as written, so the docs cannot rot.

* ``python`` blocks run as script files (``python block.py``), in a fresh process, as a reader would save them;
* ``console`` blocks are transcripts: every ``$ `` command runs (with its ``\\`` continuations) and must succeed, the
  lines after it are its output and are not compared;
* ``bash`` blocks name data the reader has (``DATA``, ``data/ogbn_products``) or take minutes: every ``mggcn`` command
  in them must be accepted by the parser as written (options, choices, types), without running, and every
  ``scripts/`` file they name must exist;
* ``text`` blocks are output shown as such.

The tutorial runs top to bottom in one directory: its Python steps after the shell steps before them. Every other
docs page runs the same way, in a fresh directory of its own, except that a block naming ``scripts/`` runs from the
repository root, where those paths lead. Every relative link of README.md and the docs pages leads to a file that
exists, and to a heading of it that exists where the link names one.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import mggcn
from mggcn.tools.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
KINDS = ("python", "console", "bash", "text")
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
TUTORIAL = DOCS / "tutorial.md"
# The least each page holds, so that a page losing its blocks fails: (commands and python blocks that run, mggcn
# commands of bash blocks that parse); README.md's are what it holds.
MINIMUM = {"README.md": (1, 9), "tutorial.md": (8, 0), "benchmarks.md": (2, 10), "formats.md": (6, 8),
           "how-it-works.md": (2, 0), "models.md": (3, 3), "reliability.md": (5, 0), "architecture.md": (1, 0),
           "api.md": (0, 0)}
# Pages without code: the API reference, which mkdocstrings fills from the docstrings (tests/test_docs_site.py).
NO_CODE = {"api.md"}


def blocks(path: Path) -> list[tuple[str, str]]:
    found = BLOCK.findall(path.read_text())
    assert found or path.name in NO_CODE, f"{path}: no code block"
    for kind, body in found:
        assert kind in KINDS, f"{path}: a ```{kind} block (tag every block as one of {KINDS}):\n{body[:200]}"
    return found


def console_commands(body: str) -> list[str]:
    """The ``$ `` commands of a transcript, continuation lines joined."""
    commands, current = [], None
    for line in body.splitlines():
        if current is not None:
            current += "\n" + line
        elif line.startswith("$ "):
            current = line[2:]
        else:
            continue
        if not current.endswith("\\"):
            commands.append(current)
            current = None
    return commands


def bash_commands(body: str) -> list[list[str]]:
    """The words of every command of a bash block (continuations joined, comments dropped, split at ``&&``/``;``)."""
    out: list[list[str]] = []
    for line in body.replace("\\\n", " ").splitlines():
        current: list[str] = []
        for word in shlex.split(line, comments=True):
            if word in ("&&", ";"):
                out.append(current)
                current = []
            else:
                current.append(word)
        out.append(current)
    return [c for c in out if c]


def mggcn_args(words: list[str]) -> list[str] | None:
    """The arguments of ``mggcn`` in a command line (``mggcn ...``, ``python -m mggcn ...``, ``torchrun ... -m
    mggcn ...``), or None when the line runs something else."""
    if words[0] == "mggcn":
        return words[1:]
    for i in range(len(words) - 1):
        if words[i] == "-m" and words[i + 1] == "mggcn":
            return words[i + 2:]
    return None


@pytest.fixture
def shell_env(tmp_path):
    """``mggcn`` and ``python`` on PATH running the sources under test, whatever the current directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, line in (("mggcn", f'exec "{sys.executable}" -m mggcn "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"')):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{line}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    src = str(Path(mggcn.__file__).resolve().parents[1])
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONUNBUFFERED="1",
                PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), MPLBACKEND="Agg")


def _run(command: list[str] | str, cwd: Path, env: dict, what: str) -> None:
    proc = subprocess.run(command, shell=isinstance(command, str), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _run_python(body: str, cwd: Path, env: dict, name: str) -> None:
    script = cwd / f"{name}.py"
    script.write_text(body)
    _run([sys.executable, script.name], cwd, env, f"{name}:\n{body}")


def test_tutorial_runs_top_to_bottom(tmp_path, shell_env):
    work = tmp_path / "work"
    work.mkdir()
    ran = 0
    for k, (kind, body) in enumerate(blocks(ROOT / "docs" / "tutorial.md")):
        if kind == "python":
            _run_python(body, work, shell_env, f"tutorial_block_{k}")
            ran += 1
        elif kind == "console":
            for command in console_commands(body):
                _run(command, work, shell_env, f"tutorial: $ {command}")
                ran += 1
        elif kind == "bash":
            pytest.fail(f"tutorial block {k}: write shell steps as console transcripts ($ lines)")
    assert ran >= MINIMUM["tutorial.md"][0]
    assert (work / "predictions.csv").read_text().startswith("vertex,prediction\n")


def test_readme_python_and_console_blocks_run(tmp_path, shell_env):
    ran = 0
    for k, (kind, body) in enumerate(blocks(ROOT / "README.md")):
        if kind == "python":
            _run_python(body, tmp_path, shell_env, f"readme_block_{k}")
            ran += 1
        elif kind == "console":
            for command in console_commands(body):
                _run(command, tmp_path, shell_env, f"README: $ {command}")
                ran += 1
    assert ran >= MINIMUM["README.md"][0]


def parse_bash_blocks(path: Path) -> int:
    """Parse every ``mggcn`` command of the bash blocks of ``path`` with the real parser; check the scripts they
    name exist. Returns how many mggcn commands were parsed."""
    parser = build_parser()
    parsed = 0
    for kind, body in blocks(path):
        if kind != "bash":
            continue
        for words in bash_commands(body):
            scripts = [w for w in words if w.startswith("scripts/")]
            assert all((ROOT / w).is_file() for w in scripts), f"{path.name}: a script that does not exist: {words}"
            args = mggcn_args(words)
            if args is None:
                continue
            try:
                parser.parse_args(args)
            except SystemExit as exc:
                pytest.fail(f"{path.name}: `mggcn {' '.join(args)}` is refused by the parser (exit {exc.code})")
            parsed += 1
    return parsed


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{p.name}" for p in PAGES)])
def test_bash_block_commands_parse_as_written(page):
    path = ROOT / page
    parsed = parse_bash_blocks(path)
    assert parsed >= MINIMUM.get(path.name, (0, 0))[1], f"{page}: {parsed} mggcn commands in its bash blocks"


def test_every_docs_page_is_covered():
    """Every page under docs/ has its least counts here and is linked from the README's Documentation list."""
    assert PAGES, "no docs pages"
    readme = (ROOT / "README.md").read_text()
    listed = readme[readme.index("## Documentation"):]
    for page in PAGES:
        assert page.name in MINIMUM, f"docs/{page.name}: add its least counts to MINIMUM in tests/test_docs.py"
        assert f"](docs/{page.name})" in listed, f"docs/{page.name} is not in the README's Documentation list"


@pytest.mark.parametrize("page", [p.name for p in PAGES if p != TUTORIAL])
def test_docs_page_blocks_run(page, tmp_path, shell_env):
    """A docs page's python and console blocks run top to bottom in one fresh directory; a block that names
    ``scripts/`` runs from the repository root instead."""
    path = DOCS / page
    work = tmp_path / "work"
    work.mkdir()
    ran = 0
    for k, (kind, body) in enumerate(blocks(path)):
        if kind == "python":
            _run_python(body, work, shell_env, f"{path.stem}_block_{k}")
            ran += 1
        elif kind == "console":
            cwd = ROOT if "scripts/" in body else work
            for command in console_commands(body):
                _run(command, cwd, shell_env, f"docs/{page}: $ {command}")
                ran += 1
    assert ran >= MINIMUM[page][0], f"docs/{page}: {ran} commands and python blocks ran"


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces as
    ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = BLOCK.sub("", path.read_text())
    return {github_anchor(m) for m in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M)}


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{p.name}" for p in PAGES)])
def test_relative_links_lead_somewhere(page):
    path = ROOT / page
    text = BLOCK.sub("", path.read_text())
    checked = 0
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{page}: the link {target} leads to no file"
        assert ROOT in dest.parents or dest == ROOT, f"{page}: the link {target} leaves the repository"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page}: the link {target}: no such heading in {dest.name}"
        checked += 1
    if path.name == "README.md":
        assert checked >= len(PAGES)


def test_github_anchors():
    assert github_anchor("Beyond MG-GCN: move only what is needed") == "beyond-mg-gcn-move-only-what-is-needed"
    assert github_anchor("GPUs: `scripts/gpu_check.sh`") == "gpus-scriptsgpu_checksh"
    assert github_anchor("GraphSAGE and GIN against PyG's models") == "graphsage-and-gin-against-pygs-models"


def test_console_and_bash_parsing():
    transcript = "$ mggcn a \\\n    --b 1\noutput\n$ head -3 x\n0,1\n"
    assert console_commands(transcript) == ["mggcn a \\\n    --b 1", "head -3 x"]
    script = "pip install x && mggcn train --nprocs 2     # comment\nmggcn prepare a b \\\n    --format ogb  # c\n"
    assert bash_commands(script) == [["pip", "install", "x"], ["mggcn", "train", "--nprocs", "2"],
                                     ["mggcn", "prepare", "a", "b", "--format", "ogb"]]
    assert mggcn_args(["torchrun", "--nproc-per-node", "8", "-m", "mggcn", "train", "D"]) == ["train", "D"]
