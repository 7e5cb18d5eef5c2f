"""What `mggcn prepare --overwrite` may replace: only what prepare itself writes (a prepared dataset, damaged or not,
or an empty directory). Anything else is refused with one line and left exactly as it was: the working directory an
empty OUT_DIR names, a directory of the user's files (among them the input itself), a file."""

import os

import pytest

from cli_util import run_cli


def _refused(out, *words: str) -> None:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr and all(w in lines[0] for w in words), lines[0]


def _tree(root) -> dict:
    """Every file under ``root`` with its bytes."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = f.read()
    return found


def _edge_list(path) -> None:
    path.write_text("0 1\n1 2\n2 0\n")


def test_an_empty_out_dir_is_refused_and_the_working_directory_kept(tmp_path):
    (tmp_path / "important.txt").write_text("keep")
    for flags in ([], ["--overwrite"]):
        _refused(run_cli("prepare", "builtin:karate", "", *flags, cwd=str(tmp_path)), "OUT_DIR is empty")
        _refused(run_cli("prepare", "builtin:karate", "  ", *flags, cwd=str(tmp_path)), "OUT_DIR is empty")
    assert _tree(tmp_path) == {"important.txt": b"keep"}


@pytest.mark.parametrize("case", ["input inside", "input itself", "user directory", "file"])
def test_overwrite_never_replaces_what_prepare_did_not_write(tmp_path, case):
    folder = tmp_path / "v"
    folder.mkdir()
    source = folder / "g.txt"
    _edge_list(source)
    (folder / "notes.md").write_text("mine")
    elsewhere = tmp_path / "h.txt"
    _edge_list(elsewhere)
    source_arg, out, words = {
        "input inside": (source, folder, ["holds the input"]),
        "input itself": (source, source, ["holds the input"]),
        "user directory": (elsewhere, folder, ["is not a prepared dataset", "manifest.json"]),
        "file": (elsewhere, source, ["is not a directory"]),
    }[case]
    before = _tree(tmp_path)
    _refused(run_cli("prepare", str(source_arg), str(out), "--format", "edgelist", "--overwrite"), str(out), *words)
    assert _tree(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["h.txt", "v"]  # no partial directory


def test_overwrite_replaces_a_prepared_dataset_a_damaged_one_and_an_empty_directory(tmp_path):
    source = tmp_path / "g.txt"
    _edge_list(source)
    out = tmp_path / "ds"
    assert run_cli("prepare", "builtin:karate", str(out)).returncode == 0
    assert run_cli("prepare", str(source), str(out), "--format", "edgelist", "--overwrite").returncode == 0
    assert "vertices    3\n" in run_cli("info", str(out)).stdout
    os.remove(out / "features.npy")  # damaged: its manifest still says what it is
    assert run_cli("prepare", "builtin:karate", str(out), "--overwrite").returncode == 0
    assert "vertices    34\n" in run_cli("info", str(out)).stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli("prepare", str(source), str(empty), "--format", "edgelist", "--overwrite").returncode == 0
    assert (empty / "manifest.json").is_file()
