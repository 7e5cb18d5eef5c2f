"""Hostile inputs, part 3: the data readers against files that are not what their names say (an ``.npy`` under an
``.npz`` name and the reverse, a file with the gzip magic that is not gzip, a byte order mark, one endless line),
values beyond the integers they are cast to (unsigned 64-bit labels and ids, Matrix Market integers beyond 64 bits,
JSON integers of thousands of digits), a prepared directory with nothing to train on, and the manifest and side-file
values whose refusal was unclear.

Every refusal is exit status 2 and exactly one line on stderr, ``mggcn CMD: error: ...``, naming the file, never a
traceback or a silently wrong result; the values a line echoes are clipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_hostile_inputs import (  # noqa: E402  (the crafted layouts of part 1)
    TRAIN,
    N,
    _edgelist,
    _edgelist_argv,
    _edit_manifest,
    _graph_arrays,
    _ogb_csv,
    _prepared,
    _reddit,
    _saint,
)

from mggcn.tools.cli import main  # noqa: E402
from planetoid_files import make_planetoid, write_planetoid  # noqa: E402

BIG_U64 = 2**64 - 1


def _one_line_error(capsys, argv: list[str], named: str) -> str:
    """Run ``argv`` with warnings as errors (a warning on stderr is a second line); return the one error line."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith(f"mggcn {argv[0]}: error: "), err
    assert named in lines[0] and "Traceback" not in err, err
    return lines[0]


def _ogb_binary(tmp: Path, edge_index=None, num_nodes_list=None, label=None) -> Path:
    root = _ogb_csv(tmp)
    ei, x, y, _ = _graph_arrays()
    np.savez(root / "raw" / "data.npz", edge_index=ei if edge_index is None else edge_index, node_feat=x,
             num_nodes_list=np.array([N]) if num_nodes_list is None else num_nodes_list)
    np.savez(root / "raw" / "node-label.npz", node_label=(y if label is None else label)[:, None])
    return root


def _as_npy(path: Path, arr: np.ndarray) -> None:
    """An ``.npy`` array written under ``path``, whatever its suffix."""
    with open(path, "wb") as f:
        np.save(f, arr)


# ------------------------------------------------------------------------- 1, 2: .npy and .npz in each other's place


def _npy_split(tmp: Path):
    paths = _edgelist(tmp, split=None)
    _as_npy(tmp / "s.npz", _graph_arrays()[3])
    return [*_edgelist_argv(paths), "--split", tmp / "s.npz"], "s.npz"


def _npy_reddit_data(tmp: Path):
    root = _reddit(tmp)
    _as_npy(root / "reddit_data.npz", _graph_arrays()[1])
    return ["train", root, "--format", "dgl-reddit", *TRAIN], "reddit_data.npz"


def _npy_ogb_data(tmp: Path):
    root = _ogb_binary(tmp)
    _as_npy(root / "raw" / "data.npz", _graph_arrays()[0])
    return ["train", root, "--format", "ogb", *TRAIN], "data.npz"


def _npy_ogb_labels(tmp: Path):
    root = _ogb_binary(tmp)
    _as_npy(root / "raw" / "node-label.npz", _graph_arrays()[2])
    return ["prepare", root, tmp / "out", "--format", "ogb", "--quiet"], "node-label.npz"


def _npy_saint_adj(tmp: Path):
    root = _saint(tmp)
    _as_npy(root / "adj_full.npz", _graph_arrays()[0])
    return ["train", root, "--format", "saint", *TRAIN], "adj_full.npz"


@pytest.mark.parametrize("case", [_npy_split, _npy_reddit_data, _npy_ogb_data, _npy_ogb_labels, _npy_saint_adj])
def test_an_npy_array_under_an_npz_name_is_refused_naming_it(tmp_path, capsys, case):
    argv, named = case(tmp_path)
    assert "an .npy array, not a" in _one_line_error(capsys, argv, named)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("array", ["split", "features", "in_indptr"])
@pytest.mark.parametrize("command", ["train", "info"])
def test_a_prepared_array_that_is_an_npz_archive_is_refused(tmp_path, capsys, array, command):
    root = _prepared(tmp_path)
    np.savez(tmp_path / "a.npz", a=np.load(root / f"{array}.npy"))
    os.replace(tmp_path / "a.npz", root / f"{array}.npy")
    argv = ["train", root, *TRAIN] if command == "train" else ["info", root]
    assert "an .npz archive" in _one_line_error(capsys, argv, f"{array}.npy")


# --------------------------------------------------------------------------- 3: the gzip magic on a file not gzip


@pytest.mark.parametrize("content", [b"\x1f\x8bnot gzip\n", b"\x1f\x8bjunk"], ids=["bad-method", "cut"])
@pytest.mark.parametrize("command", ["train", "prepare"])
def test_a_file_with_the_gzip_magic_that_is_not_gzip_is_named(tmp_path, capsys, content, command):
    (tmp_path / "gz.txt").write_bytes(content)
    argv = [command, tmp_path / "gz.txt", *([tmp_path / "out"] if command == "prepare" else []),
            "--format", "edgelist", "--quiet"]
    line = _one_line_error(capsys, argv, "gz.txt")
    assert "corrupt" in line and "cannot write" not in line and "out" not in line.split("gz.txt", 1)[1]
    assert not (tmp_path / "out").exists()


# -------------------------------------------------------------------------- 4: Matrix Market integers beyond int64


@pytest.mark.parametrize("body", ["99999999999999999999 1\n2 3\n", "1 2 100000000000000000000000\n2 3 1\n"])
def test_matrix_market_integers_beyond_int64_are_refused(tmp_path, capsys, body):
    field = "pattern" if body.count(" ") == 2 else "integer"
    (tmp_path / "big.mtx").write_text(f"%%MatrixMarket matrix coordinate {field} general\n3 3 2\n{body}")
    _one_line_error(capsys, ["train", tmp_path / "big.mtx", "--format", "mtx", *TRAIN], "big.mtx")


# ------------------------------------------------------------------- 5: unsigned labels and ids beyond the int64 range


@pytest.mark.parametrize("value", [BIG_U64, 2**63, 10**12])
def test_unsigned_labels_are_checked_before_the_cast(tmp_path, capsys, value):
    """2^64 - 1 must not read as -1 (unlabelled), nor 2^63 as a negative label: the line names the real value."""
    y = _graph_arrays()[2].astype(np.uint64)
    y[4] = value
    paths = _edgelist(tmp_path, y=y)
    for command in ("train", "prepare"):
        line = _one_line_error(capsys, _edgelist_argv(paths, command), "y.npy")
        # the largest uint64 is also a -1 stored unsigned, refused as such first
        assert f"label {value} of vertex 4 " + ("is the largest uint64, as -1" if value == BIG_U64 else "would make") \
            in line, line


def test_unsigned_and_float_labels_of_the_binary_formats_name_their_value(tmp_path, capsys):
    y = _graph_arrays()[2].astype(np.uint64)
    y[3] = BIG_U64
    root = _reddit(tmp_path, label=y)
    assert str(BIG_U64) in _one_line_error(capsys, ["train", root, "--format", "dgl-reddit", *TRAIN],
                                           "reddit_data.npz")
    labels = _graph_arrays()[2].astype(np.float64)
    labels[5] = 1e30  # an integer as a float, beyond int64
    root = _ogb_binary(tmp_path / "o", label=labels)
    line = _one_line_error(capsys, ["train", root, "--format", "ogb", *TRAIN], "node-label.npz")
    assert "negative" not in line and "1000000000000000019884624838656" in line


def test_unsigned_vertex_ids_beyond_int64_name_their_value(tmp_path, capsys):
    ei = _graph_arrays()[0].astype(np.uint64)
    ei[1, 6] = BIG_U64
    root = _ogb_binary(tmp_path, edge_index=ei)
    assert str(BIG_U64) in _one_line_error(capsys, ["train", root, "--format", "ogb", *TRAIN], "data.npz")


def _pigo(root: Path, indptr: np.ndarray, indices: np.ndarray) -> None:
    """A ``graph.bin`` with 8-byte ids and offsets (as the other files of an intact mggcn-bin directory)."""
    with open(root / "graph.bin", "wb") as f:
        f.write(b"PIGO-CSR-v2" + bytes([8, 8]) + struct.pack("<QQQQ", N, indices.size, N, N))
        f.write(indptr.astype("<u8").tobytes() + indices.astype("<u8").tobytes())


def test_unsigned_offsets_and_ids_of_a_mggcn_bin_graph_name_their_value(tmp_path, capsys):
    from test_hostile_inputs import _mggcn_bin

    root = _mggcn_bin(tmp_path)
    indptr = np.arange(N + 1, dtype=np.uint64)
    indices = np.arange(N, dtype=np.uint64)
    indices[7] = BIG_U64
    _pigo(root, indptr, indices)
    argv = ["train", root, "--format", "mggcn-bin", *TRAIN]
    assert str(BIG_U64) in _one_line_error(capsys, argv, "graph.bin")
    indptr[9], indices[7] = 3, 7  # offsets that fall: unsigned, np.diff would wrap to a rise
    _pigo(root, indptr, indices)
    assert "falls" in _one_line_error(capsys, argv, "graph.bin")


def test_unsigned_arrays_in_memory_are_refused_not_wrapped():
    from mggcn.data.formats import from_tensors
    from mggcn.utils.errors import GraphError

    ei, x, y, split = _graph_arrays()
    masks = [split == k for k in range(3)]
    y = y.astype(np.uint64)
    y[2] = BIG_U64
    with pytest.raises(GraphError, match=str(BIG_U64)):
        from_tensors(ei, x, y, *masks)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(GraphError, match="NaN or inf"):
            from_tensors(ei, np.full((N, 4), 1e300), y.astype(np.int64) % 3, *masks)


def test_ids_and_labels_in_memory_are_whole_numbers_not_truncated():
    """A Graph (or a PyG Data, made into one) of float ids or labels that are not whole numbers is refused; 0.5
    used to read as vertex 0. Whole floats and booleans are taken as they are."""
    from mggcn.data.graph import Graph
    from mggcn.utils.errors import GraphError

    masks = {"train": np.array([1, 1, 0, 0], bool), "val": np.array([0, 0, 1, 0], bool),
             "test": np.array([0, 0, 0, 1], bool)}

    def graph(edges, y):
        return Graph(num_nodes=4, edge_index=np.array(edges), x=np.ones((4, 2)), y=np.array(y), masks=masks)

    for edges, y, words in (([[0.5, 1], [1, 2]], [0, 1, 0, 1], "vertex id 0.5 is not an integer"),
                            ([[0, 1], [1, np.inf]], [0, 1, 0, 1], "vertex id inf is not an integer"),
                            ([[0, 1], [1, 2]], [0, 1.5, 0, 1], "label 1.5 is not an integer"),
                            ([[0, 1], [1, 2]], ["a", "b", "a", "b"], "labels must be integers, got dtype <U1")):
        with pytest.raises(GraphError, match=re.escape(words)):
            graph(edges, y)
    assert graph([[0.0, 1.0], [1.0, 2.0]], [True, False, True, False]).y.tolist() == [1, 0, 1, 0]
    assert graph([[0.0, 1.0], [1.0, 2.0]], [0, 1, 0, 1]).edge_index.tolist() == [[0, 1], [1, 2]]


# ------------------------------------------------------------------------ 6: a byte order mark, one endless line


@pytest.mark.parametrize("header", ["", "src dst\n"])
def test_a_byte_order_mark_is_not_part_of_the_first_edge(tmp_path, capsys, header):
    from mggcn.data.formats import iter_edgelist_chunks, read_edgelist

    (tmp_path / "bom.txt").write_bytes(("\ufeff" + header + "0 1\n1 2\n2 0\n").encode())
    assert read_edgelist(tmp_path / "bom.txt").num_edges == 3
    assert sum(c.shape[1] for c in iter_edgelist_chunks(tmp_path / "bom.txt")) == 3
    assert main(["prepare", str(tmp_path / "bom.txt"), str(tmp_path / "o"), "--format", "edgelist",
                 "--quiet"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["num_edges"] == 3


@pytest.mark.parametrize("command", ["train", "prepare"])
@pytest.mark.parametrize("content", [b"\0" * (3 << 20), b"# " + b"x" * (2 << 20) + b"\n0 1\n"],
                         ids=["zeros", "comment"])
def test_a_header_or_comment_line_of_megabytes_is_refused(tmp_path, capsys, command, content):
    (tmp_path / "z.txt").write_bytes(content)
    argv = [command, tmp_path / "z.txt", *([tmp_path / "out"] if command == "prepare" else []),
            "--format", "edgelist", "--quiet"]
    assert "line 1 is longer than" in _one_line_error(capsys, argv, "z.txt")


# ------------------------------------------------------------------------------ 7: a prepared directory, no train


def _no_training_vertices(root: Path) -> None:
    codes = np.load(root / "split.npy")
    codes[codes == 0] = 1
    np.save(root / "split.npy", codes)

    def edit(m: dict) -> None:
        m["split_sizes"] = {s: int((codes == k).sum()) for k, s in enumerate(("train", "val", "test"))}
        m["arrays"]["split"]["sha256"] = hashlib.sha256(codes.tobytes()).hexdigest()

    _edit_manifest(root, edit)


@pytest.mark.parametrize("argv", [[*TRAIN, "--nprocs", "1"], [*TRAIN, "--nprocs", "2"], ["--verify"]])
def test_a_prepared_directory_without_training_vertices_is_refused(tmp_path, capsys, argv):
    root = _prepared(tmp_path)
    _no_training_vertices(root)
    command = "info" if argv == ["--verify"] else "train"
    extra = ["--save-model", tmp_path / "m.pt"] if command == "train" else []
    assert "no training vertices" in _one_line_error(capsys, [command, root, *argv, *extra], str(root))
    assert not (tmp_path / "m.pt").exists()


# ------------------------------------------------------------------------------------- 8: unclear one-liners


def _json_case(name: str):
    def case(tmp: Path):
        if name == "manifest.json":
            root = _prepared(tmp)
            text = json.dumps(json.loads((root / name).read_text()))
            (root / name).write_text(text.replace('"num_nodes": 30', '"num_nodes": 3' + "0" * 5000))
            return ["info", root]
        huge = "1" * 5000
        root = _saint(tmp, **({"role": f'{{"tr": [{huge}], "va": [], "te": []}}'} if name == "role.json"
                              else {"class_map": f'{{"0": {huge}}}'}))
        return ["train", root, "--format", "saint", *TRAIN]

    return case


@pytest.mark.parametrize("name", ["manifest.json", "role.json", "class_map.json"])
def test_json_integers_of_thousands_of_digits_are_named(tmp_path, capsys, name):
    line = _one_line_error(capsys, _json_case(name)(tmp_path), name)
    assert "invalid JSON" in line and len(line) < 500


def test_a_class_map_key_of_thousands_of_digits_is_clipped_in_the_line(tmp_path, capsys):
    root = _saint(tmp_path, class_map=json.dumps({"9" * 5000: 1, **{str(v): 0 for v in range(N)}}))
    assert len(_one_line_error(capsys, ["train", root, "--format", "saint", *TRAIN], "class_map.json")) < 500


@pytest.mark.parametrize("edit", [
    lambda m: m.update(balance={"²": {"adj_max": 1, "adj_t_max": 1, "mean": 1}}),
    lambda m: m.update(balance={"1" * 5000: {"adj_max": 1, "adj_t_max": 1, "mean": 1}}),
    lambda m: m.update(balance={"2": {"adj_max": 10**400, "adj_t_max": 1, "mean": 1}}),
    lambda m: m["arrays"]["features"].update(file="feat\0ures.npy"),
    lambda m: m.update(num_nodes=10**400),
], ids=["superscript", "digits", "huge-number", "nul", "num-nodes"])
@pytest.mark.parametrize("command", ["train", "info"])
def test_manifest_values_that_python_refuses_are_named(tmp_path, capsys, edit, command):
    root = _prepared(tmp_path)
    _edit_manifest(root, edit)
    argv = ["train", root, *TRAIN] if command == "train" else ["info", root]
    assert len(_one_line_error(capsys, argv, "manifest.json")) < 500


@pytest.mark.parametrize("counts", [np.array([np.nan]), np.array(["abc"]), np.array([30 + 0j]), np.array([30.5])])
def test_ogb_num_nodes_list_must_hold_an_integer(tmp_path, capsys, counts):
    root = _ogb_binary(tmp_path, num_nodes_list=counts)
    assert "num_nodes_list" in _one_line_error(capsys, ["train", root, "--format", "ogb", *TRAIN], "data.npz")
    root = _ogb_binary(tmp_path / "whole", num_nodes_list=np.array([float(N)]))  # an integer stored as a float
    assert main(["train", str(root), "--format", "ogb", *TRAIN]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("parts", [("y", "ty", "ally"), ("ally",), ("y",)])
def test_planetoid_labels_without_columns_are_named(tmp_path, capsys, parts):
    data = make_planetoid(14, 60, 90, classes=7, features=30, seed=0)
    data.update({p: data[p][:, :0] for p in parts})
    folder = write_planetoid(tmp_path / "cora", "cora", data)
    _one_line_error(capsys, ["train", folder, "--format", "planetoid", *TRAIN], "ind.cora.")


@pytest.mark.parametrize("fmt", ["edgelist", "saint"])
def test_features_beyond_float32_are_one_line_without_warnings(tmp_path, capsys, fmt):
    x = np.full((N, 4), 1e300)
    if fmt == "edgelist":
        argv, named = _edgelist_argv(_edgelist(tmp_path, x=x)), "x.npy"
    else:
        argv, named = ["train", _saint(tmp_path, feats=x), "--format", "saint", *TRAIN], "feats.npy"
    assert "NaN or inf" in _one_line_error(capsys, argv, named)


@pytest.mark.parametrize("link", ["loop", "dangling"])
@pytest.mark.parametrize("role", ["dataset", "dataset with --format", "features"])
def test_a_link_that_loops_or_leads_nowhere_is_said_so_not_missing(tmp_path, capsys, link, role):
    """A symbolic link in the dataset's or a vertex file's place that loops or leads to nothing: said as such
    (as the prepared reader and the outputs say it), not "missing file" or "no such file or directory"."""
    path = tmp_path / "bad"
    if link == "loop":
        os.symlink(tmp_path / "other", path)
        os.symlink(path, tmp_path / "other")
    else:
        os.symlink(tmp_path / "nowhere", path)
    (tmp_path / "g.txt").write_text("0 1\n1 2\n2 0\n")
    argv = {"dataset": ["train", path], "dataset with --format": ["train", path, "--format", "edgelist"],
            "features": ["train", tmp_path / "g.txt", "--format", "edgelist", "--features", path]}[role]
    line = _one_line_error(capsys, [*argv, *TRAIN], str(path))
    said = "is a link that leads back to itself" if link == "loop" else "nowhere, which does not exist"
    assert said in line and "missing" not in line and "no such file" not in line, line
