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


def _two_versions(tmp_path):
    """Two prepared graphs of the same sizes that differ in their features (the GCN's karate, seeds 1 and 2)."""
    import numpy as np

    from mggcn.data.datasets import InMemoryDataset
    from mggcn.data.generators import parse_spec
    from mggcn.data.prepared.writer import write_dataset

    graph = parse_spec("builtin:karate")
    versions = []
    for seed in (1, 2):
        graph.x = np.random.default_rng(seed).standard_normal(graph.x.shape).astype(np.float32)
        versions.append(write_dataset(InMemoryDataset(graph), tmp_path / f"v{seed}"))
    return [os.fspath(v) for v in versions]


def test_a_directory_replaced_while_it_is_read_is_read_whole_from_one_version(tmp_path, monkeypatch):
    """prepare --overwrite swaps a new directory in under the same name: a reader caught between its arrays read the
    manifest of one version and the features of the other, without a word. Swapped after the first array here: the
    reader starts again and holds the new version whole, its manifest and every array."""
    import numpy as np

    from mggcn.data.prepared import reader

    old, new = _two_versions(tmp_path)
    path = tmp_path / "g"
    os.rename(old, path)
    opened, real = [], reader.PreparedDataset._open

    def swapping(self, name, dtype, shape):
        arr = real(self, name, dtype, shape)
        opened.append(name)
        if len(opened) == 1:  # as prepare --overwrite does: the old one aside, the new one in
            os.rename(path, tmp_path / "aside")
            os.rename(new, path)
        return arr

    monkeypatch.setattr(reader.PreparedDataset, "_open", swapping)
    dataset = reader.PreparedDataset(path)
    assert len(opened) > 7  # opened twice over
    whole = reader.PreparedDataset(tmp_path / "aside")  # the old version, read alone: its features differ
    monkeypatch.undo()
    fresh = reader.PreparedDataset(path)
    assert dataset.fingerprint == fresh.fingerprint != whole.fingerprint
    for name, arr in fresh.arrays.items():
        assert np.array_equal(dataset.arrays[name], arr), name
    assert not np.array_equal(dataset.arrays["features"], whole.arrays["features"])


def test_a_directory_replaced_at_every_reading_is_one_line(tmp_path, monkeypatch):
    from mggcn.data.prepared import reader
    from mggcn.utils.errors import GraphError

    first, second = _two_versions(tmp_path)
    path = tmp_path / "g"
    os.rename(first, path)
    real = reader.PreparedDataset._open
    spare = [second]

    def swapping(self, name, dtype, shape):
        arr = real(self, name, dtype, shape)
        if name == "features":  # every reading: swap the other version in
            os.rename(path, tmp_path / "aside")
            os.rename(spare.pop(), path)
            spare.append(os.fspath(tmp_path / "back"))
            os.rename(tmp_path / "aside", spare[-1])
        return arr

    monkeypatch.setattr(reader.PreparedDataset, "_open", swapping)
    with pytest.raises(GraphError) as err:
        reader.PreparedDataset(path)
    assert str(err.value) == (f"{path}: replaced 5 times while it was read (`mggcn prepare --overwrite` of it in a "
                              "loop?); read it once it stays")


def test_a_dataset_another_prepare_put_there_meanwhile_is_said_so_and_kept(tmp_path):
    """Two prepares into one new directory: the second to finish found it absent when it began, so "already exists"
    would be wrong; it says another process wrote it while this one ran, and leaves it as it is."""
    from mggcn.data.prepared.outdir import PartialDir
    from mggcn.utils.errors import ConfigError

    out = tmp_path / "g"
    partial = PartialDir(out)
    (partial.path / "manifest.json").write_text("{}")
    out.mkdir()
    (out / "manifest.json").write_text("the other one's")
    with pytest.raises(ConfigError) as err:
        partial.install("builtin:karate", overwrite=False)
    partial.discard()
    assert str(err.value) == (f"{out}: was written by another process while this prepare ran; kept as it is: remove "
                              "it or allow overwriting it")
    assert _tree(tmp_path) == {"g/manifest.json": b"the other one's"}
    partial = PartialDir(out)  # there before this prepare began: as the start would have said
    with pytest.raises(ConfigError, match=r"g: already exists; remove it or allow overwriting it$"):
        partial.install("builtin:karate", overwrite=False)
    partial.discard()


def test_a_directory_whose_inode_numbers_change_at_every_look_is_read(tmp_path, monkeypatch):
    """Some file systems (FUSE without use_ino, CIFS with noserverino) give a file a new inode number at every stat:
    a directory nobody replaced is read, not retried and refused as replaced."""
    import itertools

    from mggcn.data.prepared import reader

    path = _two_versions(tmp_path)[0]
    count, real = itertools.count(), os.stat

    def unstable(target, *args, **kwargs):
        found = real(target, *args, **kwargs)
        return os.stat_result((found.st_mode, found.st_ino + next(count), *found[2:]))

    monkeypatch.setattr(os, "stat", unstable)
    assert reader.PreparedDataset(path).num_nodes == 34
