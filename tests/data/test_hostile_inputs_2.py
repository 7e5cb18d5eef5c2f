"""Hostile inputs, part 2 (issue 31): crafted Planetoid pickles (sparse matrices whose internals lie, graph dicts
with ids beyond int64 or negative), graphs without edges, generated specs too large for the machine, and a prepared
directory whose row offsets decrease, through the ``mggcn`` command as a user runs it.

Every refusal is exit status 2 and exactly one line on stderr, ``mggcn CMD: error: ...``, naming the file or the
option; never a traceback, a crash by a signal, or a silent wrong run. A graph without edges is valid: it trains.
"""

from __future__ import annotations

import copyreg
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from mggcn.tools.cli import main
from planetoid_files import make_planetoid, py2_pickle, write_planetoid

TRAIN = ["--epochs", "1", "--hidden", "4", "--quiet"]
N, F, C = 30, 4, 3


def _one_line_error(capsys, argv: list[str], command: str, named: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith(f"mggcn {command}: error: "), err
    assert named in lines[0], err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------------------ crafted Planetoid sparse matrices


def _Crafted(cls: type, state):  # noqa: N802 - reads as the class it pickles as
    """An object that pickles as a scipy sparse matrix of class ``cls`` (its module and name) whose restored
    attributes are ``state``, whatever they are."""
    fake = type(cls.__name__, (), {"__module__": cls.__module__, "__qualname__": cls.__name__,
                                   "__reduce_ex__": lambda self, protocol: (copyreg.__newobj__, (type(self),), state)})
    return fake()


def _csr_state(m: sp.spmatrix, **change) -> dict:
    state = {"_shape": m.shape, "maxprint": 50, "indptr": m.indptr, "indices": m.indices, "data": m.data}
    state.update(change)
    return state


def _planetoid(tmp: Path, part: str | None = None, obj=None, **parts_change) -> Path:
    parts = make_planetoid(14, 60, 90, classes=7, features=30, seed=0)
    parts.update(parts_change)
    folder = write_planetoid(tmp / "cora", "cora", parts)
    if part is not None:
        py2_pickle(obj, folder / f"ind.cora.{part}")
    return folder


def _parts():
    return make_planetoid(14, 60, 90, classes=7, features=30, seed=0)


def _csr(part: str, **change):
    m = _parts()[part].tocsr()
    return _Crafted(sp.csr_matrix, _csr_state(m, **change))


def _csc(part: str, **change):
    m = _parts()[part].tocsc()
    return _Crafted(sp.csc_matrix, _csr_state(m, **change))


def _coo(part: str, old_style: bool = False, **change):
    m = _parts()[part].tocoo()
    state = {"_shape": m.shape, "maxprint": 50, "data": m.data, "has_canonical_format": False}
    if old_style:  # scipy < 1.13 kept row and col
        state.update(row=m.row, col=m.col)
    else:
        state["coords"] = (m.row, m.col)
    state.update(change)
    return _Crafted(sp.coo_matrix, state)


def _decreasing(a: np.ndarray, at: int = 3) -> np.ndarray:
    a = a.copy()
    a[at] = a[-1] + 1000
    return a


def _bumped(a: np.ndarray, at: int, value: int) -> np.ndarray:
    a = a.astype(np.int64)
    a[at] = value
    return a


SPARSE_CASES = {
    "csr indptr decreases": ("allx", lambda: _csr("allx", indptr=_decreasing(_parts()["allx"].indptr))),
    "csr indptr end beyond indices": ("allx", lambda: _csr("allx", indptr=_bumped(_parts()["allx"].indptr, -1,
                                                                                  10**9))),
    "csr indptr start not 0": ("tx", lambda: _csr("tx", indptr=_bumped(_parts()["tx"].indptr, 0, -5))),
    "csr indptr too short": ("allx", lambda: _csr("allx", indptr=_parts()["allx"].indptr[:-3])),
    "csr indptr 2-D": ("x", lambda: _csr("x", indptr=_parts()["x"].indptr[:, None])),
    "csr index beyond columns": ("x", lambda: _csr("x", indices=_bumped(_parts()["x"].indices, 2, 10**6))),
    "csr negative index": ("tx", lambda: _csr("tx", indices=_bumped(_parts()["tx"].indices, 0, -7))),
    "csr indices uint64 huge": ("allx", lambda: _csr("allx", indices=_bumped(_parts()["allx"].indices, 1, 0)
                                                    .astype(np.uint64) + np.uint64(2**63 + 5))),
    "csr float indices": ("allx", lambda: _csr("allx", indices=_parts()["allx"].indices.astype(np.float64))),
    "csr float indptr": ("allx", lambda: _csr("allx", indptr=_parts()["allx"].indptr.astype(np.float32))),
    "csr string data": ("tx", lambda: _csr("tx", data=np.array(["a"] * _parts()["tx"].nnz))),
    "csr complex data": ("tx", lambda: _csr("tx", data=_parts()["tx"].data.astype(np.complex64))),
    "csr indices and data differ in length": ("allx", lambda: _csr("allx", data=_parts()["allx"].data[:-4])),
    "csr negative shape": ("tx", lambda: _csr("tx", _shape=(-1, 30))),
    "csr shape 2^70": ("allx", lambda: _csr("allx", _shape=(2**70, 30))),
    "csr shape of 3 numbers": ("allx", lambda: _csr("allx", _shape=(574, 30, 1))),
    "csr shape of floats": ("allx", lambda: _csr("allx", _shape=(574.0, 30.0))),
    "csr without shape": ("allx", lambda: _Crafted(sp.csr_matrix, {"indptr": np.zeros(3, np.int32)})),
    "csr indptr a list": ("allx", lambda: _csr("allx", indptr=[0, 1, 2])),
    "csr state a list": ("allx", lambda: _Crafted(sp.csr_matrix, [1, 2, 3])),
    "csr columns 10^12 (dense 10^16 bytes)": ("tx", lambda: _csr("tx", _shape=(90, 10**12))),
    "csc indptr beyond indices": ("allx", lambda: _csc("allx", indptr=_decreasing(_parts()["allx"].tocsc().indptr))),
    "csc index beyond rows": ("x", lambda: _csc("x", indices=_bumped(_parts()["x"].tocsc().indices, 0, 10**7))),
    "coo row beyond rows": ("tx", lambda: _coo("tx", coords=(_bumped(_parts()["tx"].tocoo().row, 4, 10**8),
                                                             _parts()["tx"].tocoo().col))),
    "coo negative col": ("x", lambda: _coo("x", coords=(_parts()["x"].tocoo().row,
                                                        _bumped(_parts()["x"].tocoo().col, 0, -1)))),
    "coo lengths differ": ("allx", lambda: _coo("allx", data=_parts()["allx"].tocoo().data[:-1])),
    "coo one coordinate array": ("allx", lambda: _coo("allx", coords=(_parts()["allx"].tocoo().row,))),
    "coo old-style row beyond rows": ("allx", lambda: _coo("allx", old_style=True,
                                                           row=_bumped(_parts()["allx"].tocoo().row, 0, 10**6))),
    "coo old-style col missing": ("allx", lambda: _coo("allx", old_style=True, col=None)),
    "coo 10^12 x 10^12, no entries": ("allx", lambda: _Crafted(sp.coo_matrix, {
        "_shape": (10**12, 10**12), "coords": (np.zeros(0, np.int32), np.zeros(0, np.int32)),
        "data": np.zeros(0, np.float32)})),
    "object indptr": ("allx", lambda: _csr("allx", indptr=np.array([0, "a"], dtype=object))),
}


@pytest.mark.parametrize("case", list(SPARSE_CASES))
def test_crafted_sparse_matrices_are_one_line_errors(tmp_path, capsys, case):
    part, make = SPARSE_CASES[case]
    folder = _planetoid(tmp_path, part, make())
    name = f"ind.cora.{part}"
    _one_line_error(capsys, ["train", str(folder), "--format", "planetoid", *TRAIN], "train", name)
    out = tmp_path / "out"
    _one_line_error(capsys, ["prepare", str(folder), str(out), "--format", "planetoid", "--quiet"], "prepare", name)
    assert not out.exists()


def test_the_checks_keep_good_sparse_matrices_of_every_kind(tmp_path):
    from mggcn.data.formats.planetoid import read_planetoid

    base = read_planetoid(_planetoid(tmp_path / "a"))
    parts = _parts()
    crafted = {"x": _csc("x"), "tx": _coo("tx"), "allx": _coo("allx", old_style=True)}
    other = read_planetoid(_planetoid(tmp_path / "b", **crafted))
    np.testing.assert_array_equal(base.x, other.x)
    np.testing.assert_array_equal(base.edge_index, other.edge_index)
    assert parts["allx"].shape[0] == 574


@pytest.mark.parametrize("case", ["csc indptr beyond indices", "coo row beyond rows", "csr index beyond columns"])
def test_crafted_sparse_matrices_do_not_crash_a_real_process(tmp_path, case):
    """The cases that crashed the interpreter with a segmentation fault, in a process of their own."""
    part, make = SPARSE_CASES[case]
    folder = _planetoid(tmp_path, part, make())
    for argv in (["train", str(folder), "--format", "planetoid", *TRAIN],
                 ["prepare", str(folder), str(tmp_path / "out"), "--format", "planetoid", "--quiet"]):
        result = subprocess.run([sys.executable, "-m", "mggcn", *argv], capture_output=True, text=True, timeout=300,
                                env=dict(os.environ, PYTHONFAULTHANDLER="1"))
        assert result.returncode == 2, (result.returncode, result.stderr)
        lines = result.stderr.strip("\n").split("\n")
        assert len(lines) == 1 and lines[0].startswith(f"mggcn {argv[0]}: error: "), result.stderr
        assert f"ind.cora.{part}" in lines[0]
    assert not (tmp_path / "out").exists()


def test_an_array_placeholder_that_would_allocate_is_refused(tmp_path, capsys):
    import pickle

    class Placeholder:
        def __reduce__(self):
            reconstruct = np.ndarray.__reduce__(np.empty(0))[0]  # numpy._core's (numpy 2) or numpy.core's (1)
            return reconstruct, (np.ndarray, (10**12,), b"b")

    folder = _planetoid(tmp_path)
    (folder / "ind.cora.ally").write_bytes(pickle.dumps(Placeholder(), protocol=2))
    line = _one_line_error(capsys, ["train", str(folder), "--format", "planetoid", *TRAIN], "train", "ind.cora.ally")
    assert "refused" in line


# ---------------------------------------------------------------------------------------- Planetoid graph dicts


def _graph_case(change):
    def make():
        graph = _parts()["graph"]
        change(graph)
        return graph
    return make


GRAPH_CASES = {
    "key 2^70": _graph_case(lambda g: g.update({2**70: [1, 2]})),
    "neighbour 2^70": _graph_case(lambda g: g[3].append(2**70)),
    "key -1": _graph_case(lambda g: g.update({-1: [1]})),
    "neighbour -2^70": _graph_case(lambda g: g[3].append(-(2**70))),
    "neighbour -1": _graph_case(lambda g: g[5].append(-1)),
    "key 1.5": _graph_case(lambda g: g.update({1.5: [1]})),
    "neighbour 2.0": _graph_case(lambda g: g[4].append(2.0)),
    "neighbour a string": _graph_case(lambda g: g[4].append("7")),
    "neighbours a string": _graph_case(lambda g: g.update({4: "123"})),
    "neighbours an int": _graph_case(lambda g: g.update({4: 7})),
    "key True": _graph_case(lambda g: (g.pop(1, None), g.update({True: [2]}))),  # not 1 with another value
    "neighbour None": _graph_case(lambda g: g[6].append(None)),
    "neighbour a nested list": _graph_case(lambda g: g[6].append([1, 2])),
    "neighbour a sparse matrix": _graph_case(lambda g: g[6].append(_csr("x"))),
}


@pytest.mark.parametrize("case", list(GRAPH_CASES))
def test_graph_dicts_with_bad_ids_are_one_line_errors(tmp_path, capsys, case):
    folder = _planetoid(tmp_path, "graph", GRAPH_CASES[case]())
    _one_line_error(capsys, ["train", str(folder), "--format", "planetoid", *TRAIN], "train", "ind.cora.graph")
    out = tmp_path / "out"
    _one_line_error(capsys, ["prepare", str(folder), str(out), "--format", "planetoid", "--quiet"], "prepare",
                    "ind.cora.graph")
    assert not out.exists()


@pytest.mark.parametrize("line", ["1180591620717411303424", "-3", "3037000499", "100000000000"])
def test_test_index_ids_beyond_memory_or_int64_are_one_line_errors(tmp_path, capsys, line):
    folder = _planetoid(tmp_path)
    with open(folder / "ind.cora.test.index", "a") as f:
        f.write(line + "\n")
    _one_line_error(capsys, ["train", str(folder), "--format", "planetoid", *TRAIN], "train", "ind.cora.test.index")


# ------------------------------------------------------------------------------------------ graphs without edges


def _vertex_files(tmp: Path) -> list[str]:
    rng = np.random.default_rng(0)
    np.save(tmp / "x.npy", rng.standard_normal((N, F)).astype(np.float32))
    np.save(tmp / "y.npy", np.arange(N) % C)
    np.save(tmp / "split.npy", np.repeat([0, 1, 2], N // 3))
    return ["--features", str(tmp / "x.npy"), "--labels", str(tmp / "y.npy"), "--split", str(tmp / "split.npy")]


def test_an_empty_edge_list_trains_prepares_and_describes(tmp_path, capsys):
    (tmp_path / "g.txt").write_text("")
    vertex = _vertex_files(tmp_path)
    assert main(["train", str(tmp_path / "g.txt"), "--format", "edgelist", *vertex, *TRAIN]) == 0
    out = tmp_path / "prep"
    assert main(["prepare", str(tmp_path / "g.txt"), str(out), "--format", "edgelist", *vertex, "--quiet"]) == 0
    assert main(["train", str(out), *TRAIN]) == 0
    assert main(["info", str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "edges       0" in text and "in-degree   min 0  mean 0.00  max 0" in text


def test_a_mggcn_bin_graph_without_edges_trains(tmp_path):
    root = tmp_path / "mgbin"
    root.mkdir()
    rng = np.random.default_rng(1)
    with open(root / "graph.bin", "wb") as f:  # N vertices, no edge: the offsets are all zero
        f.write(b"PIGO-CSR-v2" + bytes([4, 4]) + struct.pack("<IIII", N, 0, N, N))
        f.write(np.zeros(N + 1, "<u4").tobytes())
    for name, arr in (("features.bin", rng.standard_normal((N, F)).astype("<f4")),
                      ("labels.bin", (np.arange(N) % C).astype("<i4")[:, None]),
                      ("sets.bin", np.repeat([0, 1, 2], N // 3).astype("<i4")[:, None])):
        with open(root / name, "wb") as f:
            f.write(np.array(arr.shape, "<u4").tobytes() + arr.tobytes())
    assert main(["train", str(root), "--format", "mggcn-bin", *TRAIN]) == 0


def test_the_fingerprint_of_an_empty_graph(tmp_path):
    """A graph without edges has a fingerprint, that of its prepared directory (whose arrays of edges are empty)."""
    from mggcn.data.datasets import InMemoryDataset
    from mggcn.data.graph import Graph
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.data.prepared.writer import prepare

    masks = {s: np.arange(N) % 3 == k for k, s in enumerate(("train", "val", "test"))}
    graph = Graph(num_nodes=N, edge_index=np.zeros((2, 0), np.int64), x=np.ones((N, F), np.float32),
                  y=np.arange(N) % C, masks=masks, num_classes=C)
    fingerprint = InMemoryDataset(graph).fingerprint
    assert len(fingerprint) == 16
    assert PreparedDataset(prepare(graph, tmp_path / "p", progress=False)).fingerprint == fingerprint


# --------------------------------------------------------------------------------- generated specs too large


@pytest.mark.parametrize("spec, named", [
    ("synthetic:n=100000000000", "n = 100,000,000,000"),
    ("synthetic:n=3037000500", "int64 edge keys"),
    ("synthetic:n=1000000,features=100000000", "too large for this machine (n, features, degree)"),
    ("synthetic:n=100000,degree=1000000000", "GiB, more than its"),
    ("synthetic:degree=inf", "degree must be a number in (0.0, inf)"),
    ("synthetic:noise=inf", "noise must be a number in [0.0, inf)"),
    ("rmat:scale=30,features=1000", "too large for this machine (scale, edge_factor, features)"),
    ("rmat:scale=20,edge_factor=100000000000", "GiB, more than its"),
])
def test_generated_specs_too_large_are_refused_before_allocating(capsys, spec, named):
    line = _one_line_error(capsys, ["train", spec, *TRAIN], "train", spec)
    assert named in line


@pytest.mark.parametrize("spec", ["synthetic:n=100000000000", "rmat:scale=40"])
def test_streamed_specs_too_large_are_refused(tmp_path, capsys, spec):
    out = tmp_path / "out"
    line = _one_line_error(capsys, ["prepare", spec, str(out), "--quiet"], "prepare", spec)
    assert "per-vertex arrays" in line
    assert not out.exists()


def test_a_huge_spec_does_not_crash_a_real_process():
    result = subprocess.run([sys.executable, "-m", "mggcn", "train", "synthetic:n=100000000000", *TRAIN],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("mggcn train: error: synthetic:n=")


# ------------------------------------------------------------------------------- mggcn info: decreasing offsets


def _prepared(tmp: Path) -> Path:
    from mggcn.data.formats import read
    from mggcn.data.prepared.writer import prepare

    rng = np.random.default_rng(3)
    ei = rng.integers(0, N, size=(2, 4 * N))
    (tmp / "g.txt").write_text("".join(f"{s} {d}\n" for s, d in ei.T))
    _vertex_files(tmp)
    graph = read(tmp / "g.txt", "edgelist", features=tmp / "x.npy", labels=tmp / "y.npy", split=tmp / "split.npy")
    return prepare(graph, tmp / "prep", progress=False)


@pytest.mark.parametrize("array", ["in_indptr", "out_indptr"])
def test_info_refuses_row_offsets_that_decrease(tmp_path, capsys, array):
    root = _prepared(tmp_path)
    path = root / f"{array}.npy"
    indptr = np.load(path)
    indptr[5], indptr[6] = indptr[6] + 14, indptr[6]  # vertex 5 would have in-degree -14
    np.save(path, indptr)
    line = _one_line_error(capsys, ["info", str(root)], "info", f"{array}.npy")
    assert "decrease at vertex 5" in line
    assert main(["train", str(root), *TRAIN]) == 2  # training refuses it too (the rank's shard checks)
    assert capsys.readouterr().err.count("\n") == 1
