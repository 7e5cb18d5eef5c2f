"""Real-world file quirks, read correctly: each file here is laid out the way a real publisher or a user's tool
writes it (GraphSAINT's own ogbn converter, DGL's self-loop Reddit zip, bzip2/xz-compressed or renamed text files,
spreadsheet CSVs with ``;``, Matrix Market variants, SNAP/CSV edge lists with CRLF, tabs, weights and comments),
and what is read must equal the graph the file holds: vertex count, edges, features, labels and splits.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from mggcn.data.formats import iter_edgelist_chunks, read_dgl_reddit, read_edgelist, read_mtx, read_saint
from mggcn.tools.cli import main

TRAIN = ["--epochs", "2", "--hidden", "4", "--quiet"]
TRIANGLE = np.array([[0, 1, 2], [1, 2, 0]])  # the edges every small text file below holds


def _edges(g) -> set[tuple[int, int]]:
    return set(map(tuple, g.edge_index.T.tolist()))


def _streamed(path: Path) -> np.ndarray:
    return np.concatenate(list(iter_edgelist_chunks(path, chunk_edges=2)), axis=1)


def _vertex_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, list[int]]]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    y = rng.integers(0, 3, n)
    perm = rng.permutation(n).tolist()
    return x, y, {"tr": sorted(perm[: n // 2]), "va": sorted(perm[n // 2: 3 * n // 4]),
                  "te": sorted(perm[3 * n // 4:])}


# ------------------------------------------------------------------------------------------------- GraphSAINT


def test_graphsaint_converter_files_with_a_bool_adjacency(tmp_path, capsys):
    """GraphSAINT's data/open_graph_benchmark/ogbn_converter.py (its ogbn-products and ogbn-arxiv files) builds
    adj_full as ``coo_matrix((np.ones(E, dtype=np.bool), ...)).tocsr()``: bool entries, each one an edge. They were
    refused as "not a vector of numbers"."""
    n = 12
    rng = np.random.default_rng(1)
    row, col = rng.integers(0, n, 30), rng.integers(0, n, 30)
    x, y, role = _vertex_data(n)
    root = tmp_path / "ogbn-arxiv"
    root.mkdir()
    adj = sp.coo_matrix((np.ones(row.shape[0], dtype=bool), (row, col)), shape=(n, n)).tocsr()
    sp.save_npz(root / "adj_full.npz", adj)
    np.save(root / "feats.npy", x)
    (root / "class_map.json").write_text(json.dumps({str(i): int(y[i]) for i in range(n)}))
    (root / "role.json").write_text(json.dumps(role))
    g = read_saint(root)
    assert g.num_nodes == n and _edges(g) == set(zip(row.tolist(), col.tolist()))
    assert g.num_edges == adj.nnz  # a pair given twice is one True entry: one edge
    np.testing.assert_array_equal(g.x, x)
    np.testing.assert_array_equal(g.y, y)
    for split, key in (("train", "tr"), ("val", "va"), ("test", "te")):
        assert np.flatnonzero(g.masks[split]).tolist() == role[key]
    assert main(["train", str(root), "--format", "saint", *TRAIN]) == 0, capsys.readouterr().err


# -------------------------------------------------------------------------------------------------- DGL Reddit


def test_dgl_reddit_self_loop_zip_layout(tmp_path):
    """DGL's ``RedditDataset(self_loop=True)`` extracts reddit_self_loop.zip: ``reddit_data.npz`` beside
    ``reddit_self_loop_graph.npz`` (no ``reddit_graph.npz``). It was refused as a missing file."""
    n = 8
    x, y, _ = _vertex_data(n)
    root = tmp_path / "reddit_self_loop"
    root.mkdir()
    types = np.array([1, 1, 1, 1, 2, 2, 3, 3])
    np.savez(root / "reddit_data.npz", feature=x, label=y, node_types=types, node_ids=np.arange(n))
    ring = np.arange(n)
    row = np.concatenate([ring, ring, ring])
    col = np.concatenate([(ring + 1) % n, (ring - 1) % n, ring])  # a ring both ways, and a loop on every vertex
    sp.save_npz(root / "reddit_self_loop_graph.npz", sp.coo_matrix((np.ones(3 * n), (row, col)), shape=(n, n)))
    g = read_dgl_reddit(root)
    assert g.num_nodes == n and _edges(g) == set(zip(row.tolist(), col.tolist())) and g.num_edges == 3 * n
    np.testing.assert_array_equal(g.y, y)
    assert [int(g.masks[s].sum()) for s in ("train", "val", "test")] == [4, 2, 2]


# ------------------------------------------------------------------------------- compressed and renamed files


def _compressed(kind: str, data: bytes) -> bytes:
    return {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}[kind](data)


@pytest.mark.parametrize("kind", ["gzip", "bzip2", "xz"])
@pytest.mark.parametrize("name", ["edges.txt", "edges.txt.{ext}"], ids=["renamed", "suffixed"])
def test_compressed_edge_lists_are_read_by_content(tmp_path, capsys, kind, name):
    """A bzip2 or xz edge list was read as text: its bytes made a header line and unparsable lines, or, with the
    vertex count given, no edges at all (a graph of isolated vertices, silently)."""
    path = tmp_path / name.format(ext={"gzip": "gz", "bzip2": "bz2", "xz": "xz"}[kind])
    for text in (b"# c\n0 1\n1 2\n2 0\n", b"# SNAP-style\n# FromNodeId\tToNodeId\n0\t1\n1\t2\n2\t0\n"):
        path.write_bytes(_compressed(kind, text))
        g = read_edgelist(path, num_nodes=3)
        np.testing.assert_array_equal(g.edge_index, TRIANGLE)
        np.testing.assert_array_equal(_streamed(path), TRIANGLE)
    out = tmp_path / "prepared"
    assert main(["prepare", str(path), str(out), "--format", "edgelist", "--quiet"]) == 0, capsys.readouterr().err
    assert json.loads((out / "manifest.json").read_text())["num_edges"] == 3


@pytest.mark.parametrize("kind", ["gzip", "bzip2", "xz"])
def test_compressed_matrix_market_files_are_read_by_content(tmp_path, kind):
    """scipy picks the decompressor by the suffix (.gz, .bz2 only): a renamed file, or an .xz one, was refused as
    "missing banner", and a plain file under a .gz name as not gzipped."""
    text = b"%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 2\n2 3\n3 1\n"
    for name, data in (("g.mtx", _compressed(kind, text)), (f"g.mtx.{kind}", _compressed(kind, text)),
                       (f"plain.mtx.{kind}", text)):
        path = tmp_path / name
        path.write_bytes(data)
        g = read_mtx(path)
        assert g.num_nodes == 3 and _edges(g) == {(0, 1), (1, 2), (2, 0)} and g.num_edges == 3


@pytest.mark.parametrize("command", ["train", "prepare"])
@pytest.mark.parametrize("fmt", ["edgelist", "mtx"])
def test_a_corrupt_xz_file_is_one_line(tmp_path, capsys, command, fmt):
    """A damaged xz stream raises lzma.LZMAError, no OSError: it too is a one-line error naming the file."""
    body = b"%%MatrixMarket matrix coordinate pattern general\n3 3 3\n" if fmt == "mtx" else b""
    data = bytearray(lzma.compress(body + b"1 2\n2 3\n3 1\n" * 500))
    data[40] ^= 0xFF
    path = tmp_path / "graph.xz"
    path.write_bytes(bytes(data))
    argv = [command, str(path), *([str(tmp_path / "out")] if command == "prepare" else []), "--format", fmt,
            "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err, err


@pytest.mark.parametrize("command", ["train", "prepare"])
@pytest.mark.parametrize("fmt", ["edgelist", "mtx"])
def test_a_zip_archive_is_named_as_one(tmp_path, capsys, command, fmt):
    """Network Repository and others ship an .mtx or edge list inside a .zip; given the zip, the error said a line
    of binary could not be parsed, or "missing banner", not what the file is."""
    path = tmp_path / "graph.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("graph.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 2\n2 3\n3 1\n")
    argv = [command, str(path), *([str(tmp_path / "out")] if command == "prepare" else []), "--format", fmt,
            "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "zip archive" in err and "Traceback" not in err, err


# ----------------------------------------------------------------------------------------------- edge lists


def test_semicolon_csv_with_decimal_comma_weights(tmp_path, capsys):
    """Spreadsheets where ``,`` is the decimal mark save CSV with ``;``: the first data line was taken for a header
    (its one token ``0;1`` is no number) and the next line refused."""
    path = tmp_path / "edges.csv"
    path.write_bytes(b"source;target;weight\r\n0;1;0,5\r\n1;2;1,25\r\n2;0;3\r\n")
    np.testing.assert_array_equal(read_edgelist(path).edge_index, TRIANGLE)
    np.testing.assert_array_equal(_streamed(path), TRIANGLE)
    path.write_bytes(b"0;1\n1;2\n2;0\n")  # no header: the first line is an edge
    np.testing.assert_array_equal(read_edgelist(path).edge_index, TRIANGLE)
    assert main(["train", str(path), "--format", "edgelist", *TRAIN]) == 0, capsys.readouterr().err


QUIRKS = {
    "tabs": "0\t1\n1\t2\n2\t0\n",
    "crlf": "0 1\r\n1 2\r\n2 0\r\n",
    "cr only": "0 1\r1 2\r2 0\r",
    "no final newline": "0 1\n1 2\n2 0",
    "trailing whitespace": "0 1 \t\n1\t2\t\n 2  0  \n",
    "weight column": "0 1 0.5\n1 2 1e-3\n2 0 3\n",
    "csv weight, header, crlf": "src,dst,weight\r\n0,1,0.5\r\n1, 2,1\r\n2,0,2\r\n",
    "csv trailing comma": "0,1,\n1,2,\n2,0,\n",
    "comments and blank lines": "# c\n% konect\n\n0 1\n\n1 2 # trailing\n2 0 % trailing\n\n",
    "header after comments": "% c\nFromNodeId\tToNodeId\n0\t1\n1\t2\n2\t0\n",
    "byte order mark, crlf": "\ufeff0 1\r\n1 2\r\n2 0\r\n",
}


@pytest.mark.parametrize("text", QUIRKS.values(), ids=QUIRKS.keys())
def test_edge_list_quirks_read_and_stream_the_same_edges(tmp_path, text):
    path = tmp_path / "edges.txt"
    path.write_bytes(text.encode())
    g = read_edgelist(path)
    assert g.num_nodes == 3
    np.testing.assert_array_equal(g.edge_index, TRIANGLE)
    np.testing.assert_array_equal(_streamed(path), TRIANGLE)


def test_duplicates_and_self_loops_are_kept_as_given(tmp_path):
    path = tmp_path / "edges.txt"
    path.write_text("0 1\n0 1\n2 2\n1 0\n")
    assert read_edgelist(path).edge_index.tolist() == [[0, 0, 2, 1], [1, 1, 2, 0]]


# ------------------------------------------------------------------------------------------------ Matrix Market

_BANNER = "%%MatrixMarket matrix coordinate "
MTX = {  # body, the edges it holds (0-based, row -> column)
    "pattern general, comments, blank lines": (
        _BANNER + "pattern general\n% c\n%\n\n3 3 3\n\n1 2\n2 3\n3 1\n", [(0, 1), (1, 2), (2, 0)]),
    "real general, crlf, a zero entry": (
        _BANNER + "real general\r\n% c\r\n3 3 3\r\n1 2 0.5\r\n2 3 -2e3\r\n3 1 0\r\n", [(0, 1), (1, 2)]),
    "integer symmetric, diagonal once": (
        _BANNER + "integer symmetric\n3 3 2\n2 1 7\n3 3 1\n", [(0, 1), (1, 0), (2, 2)]),
    "real skew-symmetric": (_BANNER + "real skew-symmetric\n3 3 1\n3 1 -4\n", [(0, 2), (2, 0)]),
    "complex hermitian": (_BANNER + "complex hermitian\n3 3 2\n2 1 1 1\n3 3 4 0\n", [(0, 1), (1, 0), (2, 2)]),
    "mixed-case banner, tabs, trailing spaces": (
        "%%MatrixMarket Matrix Coordinate Pattern General  \n3 3 3 \n1\t2\n 2 3\t\n3 1", [(0, 1), (1, 2), (2, 0)]),
    "duplicate entries": (_BANNER + "pattern general\n3 3 3\n1 2\n1 2\n3 1\n", [(0, 1), (0, 1), (2, 0)]),
}


@pytest.mark.parametrize("body, edges", MTX.values(), ids=MTX.keys())
def test_matrix_market_variants(tmp_path, body, edges):
    path = tmp_path / "g.mtx"
    path.write_bytes(body.encode())
    g = read_mtx(path)
    assert g.num_nodes == 3
    assert sorted(map(tuple, g.edge_index.T.tolist())) == sorted(edges)


def test_text_that_begins_like_a_compressed_file_is_read_as_text(tmp_path):
    """Only a whole magic number makes a file compressed: a header that happens to begin with bzip2's "BZh9" or
    zip's "PK" is a header."""
    for header in ("BZh9 target", "PK source"):
        path = tmp_path / "edges.txt"
        path.write_text(f"{header}\n0 1\n1 2\n2 0\n")
        np.testing.assert_array_equal(read_edgelist(path).edge_index, TRIANGLE)
        np.testing.assert_array_equal(_streamed(path), TRIANGLE)
