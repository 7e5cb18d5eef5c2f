"""The commands of README.md and of every page under docs/ run as written and print what the pages show.

* ``python`` blocks run as script files (``python block.py``), in a fresh process, as a reader would save them;
* ``console`` blocks are transcripts: every ``$ `` command runs (with its ``\\`` continuations) and must succeed;
  the lines after it are its output (stdout and stderr as a terminal interleaves them), compared by :func:`compare`;
* ``text`` blocks are output: the line before one is ``<!-- output of: COMMAND -->``, and COMMAND runs and is
  compared the same way;
* ``bash`` blocks hold commands that cannot run here as written. Their first line says what they need (``# needs
  ...``: a GPU, several hosts, a download, hours); every ``mggcn`` command in them must be accepted by the parser as
  written, every ``scripts/`` file they name must exist, and a ``<!-- stand-in: ... -->`` comment right after the
  block holds what runs in their place: on its first line the inputs it makes (``NAME=KIND``: a small graph in the
  real layout of KIND, written at NAME, tests/docs_standins.py), then ``$ `` commands, their output compared where
  the comment shows any (the slow tests run these). Three stand-ins are checks instead: ``ci`` (.ci/run runs the
  block's lines), ``install`` (pip from the network: the extras it names exist, the index is PyTorch's) and
  ``tests/FILE.py::TEST`` (a test of its own rehearses the block, a GPU script on a CPU; it exists).

Output is compared line by line (:func:`compare`): ``...`` stands for any lines (none included); every other line
must come in that order with nothing between, and the output must end where the shown lines end. Within a line the
words must be the same (runs of spaces count as one), integers equal, and decimals within TOLERANCE (2% or 0.01,
whichever is larger: accuracies and losses move in the last digits with the machine's thread count); seconds are
not compared (a number followed by `` s``, the parenthesized phases after it, ``epoch time xN``), nor the folder of
an absolute path (``/tmp/karate`` matches any absolute path ending in ``karate``).

The tutorial runs top to bottom in one directory: its Python steps after the shell steps before them. Every other
docs page runs the same way, in a fresh directory of its own, except that a block naming ``scripts/`` runs from the
repository root, where those paths lead. Every relative link of README.md and the docs pages leads to a file that
exists, and to a heading of it that exists where the link names one.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import mggcn
from docs_standins import write_standin
from mggcn.tools.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
OUTPUT_OF = re.compile(r"<!-- output of: (.+?) -->\n$")
STAND_IN = re.compile(r"\n<!-- stand-in:(.*?)-->", re.S)
KINDS = ("python", "console", "bash", "text")
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
TUTORIAL = DOCS / "tutorial.md"
# The least each page holds, so that a page losing its blocks fails: (commands and python blocks that run, mggcn
# commands of bash blocks that parse); README.md's are what it holds.
MINIMUM = {"README.md": (6, 6), "tutorial.md": (8, 0), "benchmarks.md": (2, 10), "formats.md": (6, 8),
           "how-it-works.md": (2, 0), "models.md": (3, 3), "reliability.md": (5, 0), "architecture.md": (1, 0),
           "api.md": (0, 0), "datasets.md": (0, 1)}
# Pages without code: the API reference, which mkdocstrings fills from the docstrings (tests/test_docs_site.py).
NO_CODE = {"api.md"}
TOLERANCE = (0.02, 0.01)  # relative, absolute: the larger one holds
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
SECONDS = re.compile(r"\d+(?:\.\d+)? s\b(?: \([^()]*\))?|epoch time x\d+(?:\.\d+)?")
ABSOLUTE_PATH = re.compile(r"(?<![\w./])/(?:[\w.+-]+/)*([\w.+-]+)")


@dataclass
class Block:
    kind: str
    body: str
    output_of: str | None  # a text block's command, from the comment on the line before it
    stand_in: str | None  # a bash block's stand-in comment, right after it


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for m in BLOCK.finditer(text):
        kind, body = m.groups()
        assert kind in KINDS, f"{path}: a ```{kind} block (tag every block as one of {KINDS}):\n{body[:200]}"
        before = OUTPUT_OF.search(text, 0, m.start())
        after = STAND_IN.match(text, m.end())
        found.append(Block(kind, body, before.group(1) if before else None, after.group(1) if after else None))
    assert found or path.name in NO_CODE, f"{path}: no code block"
    return found


def console_commands(body: str) -> list[tuple[str, list[str]]]:
    """The ``$ `` commands of a transcript, continuation lines joined, each with the output lines shown after it."""
    commands: list[tuple[str, list[str]]] = []
    current = None
    for line in body.splitlines():
        if current is not None:
            current += "\n" + line
        elif line.startswith("$ "):
            current = line[2:]
        else:
            if commands:
                commands[-1][1].append(line)
            continue
        if not current.endswith("\\"):
            commands.append((current, []))
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


def _words_and_numbers(line: str) -> tuple[list[str], list[str]]:
    line = ABSOLUTE_PATH.sub(r"…/\1", SECONDS.sub("<seconds>", line))
    line = " ".join(line.split())
    return NUMBER.split(line), NUMBER.findall(line)


def _same_number(shown: str, real: str) -> bool:
    a, b = float(shown.replace(",", "")), float(real.replace(",", ""))
    if "." not in shown + real:
        return a == b
    return abs(a - b) <= max(TOLERANCE[0] * abs(a), TOLERANCE[1])


def line_matches(shown: str, real: str) -> bool:
    """Whether the real output line ``real`` is the line ``shown`` (the rules of the module docstring)."""
    (shown_words, shown_numbers), (real_words, real_numbers) = _words_and_numbers(shown), _words_and_numbers(real)
    return shown_words == real_words and all(_same_number(a, b) for a, b in zip(shown_numbers, real_numbers))


def compare(shown: list[str], real: list[str]) -> str | None:
    """None when the output ``real`` is what ``shown`` shows, else what differs (``...`` in ``shown``: any lines)."""
    at, gap = 0, False
    for line in shown:
        if line.strip() == "...":
            gap = True
            continue
        found = next((i for i in range(at, len(real) if gap else min(at + 1, len(real)))
                      if line_matches(line, real[i])), None)
        if found is None:
            where = "after" if gap else "as the next line after"
            return f"no line like\n    {line}\n{where} line {at} of the output"
        at, gap = found + 1, False
    if not gap and at < len(real):
        return f"more output than shown, from line {at + 1}:\n    {real[at]}"
    return None


@pytest.fixture
def shell_env(tmp_path):
    """``mggcn``, ``torchrun`` and ``python`` on PATH running the sources under test, whatever the current
    directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, line in (("mggcn", f'exec "{sys.executable}" -m mggcn "$@"'),
                       ("torchrun", f'exec "{sys.executable}" -m torch.distributed.run "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"')):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{line}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    src = str(Path(mggcn.__file__).resolve().parents[1])
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONUNBUFFERED="1",
                PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), MPLBACKEND="Agg")


def _run(command: list[str] | str, cwd: Path, env: dict, what: str) -> list[str]:
    """Run ``command``; its output lines (stdout and stderr interleaved, as a terminal shows them)."""
    proc = subprocess.run(command, shell=isinstance(command, str), cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout[-5000:]}"
    return proc.stdout.splitlines()


def run_and_compare(command: str, shown: list[str], cwd: Path, env: dict, what: str) -> None:
    real = _run(command, cwd, env, f"{what}: $ {command}")
    difference = compare(shown, real)
    assert difference is None, f"{what}: $ {command}\n{difference}\nThe whole output:\n" + "\n".join(real)


def run_blocks(path: Path, work: Path, env: dict) -> int:
    """Run the python, console and text blocks of ``path`` top to bottom in ``work`` (a block naming ``scripts/``
    from the repository root); returns how many commands and python blocks ran."""
    ran = 0
    what = str(path.relative_to(ROOT))
    for k, block in enumerate(blocks(path)):
        cwd = ROOT if "scripts/" in block.body and path != TUTORIAL else work
        if block.kind == "python":
            script = work / f"{path.stem}_block_{k}.py"
            script.write_text(block.body)
            _run([sys.executable, str(script)], cwd, env, f"{what}, block {k}:\n{block.body}")
            ran += 1
        elif block.kind == "console":
            for command, shown in console_commands(block.body):
                run_and_compare(command, shown, cwd, env, what)
                ran += 1
        elif block.kind == "text":
            assert block.output_of, f"{what}, block {k}: a text block needs <!-- output of: COMMAND --> before it"
            run_and_compare(block.output_of, block.body.splitlines(), cwd, env, what)
            ran += 1
    return ran


@pytest.mark.slow  # each runs a page's commands (mggcn processes): the slow run (.ci/run) has them
def test_tutorial_runs_top_to_bottom(tmp_path, shell_env):
    work = tmp_path / "work"
    work.mkdir()
    assert not [b for b in blocks(TUTORIAL) if b.kind == "bash"], "tutorial: write shell steps as console transcripts"
    assert run_blocks(TUTORIAL, work, shell_env) >= MINIMUM["tutorial.md"][0]
    assert (work / "predictions.csv").read_text().startswith("vertex,prediction\n")


@pytest.mark.slow  # each runs a page's commands (mggcn processes): the slow run (.ci/run) has them
def test_readme_blocks_run(tmp_path, shell_env):
    assert run_blocks(ROOT / "README.md", tmp_path, shell_env) >= MINIMUM["README.md"][0]


@pytest.mark.slow  # each runs a page's commands (mggcn processes): the slow run (.ci/run) has them
@pytest.mark.parametrize("page", [p.name for p in PAGES if p != TUTORIAL])
def test_docs_page_blocks_run(page, tmp_path, shell_env):
    """A docs page's python, console and text blocks run top to bottom in one fresh directory; a block that names
    ``scripts/`` runs from the repository root instead."""
    work = tmp_path / "work"
    work.mkdir()
    ran = run_blocks(DOCS / page, work, shell_env)
    assert ran >= MINIMUM[page][0], f"docs/{page}: {ran} commands and python blocks ran"


def parse_bash_blocks(path: Path) -> int:
    """Parse every ``mggcn`` command of the bash blocks of ``path`` with the real parser; check the scripts they
    name exist, that each block says what it needs and has a stand-in. Returns how many mggcn commands parsed."""
    parser = build_parser()
    parsed = 0
    for block in blocks(path):
        if block.kind != "bash":
            continue
        assert block.body.startswith("# needs "), f"{path.name}: a bash block that does not say what it needs " \
                                                  f"(# needs ... on its first line):\n{block.body}"
        assert block.stand_in is not None, f"{path.name}: a bash block without <!-- stand-in: ... -->:\n{block.body}"
        for words in bash_commands(block.body):
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
        if block.stand_in.strip() == "ci":
            check_ci_runs(path, block.body)
        elif block.stand_in.strip() == "install":
            check_install(path, block.body)
        elif block.stand_in.strip().startswith("tests/"):
            check_named_tests(block.stand_in)
    return parsed


def check_named_tests(stand_in: str) -> None:
    """A stand-in that is a test of its own (``tests/FILE.py::NAME``, the rehearsal of a GPU script on a CPU):
    that test exists."""
    for test in stand_in.split():
        file, _, name = test.partition("::")
        assert re.search(rf"^def {name}\(", (ROOT / file).read_text(), re.M), f"no test {test}"


def check_ci_runs(path: Path, body: str) -> None:
    """Each command of a ``ci`` block is .ci/run itself or a line of it (pip's --quiet options aside, what follows
    ``||`` too), or the command whose output a text block of the page shows."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    ci = [shlex.split(line.partition("||")[0], comments=True) for line in lines]
    ci = [[w for w in words if w not in ("--quiet", "--disable-pip-version-check")] for words in ci]
    shown = [shlex.split(b.output_of) for b in blocks(path) if b.output_of]
    for words in bash_commands(body):
        as_ci = ["python", "-m", *words] if words[0] == "pip" else words
        assert as_ci in ci or words in shown or words == [".ci/run"], \
            f"{path.name}: .ci/run does not run `{' '.join(words)}`"


def check_install(path: Path, body: str) -> None:
    """An ``install`` block (it needs the network, so nothing runs it): its pip commands install this project with
    extras pyproject.toml defines, or torch from an index of PyTorch's builds."""
    extras = set(re.findall(r"^(\w+) = \[", (ROOT / "pyproject.toml").read_text(), re.M))
    for words in bash_commands(body):
        assert words[:2] == ["pip", "install"], f"{path.name}: an install block runs `{' '.join(words)}`"
        if "-e" in words:
            named = re.fullmatch(r"\.(?:\[([\w,]+)\])?", words[words.index("-e") + 1])
            assert named and set(filter(None, (named.group(1) or "").split(","))) <= extras, words
        else:
            index = words[words.index("--index-url") + 1]
            assert words[2] == "torch" and re.fullmatch(r"https://download\.pytorch\.org/whl/(cpu|cu\d{3})", index)


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{p.name}" for p in PAGES)])
def test_bash_block_commands_parse_as_written(page):
    path = ROOT / page
    parsed = parse_bash_blocks(path)
    assert parsed >= MINIMUM.get(path.name, (0, 0))[1], f"{page}: {parsed} mggcn commands in its bash blocks"


def stand_ins() -> list:
    return [pytest.param(page, k, b.stand_in, id=f"{page}, block {k}")
            for page in ["README.md", *(f"docs/{p.name}" for p in PAGES)] for k, b in enumerate(blocks(ROOT / page))
            if b.stand_in is not None and b.stand_in.strip() not in ("ci", "install")
            and not b.stand_in.strip().startswith("tests/")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("page, k, stand_in", stand_ins())
def test_stand_in_runs(page, k, stand_in, tmp_path, shell_env):
    """The commands standing in for a bash block run, on the small inputs its first line names."""
    inputs, _, transcript = stand_in.partition("\n")
    (tmp_path / "scripts").symlink_to(ROOT / "scripts")  # the paths the docs' commands name, from the root
    for item in inputs.split():
        name, _, kind = item.partition("=")
        write_standin(kind, tmp_path / name)
    commands = console_commands(transcript)
    assert commands, f"{page}, block {k}: a stand-in without commands"
    env = dict(shell_env, PORT=str(_free_port()))
    for command, shown in commands:
        if shown:
            run_and_compare(command, shown, tmp_path, env, f"{page}, stand-in of block {k}")
        else:
            _run(command, tmp_path, env, f"{page}, stand-in of block {k}: $ {command}")


@pytest.mark.slow
def test_accuracy_table_of_the_builtin_graphs(tmp_path, shell_env):
    """docs/models.md's accuracies at the defaults, for the small graphs: each is the test accuracy of the last line
    of `mggcn train GRAPH --model M --quiet`, rounded to the table's digits."""
    text = (DOCS / "models.md").read_text()
    header = re.search(r"^\| graph \| (.+) \|$", text, re.M).group(1).replace("`", "").split(" | ")
    rows = re.findall(r"^\| `(builtin:\w+)` \| (.+) \|$", text, re.M)
    assert len(rows) == 2 and header == ["gcn", "sage", "gin"]
    for graph, cells in rows:
        for model, shown in zip(header, cells.split(" | ")):
            last = _run(f"mggcn train {graph} --model {model} --quiet", tmp_path, shell_env, graph)[-1]
            test = re.search(r"eval mode\): train \S+ val \S+ test (\S+)", last).group(1)
            assert _same_number(shown, f"{float(test):.3f}"), (graph, model, shown, last)


def test_readme_stays_short():
    """The README is the front page: what mggcn is, how to install and run it; the rest is in docs/."""
    assert len((ROOT / "README.md").read_bytes()) <= 12 * 1024


def test_every_docs_page_is_covered():
    """Every page under docs/ has its least counts here and is linked from the README's Documentation list."""
    assert PAGES, "no docs pages"
    readme = (ROOT / "README.md").read_text()
    listed = readme[readme.index("## Documentation"):]
    for page in PAGES:
        assert page.name in MINIMUM, f"docs/{page.name}: add its least counts to MINIMUM in tests/test_docs.py"
        assert f"](docs/{page.name})" in listed, f"docs/{page.name} is not in the README's Documentation list"


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
    assert console_commands(transcript) == [("mggcn a \\\n    --b 1", ["output"]), ("head -3 x", ["0,1"])]
    script = "pip install x && mggcn train --nprocs 2     # comment\nmggcn prepare a b \\\n    --format ogb  # c\n"
    assert bash_commands(script) == [["pip", "install", "x"], ["mggcn", "train", "--nprocs", "2"],
                                     ["mggcn", "prepare", "a", "b", "--format", "ogb"]]
    assert mggcn_args(["torchrun", "--nproc-per-node", "8", "-m", "mggcn", "train", "D"]) == ["train", "D"]


def test_output_comparison():
    shown = ["mggcn: x: 5,000 vertices", "...",
             "epoch   10 | loss 0.1105 | test 0.9952 | 0.157 s (spmm 0.001, gemm 0.0)",
             "directory   /tmp/karate (1.0 MiB)"]
    real = ["mggcn: x: 5,000 vertices", "noise",
            "epoch   10 | loss 0.1150 | test 0.9890 | 12.5 s (spmm 3.1, gemm 9.0)",
            "directory /home/u/w/karate (1.0 MiB)"]
    assert compare(shown, real) is None
    assert compare(shown, real + ["more"]) is not None  # output past the shown lines, with no ... at the end
    assert compare(shown + ["..."], real + ["more"]) is None
    assert compare(shown, [real[0], *real[2:]]) is None  # ... is also no line at all
    assert compare(shown[:1] + shown[2:], real) is not None  # a line between, with no ... shown
    assert "5,000" in compare(shown, ["mggcn: x: 5,001 vertices", *real[1:]])  # integers are equal
    assert compare(shown, [*real[:2], real[2].replace("0.9890", "0.9700"), real[3]]) is not None  # beyond 2%
    assert compare(shown, [*real[:3], "directory /home/u/w/other (1.0 MiB)"]) is not None
    assert compare(shown, real[:2]) is not None
    assert compare([], []) is None and compare([], ["a line"]) is not None


def test_a_models_repr_says_what_it_holds():
    """print(result.model) (the tutorial) names its linears as torch does and shows each GCN layer's own bias."""
    text = repr(mggcn.GCN([8, 4, 3]))
    assert "_Uninitialized" not in text
    assert text.count("GCNLayer(\n      8, 4, bias=True") == 1 and "4, 3, bias=True" in text
    assert "(lin): Linear(in_features=8, out_features=4, bias=False)" in text  # the bias is added after the SpMM
    assert "bias=False" in repr(mggcn.GCN([8, 4, 3], bias=False)).split("(lin)")[0]
