"""Multi-label node classification data: labels ``uint8 [n, C]`` of 0/1, every vertex labelled.

Each reader on small files written in the real on-disk layout (GraphSAINT's class maps of 0/1 lists as PPI, Yelp and
Amazon ship them, OGB's label columns as ogbn-proteins ships them, a labels ``.npy [n, C]`` beside an edge list, a
PyG ``Data``'s ``y [n, C]``) gives the labels as uint8 [n, C]; a bad one is refused in one line naming the file.
A prepared multi-label dataset, written whole or streamed in chunks, gives each rank at P = 1, 2, 3 (41 vertices:
no P divides them) its rows of the labels; a single-label prepared directory is what it was.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch
from test_formats import gz_lines, raises_naming, sorted_edges, write_ogb_csv, write_ogb_npz, write_reddit
from torch_geometric.data import Data

import workers
from cli_util import run_cli
from mggcn.data.datasets import InMemoryDataset
from mggcn.data.formats import (
    from_pyg,
    from_tensors,
    read,
    read_dgl_reddit,
    read_edgelist,
    read_mtx,
    read_ogb,
    read_saint,
    transform,
)
from mggcn.data.formats.saint import write_saint
from mggcn.data.graph import SPLITS, Graph
from mggcn.data.prepared.reader import PreparedDataset, describe
from mggcn.data.prepared.writer import prepare, write_dataset
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.tools.cli import main as cli_main

N, F, C = 41, 5, 4


def _graph(num_edges: int = 150, seed: int = 11) -> Graph:
    """Vertex 5 has no label at all (the empty set: still labelled); 38..40 are in no split."""
    rng = np.random.default_rng(seed)
    ei = np.concatenate([rng.integers(0, N, size=(2, num_edges)), [[3, 3, 9], [4, 4, 9]]], axis=1)
    x = rng.standard_normal((N, F)).astype(np.float32)
    y = (rng.random((N, C)) < 0.4).astype(np.uint8)
    y[5] = 0
    masks = {s: np.zeros(N, dtype=bool) for s in SPLITS}
    masks["train"][:20], masks["val"][20:28], masks["test"][28:38] = True, True, True
    return Graph(N, ei, x, y, masks, name="ml").validate()


@pytest.fixture
def ml() -> Graph:
    return _graph()


def _single(g: Graph) -> Graph:
    """``g`` with one class per vertex (for the writers of the format tests, which write those)."""
    return Graph(g.num_nodes, g.edge_index, g.x, np.argmax(g.y, axis=1), g.masks, num_classes=C, name="single")


def assert_labels(g: Graph, ref: Graph, edges: bool = True) -> None:
    assert g.multilabel and g.num_classes == C and g.y.dtype == np.uint8 and g.y.shape == (N, C)
    np.testing.assert_array_equal(g.y, ref.y)
    np.testing.assert_array_equal(g.x, ref.x)
    for s in SPLITS:
        np.testing.assert_array_equal(g.masks[s], ref.masks[s], err_msg=s)
    if edges:
        np.testing.assert_array_equal(sorted_edges(g.edge_index), sorted_edges(ref.edge_index))


# --------------------------------------------------------------------------------------------------- GraphSAINT


def write_saint_lists(root: Path, g: Graph, class_map: dict | None = None) -> Path:
    """A GraphSAINT directory as PPI's: ``class_map.json`` maps every vertex id to its list of C zeros and ones."""
    root.mkdir(parents=True)
    ei = transform(g, dedup=True).edge_index
    adj = sp.csr_matrix((np.ones(ei.shape[1], dtype=np.float32), (ei[0], ei[1])), shape=(g.num_nodes,) * 2)
    sp.save_npz(root / "adj_full.npz", adj)
    np.save(root / "feats.npy", g.x)
    if class_map is None:
        class_map = {str(v): row.tolist() for v, row in enumerate(g.y)}
    (root / "class_map.json").write_text(json.dumps(class_map))
    role = {key: np.flatnonzero(g.masks[s]).tolist() for key, s in zip(("tr", "va", "te"), SPLITS)}
    (root / "role.json").write_text(json.dumps(role))
    return root


def test_saint_class_map_of_lists_is_multilabel(tmp_path, ml):
    ref = transform(ml, dedup=True)
    assert_labels(read_saint(write_saint_lists(tmp_path / "ppi", ml)), ref)
    assert_labels(read(tmp_path / "ppi", "saint"), ref)
    write_saint(ml, tmp_path / "own")  # mggcn's own writer writes the lists too
    assert_labels(read_saint(tmp_path / "own"), ref)
    booleans = {str(v): [bool(e) for e in row] for v, row in enumerate(ml.y)}  # JSON true/false: the same labels
    assert_labels(read_saint(write_saint_lists(tmp_path / "b", ml, booleans)), ref)
    shuffled = {str(v): ml.y[v].tolist() for v in np.random.default_rng(0).permutation(N)}  # any key order
    assert_labels(read_saint(write_saint_lists(tmp_path / "s", ml, shuffled)), ref)


def _edit(rows: dict, vertex: int, value) -> dict:
    return {**rows, str(vertex): value}


_BAD_CLASS_MAPS = {
    "a class after lists": (lambda m: _edit(m, 1, 2), ["vertex 1 has the label 2", "multi-label"]),
    "a list after classes": (lambda m: {"0": 1, "1": [0, 1, 0, 0]}, ["vertex 1 has a list", "multi-label"]),
    "lists of two lengths": (lambda m: _edit(m, 7, [0, 1, 0, 0, 1]), ["vertex 7", "list of 5 labels", "of 4"]),
    "a 2": (lambda m: _edit(m, 3, [0, 2, 0, 0]), ["vertex 3 has 2 for label 1", "0 or 1"]),
    "a -1": (lambda m: _edit(m, 3, [0, 0, -1, 0]), ["vertex 3 has -1 for label 2"]),
    "a fraction": (lambda m: _edit(m, 3, [0, 0.5, 0, 0]), ["vertex 3 has 0.5 for label 1"]),
    "a float 1.0": (lambda m: _edit(m, 3, [0, 1.0, 0, 0]), ["vertex 3 has 1.0 for label 1"]),
    "text": (lambda m: _edit(m, 3, [0, "1", 0, 0]), ["vertex 3 has '1' for label 1"]),
    "null": (lambda m: _edit(m, 3, [0, None, 0, 0]), ["vertex 3 has None for label 1"]),
    "nested lists": (lambda m: _edit(m, 3, [[0], [1], [0], [1]]), ["vertex 3 has [0] for label 0"]),
    "beyond int64": (lambda m: _edit(m, 3, [0, 2**70, 0, 0]), ["vertex 3 has 1180591620717411303424 for label 1"]),
    "lists of one": (lambda m: {str(v): [1] for v in range(N)}, ["list of 1 label(s)", "C >= 2"]),
    "a vertex missing": (lambda m: {k: v for k, v in m.items() if k != "12"}, ["vertex 12 is not listed"]),
    "a vertex id out of range": (lambda m: _edit(m, 50, [0, 0, 0, 0]), ["vertex id 50 is out of range"]),
}


@pytest.mark.parametrize("case", list(_BAD_CLASS_MAPS))
def test_saint_bad_class_map_lists(tmp_path, ml, case):
    make, words = _BAD_CLASS_MAPS[case]
    root = write_saint_lists(tmp_path / "s", ml, make({str(v): row.tolist() for v, row in enumerate(ml.y)}))
    with raises_naming(root / "class_map.json", *words):
        read_saint(root)


# ---------------------------------------------------------------------------------------------------------- OGB


def write_ogb_label_columns(root: Path, g: Graph, binary: bool = False) -> Path:
    """An OGB directory as ogbn-proteins': a line (or row of ``node_label``) of C zeros and ones per vertex."""
    if binary:
        write_ogb_npz(root, _single(g))
        np.savez_compressed(root / "raw" / "node-label.npz", node_label=g.y.astype(np.int64))
    else:
        write_ogb_csv(root, _single(g), "species")
        gz_lines(root / "raw" / "node-label.csv.gz", [",".join(str(int(v)) for v in row) for row in g.y])
    return root


@pytest.mark.parametrize("binary", [False, True], ids=["csv", "npz"])
def test_ogb_label_columns_are_multilabel(tmp_path, ml, binary):
    assert_labels(read_ogb(write_ogb_label_columns(tmp_path / "ogbn_proteins", ml, binary)), ml)


def test_ogb_bad_label_columns(tmp_path, ml):
    root = write_ogb_label_columns(tmp_path / "o", ml)
    labels = root / "raw" / "node-label.csv.gz"
    lines = [",".join(str(int(v)) for v in row) for row in ml.y]
    for i, text, words in ((6, "0,0,2,1", ["vertex 6 has 2.0 for label 2", "0 or 1"]),
                           (6, "0,nan,1,1", ["vertex 6 has nan for label 1", "every vertex"]),
                           (3, "0,1,1", ["line 4"])):
        gz_lines(labels, [*lines[:i], text, *lines[i + 1:]])
        with raises_naming(labels, *words):
            read_ogb(root)
    root = write_ogb_label_columns(tmp_path / "b", ml, binary=True)
    labels = root / "raw" / "node-label.npz"
    bad = ml.y.astype(np.int64)
    bad[9, 3] = 3
    np.savez_compressed(labels, node_label=bad)
    with raises_naming(labels, "vertex 9 has 3 for label 3"):
        read_ogb(root)
    np.savez_compressed(labels, node_label=ml.y[:30])
    with raises_naming(labels, "30 label rows for 41 vertices"):
        read_ogb(root)


# ------------------------------------------------------------------------------ vertex files, PyG, DGL's Reddit


def write_edgelist_files(root: Path, g: Graph, labels: np.ndarray | None = None) -> dict[str, Path]:
    """An edge list (``u v`` per line) and the vertex files beside it: labels ``y.npy [n, C]``, split codes."""
    root.mkdir(parents=True, exist_ok=True)
    np.savetxt(root / "graph.txt", g.edge_index.T, fmt="%d")
    np.save(root / "x.npy", g.x)
    np.save(root / "y.npy", g.y if labels is None else labels)
    codes = np.full(g.num_nodes, -1, dtype=np.int64)
    for code, s in enumerate(SPLITS):
        codes[g.masks[s]] = code
    np.save(root / "split.npy", codes)
    return {"features": root / "x.npy", "labels": root / "y.npy", "split": root / "split.npy"}


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float32, bool])
def test_edgelist_labels_file_of_columns(tmp_path, ml, dtype):
    files = write_edgelist_files(tmp_path, ml, ml.y.astype(dtype))
    assert_labels(read_edgelist(tmp_path / "graph.txt", **files), ml)
    assert_labels(read_edgelist(tmp_path / "graph.txt", **files, num_classes=C), ml)
    del files["split"]  # the random split: every vertex labelled, so every vertex drawn
    g = read_edgelist(tmp_path / "graph.txt", **files)
    assert g.multilabel and sum(int(g.masks[s].sum()) for s in SPLITS) == N


def test_matrix_market_with_a_labels_file_of_columns(tmp_path, ml):
    ref = transform(ml, dedup=True)  # a sparse matrix holds each (i, j) once
    files = write_edgelist_files(tmp_path, ref)
    ei = ref.edge_index
    scipy.io.mmwrite(tmp_path / "g.mtx", sp.coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(N, N)))
    assert_labels(read_mtx(tmp_path / "g.mtx", **files), ref)


def test_edgelist_bad_labels_file(tmp_path, ml):
    files = write_edgelist_files(tmp_path, ml)
    labels = files["labels"]
    with raises_naming(labels, "4 label columns", "num_classes=3"):
        read_edgelist(tmp_path / "graph.txt", **files, num_classes=3)
    for bad, words in ((np.where(np.arange(C) == 2, -1, ml.y.astype(np.int64)), ["vertex 0 has -1 for label 2"]),
                       (np.where(ml.y == 1, np.nan, ml.y.astype(np.float64)), ["has nan for label", "NaN"]),
                       (np.zeros((N, C, 2)), ["got shape [41, 4, 2]"]),
                       (ml.y[:30], ["30 label rows for 41 vertices"]),
                       (ml.y.astype(np.complex64), ["dtype complex64"])):
        np.save(labels, bad)
        with raises_naming(labels, *words):
            read_edgelist(tmp_path / "graph.txt", **files)


def test_a_one_hot_class_beyond_the_vertices_is_refused_by_prepare_too(tmp_path, ml):
    """A one-hot matrix is one class per vertex: a class id of n or more is refused naming the labels file, by
    prepare (which wrote a directory training then refused) as by the reader."""
    one_hot = np.zeros((N, 3 * N), dtype=np.uint8)
    one_hot[np.arange(N), np.arange(N) % 3] = 1
    one_hot[5] = 0
    one_hot[5, 2 * N] = 1
    files = write_edgelist_files(tmp_path, ml, labels=one_hot)
    words = (f"label {2 * N} of vertex 5 would make {2 * N + 1} classes", f"the {N} vertices")
    with raises_naming(files["labels"], *words):
        read_edgelist(tmp_path / "graph.txt", **files)
    with raises_naming(files["labels"], *words):
        prepare(tmp_path / "graph.txt", tmp_path / "out", fmt="edgelist", progress=False, **files)
    assert not (tmp_path / "out").exists()


def test_pyg_data_and_tensors_with_a_label_matrix(ml):
    masks = {f"{s}_mask": torch.from_numpy(ml.masks[s]) for s in SPLITS}
    data = Data(edge_index=torch.from_numpy(ml.edge_index), x=torch.from_numpy(ml.x),
                y=torch.from_numpy(ml.y).float(), num_nodes=N, **masks)
    assert_labels(from_pyg(data), ml)
    assert_labels(from_tensors(data.edge_index, data.x, data.y.bool(), *masks.values()), ml)
    one = from_tensors(data.edge_index, data.x, torch.from_numpy(ml.y[:, :1]).long(), *masks.values())
    assert not one.multilabel and one.y.shape == (N,)  # [n, 1]: one class per vertex, as OGB's y


def test_dgl_reddit_stays_single_label(tmp_path, ml):
    root = write_reddit(tmp_path / "reddit", _single(ml))
    data = root / "reddit_data.npz"
    with np.load(data) as f:
        arrays = dict(f)
    np.savez(data, **dict(arrays, label=ml.y.astype(np.int64)))
    with raises_naming(data, "one class per vertex", "[41, 4]"):
        read_dgl_reddit(root)


# -------------------------------------------------------------------------------------------- prepared datasets


def assert_rank_rows(path: Path, ref: Graph) -> PreparedDataset:
    """The directory opens (and verifies) as multi-label, its labels a memory map of uint8 [n, C]; each rank at
    P = 1, 2, 3 gets its rows of them (zeros on padding rows), in a shard equal to the in-memory graph's."""
    ds = PreparedDataset(path, verify=True)
    assert ds.multilabel and ds.num_classes == C and ds.manifest["multilabel"] is True
    assert ds.manifest["format_version"] == 2  # a reader of version 1 says it is too old, not a dtype mismatch
    assert ds.manifest["num_labelled"] == N and ds.manifest["num_classes"] == C
    labels = ds.arrays["labels"]
    assert isinstance(labels, np.memmap) and labels.dtype == np.uint8 and labels.shape == (N, C)
    for p in (1, 2, 3):
        part = make_partition(N, p, seed=p)
        for rank in range(p):
            orig = part.order[part.rows(rank)]
            want = np.zeros((orig.size, C), dtype=np.uint8)
            want[orig >= 0] = ref.y[orig[orig >= 0]]
            reads = {}
            shard = build_shard(ds, part, rank, "sym", reads=reads)
            assert shard.y.dtype == torch.uint8 and torch.equal(shard.y, torch.from_numpy(want)), (p, rank)
            assert reads["rows"] == int((orig >= 0).sum())
            assert workers.shards_equal(shard, build_shard(ref, part, rank, "sym")), (p, rank)
    return ds


def test_prepare_a_graph_a_pyg_data_and_a_dataset_in_memory(tmp_path, ml):
    assert_rank_rows(prepare(ml, tmp_path / "graph", progress=False), ml)
    masks = {f"{s}_mask": torch.from_numpy(ml.masks[s]) for s in SPLITS}
    data = Data(edge_index=torch.from_numpy(ml.edge_index), x=torch.from_numpy(ml.x),
                y=torch.from_numpy(ml.y).float(), num_nodes=N, **masks)
    assert_rank_rows(prepare(data, tmp_path / "pyg", progress=False), ml)
    ds = assert_rank_rows(write_dataset(InMemoryDataset(ml), tmp_path / "whole"), ml)
    assert ds.manifest["built"]["format"] == "memory"
    assert InMemoryDataset(ml).multilabel and not InMemoryDataset(_single(ml)).multilabel


def _streamed_case(tmp_path: Path, fmt: str, g: Graph) -> tuple[Path, dict, Graph]:
    if fmt == "edgelist":
        files = write_edgelist_files(tmp_path / "e", g)
        return tmp_path / "e" / "graph.txt", files, read_edgelist(tmp_path / "e" / "graph.txt", **files)
    if fmt == "saint":
        return write_saint_lists(tmp_path / "s", g), {}, transform(g, dedup=True)
    return write_ogb_label_columns(tmp_path / "o", g), {}, g


@pytest.mark.parametrize("fmt", ["edgelist", "saint", "ogb"])
def test_prepare_streamed_in_chunks(tmp_path, fmt):
    """3000 edges through chunks of 1024 (the least a chunk may be) and a 1 MiB sort budget."""
    g = _graph(num_edges=3000, seed=5)
    source, files, ref = _streamed_case(tmp_path, fmt, g)
    out = prepare(source, tmp_path / "out", fmt=fmt, memory_limit="1M", chunk_edges=1024, progress=False, **files)
    ds = assert_rank_rows(out, ref)
    assert ds.manifest["built"]["chunk_edges"] == 1024 and ds.num_edges == ref.num_edges


def test_info_says_multilabel_and_verify_checks_the_values(tmp_path, ml, capsys):
    out = prepare(ml, tmp_path / "d", progress=False)
    assert cli_main(["info", str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "classes     multi-label, 4 labels" in text and "(labelled 41)" in text and "verified" in text
    labels = out / "labels.npy"
    array = np.load(labels, mmap_mode="r+")
    array[7, 2] = 2
    array.flush()
    del array
    with raises_naming(labels, "checksum mismatch"):
        PreparedDataset(out, verify=True)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["arrays"]["labels"]["sha256"]  # as in a directory a job writes for its own workers
    (out / "manifest.json").write_text(json.dumps(manifest))
    with raises_naming(labels, "vertex 7 has 2 for label 2"):
        PreparedDataset(out, verify=True)
    ds = PreparedDataset(out)  # unverified: the rank that reads the row refuses it
    with raises_naming(labels, "vertex 7 has 2 for label 2"):
        for rank in range(2):
            build_shard(ds, make_partition(N, 2), rank, "sym")


def test_manifest_and_labels_file_must_agree(tmp_path, ml):
    multi = prepare(ml, tmp_path / "m", progress=False)
    np.save(multi / "labels.npy", np.argmax(ml.y, axis=1))
    with raises_naming(multi / "labels.npy", "one class per vertex", "says multi-label"):
        PreparedDataset(multi)
    single = prepare(_single(ml), tmp_path / "s", progress=False)
    np.save(single / "labels.npy", ml.y)
    with raises_naming(single / "labels.npy", "a matrix of labels", "says one class per vertex"):
        PreparedDataset(single)
    manifest = json.loads((single / "manifest.json").read_text())
    for edit, words in (({"multilabel": "yes"}, ["multilabel 'yes' is not a JSON boolean"]),
                        ({"multilabel": True, "num_classes": 1}, ["num_classes 1 of a multi-label dataset"])):
        (single / "manifest.json").write_text(json.dumps(dict(manifest, **edit)))
        with raises_naming(single / "manifest.json", *words):
            PreparedDataset(single)


def test_more_labels_than_vertices(tmp_path):
    """A label matrix may have more columns than there are vertices (ogbn-proteins' 112 labels on a small graph)."""
    n, c = 6, 9
    y = np.eye(n, c, dtype=np.uint8)
    y[0, c - 1] = 1  # two labels on one vertex: multi-label, not one-hot
    masks = {"train": np.arange(n) < 3, "val": np.arange(n) == 3, "test": np.arange(n) == 4}
    g = Graph(n, np.array([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]), np.ones((n, 2), np.float32), y, masks).validate()
    ds = PreparedDataset(prepare(g, tmp_path / "d", progress=False), verify=True)
    assert ds.num_classes == c and "multi-label, 9 labels" in describe(ds)


def test_the_fingerprint_covers_the_labels(tmp_path, ml):
    flipped = Graph(N, ml.edge_index, ml.x, ml.y ^ np.eye(N, C, dtype=np.uint8)[::-1], ml.masks).validate()
    a = PreparedDataset(prepare(ml, tmp_path / "a", progress=False))
    b = PreparedDataset(prepare(flipped, tmp_path / "b", progress=False))
    again = PreparedDataset(prepare(ml, tmp_path / "c", progress=False))
    assert a.fingerprint == again.fingerprint != b.fingerprint
    assert InMemoryDataset(ml).fingerprint != InMemoryDataset(flipped).fingerprint


_SINGLE_LABEL_KEYS = {"format", "format_version", "name", "num_nodes", "num_edges", "num_features", "num_classes",
                      "split_sizes", "num_labelled", "symmetric", "self_loops", "nnz_hat", "balance", "built", "arrays"}


def test_a_single_label_prepared_directory_is_as_it_was(tmp_path, ml):
    g = Graph(N, ml.edge_index, ml.x, np.where(np.arange(N) < 38, np.argmax(ml.y, axis=1), -1), ml.masks,
              num_classes=C).validate()
    for out in (prepare(g, tmp_path / "p", progress=False), write_dataset(InMemoryDataset(g), tmp_path / "w")):
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["format_version"] == 1 and "multilabel" not in manifest
        assert set(manifest) - {"fingerprint"} == _SINGLE_LABEL_KEYS and manifest["num_labelled"] == 38
        assert manifest["arrays"]["labels"]["dtype"] == "<i8" and manifest["arrays"]["labels"]["shape"] == [N]
        ds = PreparedDataset(out, verify=True)
        assert not ds.multilabel and ds.arrays["labels"].shape == (N,)
        assert f"classes     {C}\n" in describe(ds)
        part = make_partition(N, 3, seed=1)
        for rank in range(3):
            shard = build_shard(ds, part, rank, "sym")
            assert shard.y.dtype == torch.int64 and workers.shards_equal(shard, build_shard(g, part, rank, "sym"))



def test_a_one_hot_label_matrix_is_one_class_per_vertex(tmp_path, ml):
    """A 0/1 matrix with exactly one 1 in every row is one-hot (``F.one_hot(y)``, SAINT lists of one 1): each row's
    class, single-label, the same through every reader and through a prepared copy; one row with another count
    of ones (none, two) keeps it multi-label."""
    classes = np.random.default_rng(3).integers(0, C, N)
    one_hot = np.eye(C, dtype=np.uint8)[classes]
    g = Graph(N, ml.edge_index, ml.x, one_hot, ml.masks, name="one-hot").validate()
    assert not g.multilabel and g.num_classes == C
    np.testing.assert_array_equal(g.y, classes)
    lists = {str(v): row.tolist() for v, row in enumerate(one_hot)}
    saint = read_saint(write_saint_lists(tmp_path / "saint", g, lists))
    ogb = read_ogb(write_ogb_label_columns(tmp_path / "ogb", _with_y(g, one_hot)))
    for read_back in (saint, ogb):
        assert not read_back.multilabel
        np.testing.assert_array_equal(read_back.y, classes)
    for fmt in ("saint", "ogb"):  # streamed into a prepared copy
        out = prepare(tmp_path / fmt, tmp_path / f"p-{fmt}", fmt=fmt, memory_limit="1M", chunk_edges=1024,
                      progress=False)
        ds = PreparedDataset(out)
        assert not ds.multilabel and ds.num_classes == C
        np.testing.assert_array_equal(np.asarray(ds.arrays["labels"]), classes)
    for count in (0, 2):
        y = one_hot.copy()
        y[7] = 0
        y[7, : count] = 1
        with pytest.warns(UserWarning, match=f"but vertex 7 has {count}"):
            assert Graph(N, ml.edge_index, ml.x, y, ml.masks).validate().multilabel


def _with_y(g: Graph, y: np.ndarray) -> Graph:
    """``g`` whose ``y`` is the label matrix ``y`` as given (the writers write ``g.y`` row by row)."""
    copy = Graph(g.num_nodes, g.edge_index, g.x, g.y, g.masks, num_classes=g.num_classes, name=g.name)
    copy.y = y
    return copy


def test_a_label_matrix_one_hot_but_for_a_row_is_said_to_be_multilabel(tmp_path, ml):
    """A matrix whose rows all hold one 1 but one (a one-hot file with a row left empty, or marked twice) trains as
    multi-label, with another loss and metric than its one-hot rows mean: a warning names the row, once, by
    ``Graph`` (labels as users give them: float, int64, bool), by ``prepare`` naming the labels file, and by the
    command as one line of its own. One-hot labels and multi-label data (most rows with several labels or none)
    are read without a word."""
    one_hot = np.eye(C)[np.random.default_rng(5).integers(0, C, N)]
    for dtype in (np.float32, np.int64, bool, np.uint8):
        y = one_hot.astype(dtype)
        y[7] = 0
        with pytest.warns(UserWarning, match=rf"^m: the labels are read as multi-label .*: {N - 1} of {N} rows hold "
                                             r"exactly one 1, but vertex 7 has 0; one-hot"):
            assert Graph(N, ml.edge_index, ml.x, y, ml.masks, name="m").validate().multilabel
    y = one_hot.astype(np.uint8)
    y[11, :2] = 1
    files = write_edgelist_files(tmp_path, ml, labels=y)
    with pytest.warns(UserWarning, match=r"y\.npy: the labels .* but vertex 11 has 2") as said:
        prepare(tmp_path / "graph.txt", tmp_path / "p", fmt="edgelist", progress=False, **files)
    assert len(said) == 1 and PreparedDataset(tmp_path / "p").multilabel
    with pytest.warns(UserWarning) as said:
        assert read_edgelist(tmp_path / "graph.txt", **files).multilabel
    assert len(said) == 1, [str(w.message) for w in said]
    done = run_cli("train", str(tmp_path / "graph.txt"), "--format", "edgelist", "--epochs", "1", "--quiet",
                   *(a for k, v in files.items() for a in (f"--{k}", str(v))))
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warned == [f"mggcn train: warning: {files['labels']}: the labels are read as multi-label (binary "
                      f"cross-entropy, micro-F1): {N - 1} of {N} rows hold exactly one 1, but vertex 11 has 2; "
                      "one-hot labels (one class per vertex) need a single 1 in every row"], done.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Graph(0, np.zeros((2, 0)), np.zeros((0, F)), np.zeros((0, C)), {}).y.shape == (0, C)  # no rows
        assert not Graph(N, ml.edge_index, ml.x, one_hot, ml.masks).validate().multilabel
        assert Graph(N, ml.edge_index, ml.x, ml.y, ml.masks).validate().multilabel
