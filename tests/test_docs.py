"""The code of README.md, docs/tutorial.md and docs/benchmarks.md runs as written, so the docs cannot rot.

* ``python`` blocks run as script files (``python block.py``), in a fresh process, as a reader would save them;
* ``console`` blocks are transcripts: every ``$ `` command runs (with its ``\\`` continuations) and must succeed, the
  lines after it are its output and are not compared;
* ``bash`` blocks of README.md name data the reader has (``DATA``, ``data/ogbn_products``): every ``mggcn`` command in
  them must be accepted by the parser as written (options, choices, types), without running;
* ``text`` blocks are output shown as such.

The tutorial runs top to bottom in one directory: its Python steps after the shell steps before them.
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


def blocks(path: Path) -> list[tuple[str, str]]:
    found = BLOCK.findall(path.read_text())
    assert found, f"{path}: no code block"
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
    assert ran >= 8
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
    assert ran >= 2


def test_readme_commands_parse_as_written():
    parser = build_parser()
    checked = 0
    for kind, body in blocks(ROOT / "README.md"):
        if kind != "bash":
            continue
        for words in bash_commands(body):
            args = mggcn_args(words)
            if args is None:
                continue
            try:
                parser.parse_args(args)
            except SystemExit as exc:
                pytest.fail(f"README: `mggcn {' '.join(args)}` is refused by the parser (exit {exc.code})")
            checked += 1
    assert checked >= 12


def test_benchmarks_page_commands_run_and_parse(shell_env):
    """docs/benchmarks.md: its console blocks (the measuring scripts at a tiny size) run from the repository root;
    every mggcn command of its bash blocks (the full-size runs its tables come from) is accepted by the parser, and
    every script they name exists."""
    parser = build_parser()
    ran = parsed = 0
    for kind, body in blocks(ROOT / "docs" / "benchmarks.md"):
        if kind == "console":
            for command in console_commands(body):
                _run(command, ROOT, shell_env, f"docs/benchmarks.md: $ {command}")
                ran += 1
        elif kind == "bash":
            for words in bash_commands(body):
                scripts = [w for w in words if w.startswith("scripts/")]
                assert all((ROOT / w).is_file() for w in scripts), words
                args = mggcn_args(words)
                if args is not None:
                    try:
                        parser.parse_args(args)
                    except SystemExit as exc:
                        pytest.fail(f"docs/benchmarks.md: `mggcn {' '.join(args)}` is refused (exit {exc.code})")
                    parsed += 1
    assert ran >= 2 and parsed >= 3


def test_console_and_bash_parsing():
    transcript = "$ mggcn a \\\n    --b 1\noutput\n$ head -3 x\n0,1\n"
    assert console_commands(transcript) == ["mggcn a \\\n    --b 1", "head -3 x"]
    script = "pip install x && mggcn train --nprocs 2     # comment\nmggcn prepare a b \\\n    --format ogb  # c\n"
    assert bash_commands(script) == [["pip", "install", "x"], ["mggcn", "train", "--nprocs", "2"],
                                     ["mggcn", "prepare", "a", "b", "--format", "ogb"]]
    assert mggcn_args(["torchrun", "--nproc-per-node", "8", "-m", "mggcn", "train", "D"]) == ["train", "D"]
