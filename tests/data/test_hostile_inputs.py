"""Hostile inputs: crafted files in the real on-disk layouts, through the ``mggcn`` command as a user runs it.

Every case must end the same way: exit status 2, exactly one line on stderr naming the offending file or option,
no traceback, no crash by a signal, nothing written where an output was asked for. One test per item of issue 15
that these cases cover (3: structures that reach C code, 5: prepared directories, 6: one value that would resize the
problem, 7: tracebacks), plus the in-memory entry points (``from_tensors``/``from_pyg``) and ``| head`` on a pipe.

Each case is a function ``tmp -> (argv, named, outputs)``: the command line (run in ``tmp``), a string the error
line must contain (the file or the option), and the output paths that must not exist afterwards.
``python tests/data/test_hostile_inputs.py`` prints the table of outcomes (clean error, traceback, signal, accepted).

Legend: n = vertices, E = edges.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

N, F, C = 30, 4, 3
TRAIN = ["--epochs", "1", "--hidden", "4", "--quiet"]


def _graph_arrays(n: int = N, seed: int = 3):
    """A small directed graph with every vertex labelled and a 50/25/25 split (codes 0/1/2)."""
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, n, size=(2, 4 * n))
    x = rng.standard_normal((n, F)).astype(np.float32)
    y = rng.integers(0, C, n)
    y[:C] = np.arange(C)
    split = np.repeat(np.array([0, 1, 2]), [n // 2, n // 4, n - n // 2 - n // 4]).astype(np.int64)
    return ei, x, y, split


def _edgelist(tmp: Path, **change) -> dict[str, Path]:
    ei, x, y, split = _graph_arrays()
    arrays = {"x": x, "y": y, "split": split}
    lines = [f"{s} {d}" for s, d in ei.T]
    for key, value in change.items():
        if key == "lines":
            lines = value(lines)
        else:
            arrays[key] = value
    (tmp / "g.txt").write_text("\n".join(lines) + "\n")
    paths = {"edges": tmp / "g.txt"}
    for key, arr in arrays.items():
        if arr is not None:
            np.save(tmp / f"{key}.npy", arr)
            paths[key] = tmp / f"{key}.npy"
    return paths


def _edgelist_argv(paths: dict[str, Path], command: str = "train") -> list[str]:
    argv = [command, str(paths["edges"])] + (["g_out"] if command == "prepare" else [])
    argv += ["--format", "edgelist"]
    for key, option in (("x", "--features"), ("y", "--labels"), ("split", "--split")):
        if key in paths:
            argv += [option, str(paths[key])]
    return argv + (TRAIN if command == "train" else ["--quiet"])


def _saint(tmp: Path, adj_arrays: dict | None = None, class_map=None, role=None, feats=None) -> Path:
    ei, x, y, split = _graph_arrays()
    root = tmp / "saint"
    root.mkdir()
    adj = sp.csr_matrix((np.ones(ei.shape[1], np.float32), (ei[0], ei[1])), shape=(N, N))
    adj.sum_duplicates()
    members = {"format": np.array("csr"), "shape": np.array([N, N]), "indptr": adj.indptr, "indices": adj.indices,
               "data": adj.data}
    members.update(adj_arrays or {})
    np.savez(root / "adj_full.npz", **members)
    np.save(root / "feats.npy", x if feats is None else feats)
    text = json.dumps({str(v): int(c) for v, c in enumerate(y)}) if class_map is None else class_map
    (root / "class_map.json").write_text(text)
    ids = {key: np.flatnonzero(split == code).tolist() for code, key in enumerate(("tr", "va", "te"))}
    (root / "role.json").write_text(json.dumps(ids) if role is None else role)
    return root


def _reddit(tmp: Path, graph: dict | None = None, label=None) -> Path:
    ei, x, y, split = _graph_arrays()
    root = tmp / "reddit"
    root.mkdir()
    np.savez(root / "reddit_data.npz", feature=x, label=y if label is None else label, node_types=split + 1)
    coo = {"format": np.array("coo"), "shape": np.array([N, N]), "row": ei[0].astype(np.int32),
           "col": ei[1].astype(np.int32), "data": np.ones(ei.shape[1], np.float32)}
    coo.update(graph or {})
    np.savez(root / "reddit_graph.npz", **coo)
    return root


def _ogb_csv(tmp: Path, labels: list[str] | None = None) -> Path:
    ei, x, y, split = _graph_arrays()
    root = tmp / "ogbn_tiny"
    raw, sp_dir = root / "raw", root / "split" / "random"
    raw.mkdir(parents=True)
    sp_dir.mkdir(parents=True)

    def gz(path: Path, rows: list[str]) -> None:
        with gzip.open(path, "wt") as f:
            f.write("".join(r + "\n" for r in rows))

    gz(raw / "edge.csv.gz", [f"{s},{d}" for s, d in ei.T])
    gz(raw / "num-node-list.csv.gz", [str(N)])
    gz(raw / "node-feat.csv.gz", [",".join(map(str, row)) for row in x])
    gz(raw / "node-label.csv.gz", labels if labels is not None else [str(v) for v in y])
    for code, name in enumerate(("train", "valid", "test")):
        gz(sp_dir / f"{name}.csv.gz", [str(v) for v in np.flatnonzero(split == code)])
    return root


def _mggcn_bin(tmp: Path, labels: np.ndarray | None = None) -> Path:
    ei, x, y, split = _graph_arrays()
    root = tmp / "mgbin"
    root.mkdir()
    order = np.lexsort((ei[0], ei[1]))
    src_, dst = ei[0, order], ei[1, order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=N))])
    with open(root / "graph.bin", "wb") as f:
        f.write(b"PIGO-CSR-v2" + bytes([4, 4]) + struct.pack("<IIII", N, src_.size, N, N))
        f.write(indptr.astype("<u4").tobytes() + src_.astype("<u4").tobytes())
    for name, arr in (("features.bin", x.astype("<f4")), ("labels.bin", (y if labels is None else labels)
                                                           .astype("<i4")[:, None]),
                      ("sets.bin", split.astype("<i4")[:, None])):
        with open(root / name, "wb") as f:
            f.write(np.array(arr.shape, "<u4").tobytes() + arr.tobytes())
    return root


def _prepared(tmp: Path, name: str = "prep", undirected: bool = False) -> Path:
    from mggcn.data.formats import read
    from mggcn.data.prepared.writer import prepare

    paths = _edgelist(tmp)
    graph = read(paths["edges"], "edgelist", features=paths["x"], labels=paths["y"], split=paths["split"])
    return prepare(graph, tmp / name, undirected=undirected, progress=False)


def _edit_manifest(root: Path, edit: Callable[[dict], None]) -> None:
    path = root / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def _rewrite_array(root: Path, name: str, edit: Callable[[np.ndarray], np.ndarray]) -> None:
    """Change one array of a prepared directory, keeping its dtype and shape (so only the values lie)."""
    path = root / f"{name}.npy"
    arr = np.load(path)
    np.save(path, edit(arr.copy()).astype(arr.dtype))


def _deep_json(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


Case = Callable[[Path], tuple[list[str], str, list[str]]]

# ------------------------------------------------------------------------------- item 3: structures that reach C


def _saint_indptr_past_arrays(tmp: Path):
    root = _saint(tmp)
    with np.load(root / "adj_full.npz") as npz:
        members = dict(npz)
    members["indptr"] = members["indptr"].copy()
    members["indptr"][5] = 10**8  # row 4 runs far past the arrays; the last offset still says nnz
    np.savez(root / "adj_full.npz", **members)
    return ["train", str(root), "--format", "saint", *TRAIN], "adj_full.npz", []


def _saint_indptr_decreasing(tmp: Path):
    root = _saint(tmp)
    with np.load(root / "adj_full.npz") as npz:
        members = dict(npz)
    members["indptr"] = members["indptr"].copy()
    members["indptr"][5] = members["indptr"][-1]  # rises to nnz early, then falls back
    np.savez(root / "adj_full.npz", **members)
    return ["prepare", str(root), "out", "--format", "saint", "--quiet"], "adj_full.npz", ["out"]


def _saint_index_out_of_range(tmp: Path):
    root = _saint(tmp)
    with np.load(root / "adj_full.npz") as npz:
        members = dict(npz)
    members["indices"] = members["indices"].copy()
    members["indices"][3] = 10**6
    np.savez(root / "adj_full.npz", **members)
    return ["train", str(root), "--format", "saint", *TRAIN, "--metrics", "m.jsonl"], "adj_full.npz", ["m.jsonl"]


def _saint_indptr_wrong_length(tmp: Path):
    root = _saint(tmp, {"indptr": np.array([0, 1], np.int32)})
    return ["train", str(root), "--format", "saint", *TRAIN], "adj_full.npz", []


def _saint_shape_negative(tmp: Path):
    root = _saint(tmp, {"shape": np.array([-5, -5])})
    return ["train", str(root), "--format", "saint", *TRAIN], "adj_full.npz", []


def _reddit_coo_lengths_differ(tmp: Path):
    root = _reddit(tmp, {"row": np.arange(5, dtype=np.int32)})
    return ["train", str(root), "--format", "dgl-reddit", *TRAIN], "reddit_graph.npz", []


def _reddit_coo_negative_row(tmp: Path):
    ei = _graph_arrays()[0]
    row = ei[0].astype(np.int32)
    row[7] = -3
    root = _reddit(tmp, {"row": row})
    return ["train", str(root), "--format", "dgl-reddit", *TRAIN], "reddit_graph.npz", []


def _mtx_entry_beyond_header(tmp: Path):
    (tmp / "g.mtx").write_text("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n7 1\n")
    return ["train", "g.mtx", "--format", "mtx", *TRAIN], "g.mtx", []


def _mggcn_bin_offsets_fall(tmp: Path):
    root = _mggcn_bin(tmp)
    data = bytearray((root / "graph.bin").read_bytes())
    at = 13 + 16 + 4 * 6  # the magic, the widths, the four header words, then indptr[6] (uint32)
    data[at:at + 4] = struct.pack("<I", 10**6)
    (root / "graph.bin").write_bytes(bytes(data))
    return ["train", str(root), "--format", "mggcn-bin", *TRAIN], "graph.bin", []


def _ogb_npz_member_huge(tmp: Path):
    import zipfile

    root = _ogb_csv(tmp)
    raw = root / "raw"
    ei, _, y, _ = _graph_arrays()
    np.savez(raw / "data.npz", edge_index=ei, num_nodes_list=np.array([N]))
    np.savez(raw / "node-label.npz", node_label=y[:, None])
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 4), }"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    with zipfile.ZipFile(raw / "data.npz", "a") as z:  # node_feat: a header and no data
        z.writestr("node_feat.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    return ["train", str(root), "--format", "ogb", *TRAIN], "data.npz", []


def _threads_huge(tmp: Path):
    return ["train", "synthetic:n=200", *TRAIN, "--threads", "100000", "--metrics", "m.jsonl"], "--threads", \
        ["m.jsonl"]


def _predict_threads_huge(tmp: Path):
    return ["predict", "model.pt", "synthetic:n=200", "--out", "p.npy", "--threads", "100000"], "--threads", \
        ["p.npy"]


ITEM_3: dict[str, Case] = {
    "saint adj_full.npz: indptr points past its arrays": _saint_indptr_past_arrays,
    "saint adj_full.npz: indptr decreases (prepare)": _saint_indptr_decreasing,
    "saint adj_full.npz: a column index beyond n": _saint_index_out_of_range,
    "saint adj_full.npz: indptr of the wrong length": _saint_indptr_wrong_length,
    "saint adj_full.npz: a negative shape": _saint_shape_negative,
    "dgl reddit_graph.npz: row and col of different lengths": _reddit_coo_lengths_differ,
    "dgl reddit_graph.npz: a negative row": _reddit_coo_negative_row,
    "mtx: an entry beyond the header's size": _mtx_entry_beyond_header,
    "mggcn-bin graph.bin: a row offset past the arrays": _mggcn_bin_offsets_fall,
    "train --threads 100000": _threads_huge,
    "predict --threads 100000": _predict_threads_huge,
}

# ----------------------------------------------------------------------------------- item 5: prepared directories


def _prepared_case(edit: Callable[[Path], None], nprocs: int = 1, undirected: bool = False,
                   command: str = "train", named: str = "") -> Case:
    def case(tmp: Path):
        root = _prepared(tmp, undirected=undirected)
        edit(root)
        if command == "info":
            return ["info", str(root)], named or "manifest.json", []
        return ["train", str(root), *TRAIN, "--nprocs", str(nprocs), "--save-predictions", "p.npy"], \
            named or "manifest.json", ["p.npy"]

    return case


def _lying_split_sizes(root: Path) -> None:
    _edit_manifest(root, lambda m: m["split_sizes"].update(train=m["split_sizes"]["train"] * 100))


def _negative_index(root: Path) -> None:
    def edit(a):
        a[4] = -2
        return a

    _rewrite_array(root, "in_indices", edit)


def _index_beyond_n(root: Path) -> None:
    def edit(a):
        a[-1] = N + 7
        return a

    _rewrite_array(root, "out_indices", edit)


def _label_beyond_classes(root: Path) -> None:
    def edit(a):
        a[2] = 17
        return a

    _rewrite_array(root, "labels", edit)


def _false_symmetric(root: Path) -> None:
    _edit_manifest(root, lambda m: m.update(symmetric=True))


def _absolute_array_path(root: Path) -> None:
    outside = root.parent / "elsewhere.npy"
    np.save(outside, np.load(root / "features.npy"))
    _edit_manifest(root, lambda m: m["arrays"]["features"].update(file=str(outside)))


def _dotdot_array_path(root: Path) -> None:
    np.save(root.parent / "labels.npy", np.load(root / "labels.npy"))
    _edit_manifest(root, lambda m: m["arrays"]["labels"].update(file="../labels.npy"))


def _symlink_outside(root: Path) -> None:
    outside = root.parent / "elsewhere-degree.npy"
    np.save(outside, np.load(root / "degree.npy"))
    (root / "degree.npy").unlink()
    (root / "degree.npy").symlink_to(outside)


def _num_nodes_string(root: Path) -> None:
    _edit_manifest(root, lambda m: m.update(num_nodes="30"))


def _split_sizes_not_ints(root: Path) -> None:
    _edit_manifest(root, lambda m: m.update(split_sizes={"train": "many", "val": None, "test": 1.5}))


def _indptr_not_monotone(root: Path) -> None:
    def edit(a):
        a[10], a[11] = a[11], a[10] - 1
        return a

    _rewrite_array(root, "in_indptr", edit)


def _manifest_classes_beyond_vertices(root: Path) -> None:
    _edit_manifest(root, lambda m: m.update(num_classes=10**9))


def _balance_malformed(root: Path) -> None:
    _edit_manifest(root, lambda m: m.update(balance={"2": "fast"}))


def _arrays_record_not_dict(root: Path) -> None:
    _edit_manifest(root, lambda m: m["arrays"].update(degree=["degree.npy"]))


def _split_code_bad(root: Path) -> None:
    def edit(a):
        a[0] = 9
        return a

    _rewrite_array(root, "split", edit)


def _degree_zero(root: Path) -> None:
    def edit(a):
        a[1] = 0
        return a

    _rewrite_array(root, "degree", edit)


ITEM_5: dict[str, Case] = {
    "prepared: split_sizes lie (100x train, P=2)": _prepared_case(_lying_split_sizes, nprocs=2),
    "prepared: a negative index in in_indices": _prepared_case(_negative_index, named="in_indices.npy"),
    "prepared: an index beyond n in out_indices": _prepared_case(_index_beyond_n, named="out_indices.npy"),
    "prepared: a label >= num_classes": _prepared_case(_label_beyond_classes, named="labels.npy"),
    "prepared: a false \"symmetric\": true": _prepared_case(_false_symmetric),
    "prepared: an absolute array path outside the directory": _prepared_case(_absolute_array_path),
    "prepared: an array path with ..": _prepared_case(_dotdot_array_path),
    "prepared: an array file linked to outside the directory": _prepared_case(_symlink_outside,
                                                                               named="degree.npy"),
    "prepared: num_nodes a string": _prepared_case(_num_nodes_string),
    "prepared: split_sizes not integers": _prepared_case(_split_sizes_not_ints),
    "prepared: in_indptr decreases inside": _prepared_case(_indptr_not_monotone, named="in_indptr.npy"),
    "prepared: num_classes 10^9 for 30 vertices": _prepared_case(_manifest_classes_beyond_vertices),
    "prepared: a split code 9": _prepared_case(_split_code_bad, named="split.npy"),
    "prepared: a degree of 0": _prepared_case(_degree_zero, named="degree.npy"),
    "info: balance record malformed": _prepared_case(_balance_malformed, command="info"),
    "info: an arrays record that is a list": _prepared_case(_arrays_record_not_dict, command="info"),
    "info: split_sizes not integers": _prepared_case(_split_sizes_not_ints, command="info"),
}

# ------------------------------------------------------------------------ item 6: one value resizes the problem


def _edgelist_label_huge(tmp: Path):
    y = _graph_arrays()[2].copy()
    y[5] = 10**9
    return _edgelist_argv(_edgelist(tmp, y=y)), "y.npy", []


def _edgelist_label_huge_prepare(tmp: Path):
    y = _graph_arrays()[2].copy()
    y[5] = 10**9
    return _edgelist_argv(_edgelist(tmp, y=y), "prepare"), "y.npy", ["g_out"]


def _edgelist_id_far_beyond_features(tmp: Path):
    paths = _edgelist(tmp, lines=lambda lines: lines + ["3 10000000"])
    return _edgelist_argv(paths), "g.txt", []


def _edgelist_id_far_no_vertex_files(tmp: Path):
    paths = _edgelist(tmp, x=None, y=None, split=None, lines=lambda lines: lines + ["10000000 2"])
    return _edgelist_argv(paths), "g.txt", []


def _edgelist_id_far_prepare(tmp: Path):
    paths = _edgelist(tmp, lines=lambda lines: lines + ["3 10000000"])
    return _edgelist_argv(paths, "prepare"), "g.txt", ["g_out"]


def _saint_label_huge(tmp: Path):
    y = _graph_arrays()[2]
    root = _saint(tmp, class_map=json.dumps({str(v): int(c) if v != 4 else 10**9 for v, c in enumerate(y)}))
    return ["train", str(root), "--format", "saint", *TRAIN], "class_map.json", []


def _reddit_label_huge(tmp: Path):
    y = _graph_arrays()[2].copy()
    y[3] = 10**9
    return ["train", str(_reddit(tmp, label=y)), "--format", "dgl-reddit", *TRAIN], "reddit_data.npz", []


def _ogb_label_huge(tmp: Path):
    y = [str(v) for v in _graph_arrays()[2]]
    y[2] = "1000000000"
    return ["train", str(_ogb_csv(tmp, y)), "--format", "ogb", *TRAIN], "node-label.csv.gz", []


def _mggcn_bin_label_huge(tmp: Path):
    y = _graph_arrays()[2].copy()
    y[8] = 10**9
    return ["train", str(_mggcn_bin(tmp, y)), "--format", "mggcn-bin", *TRAIN], "labels.bin", []


def _mtx_header_huge(tmp: Path):
    (tmp / "g.mtx").write_text("%%MatrixMarket matrix coordinate pattern general\n10000000 10000000 2\n1 2\n3 1\n")
    np.save(tmp / "x.npy", np.zeros((1000, 4), np.float32))
    return ["train", "g.mtx", "--format", "mtx", "--features", "x.npy", *TRAIN], "x.npy", []


def _mtx_header_huge_alone(tmp: Path):
    (tmp / "g.mtx").write_text("%%MatrixMarket matrix coordinate pattern general\n10000000 10000000 2\n1 2\n3 1\n")
    return ["train", "g.mtx", "--format", "mtx", *TRAIN], "g.mtx", []


ITEM_6: dict[str, Case] = {
    "edgelist: one label 10^9 (train)": _edgelist_label_huge,
    "edgelist: one label 10^9 (prepare)": _edgelist_label_huge_prepare,
    "edgelist: id 10^7, features for 30 vertices": _edgelist_id_far_beyond_features,
    "edgelist: id 10^7, no vertex files": _edgelist_id_far_no_vertex_files,
    "edgelist: id 10^7, features for 30 vertices (prepare)": _edgelist_id_far_prepare,
    "saint: class_map label 10^9": _saint_label_huge,
    "dgl-reddit: label 10^9": _reddit_label_huge,
    "ogb: label 10^9": _ogb_label_huge,
    "mggcn-bin: label 10^9": _mggcn_bin_label_huge,
    "mtx: header 10^7 vertices, features for 1000": _mtx_header_huge,
    "mtx: header 10^7 vertices, no vertex files": _mtx_header_huge_alone,
}

# ----------------------------------------------------------------------------------------- item 7: tracebacks


def _features_npz(tmp: Path):
    paths = _edgelist(tmp, x=None)
    np.savez(tmp / "x.npz", x=_graph_arrays()[1])
    return _edgelist_argv(paths) + ["--features", "x.npz"], "x.npz", []


def _zero_features_prepare(tmp: Path):
    paths = _edgelist(tmp, x=np.zeros((N, 0), np.float32))
    return _edgelist_argv(paths, "prepare"), "x.npy", ["g_out"]


def _role_id_huge(tmp: Path):
    split = _graph_arrays()[3]
    role = {key: np.flatnonzero(split == code).tolist() for code, key in enumerate(("tr", "va", "te"))}
    text = json.dumps(role).replace("[", "[1180591620717411303424, ", 1)
    return ["train", str(_saint(tmp, role=text)), "--format", "saint", *TRAIN], "role.json", []


def _class_map_deep(tmp: Path):
    return ["train", str(_saint(tmp, class_map=_deep_json())), "--format", "saint", *TRAIN], "class_map.json", []


def _manifest_deep(tmp: Path):
    root = _prepared(tmp)
    (root / "manifest.json").write_text(_deep_json())
    return ["train", str(root), *TRAIN], "manifest.json", []


def _info_manifest_deep(tmp: Path):
    root = _prepared(tmp)
    (root / "manifest.json").write_text(_deep_json())
    return ["info", str(root)], "manifest.json", []


def _model(tmp: Path, card: str) -> list[str]:
    """A one-layer GCN state dict (8 features, 3 classes) with the sidecar ``card``; the predict command line."""
    import torch

    torch.save({"convs.0.lin.weight": torch.zeros(3, 8), "convs.0.bias": torch.zeros(3)}, tmp / "model.pt")
    (tmp / "model.pt.json").write_text(card)
    return ["predict", "model.pt", "synthetic:n=200,features=8,classes=3", "--out", "p.npy"]


def _model_json_deep(tmp: Path):
    return _model(tmp, _deep_json()), "model.pt.json", ["p.npy"]


def _model_json_no_norm(tmp: Path):
    card = {"format": "mggcn-model", "dims": [8, 3], "activation": "relu", "dataset": {}}
    return _model(tmp, json.dumps(card)), "model.pt.json", ["p.npy"]


def _metrics_deep(tmp: Path):
    (tmp / "m.jsonl").write_text(_deep_json() + "\n")
    return ["report", "m.jsonl", "--out", "plots"], "m.jsonl", ["plots"]


def _checkpoint_dir_is_file(tmp: Path):
    (tmp / "ckpt").write_text("not a directory\n")
    return ["train", "synthetic:n=200", *TRAIN, "--checkpoint-dir", "ckpt", "--checkpoint-every", "1",
            "--metrics", "m.jsonl"], "--checkpoint-dir", ["m.jsonl"]


def _output_dir_unwritable(tmp: Path):
    # /proc/1 is a directory nobody (not even root) can create files in.
    return ["train", "synthetic:n=200", *TRAIN, "--save-model", "/proc/1/model.pt", "--metrics", "m.jsonl"], \
        "--save-model", ["m.jsonl"]


def _predictions_dir_unwritable(tmp: Path):
    return ["train", "synthetic:n=200", *TRAIN, "--save-predictions", "/proc/1/p.npy", "--metrics", "m.jsonl"], \
        "--save-predictions", ["m.jsonl"]


def _truncated_npy(tmp: Path):
    paths = _edgelist(tmp)
    data = paths["x"].read_bytes()
    paths["x"].write_bytes(data[: len(data) // 2])
    return _edgelist_argv(paths), "x.npy", []


def _npy_huge_header(tmp: Path):
    paths = _edgelist(tmp)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 4), }"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    paths["x"].write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    return _edgelist_argv(paths), "x.npy", []


def _labels_float_strings(tmp: Path):
    paths = _edgelist(tmp, y=np.array(["a"] * N))
    return _edgelist_argv(paths), "y.npy", []


def _features_nan(tmp: Path):
    x = _graph_arrays()[1].copy()
    x[4, 1] = np.nan
    return _edgelist_argv(_edgelist(tmp, x=x)), "x.npy", []


def _empty_edge_file(tmp: Path):
    paths = _edgelist(tmp, x=None, y=None, split=None)
    paths["edges"].write_text("")
    return _edgelist_argv(paths), "g.txt", []


def _non_utf8_edges(tmp: Path):
    paths = _edgelist(tmp)
    paths["edges"].write_bytes(b"0 1\n\xff\xfe 2\n")
    return _edgelist_argv(paths), "g.txt", []


def _split_npz_wrong(tmp: Path):
    paths = _edgelist(tmp, split=None)
    np.savez(tmp / "s.npz", train=np.ones(N, bool), val=np.zeros((2, 2)), test=np.zeros(N, bool))
    return _edgelist_argv(paths) + ["--split", "s.npz"], "s.npz", []


def _features_1d(tmp: Path):
    return _edgelist_argv(_edgelist(tmp, x=np.zeros(N, np.float32))), "x.npy", []


def _features_object_npy(tmp: Path):
    paths = _edgelist(tmp, x=None)
    np.save(tmp / "x.npy", np.array([{"a": 1}] * N, dtype=object), allow_pickle=True)
    return _edgelist_argv(paths) + ["--features", "x.npy"], "x.npy", []


def _features_directory(tmp: Path):
    paths = _edgelist(tmp, x=None)
    (tmp / "xdir.npy").mkdir()
    return _edgelist_argv(paths) + ["--features", "xdir.npy"], "xdir.npy", []


def _prepared_array_truncated(tmp: Path):
    root = _prepared(tmp)
    data = (root / "features.npy").read_bytes()
    (root / "features.npy").write_bytes(data[:-5])
    return ["train", str(root), *TRAIN], "features.npy", []


def _metrics_not_utf8(tmp: Path):
    (tmp / "m.jsonl").write_bytes(b'{"epoch": 1, \xff\xfe}\n')
    return ["report", "m.jsonl", "--out", "plots"], "m.jsonl", ["plots"]


def _model_json_not_object(tmp: Path):
    return _model(tmp, "[1, 2]"), "model.pt.json", ["p.npy"]


ITEM_7: dict[str, Case] = {
    "features given as .npz": _features_npz,
    "prepare with F = 0": _zero_features_prepare,
    "role.json id 2^70": _role_id_huge,
    "class_map.json nested 100k deep": _class_map_deep,
    "manifest.json nested 100k deep (train)": _manifest_deep,
    "manifest.json nested 100k deep (info)": _info_manifest_deep,
    "model.pt.json nested 100k deep (predict)": _model_json_deep,
    "model.pt.json without norm (predict)": _model_json_no_norm,
    "model.pt.json a list (predict)": _model_json_not_object,
    "metrics nested 100k deep (report)": _metrics_deep,
    "metrics not UTF-8 (report)": _metrics_not_utf8,
    "--checkpoint-dir is a file": _checkpoint_dir_is_file,
    "--save-model in an unwritable directory": _output_dir_unwritable,
    "--save-predictions in an unwritable directory": _predictions_dir_unwritable,
    "ogb data.npz: a member whose header claims 10^12 rows": _ogb_npz_member_huge,
    "features .npy truncated": _truncated_npy,
    "features .npy header claims 10^12 rows": _npy_huge_header,
    "labels .npy of strings": _labels_float_strings,
    "features with NaN": _features_nan,
    "empty edge list": _empty_edge_file,
    "edge list with non-UTF-8 bytes": _non_utf8_edges,
    "split .npz with a 2-D mask": _split_npz_wrong,
    "features 1-D": _features_1d,
    "features .npy of Python objects": _features_object_npy,
    "features path is a directory": _features_directory,
    "prepared features.npy truncated": _prepared_array_truncated,
}

ITEMS = {"3": ITEM_3, "5": ITEM_5, "6": ITEM_6, "7": ITEM_7}

# --------------------------------------------------------------------------------------------------- running them


def outcome(result: dict) -> str:
    """One word for what a command did: ``clean`` (exit 2, one line), ``traceback``, ``signal``, ``accepted`` ..."""
    err = result["stderr"]
    if result["timed_out"]:
        return "hang"
    if result["signal"] is not None:
        return f"signal {result['signal']}"
    if "Traceback (most recent call last)" in err:
        return "traceback"
    if result["rc"] == 0:
        return "accepted"
    lines = [line for line in err.splitlines() if line.strip()]
    if result["rc"] == 2 and len(lines) == 1:
        return "clean"
    return f"exit {result['rc']}, {len(lines)} stderr lines"


def run_cases(cases: dict[str, Case], tmp: Path) -> list[tuple[str, str, dict, list[str], str]]:
    """Build every case in its own directory under ``tmp``, run them all; ``(name, named, result, outputs, dir)``."""
    from cli_util import run_cli_many

    built, commands = [], []
    for k, (name, case) in enumerate(cases.items()):
        where = tmp / f"case{k}"
        where.mkdir()
        argv, named, outputs = case(where)
        built.append((name, named, outputs, where))
        commands.append((argv, str(where)))
    results = run_cli_many(commands)
    return [(name, named, res, [o for o in outputs if (where / o).exists()], str(where))
            for (name, named, outputs, where), res in zip(built, results, strict=True)]


def assert_all_clean(cases: dict[str, Case], tmp: Path) -> None:
    failures = []
    for name, named, res, left, _ in run_cases(cases, tmp):
        lines = [line for line in res["stderr"].splitlines() if line.strip()]
        what = outcome(res)
        if what != "clean":
            failures.append(f"{name}: {what}: {res['stderr'][-300:]!r}")
        elif named not in lines[0]:
            failures.append(f"{name}: the error does not name {named!r}: {lines[0]!r}")
        elif left:
            failures.append(f"{name}: output(s) {left} written")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("item", ["3", "5", "6", "7"])
def test_hostile_inputs_are_one_line_errors(tmp_path, item):
    assert_all_clean(ITEMS[item], tmp_path)


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_each_rank_checks_the_rows_it_loads(tmp_path, nprocs):
    """Item 5 at P = 1..4 (30 vertices: not divisible by 4): a bad value in a prepared array is refused by the
    rank whose rows (or edges) hold it, with one line naming the array, and only by that rank; the other ranks'
    shards equal those of the intact directory, entry for entry."""
    import workers
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.distributed.partition import make_partition
    from mggcn.distributed.sharding import build_shard
    from mggcn.utils.errors import GraphError

    intact = PreparedDataset(_prepared(tmp_path, "intact"))
    part = make_partition(N, nprocs, seed=5)
    owner = {int(v): r for r in range(nprocs) for v in part.order[part.rows(r)] if v >= 0}
    in_indptr = np.load(tmp_path / "intact" / "in_indptr.npy")
    target = int(np.searchsorted(in_indptr, 4, side="right") - 1)  # the vertex whose in-edges hold entry 4
    cases = {  # array -> (edit, the vertex whose rank must refuse it)
        "in_indices": (_negative_index, target),
        "labels": (_label_beyond_classes, 2),
        "degree": (_degree_zero, 1),
    }
    for k, (name, (edit, vertex)) in enumerate(cases.items()):
        root = _prepared(tmp_path, f"bad{k}")
        edit(root)
        ds = PreparedDataset(root)
        for rank in range(nprocs):
            try:
                shard = build_shard(ds, part, rank, "sym")
            except GraphError as err:
                assert f"{name}.npy" in str(err) and "\n" not in str(err), err
                # a degree is also read by the ranks of its vertex's neighbours; the rest only by its owner
                assert rank == owner[vertex] or name == "degree", (name, rank)
                continue
            assert rank != owner[vertex], f"rank {rank} accepted the bad {name}"
            assert workers.shards_equal(shard, build_shard(intact, part, rank, "sym")), (name, rank)


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_a_false_symmetric_claim_is_refused(tmp_path, nprocs):
    """A directed graph whose manifest says ``"symmetric": true``: the ranks check their diagonal blocks (at these
    sizes every rank finds an asymmetric edge among its own rows), ``verify`` checks every edge; a truly symmetric
    directory passes both."""
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.distributed.partition import make_partition
    from mggcn.distributed.sharding import build_shard
    from mggcn.utils.errors import GraphError

    root = _prepared(tmp_path, "directed")
    (root / "out_indptr.npy").unlink()
    (root / "out_indices.npy").unlink()
    _edit_manifest(root, lambda m: m.update(symmetric=True))
    part = make_partition(N, nprocs, seed=1)
    ds = PreparedDataset(root)
    for rank in range(nprocs):
        with pytest.raises(GraphError, match="symmetric"):
            build_shard(ds, part, rank, "sym")
    with pytest.raises(GraphError, match="symmetric"):
        PreparedDataset(root, verify=True)
    sym = PreparedDataset(_prepared(tmp_path, "undirected", undirected=True), verify=True)
    assert sym.symmetric
    for rank in range(nprocs):
        build_shard(sym, part, rank, "sym")


def test_in_memory_graphs_are_bounded_too():
    """Item 6 for ``from_tensors``/``from_pyg``: one label or one vertex id must not resize the problem."""
    import torch

    from mggcn.data.formats import from_pyg, from_tensors
    from mggcn.utils.errors import GraphError

    ei, x, y, split = _graph_arrays()
    masks = [torch.from_numpy(split == k) for k in range(3)]
    y_big = y.copy()
    y_big[2] = 10**9
    with pytest.raises(GraphError, match="classes") as info:
        from_tensors(torch.from_numpy(ei), torch.from_numpy(x), torch.from_numpy(y_big), *masks)
    assert "\n" not in str(info.value)
    ei_far = ei.copy()
    ei_far[1, 0] = 10**7
    with pytest.raises(GraphError, match="out of range") as info:
        from_tensors(ei_far, x, y, *masks)
    assert "\n" not in str(info.value)

    from torch_geometric.data import Data

    data = Data(edge_index=torch.from_numpy(ei), x=torch.from_numpy(x), y=torch.from_numpy(y_big),
                train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])
    with pytest.raises(GraphError, match="classes"):
        from_pyg(data)


@pytest.mark.parametrize("command", ["train", "train-p2", "info"])
def test_head_closing_the_pipe_exits_quietly(tmp_path, command):
    """``mggcn train | head -3``: when the reader goes away, stop as Unix tools do, with no BrokenPipeError and
    status 141 (128 + SIGPIPE, what a shell reports for ``yes | head``)."""
    if command == "info":
        argv, keep = ["info", str(_prepared(tmp_path))], 0  # gone before the first line
    else:
        argv, keep = ["train", "synthetic:n=300", "--epochs", "200", "--hidden", "4", "--tile-bytes", "0"], 2
        argv += ["--nprocs", "2"] if command == "train-p2" else []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "mggcn", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    for _ in range(keep):
        proc.stdout.readline()
    proc.stdout.close()  # what head does after its lines
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=600)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert rc == 141 and not err.strip(), (rc, err)


# ------------------------------------------------------------------------------------------------------ the table


def _table() -> None:
    import tempfile

    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for item, cases in ITEMS.items():
            where = Path(tmp) / f"item{item}"
            where.mkdir()
            for name, named, res, left, _ in run_cases(cases, where):
                what = outcome(res)
                lines = [line for line in res["stderr"].splitlines() if line.strip()]
                if what == "clean" and named not in lines[0]:
                    what = "clean, not naming it"
                if left:
                    what += f", wrote {left}"
                counts.setdefault(item, {}).setdefault(what.split(",")[0], 0)
                counts[item][what.split(",")[0]] += 1
                last = lines[-1][:110] if lines else ""
                print(f"| {item} | {name} | {what} | {last} |")
    print(json.dumps(counts))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    _table()
