"""Prepared directories as users handle them: OUT_DIR written by another process while a prepare runs, a replacement
that fails halfway, a prepare killed before it finished, and a directory this user may not read."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_formats import raises_naming

from mggcn.data.prepared import writer
from mggcn.data.prepared.outdir import PartialDir
from mggcn.data.prepared.reader import PreparedDataset, _sha256
from mggcn.data.prepared.writer import prepare
from mggcn.utils.errors import ConfigError, GraphError
from reference import random_graph

SOURCE = "synthetic:n=60,classes=3,features=4,degree=4"


def _listing(folder) -> list[str]:
    return sorted(os.listdir(folder))


def _meanwhile(monkeypatch, action) -> None:
    """Run ``action()`` while prepare writes, after the edges and before the vertex data."""
    real = writer._write_vertex_data

    def hooked(*args, **kwargs):
        action()
        return real(*args, **kwargs)

    monkeypatch.setattr(writer, "_write_vertex_data", hooked)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_directory_made_at_out_dir_while_preparing_is_kept(tmp_path, monkeypatch, overwrite):
    """Another process (a user, a second prepare) fills OUT_DIR while the dataset is written: the dataset must not
    take its place, nor remove what it holds, with or without --overwrite (which replaces only a prepared dataset)."""
    out = tmp_path / "ds"

    def user_writes():
        out.mkdir()
        (out / "notes.txt").write_text("mine")

    _meanwhile(monkeypatch, user_writes)
    with pytest.raises(ConfigError, match=str(out)):
        prepare(SOURCE, out, progress=False, overwrite=overwrite)
    assert _listing(out) == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    assert _listing(tmp_path) == ["ds"]  # no partial or set-aside directory left


def test_a_dataset_prepared_meanwhile_is_kept_without_overwrite(tmp_path, monkeypatch):
    out = tmp_path / "ds"
    first = prepare("builtin:karate", tmp_path / "first", progress=False)
    _meanwhile(monkeypatch, lambda: shutil.copytree(first, out))
    with pytest.raises(ConfigError, match="was written by another process while this prepare ran; kept as it is"):
        prepare(SOURCE, out, progress=False)
    assert PreparedDataset(out).num_nodes == 34


@pytest.mark.parametrize("failing", ["set aside", "put in place"])
def test_a_replacement_that_fails_keeps_the_old_dataset_and_leaves_nothing(tmp_path, monkeypatch, failing):
    """--overwrite moves the old dataset aside, puts the new one in its place, removes the old: when a move fails
    (EBUSY: OUT_DIR is a mount point), the old dataset stays at OUT_DIR and no hidden directory is left."""
    out = prepare("builtin:karate", tmp_path / "ds", progress=False)

    def refusing(real):
        def move(src, dst, *args, **kwargs):
            set_aside = os.fspath(src) == os.fspath(out)
            put_in_place = os.fspath(dst) == os.fspath(out) and ".partial-" in os.fspath(src)
            if set_aside if failing == "set aside" else put_in_place:
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), os.fspath(src))
            return real(src, dst, *args, **kwargs)
        return move

    monkeypatch.setattr(os, "rename", refusing(os.rename))
    monkeypatch.setattr(os, "replace", refusing(os.replace))
    with pytest.raises(GraphError, match="Device or resource busy"):
        prepare(SOURCE, out, progress=False, overwrite=True)
    monkeypatch.undo()
    assert PreparedDataset(out, verify=True).num_nodes == 34
    assert _listing(tmp_path) == ["ds"]


_KILLED = textwrap.dedent("""
    import os, signal, sys
    from mggcn.data.prepared import writer

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would: no cleanup runs

    writer._write_vertex_data = die
    writer.prepare(sys.argv[1], sys.argv[2], progress=False)
""")


def test_a_prepare_killed_midway_leaves_a_partial_directory_the_next_one_removes(tmp_path, capsys):
    out = tmp_path / "ds"
    live = PartialDir(out)  # another prepare, still writing: its directory must survive
    try:
        proc = subprocess.run([sys.executable, "-c", _KILLED, SOURCE, str(out)], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == -9, proc.stderr
        left = [name for name in _listing(tmp_path) if name != live.path.name]
        assert len(left) == 1 and left[0].startswith(".ds.partial-"), left
        prepare(SOURCE, out, progress=True)
        assert live.path.is_dir()
        assert _listing(tmp_path) == sorted(["ds", live.path.name])
    finally:
        live.discard()
    assert f"removed {tmp_path / left[0]}, left by a prepare that was stopped" in capsys.readouterr().err
    assert _listing(tmp_path) == ["ds"] and PreparedDataset(out, verify=True).num_nodes == 60


def _unprivileged(argv: list[str]) -> list[str]:
    """``argv`` run without the root's right to read what permissions forbid."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop root's file access override")
    drop = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", "--", *argv]


@pytest.mark.parametrize("case", ["array", "directory"])
def test_a_dataset_this_user_may_not_read_is_named_so(tmp_path, case):
    out = prepare("builtin:karate", tmp_path / "ds", progress=False)
    target, mode = (out / "features.npy", 0o000) if case == "array" else (out, 0o600)
    command = "info" if case == "array" else "train"
    os.chmod(target, mode)
    try:
        proc = subprocess.run(_unprivileged([sys.executable, "-m", "mggcn", command, str(out)]),
                              capture_output=True, text=True, timeout=120)
    finally:
        os.chmod(target, 0o644 if case == "array" else 0o755)
    if proc.returncode != 2 and "Operation not permitted" in proc.stderr:
        pytest.skip("setpriv may not drop capabilities here")
    lines = proc.stderr.strip().splitlines()
    named = target if case == "array" else out / "manifest.json"
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert str(named) in lines[0] and "unreadable (Permission denied)" in lines[0], lines[0]


def test_ranks_that_opened_different_prepared_datasets_refuse_to_train(tmp_path):
    """A dataset replaced while a job starts (prepare --overwrite into its directory): ranks that opened the old one
    and ranks that opened the new one would cut shards of two graphs. They compare the manifests' fingerprints."""
    import workers
    from mggcn.distributed.launch import WorkerError, run_workers

    for name, spec in (("a", "synthetic:n=200"), ("b", "synthetic:n=200,seed=5")):
        prepare(spec, str(tmp_path / name), progress=False)
    same = [str(tmp_path / "a")] * 2
    assert run_workers(workers.same_dataset_worker, 2, (same,), timeout_s=120) == [0, 1]
    with pytest.raises(WorkerError, match="the ranks opened different datasets"):
        run_workers(workers.same_dataset_worker, 2, ([str(tmp_path / "a"), str(tmp_path / "b")],), timeout_s=120)


@pytest.mark.parametrize("directed", [False, True])
def test_verify_checks_every_rows_order_and_degree_as_a_shard_would(tmp_path, directed):
    """A directory whose checksums were stripped (a hand edit) with a degree off, or a row's ids out of order:
    ``info --verify`` passed it ("every value is in range") while training refused the degree; verify now checks
    every row as building a shard checks a rank's, naming the file and the row."""
    g = random_graph(30, 120, features=4, classes=3, directed=directed, seed=2)
    out = prepare(g, tmp_path / "ds", progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    for record in manifest["arrays"].values():
        record.pop("sha256", None)
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert PreparedDataset(out, verify=True).num_nodes == 30
    degree = np.load(out / "degree.npy")
    np.save(out / "degree.npy", degree + (np.arange(30) == 7) * 3)
    with raises_naming(out / "degree.npy", f"degree {degree[7] + 3} of vertex 7", "expected that plus one"):
        PreparedDataset(out, verify=True)
    np.save(out / "degree.npy", degree)
    view = "in" if not directed else "out"
    indptr, indices = np.load(out / f"{view}_indptr.npy"), np.load(out / f"{view}_indices.npy")
    row = int(np.argmax(np.diff(indptr) >= 2))  # a row of two distinct ids or more, reversed
    lo, hi = indptr[row], indptr[row + 1]
    assert indices[lo] != indices[hi - 1]
    indices[lo:hi] = indices[lo:hi][::-1].copy()
    np.save(out / f"{view}_indices.npy", indices)
    with raises_naming(out / f"{view}_indices.npy", f"the ids of row {row} are not sorted"):
        PreparedDataset(out, verify=True)


def test_verify_checks_the_out_edges_are_the_in_edges_reversed(tmp_path):
    """A directed graph's out-CSR (the backward pass's Aᵀ) replaced by its in-CSR, or an id of it moved to another
    row's vertex, its rows still sorted and its checksums recomputed: every value in range, so ``info --verify``
    passed it and training used another graph backward. Verify compares the two CSRs' edges."""
    g = random_graph(30, 120, features=4, classes=3, directed=True, seed=2)
    out = prepare(g, tmp_path / "ds", progress=False)
    assert not json.loads((out / "manifest.json").read_text()).get("symmetric")
    assert PreparedDataset(out, verify=True).num_nodes == 30
    in_ptr, in_ids = np.load(out / "in_indptr.npy"), np.load(out / "in_indices.npy")
    out_ptr, out_ids = np.load(out / "out_indptr.npy"), np.load(out / "out_indices.npy")
    assert not (np.array_equal(in_ptr, out_ptr) and np.array_equal(in_ids, out_ids))
    row = int(np.argmax(np.diff(out_ptr) >= 1))
    moved = out_ids.copy()
    moved[out_ptr[row]] = (moved[out_ptr[row]] + 1) % 30  # one edge's target changed
    lo, hi = out_ptr[row], out_ptr[row + 1]
    moved[lo:hi] = np.sort(moved[lo:hi])
    for ptr, ids in ((in_ptr, in_ids), (out_ptr, moved)):
        np.save(out / "out_indptr.npy", ptr)
        np.save(out / "out_indices.npy", ids)
        manifest = json.loads((out / "manifest.json").read_text())
        for name in ("out_indptr", "out_indices"):
            manifest["arrays"][name]["sha256"] = _sha256(np.load(out / f"{name}.npy", mmap_mode="r"))
        (out / "manifest.json").write_text(json.dumps(manifest))
        with raises_naming(out / "out_indices.npy", "the out-edges (out_indptr, out_indices) are not the in-edges"):
            PreparedDataset(out, verify=True)


def test_a_graph_of_fewer_vertices_than_random_classes_is_refused_before_prepare_writes(tmp_path):
    """One vertex and no labels: the random labels' two classes exceed it. Training refused it; prepare wrote a
    directory (exit 0) that every reader then refused."""
    (tmp_path / "one.txt").write_text("0 0\n")
    message = r"one\.txt: 1 vertex\(es\) \(n = largest id in one\.txt \+ 1\) for the 2 classes of random labels"
    with pytest.raises(GraphError, match=message):
        prepare(tmp_path / "one.txt", tmp_path / "out", fmt="edgelist", progress=False)
    assert not (tmp_path / "out").exists()
    from mggcn.data.formats import read

    with pytest.raises(GraphError, match=message):
        read(tmp_path / "one.txt", "edgelist")


def test_a_link_loop_in_a_prepared_directory_and_a_prepared_source_are_named_in_one_line(tmp_path):
    """A link loop in place of an array raised Path.resolve's RuntimeError (a traceback); a prepared directory
    given to prepare was called "not a generated dataset"."""
    prepare("builtin:karate", tmp_path / "k", progress=False)
    (tmp_path / "k" / "features.npy").unlink()
    (tmp_path / "k" / "features.npy").symlink_to("features.npy")
    with pytest.raises(GraphError, match=r"k/features\.npy: a link that leads back to itself \(a loop of symbolic "):
        PreparedDataset(tmp_path / "k")
    prepare("builtin:karate", tmp_path / "k2", progress=False)
    with pytest.raises(GraphError, match=r"k2: already a prepared dataset: train on it as it is \(mggcn train "):
        prepare(str(tmp_path / "k2"), tmp_path / "k3", progress=False)


def test_a_manifest_name_of_control_characters_is_shown_printable(tmp_path):
    """The run's first line and its errors say the dataset's name: a crafted one split the line and sent terminal
    escapes."""
    out = prepare("builtin:karate", tmp_path / "k", progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["name"] = "karate\n\x1b[31mred"
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert PreparedDataset(out).name == "karate??[31mred"


def test_overwrite_leaves_only_the_new_dataset(tmp_path):
    """--overwrite sets the old dataset aside, puts the new one in place, and removes the old: nothing hidden is
    left beside OUT_DIR (the old dataset's size on disk, for every overwrite)."""
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.data.prepared.writer import prepare

    out = tmp_path / "ds"
    prepare("builtin:karate", out, progress=False)
    prepare("synthetic:n=60,classes=3,features=4,degree=4", out, progress=False, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["ds"] and PreparedDataset(out).num_nodes == 60


def test_the_set_aside_dataset_of_a_killed_overwrite_is_removed_by_the_next_prepare(tmp_path):
    """A prepare --overwrite killed between setting the old dataset aside and removing it leaves .OUT.old-*: no live
    process holds it, so the next prepare into OUT_DIR removes it as it removes a killed prepare's partial one."""
    from mggcn.data.prepared.outdir import PartialDir, remove_stale

    out = tmp_path / "ds"
    live = PartialDir(out)  # another prepare's, still held: kept
    left = tmp_path / ".ds.old-killed1"
    (left / "ds").mkdir(parents=True)
    (left / "ds" / "features.npy").write_bytes(b"x" * 1000)
    try:
        assert remove_stale(out) == [left]
        assert sorted(os.listdir(tmp_path)) == [live.path.name]
    finally:
        live.discard()
