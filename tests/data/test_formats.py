"""Tests for mggcn.data.formats: each reader on a small graph written in the format's real on-disk layout.

Every dataset here is one 40-vertex directed graph (with a duplicate edge and a self-loop, which readers must keep),
written by hand the way OGB / GraphSAINT / DGL / Matrix Market / MG-GCN write it, read back and compared
array-for-array. The bad-input tests damage one file and check the error names THAT file.
"""

from __future__ import annotations

import gzip
import json
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch

from mggcn.data.formats import (
    FORMATS,
    from_pyg,
    from_tensors,
    read,
    read_dgl_reddit,
    read_edgelist,
    read_mggcn_bin,
    read_mtx,
    read_ogb,
    read_saint,
    sparse,
    transform,
    write_mggcn_bin,
)
from mggcn.data.graph import SPLITS, Graph
from mggcn.utils.errors import GraphError

N, F, C = 40, 5, 3


@pytest.fixture
def src() -> Graph:
    """The reference graph: vertices 36..39 are unlabelled and in no split."""
    rng = np.random.default_rng(7)
    ei = rng.integers(0, N, size=(2, 120))
    ei = np.concatenate([ei, [[3, 3, 9], [4, 4, 9]]], axis=1)  # a duplicate 3->4 and a self-loop 9->9
    x = rng.standard_normal((N, F)).astype(np.float32)
    y = rng.integers(0, C, N)
    y[36:] = -1
    masks = {name: np.zeros(N, dtype=bool) for name in SPLITS}
    masks["train"][:20], masks["val"][20:28], masks["test"][28:36] = True, True, True
    return Graph(N, ei, x, y, masks, num_classes=C, name="src").validate()


def sorted_edges(ei: np.ndarray) -> np.ndarray:
    return ei[:, np.lexsort((ei[1], ei[0]))]


def assert_same(g: Graph, ref: Graph, *, edges: bool = True, labels: bool = True) -> None:
    assert g.num_nodes == ref.num_nodes
    if edges:
        np.testing.assert_array_equal(sorted_edges(g.edge_index), sorted_edges(ref.edge_index))
    np.testing.assert_array_equal(g.x, ref.x)  # exact: every writer below round-trips float32 exactly
    if labels:
        np.testing.assert_array_equal(g.y, ref.y)
        for name in SPLITS:
            np.testing.assert_array_equal(g.masks[name], ref.masks[name], err_msg=name)
    assert g.edge_index.dtype == np.int64 and g.x.dtype == np.float32 and g.y.dtype == np.int64


def raises_naming(path: Path, *words: str):
    """Context: a GraphError whose single-line message names ``path`` and contains ``words``."""

    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(GraphError)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            swallowed = self.ctx.__exit__(*exc)
            msg = str(self.info.value)
            assert "\n" not in msg, msg
            assert str(path) in msg, msg
            for w in words:
                assert w in msg, msg
            return swallowed

    return _Check()


# ---------------------------------------------------------------------------------------------------------- OGB


def gz_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(line + "\n" for line in lines))


def write_ogb_csv(root: Path, g: Graph, split_name: str = "sales_ranking") -> Path:
    raw = root / "raw"
    gz_lines(raw / "edge.csv.gz", [f"{s},{d}" for s, d in g.edge_index.T])
    gz_lines(raw / "num-node-list.csv.gz", [str(g.num_nodes)])
    gz_lines(raw / "node-feat.csv.gz", [",".join(f"{v:.9g}" for v in row) for row in g.x])
    gz_lines(raw / "node-label.csv.gz", ["nan" if v < 0 else str(v) for v in g.y])
    for name, fname in (("train", "train"), ("val", "valid"), ("test", "test")):
        gz_lines(root / "split" / split_name / f"{fname}.csv.gz", [str(v) for v in np.flatnonzero(g.masks[name])])
    return root


def write_ogb_npz(root: Path, g: Graph) -> Path:
    raw = root / "raw"
    raw.mkdir(parents=True)
    np.savez_compressed(raw / "data.npz", edge_index=g.edge_index, edge_feat=None, node_feat=g.x,
                        num_nodes_list=np.array([g.num_nodes]), num_edges_list=np.array([g.num_edges]))
    label = np.where(g.y < 0, np.nan, g.y).astype(np.float32)[:, None]
    np.savez_compressed(raw / "node-label.npz", node_label=label)
    for name, fname in (("train", "train"), ("val", "valid"), ("test", "test")):
        gz_lines(root / "split" / "time" / f"{fname}.csv.gz", [str(v) for v in np.flatnonzero(g.masks[name])])
    return root


def test_ogb_csv(tmp_path, src):
    root = write_ogb_csv(tmp_path / "ogbn_products", src)
    g = read_ogb(root)
    assert_same(g, src)
    np.testing.assert_array_equal(g.edge_index, src.edge_index)  # kept exactly as stored: directed, in file order
    assert g.meta["split"] == "sales_ranking"
    assert_same(read(root, "ogb"), src)


def test_ogb_binary(tmp_path, src):
    assert_same(read_ogb(write_ogb_npz(tmp_path / "ogbn_papers100M", src)), src)


def test_ogb_split_choice(tmp_path, src, capsys):
    root = write_ogb_csv(tmp_path / "d", src, "a")
    write_ogb_csv(tmp_path / "d", src, "b")
    with raises_naming(root / "split", "found ['a', 'b']; give its name (split=NAME)"):
        read_ogb(root)
    assert_same(read_ogb(root, split="b"), src)
    with raises_naming(root / "split", "split '../d' is not the name of a split scheme directory in it"):
        read_ogb(root, split="../d")
    # on the command line too: --split names the scheme of an OGB directory
    from mggcn.tools.cli import main

    out = tmp_path / "p"
    assert main(["train", str(root), "--format", "ogb", "--epochs", "1"]) == 2  # the flag, once
    assert capsys.readouterr().err.endswith("found ['a', 'b']; give its name (--split NAME)\n")
    assert main(["prepare", str(root), str(out), "--format", "ogb", "--split", "b", "--quiet"]) == 0
    assert main(["train", str(root), "--format", "ogb", "--split", "a", "--epochs", "1", "--quiet"]) == 0


def _rewrite(path: Path, edit) -> None:
    with gzip.open(path, "rt") as f:
        lines = f.read().splitlines()
    gz_lines(path, edit(lines))


def _set(i: int, text: str):
    return lambda lines: lines[:i] + [text] + lines[i + 1:]


@pytest.mark.parametrize("target, edit, words", [
    ("raw/edge.csv.gz", _set(2, "3,x"), ["line 3", "'x'"]),
    ("raw/edge.csv.gz", _set(4, "1,2,3"), ["line 5", "expected 2"]),
    ("raw/edge.csv.gz", _set(6, "1,40"), ["line 7", "40", "out of range"]),
    ("raw/edge.csv.gz", _set(0, "-1,2"), ["line 1", "-1"]),
    ("raw/num-node-list.csv.gz", lambda lines: ["40", "40"], ["one line"]),
    ("raw/node-feat.csv.gz", lambda lines: lines[:-1], ["39 feature rows", "40 vertices"]),
    ("raw/node-feat.csv.gz", _set(11, "1,2,nan,4,5"), ["NaN", "row 11"]),
    ("raw/node-feat.csv.gz", _set(11, "1,2,3"), ["line 12", "expected 5"]),
    ("raw/node-label.csv.gz", _set(3, "-2"), ["label -2", "negative"]),
    ("raw/node-label.csv.gz", _set(3, "1.5"), ["not an integer"]),
    ("raw/node-label.csv.gz", lambda lines: lines[:-2], ["38 labels"]),
    ("raw/node-label.csv.gz", _set(5, "nan"), ["train.csv.gz", "vertex 5", "no label"]),  # named: the split file
    ("split/s/valid.csv.gz", lambda lines: lines + ["30"], ["valid.csv.gz", "test.csv.gz", "overlap", "30"]),
    ("split/s/train.csv.gz", lambda lines: [], ["training split is empty"]),
    ("split/s/test.csv.gz", _set(1, "77"), ["line 2", "77", "out of range"]),
])
def test_ogb_bad_input(tmp_path, src, target, edit, words):
    root = write_ogb_csv(tmp_path / "ogbn_x", src, "s")
    _rewrite(root / target, edit)
    # An unlabelled split vertex is the split file's fault; every other error names the file we damaged.
    named = root / ("split/s/train.csv.gz" if "no label" in words else target)
    if "overlap" in words:
        named = root / "split/s/valid.csv.gz"
    with raises_naming(named, *words):
        read_ogb(root)


def test_ogb_missing_and_truncated(tmp_path, src):
    root = write_ogb_csv(tmp_path / "ogbn_x", src)
    (root / "raw/node-feat.csv.gz").unlink()
    with raises_naming(root / "raw/node-feat.csv.gz", "missing file"):
        read_ogb(root)
    root = write_ogb_csv(tmp_path / "ogbn_y", src)
    edge = root / "raw/edge.csv.gz"
    edge.write_bytes(edge.read_bytes()[:-30])
    with raises_naming(edge, "truncated or corrupt"):
        read_ogb(root)
    with raises_naming(tmp_path, "no raw/"):
        read_ogb(tmp_path)


def test_ogb_binary_bad_input(tmp_path, src):
    root = write_ogb_npz(tmp_path / "a", src)
    labels = root / "raw/node-label.npz"
    label = np.full((N, 1), np.nan, dtype=np.float32)
    label[:36, 0] = src.y[:36]
    label[12, 0] = np.nan  # a training vertex without a label
    np.savez(labels, node_label=label)
    with raises_naming(root / "split/time/train.csv.gz", "vertex 12", "node-label.npz"):
        read_ogb(root)
    data = root / "raw/data.npz"
    data.write_bytes(data.read_bytes()[:100])
    with raises_naming(data, "truncated or corrupt"):
        read_ogb(root)
    root = write_ogb_npz(tmp_path / "b", src)
    np.savez(root / "raw/data.npz", edge_index=np.array([[0, 1], [2, 45]]), node_feat=src.x,
             num_nodes_list=np.array([N]))
    with raises_naming(root / "raw/data.npz", "edge_index[:, 1]", "45"):
        read_ogb(root)


# --------------------------------------------------------------------------------------------------- GraphSAINT


def write_saint(root: Path, g: Graph) -> Path:
    root.mkdir(parents=True)
    # GraphSAINT stores a 0/1 CSR; a duplicate edge collapses to one entry, so write the deduplicated graph.
    ei = transform(g, dedup=True).edge_index
    adj = sp.csr_matrix((np.ones(ei.shape[1], dtype=np.float32), (ei[0], ei[1])), shape=(g.num_nodes,) * 2)
    sp.save_npz(root / "adj_full.npz", adj)
    np.save(root / "feats.npy", g.x)
    (root / "class_map.json").write_text(json.dumps({str(v): int(c) for v, c in enumerate(g.y) if c >= 0}))
    role = {key: np.flatnonzero(g.masks[name]).tolist() for key, name in zip(("tr", "va", "te"), SPLITS)}
    (root / "role.json").write_text(json.dumps(role))
    return root


def test_saint(tmp_path, src):
    g = read_saint(write_saint(tmp_path / "flickr", src))
    assert_same(g, transform(src, dedup=True))


def test_saint_bad_input(tmp_path, src):
    root = write_saint(tmp_path / "s", src)
    cm = root / "class_map.json"
    cm.write_text(json.dumps({"0": [1, 0, 0], "1": 2}))  # lists (multi-label) and classes mixed
    with raises_naming(cm, "multi-label"):
        read_saint(root)
    cm.write_text('{"0": 1,\n "1": }')
    with raises_naming(cm, "line 2", "invalid JSON"):
        read_saint(root)
    cm.write_text(json.dumps({"0": 1, "50": 2}))
    with raises_naming(cm, "50", "out of range"):
        read_saint(root)
    cm.write_text(json.dumps({"0": 1, "1": -3}))
    with raises_naming(cm, "negative"):
        read_saint(root)
    cm.write_text('{"0": 1, "1": 2, "0": 0}')  # json keeps the last: vertex 0's label would be replaced
    with raises_naming(cm, "invalid JSON", "the key '0' appears twice"):
        read_saint(root)

    root = write_saint(tmp_path / "t", src)
    role = root / "role.json"
    role.write_text(json.dumps({"tr": [0, 1], "va": [1]}))
    with raises_naming(role, "'te'"):
        read_saint(root)
    role.write_text('{"tr": [0], "va": [1], "te": [2], "tr": [3]}')
    with raises_naming(role, "the key 'tr' appears twice"):
        read_saint(root)
    role.write_text(json.dumps({"tr": [0, 1], "va": [1], "te": [2]}))
    with raises_naming(role, "'train' and 'val'", "overlap"):
        read_saint(root)
    role.write_text(json.dumps({"tr": [], "va": [1], "te": [2]}))
    with raises_naming(role, "training split is empty"):
        read_saint(root)
    role.write_text(json.dumps({"tr": [0, 37], "va": [1], "te": [2]}))
    with raises_naming(role, "vertex 37", "class_map.json"):
        read_saint(root)
    feats = root / "feats.npy"
    feats.write_bytes(feats.read_bytes()[:-40])
    with raises_naming(feats, "truncated or corrupt"):
        read_saint(root)
    np.save(feats, src.x[:30])
    with raises_naming(feats, "30 feature rows", "40 vertices"):
        read_saint(root)


def test_saint_holds_at_most_the_graph_it_returns_and_the_files_arrays(tmp_path):
    """Reading a GraphSAINT directory (issue 17) holds the graph it returns (int64 edges, features, labels, masks)
    and, while the edges are made, the arrays of ``adj_full.npz``: no int64 copy of the file's indices, no COO matrix,
    no map of ``feats.npy`` beside its copy (the reader before held ~1.6x this on this graph). Python's allocation
    counter (``tracemalloc``, which numpy reports to) measures it; 1 MiB of slack for the JSON files' objects."""
    import tracemalloc

    from reference import random_graph

    graph = random_graph(20_000, 400_000, features=32, classes=8, directed=False, seed=3)
    root = write_saint(tmp_path / "s", graph)
    with np.load(root / "adj_full.npz") as f:
        file_bytes = sum(f[k].nbytes for k in ("indptr", "indices", "data"))
    tracemalloc.start()
    try:
        got = read_saint(root)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    returned = got.edge_index.nbytes + got.x.nbytes + got.y.nbytes + sum(m.nbytes for m in got.masks.values())
    assert kept >= returned
    assert peak <= returned + file_bytes + (1 << 20), (peak / 2**20, returned / 2**20, file_bytes / 2**20)


# --------------------------------------------------------------------------------------------------- DGL Reddit


def write_reddit(root: Path, g: Graph) -> Path:
    root.mkdir(parents=True)
    types = np.zeros(g.num_nodes, dtype=np.int64)
    for code, name in enumerate(SPLITS, 1):
        types[g.masks[name]] = code
    np.savez(root / "reddit_data.npz", feature=g.x, label=g.y, node_ids=np.arange(g.num_nodes), node_types=types)
    ei = g.edge_index
    coo = sp.coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(g.num_nodes,) * 2)
    sp.save_npz(root / "reddit_graph.npz", coo)
    return root


def test_dgl_reddit(tmp_path, src):
    ref = dataclasses_replace_y(src, np.where(src.y < 0, 0, src.y))  # DGL's Reddit labels every vertex
    g = read_dgl_reddit(write_reddit(tmp_path / "reddit", ref))
    assert_same(g, ref)


def dataclasses_replace_y(g: Graph, y: np.ndarray) -> Graph:
    return Graph(g.num_nodes, g.edge_index, g.x, y, g.masks, g.num_classes, g.name)


def test_dgl_reddit_bad_input(tmp_path, src):
    root = write_reddit(tmp_path / "r", src)
    graph = root / "reddit_graph.npz"
    sp.save_npz(graph, sp.coo_matrix((np.ones(1), ([0], [1])), shape=(30, 30)))
    with raises_naming(graph, "30 x 30", "40 vertices"):
        read_dgl_reddit(root)
    graph.write_bytes(b"not a zip")
    with raises_naming(graph, "not a scipy sparse .npz archive: it begins as text"):
        read_dgl_reddit(root)
    graph.write_bytes(b"PK\x03\x04 but cut short")  # a zip's start, then nothing of one
    with raises_naming(graph, "truncated or corrupt"):
        read_dgl_reddit(root)
    data = root / "reddit_data.npz"
    np.savez(data, feature=src.x, label=src.y)
    with raises_naming(data, "node_types"):
        read_dgl_reddit(root)
    x = src.x.copy()
    x[3, 1] = np.inf
    np.savez(data, feature=x, label=src.y, node_types=np.ones(N, dtype=np.int64))
    with raises_naming(data, "NaN or inf", "row 3"):
        read_dgl_reddit(root)


# ------------------------------------------------------------------------------------------------ Matrix Market


def write_vertex_files(root: Path, g: Graph, split_kind: str = "npy") -> dict[str, Path]:
    np.save(root / "x.npy", g.x)
    np.save(root / "y.npy", g.y)
    if split_kind == "npy":
        codes = np.full(g.num_nodes, -1, dtype=np.int64)
        for code, name in enumerate(SPLITS):
            codes[g.masks[name]] = code
        np.save(root / "split.npy", codes)
        split = root / "split.npy"
    else:
        np.savez(root / "split.npz", **g.masks)
        split = root / "split.npz"
    return {"features": root / "x.npy", "labels": root / "y.npy", "split": split}


def test_mtx(tmp_path, src):
    ref = transform(src, dedup=True)  # a sparse matrix holds each (i, j) once
    ei = ref.edge_index
    path = tmp_path / "g.mtx"
    scipy.io.mmwrite(path, sp.coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(N, N)), field="pattern")
    assert path.read_text().startswith("%%MatrixMarket matrix coordinate pattern general")
    assert_same(read_mtx(path, **write_vertex_files(tmp_path, src)), ref)
    assert_same(read(path, "mtx", **write_vertex_files(tmp_path, src, "npz")), ref)


def test_mtx_symmetric_and_synthetic(tmp_path):
    path = tmp_path / "sym.mtx"
    path.write_text("%%MatrixMarket matrix coordinate pattern symmetric\n% a comment\n6 6 4\n2 1\n3 2\n6 4\n5 5\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy >= 1.18 warns of mmread's sparse-matrix default unless told
        g = read_mtx(path, num_classes=4, seed=3)
    want = {(1, 0), (0, 1), (2, 1), (1, 2), (5, 3), (3, 5), (4, 4)}  # 1-based, both directions, one diagonal
    assert set(map(tuple, g.edge_index.T.tolist())) == want and g.num_edges == 7
    assert g.x.shape == (6, 32) and g.num_classes == 4 and g.y.min() >= 0 and g.y.max() < 4
    assert sum(int(m.sum()) for m in g.masks.values()) == 6 and g.masks["train"].sum() == 3
    again = read_mtx(path, num_classes=4, seed=3)
    np.testing.assert_array_equal(again.x, g.x)
    np.testing.assert_array_equal(again.masks["test"], g.masks["test"])


def test_mtx_bad_input(tmp_path, src):
    path = tmp_path / "g.mtx"
    path.write_text("%%MatrixMarket matrix coordinate pattern general\n40 40 3\n2 1\n3 2\n")
    with raises_naming(path, "unreadable Matrix Market file"):  # then scipy's words, which differ by version
        read_mtx(path)
    path.write_text("%%MatrixMarket matrix coordinate pattern general\n4 5 1\n2 1\n")
    with raises_naming(path, "not square"):
        read_mtx(path)
    path.write_text("%%MatrixMarket matrix coordinate pattern general\n40 40 1\n2 1\n")
    files = write_vertex_files(tmp_path, src)
    with raises_naming(files["labels"], "out of range [0, 2)"):
        read_mtx(path, **files, num_classes=2)
    np.save(files["labels"], src.y[:39])
    with raises_naming(files["labels"], "39 labels", "40 vertices"):
        read_mtx(path, **files)
    np.save(files["labels"], np.where(src.y == -1, -5, src.y))
    with raises_naming(files["labels"], "label -5", "negative"):
        read_mtx(path, **files)
    np.save(files["labels"], src.y)
    np.save(files["split"], np.full(N, 7))
    with raises_naming(files["split"], "split code 7"):
        read_mtx(path, **files)
    np.save(files["split"], np.full(N, 1))
    with raises_naming(files["split"], "training split is empty"):
        read_mtx(path, **files)
    np.save(files["split"], np.zeros(N, dtype=np.int64))
    with raises_naming(files["split"], "vertex 36", str(files["labels"])):
        read_mtx(path, **files)
    with raises_naming(tmp_path / "nope.mtx", "missing file"):
        read_mtx(tmp_path / "nope.mtx")


# ---------------------------------------------------------------------------------------------------- edge list


def test_edgelist_whitespace_comments_header(tmp_path, src):
    path = tmp_path / "g.txt"
    lines = ["# a SNAP-style comment", "% another", "FromNodeId\tToNodeId"]
    lines += [f"{s}\t{d}" for s, d in src.edge_index.T]
    lines[7] += "   # trailing comment"
    path.write_text("\n".join(lines) + "\n\n")
    g = read_edgelist(path, **write_vertex_files(tmp_path, src))
    np.testing.assert_array_equal(g.edge_index, src.edge_index)
    assert_same(g, src)


def test_edgelist_csv_gz_extra_columns(tmp_path, src):
    path = tmp_path / "g.csv.gz"
    gz_lines(path, ["src,dst,weight"] + [f"{s}, {d},0.5" for s, d in src.edge_index.T])
    g = read(path, "edgelist", num_nodes=N, **write_vertex_files(tmp_path, src, "npz"))
    assert_same(g, src)
    g = read_edgelist(path, seed=1)  # synthetic vertex data; n = max id + 1
    assert g.num_nodes == int(src.edge_index.max()) + 1


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_sparse_adjacency_entry_that_is_not_finite_is_refused(tmp_path, value):
    """Any nonzero entry is an edge and a zero none; a NaN or an infinity is neither: refused, naming the entry
    (a Matrix Market file's row and column, 1-based; a scipy .npz's entry and its edge)."""
    mtx = tmp_path / "g.mtx"
    mtx.write_text(f"%%MatrixMarket matrix coordinate real general\n4 4 3\n1 2 1\n2 3 {value}\n3 4 0.5\n")
    with raises_naming(mtx, "entry at row 2, column 3 is", "must be finite"):
        read_mtx(mtx)
    mat = sp.coo_matrix((np.array([1.0, float(value), 2.0]), (np.array([0, 1, 2]), np.array([1, 2, 3]))), (4, 4))
    sp.save_npz(tmp_path / "a.npz", mat.tocsr())
    with raises_naming(tmp_path / "a.npz", "entry at 1 of 'data' (edge 1 -> 2) is", "must be finite"):
        sparse.load_sparse(tmp_path / "a.npz")


@pytest.mark.parametrize("sep", [" ", "\t", ","])
def test_edgelist_text_after_the_ids_on_the_first_line_is_no_header(tmp_path, src, sep):
    """A first line whose two ids are numbers is an edge, whatever its other columns hold (a date, a relation):
    only a line whose ids are words is a header; the prepared copy keeps the same edges."""
    path = tmp_path / "g.txt"
    path.write_text("".join(f"{s}{sep}{d}{sep}2020-01-0{i % 9 + 1}{sep}cites\n" for i, (s, d) in
                            enumerate(src.edge_index.T)))
    g = read_edgelist(path, **write_vertex_files(tmp_path, src))
    np.testing.assert_array_equal(g.edge_index, src.edge_index)
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.data.prepared.writer import prepare

    prepare(str(path), tmp_path / "p", fmt="edgelist", progress=False)
    assert PreparedDataset(tmp_path / "p").num_edges == src.num_edges


def test_edgelist_ids_beyond_64_bits_name_their_line(tmp_path):
    from mggcn.data.formats.edgelist import iter_edgelist_chunks

    path = tmp_path / "g.txt"
    path.write_text("0 1\n1 99999999999999999999\n")
    for read_it in (read_edgelist, lambda p: list(iter_edgelist_chunks(p))):
        with raises_naming(path, "line 2: '99999999999999999999' is beyond the range of int64"):
            read_it(path)
    path.write_text(f"0 1\n1 {2**63 - 1}\n")  # an id, but n = id + 1 is not
    with raises_naming(path, "line 2: vertex id", "n = largest id + 1 must fit in 64 bits"):
        list(iter_edgelist_chunks(path))


def test_edgelist_bad_input(tmp_path, src):
    path = tmp_path / "g.txt"
    path.write_text("# c\n0 1\n\n1 2\n2 x\n")
    with raises_naming(path, "line 5", "'x'"):
        read_edgelist(path)
    path.write_text("# c\n0 1\n1\n")
    with raises_naming(path, "line 3", "at least 2"):
        read_edgelist(path)
    path.write_text("# c\n0 1\n\n1 2\n2 9\n")
    with raises_naming(path, "line 5", "vertex id 9", "[0, 5)"):
        read_edgelist(path, num_nodes=5)
    path.write_text("0 1\n1 -2\n")
    with raises_naming(path, "line 2", "-2"):
        read_edgelist(path)
    path.write_text("0 1\n1 2\n")
    np.save(tmp_path / "x.npy", src.x[:2])
    with raises_naming(path, "line 2", "vertex id 2", "[0, 2)", "x.npy"):  # the vertex files say n
        read_edgelist(path, features=tmp_path / "x.npy")


# -------------------------------------------------------------------------------------------------- MG-GCN binary


def prep_py_layout(root: Path, g: Graph, width: int = 4, weighted: bool = True) -> None:
    """Write the files the way MG-GCN's test/data/prep.py does (A[target, source] CSR; uint32 labels/sets).

    ``width`` 8 and ``weighted=False`` are the other layouts PIGO's CSR::save writes.
    """
    root.mkdir(parents=True)
    ei = g.edge_index
    a = sp.csr_matrix((np.ones(ei.shape[1], np.float32), (ei[1], ei[0])), shape=(g.num_nodes,) * 2)
    u = f"<u{width}"
    with open(root / "graph.bin", "wb") as f:
        f.write(b"PIGO-CSR-v2" + bytes([width, width]) + np.array([N, a.nnz, N, N], u).tobytes())
        f.write(a.indptr.astype(u).tobytes() + a.indices.astype(u).tobytes())
        if weighted:
            f.write(a.data.astype("<f4").tobytes())
    sets = np.full(N, 3, dtype="<u4")  # 3: in no split
    for code, name in enumerate(SPLITS):
        sets[g.masks[name]] = code
    for fname, arr in (("features.bin", g.x), ("labels.bin", g.y.astype("<u4")[:, None]),
                       ("sets.bin", sets[:, None])):
        (root / fname).write_bytes(np.array(arr.shape, "<u4").tobytes() + np.ascontiguousarray(arr).tobytes())


def test_mggcn_bin_round_trip(tmp_path, src):
    write_mggcn_bin(src, tmp_path / "out")
    g = read_mggcn_bin(tmp_path / "out")
    assert_same(g, src)
    assert (tmp_path / "out/graph.bin").read_bytes()[:13] == b"PIGO-CSR-v2\x04\x04"
    # Target-major storage: edges come back ordered by target.
    assert (np.diff(g.edge_index[1]) >= 0).all()


@pytest.mark.parametrize("width, weighted", [(4, True), (8, True), (4, False)])
def test_mggcn_bin_reads_prep_py_files(tmp_path, src, width, weighted):
    ref = dataclasses_replace_y(src, np.where(src.y < 0, 0, src.y))  # uint32 has no -1
    prep_py_layout(tmp_path / "d", ref, width, weighted)
    # scipy sums the duplicate 3->4 into one entry of value 2: compare with the deduplicated graph.
    assert_same(read(tmp_path / "d", "mggcn-bin"), transform(ref, dedup=True))


def test_mggcn_bin_weight_that_is_not_finite_is_refused(tmp_path, src):
    ref = dataclasses_replace_y(src, np.where(src.y < 0, 0, src.y))
    prep_py_layout(tmp_path / "d", ref, 4, True)
    graph = tmp_path / "d" / "graph.bin"
    graph.write_bytes(graph.read_bytes()[:-4] + struct.pack("<f", float("nan")))  # the last entry's value
    with raises_naming(graph, "the adjacency's entry at", "is nan: its values must be finite"):
        read(tmp_path / "d", "mggcn-bin")


def test_mggcn_bin_bad_input(tmp_path, src):
    root = tmp_path / "b"
    write_mggcn_bin(src, root)
    graph = root / "graph.bin"
    good = graph.read_bytes()
    graph.write_bytes(good[:-4])
    with raises_naming(graph, "truncated", f"implies {len(good)} bytes", f"found {len(good) - 4}"):
        read_mggcn_bin(root)
    graph.write_bytes(b"PIGO-COO-v1" + good[11:])
    with raises_naming(graph, "bad header"):
        read_mggcn_bin(root)
    graph.write_bytes(good[:20])
    with raises_naming(graph, "truncated header"):
        read_mggcn_bin(root)
    header = bytearray(good)  # n of the header (after the magic and the two widths) one more than its rows
    header[13:17] = struct.pack("<I", src.num_nodes + 1)
    graph.write_bytes(bytes(header))
    with raises_naming(graph, f"the header says n={src.num_nodes + 1} for a {src.num_nodes} x {src.num_nodes} "
                              "matrix"):
        read_mggcn_bin(root)
    bad = bytearray(good)
    bad[-4 * src.num_edges - 8: -4 * src.num_edges - 4] = struct.pack("<I", 99)  # last source id
    graph.write_bytes(bytes(bad))
    with raises_naming(graph, "vertex id 99", "out of range"):
        read_mggcn_bin(root)
    graph.write_bytes(good)

    feats = root / "features.bin"
    feats.write_bytes(feats.read_bytes()[:-1])
    with raises_naming(feats, "truncated", "(40 x 5)"):
        read_mggcn_bin(root)
    feats.write_bytes(np.array([39, F], "<u4").tobytes() + src.x[:39].tobytes())
    with raises_naming(feats, "39 feature rows", "40 vertices"):
        read_mggcn_bin(root)
    feats.write_bytes(b"\x01")
    with raises_naming(feats, "truncated header"):
        read_mggcn_bin(root)
    write_mggcn_bin(src, root)
    (root / "sets.bin").unlink()
    with raises_naming(root / "sets.bin", "missing file"):
        read_mggcn_bin(root)


def test_mggcn_bin_unlabelled_train_vertex(tmp_path, src):
    bad = dataclasses_replace_y(src, src.y.copy())
    bad.y[36:] = 0
    bad.masks = {k: v.copy() for k, v in src.masks.items()}
    bad.masks["train"][37] = True
    write_mggcn_bin(bad, tmp_path)
    labels = np.fromfile(tmp_path / "labels.bin", "<i4")
    labels[2 + 37] = -1
    labels.tofile(tmp_path / "labels.bin")
    with raises_naming(tmp_path / "sets.bin", "vertex 37", "labels.bin"):
        read_mggcn_bin(tmp_path)


# ---------------------------------------------------------------------------------------------- in-memory, misc


def test_from_pyg_and_tensors(src):
    from torch_geometric.data import Data

    t = {name: torch.from_numpy(m) for name, m in src.masks.items()}
    data = Data(edge_index=torch.from_numpy(src.edge_index), x=torch.from_numpy(src.x),
                y=torch.from_numpy(src.y)[:, None], train_mask=t["train"], val_mask=t["val"], test_mask=t["test"])
    assert_same(from_pyg(data), src)
    del data.train_mask
    with pytest.raises(GraphError, match="train_mask"):
        from_pyg(data, name="mine")
    g = from_tensors(torch.from_numpy(src.edge_index), src.x, src.y, t["train"], t["val"], t["test"], name="t")
    assert_same(g, src)
    with pytest.raises(GraphError, match="t: edge endpoint 40"):
        from_tensors(torch.tensor([[0], [40]]), src.x, src.y, t["train"], t["val"], t["test"], name="t")


def test_transform(src):
    d = transform(src, dedup=True)
    assert d.num_edges == len({tuple(e) for e in src.edge_index.T.tolist()}) < src.num_edges
    # undirected as PyG's to_undirected: each pair once per direction, an edge given twice or both ways counted once
    pairs = {tuple(e) for e in src.edge_index.T.tolist()}
    for ud in (transform(src, undirected=True), transform(src, undirected=True, dedup=True)):
        assert {tuple(e) for e in ud.edge_index.T.tolist()} == pairs | {(b, a) for a, b in pairs}
        assert ud.num_edges == len(pairs | {(b, a) for a, b in pairs})
    from torch_geometric.utils import to_undirected

    np.testing.assert_array_equal(transform(src, undirected=True).edge_index,
                                  to_undirected(torch.from_numpy(src.edge_index), num_nodes=src.num_nodes).numpy())
    np.testing.assert_array_equal(ud.x, src.x)
    np.testing.assert_array_equal(src.edge_index[:, -1], [9, 9])  # the input graph is untouched


def test_read_unknown_format(tmp_path):
    with pytest.raises(GraphError, match="unknown format 'csv'.*ogb, saint, dgl-reddit, mtx, edgelist, mggcn-bin"):
        read(tmp_path, "csv")
    assert FORMATS == ("ogb", "saint", "dgl-reddit", "mtx", "edgelist", "mggcn-bin", "planetoid", "npz")


# ------------------------------------------------------------------------------------------- scipy sparse .npz


@pytest.mark.parametrize("layout", ["csr", "csc", "coo"])
def test_sparse_npz_edges_equal_scipys_nonzeros(tmp_path, monkeypatch, layout):
    """load_sparse writes each entry's edge straight into one int64 array, the row ids a few rows at a time (2 to 3
    here): the edges scipy's own loader finds, one per nonzero entry (duplicates of a COO file kept, explicit zeros
    dropped), whatever the file's layout and index dtype."""

    monkeypatch.setattr(sparse, "SPARSE_CHUNK", 7)
    rng = np.random.default_rng(5)
    n, e = 23, 90
    row, col = rng.integers(0, n, e), rng.integers(0, n, e)
    data = rng.integers(0, 3, e).astype(np.float32)  # about a third explicit zeros
    mat = sp.coo_matrix((data, (row, col)), shape=(n, n))
    mat = mat if layout == "coo" else mat.asformat(layout)
    if layout != "coo":
        mat.data[::4] = 0  # explicit zeros kept in the file
    path = tmp_path / f"{layout}.npz"
    sp.save_npz(path, mat, compressed=False)
    got_n, got = sparse.load_sparse(path)
    ref = sp.load_npz(path).tocoo()
    keep = ref.data != 0
    want = np.stack([ref.row[keep], ref.col[keep]]).astype(np.int64)
    assert got_n == n and got.dtype == np.int64 and got.flags.c_contiguous
    assert np.array_equal(sorted_edges(got), sorted_edges(want))
    assert want.shape[1] < e  # zeros were there to drop


def test_mggcn_bin_vertex_files_of_the_wrong_shape_are_refused_naming_them(tmp_path):
    from mggcn.data.formats.mggcn_bin import read_mggcn_bin, write_mggcn_bin
    from reference import random_graph

    src = random_graph(40, 150, features=5, classes=3, seed=1)
    root = tmp_path / "b"
    write_mggcn_bin(src, root)
    y = src.y.astype("<i4")
    two = np.ascontiguousarray(np.stack([y[::-1], y], 1))  # [40, 2]: of the right size, not one column
    (root / "labels.bin").write_bytes(np.array(two.shape, "<u4").tobytes() + two.tobytes())
    with pytest.raises(GraphError, match=r"labels\.bin: expected one column, the header says 2$"):
        read_mggcn_bin(root)
    write_mggcn_bin(src, root)
    sets = (root / "sets.bin").read_bytes()
    (root / "sets.bin").write_bytes(struct.pack("<II", 39, 1) + sets[8:-4])
    with pytest.raises(GraphError, match=r"sets\.bin: 39 rows for 40 vertices \(graph\.bin has 40 rows\)$"):
        read_mggcn_bin(root)
    write_mggcn_bin(src, root)
    graph = bytearray((root / "graph.bin").read_bytes())
    graph[25:29] = struct.pack("<I", 41)  # ncols of the header
    (root / "graph.bin").write_bytes(bytes(graph))
    with pytest.raises(GraphError, match="the header says n=40 for a 40 x 41 matrix"):
        read_mggcn_bin(root)


def test_split_files_and_id_checks_at_their_boundaries(tmp_path):
    """The boundaries of the shared checks: an id equal to n, split code 3, an integer mask holding 2, the most
    vertices without an edge, and zeros before a short id."""
    from mggcn.data.formats import checks

    with pytest.raises(GraphError, match=r"ids\.txt: line 2: vertex id 5 is out of range \[0, 5\)$"):
        checks.mask_from_ids(np.array([1, 5]), 5, "ids.txt", lambda i: f"line {i + 1}")
    np.save(tmp_path / "codes.npy", np.array([0, 1, 3, 2, -1]))
    with pytest.raises(GraphError, match=r"codes\.npy: split code 3 of vertex 2 is not one of 0, 1, 2, -1$"):
        checks.load_split(tmp_path / "codes.npy", 5, "n")
    np.savez(tmp_path / "masks.npz", train=np.array([1, 0, 2, 0, 0]), val=np.array([0, 1, 0, 0, 0]),
             test=np.array([0, 0, 0, 1, 0]))
    with pytest.raises(GraphError, match=r"masks\.npz: 'train' must be a bool mask, got int64$"):
        checks.load_split(tmp_path / "masks.npz", 5, "n")
    np.savez(tmp_path / "masks.npz", train=np.array([1, 0, 1, 0, 0]), val=np.array([0, 1, 0, 0, 0]),
             test=np.array([0, 0, 0, 1, 0]))
    assert checks.load_split(tmp_path / "masks.npz", 5, "n")["train"].tolist() == [True, False, True, False, False]
    edges = 1000
    checks.check_vertex_count("g.txt", 2 * edges + checks.ISOLATED_SLACK, edges, "hint")
    with pytest.raises(GraphError, match="at least 65537 of them would have no edge"):
        checks.check_vertex_count("g.txt", 2 * edges + checks.ISOLATED_SLACK + 1, edges, "hint")
    assert checks.decimal_int("0" * 40 + "7") == 7 and checks.decimal_int("-" + "0" * 40 + "7") == -7
    assert checks.decimal_int("1" + "0" * 30) == 10**30 and checks.decimal_int("9" * 30) == int("9" * 30)
