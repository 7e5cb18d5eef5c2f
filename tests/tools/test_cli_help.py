"""Help in plain words: no reST markup, defaults shown, an example per command that the parser accepts; --version;
one-line errors that say what is wrong with a dataset path and what to type instead."""

from __future__ import annotations

import re
import shlex

import pytest

from mggcn import __version__
from mggcn.tools.cli import COMMANDS, build_parser, main

REST = re.compile(r"``|:(?:func|class|mod|meth|attr|data|math):|::\s*$|^\s*\.\. ", re.M)


def _help(command: str | None) -> str:
    parser = build_parser(command)
    if command is None:
        return parser.format_help()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[command].format_help()


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_plain_words_with_an_example_the_parser_accepts(command):
    text = _help(command)
    assert not REST.search(text), f"reST markup in `mggcn {command} -h`: {REST.search(text).group(0)!r}"
    examples = [line.strip().split("  #")[0] for line in text.splitlines() if line.startswith("  mggcn ")]
    assert examples, f"`mggcn {command} -h` shows no example"
    for example in examples:
        words = shlex.split(example)[1:]
        build_parser(words[0]).parse_args(words)  # exits (fails the test) when an option is unknown


def test_train_help_shows_every_default():
    parser = next(a for a in build_parser("train")._actions if a.dest == "command").choices["train"]
    formatter = parser._get_formatter()
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for option, default in (("--epochs", "100"), ("--lr", "0.01"), ("--weight-decay", "0.0005"), ("--seed", "0"),
                            ("--activation", "relu"), ("--dropout", "0.0"), ("--input-dropout", "0.0"),
                            ("--hidden", "128")):
        assert re.search(rf"\(default:? {re.escape(default)}\b", formatter._expand_help(actions[option])), option
    assert "a prepared directory" in " ".join(_help("train").split())


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"mggcn {__version__}"


def _one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_format_without_a_path(capsys):
    assert "--format ogb needs a dataset path: mggcn train PATH --format ogb" in \
        _one_line_error(capsys, ["train", "--format", "ogb"])


def test_what_is_wrong_with_a_path(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "mygrpah: no such file or directory, and not a built-in dataset" in \
        _one_line_error(capsys, ["train", "mygrpah"])
    assert "a directory that is not a prepared dataset" in _one_line_error(capsys, ["train", str(tmp_path)])
    (tmp_path / "g.txt").write_text("0 1\n")
    assert "g.txt: not a directory, but --format ogb reads a directory" in \
        _one_line_error(capsys, ["train", "g.txt", "--format", "ogb"])
    assert "--normalize-features is for --format planetoid" in \
        _one_line_error(capsys, ["train", "g.txt", "--format", "edgelist", "--normalize-features"])


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["plan", "--help"]])
@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_help_and_version_onto_a_full_disk_say_so_in_one_line(argv, unbuffered):
    """argparse drops a failed write silently (exit 0 with nothing written, unbuffered), and its exit skipped the
    command's last flush (the interpreter's own then printed a traceback, exit 120)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "mggcn", *argv], stdout=full, stderr=subprocess.PIPE, text=True,
                              env=env, timeout=120)
    assert (done.returncode, done.stderr) == (1, "mggcn: error: standard output: cannot write: No space left on "
                                                 "device\n")
