"""Tests for prepared datasets: ``mggcn prepare`` (mggcn.data.prepared.writer, mggcn.data.prepared.edgesort) and reading
them back (mggcn.data.prepared.reader), per format, at P = 1..4, out of core under a hard memory cap, and on bad input.

The claim checked throughout: a rank's shard read from a prepared directory equals, bit for bit, the shard
``build_shard`` cuts from the same graph in memory; so training from either gives the same numbers.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch
from test_formats import (
    N,
    prep_py_layout,
    raises_naming,
    src,  # noqa: F401 (the 40-vertex graph of the format tests, as a fixture)
    write_ogb_csv,
    write_ogb_npz,
    write_reddit,
    write_saint,
    write_vertex_files,
)

import workers
from mggcn.config import TrainConfig
from mggcn.data import formats
from mggcn.data.csr import index_dtype
from mggcn.data.datasets import InMemoryDataset, open_dataset
from mggcn.data.generators import parse_spec
from mggcn.data.graph import SPLITS, Graph
from mggcn.data.prepared.edgesort import EdgeSorter
from mggcn.data.prepared.reader import PreparedDataset, nnz_per_rank
from mggcn.data.prepared.writer import parse_memory, prepare
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.tools.cli import main as cli_main
from mggcn.training.job import TrainJob, run_train_job
from mggcn.utils.errors import ConfigError, GraphError
from mggcn.utils.progress import Progress
from reference import random_graph

CFG = TrainConfig(hidden=(8,), epochs=2, seed=3)


def _train(tmp_path: Path, dataset, tag: str):
    """Two epochs in this process; predictions go through the job's own writer."""
    preds = tmp_path / f"pred-{tag}.npy"
    spec = str(dataset.path) if isinstance(dataset, PreparedDataset) else "unused"
    job = TrainJob(dataset=spec, config=CFG, save_predictions=str(preds), quiet=True)
    # A prepared dataset is opened by the job itself (through open_dataset), as `mggcn train DIR` does.
    result = run_train_job(job, None if isinstance(dataset, PreparedDataset) else dataset)
    return result, np.load(preds)


def assert_trains_the_same(tmp_path: Path, prepared: Path, graph: Graph) -> None:
    """The prepared directory and the in-memory graph give the same shards, losses, weights and predictions.

    Exact (rtol = atol = 0): the shards are bit-identical (checked first), and the same single-process code then
    runs the same floating-point operations on them.
    """
    ds = PreparedDataset(prepared, verify=True)
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == (
        graph.num_nodes, graph.num_edges, graph.num_features, graph.num_classes)
    for norm in ("sym", "mean", "in-mean", "sum"):  # the GCN's, GraphSAGE's and GIN's Â
        part = make_partition(graph.num_nodes, 3, seed=1)
        for rank in range(3):
            same = workers.shards_equal(build_shard(ds, part, rank, norm), build_shard(graph, part, rank, norm))
            assert same, (norm, rank)
    got, got_pred = _train(tmp_path, ds, "prepared")
    want, want_pred = _train(tmp_path, InMemoryDataset(graph), "memory")
    exact = dict(rtol=0, atol=0)
    torch.testing.assert_close([h["loss"] for h in got.history], [h["loss"] for h in want.history], **exact)
    torch.testing.assert_close(got.state_dict, want.state_dict, **exact)
    np.testing.assert_array_equal(got_pred, want_pred)


def _no_leftovers(parent: Path, before: set[str]) -> None:
    assert set(os.listdir(parent)) == before, "a failed prepare left something behind"


# ------------------------------------------------------------------------------------------------ one per format


def _mtx(root: Path, g: Graph) -> tuple[Path, dict]:
    root.mkdir()
    ei = g.edge_index
    scipy.io.mmwrite(root / "g.mtx", sp.coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(N, N)),
                     field="pattern")
    return root / "g.mtx", write_vertex_files(root, g)


def _edgelist(root: Path, g: Graph) -> tuple[Path, dict]:
    root.mkdir()
    with gzip.open(root / "g.csv.gz", "wt") as f:
        f.write("# a comment\nsrc,dst\n" + "".join(f"{s},{d}\n" for s, d in g.edge_index.T))
    return root / "g.csv.gz", write_vertex_files(root, g, "npz")


FORMAT_CASES = {
    "ogb-csv": ("ogb", lambda root, g: (write_ogb_csv(root, g), {})),
    "ogb-npz": ("ogb", lambda root, g: (write_ogb_npz(root, g), {})),
    "saint": ("saint", lambda root, g: (write_saint(root, g), {})),
    "dgl-reddit": ("dgl-reddit", lambda root, g: (write_reddit(root, _all_labelled(g)), {})),
    "mtx": ("mtx", _mtx),
    "edgelist": ("edgelist", _edgelist),
    "mggcn-bin": ("mggcn-bin", lambda root, g: (_mggcn_bin(root, g), {})),
}


def _all_labelled(g: Graph) -> Graph:
    return Graph(g.num_nodes, g.edge_index, g.x, np.where(g.y < 0, 0, g.y), g.masks, g.num_classes, g.name)


def _mggcn_bin(root: Path, g: Graph) -> Path:
    prep_py_layout(root, _all_labelled(g))  # as MG-GCN's prep.py writes it (uint32 labels: no -1)
    return root


@pytest.mark.parametrize("case", FORMAT_CASES)
def test_each_format_trains_like_the_graph_in_memory(tmp_path, src, case):  # noqa: F811
    fmt, write = FORMAT_CASES[case]
    path, options = write(tmp_path / "raw", src)
    out = prepare(path, tmp_path / "prepared", fmt=fmt, progress=False, **options)
    assert PreparedDataset(out).manifest["built"]["format"] == fmt
    assert_trains_the_same(tmp_path, out, formats.read(path, fmt, **options))


def test_pyg_data_and_graph_and_edge_options(tmp_path, src):  # noqa: F811
    from torch_geometric.data import Data

    t = {k: torch.from_numpy(v) for k, v in src.masks.items()}
    data = Data(edge_index=torch.from_numpy(src.edge_index), x=torch.from_numpy(src.x), y=torch.from_numpy(src.y),
                train_mask=t["train"], val_mask=t["val"], test_mask=t["test"])
    assert_trains_the_same(tmp_path, prepare(data, tmp_path / "pyg", progress=False), src)
    # --undirected/--dedup mean what formats.transform means; an undirected graph is stored once (symmetric).
    for undirected, dedup in ((True, False), (False, True), (True, True)):
        out = prepare(src, tmp_path / f"g{undirected}{dedup}", undirected=undirected, dedup=dedup, progress=False)
        assert PreparedDataset(out).symmetric == undirected
        assert not undirected or not (out / "out_indices.npy").exists()
        ref = formats.transform(src, undirected=undirected, dedup=dedup)
        ds = PreparedDataset(out, verify=True)
        part = make_partition(src.num_nodes, 2, seed=4)
        for rank in range(2):
            assert workers.shards_equal(build_shard(ds, part, rank, "sym"), build_shard(ref, part, rank, "sym"))


def test_generated_specs(tmp_path, monkeypatch):
    # rmat: is always streamed, and is exactly the dataset `mggcn train rmat:...` builds in memory.
    spec = "rmat:scale=8,edge_factor=6,seed=2"
    out = prepare(spec, tmp_path / "rmat", progress=False)
    assert PreparedDataset(out).manifest["built"]["generator"]["generator"] == "rmat_graph"
    assert_trains_the_same(tmp_path, out, parse_spec(spec))
    # synthetic: in memory like `mggcn train` while small; streamed (community_stream) when large. Streamed, it is
    # deterministic whatever the chunking, and its vertex data are community_graph's.
    spec = "synthetic:n=1500,degree=8,seed=5"
    assert_trains_the_same(tmp_path, prepare(spec, tmp_path / "small", progress=False), parse_spec(spec))
    monkeypatch.setattr("mggcn.data.prepared.writer.STREAM_MIN_EDGES", 1000)
    a = prepare(spec, tmp_path / "a", progress=False)
    b = prepare(spec, tmp_path / "b", progress=False, memory_limit="1M", chunk_edges=1000)
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    assert ma["built"]["generator"]["generator"] == "community_stream"
    assert {k: r["sha256"] for k, r in ma["arrays"].items()} == {k: r["sha256"] for k, r in mb["arrays"].items()}
    ds, g = PreparedDataset(a, verify=True), parse_spec(spec)
    np.testing.assert_array_equal(np.asarray(ds.arrays["features"]), g.x)
    np.testing.assert_array_equal(np.asarray(ds.arrays["labels"]), g.y)
    assert ds.symmetric and 0.8 * g.num_edges < ds.num_edges <= g.num_edges  # duplicates merged, not topped up


# ------------------------------------------------------------------------------------------------------ P-way


@pytest.mark.slow
def test_p_1_to_4_from_one_directory_same_curve_and_each_rank_reads_its_share(tmp_path):
    """One spawn of 4 ranks trains at P = 1, 2, 3, 4 (P < 4 on the sub-group of ranks 0..P-1).

    The graph is directed with parallel edges and self loops. Each rank's shard must equal the in-memory one
    exactly; the loss curves of different P agree to float32 rounding (the SpMM sums in another order per P;
    differences are ~1e-7 relative, 1e-5 leaves room). A rank's share: it reads exactly its rows and their
    in- and out-edges, and what it gathers from the memory maps and allocates while building the shard shrinks
    with its share (tracemalloc; the O(n) partition itself is made before measuring).
    """
    graph = random_graph(800, 12000, features=8, classes=4, seed=11)
    out = prepare(graph, tmp_path / "p", progress=False)
    cfg = TrainConfig(hidden=(16,), epochs=3, seed=2)
    sizes = (1, 2, 3, 4)
    per_rank = run_workers(workers.prepared_many_p_worker, 4, (str(out), graph, cfg, sizes), timeout_s=300)
    indeg = np.bincount(graph.edge_index[1], minlength=graph.num_nodes)
    outdeg = np.bincount(graph.edge_index[0], minlength=graph.num_nodes)
    reference = per_rank[0][1]["losses"]
    F = graph.num_features
    for p in sizes:
        part = make_partition(graph.num_nodes, p, cfg.seed, cfg.partition)
        for rank in range(p):
            got = per_rank[rank][p]
            assert got["same"], f"P={p} rank {rank}: shard differs from build_shard"
            torch.testing.assert_close(got["losses"], reference, rtol=1e-5, atol=0)
            torch.testing.assert_close(got["state"], per_rank[0][p]["state"], rtol=0, atol=0)  # replicated
            ids = part.order[part.rows(rank)]
            ids = ids[ids >= 0]
            edges = int(indeg[ids].sum() + outdeg[ids].sum())
            reads = got["reads"]
            assert (reads["rows"], reads["edges"]) == (ids.size, edges)
            # Upper bound, from what shard() gathers: per CSR entry its neighbour id (8 B) and the degrees at both
            # ends (16 B); per row, 2 indptr reads and the diagonal's 2 degrees per view (64 B), features, label, split.
            assert reads["bytes"] <= 24 * edges + (64 + 4 * F + 9) * ids.size
            assert got["peak"] <= 128 * edges + 16 * (4 * F + 9) * ids.size + (64 << 10)
    whole = per_rank[0][1]
    for rank in range(4):
        quarter = per_rank[rank][4]
        assert quarter["reads"]["bytes"] < 0.3 * whole["reads"]["bytes"]
        # the setup's allocation peak is bounded per rank by its own edges and rows above (`got["peak"]`); a ratio
        # to P = 1's is not asserted: the pieces kept per column block and chunk read do not shrink with the share
        # on a graph this small (measured 0.42-0.52 at P = 4 across ranks)
        assert quarter["held"] < 0.35 * whole["held"]


# ------------------------------------------------------------------------------------------------- out of core


_CAPPED = textwrap.dedent("""
    import importlib.util, json, resource, sys, types
    # mggcn/__init__.py imports the trainer (torch, ~600 MiB of address space); the writer needs none of it, so
    # load the package's modules without running its __init__.
    spec = importlib.util.find_spec("mggcn")
    pkg = types.ModuleType("mggcn")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["mggcn"] = pkg
    import numpy as np
    from mggcn.data.prepared.writer import prepare

    def vm(key):
        return next(int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith(key))

    base = vm("VmSize:")
    if sys.argv[1] == "measure":
        print(json.dumps({"base": base}))
        sys.exit()
    cap, edges = int(sys.argv[1]), int(sys.argv[4])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    prepare(sys.argv[2], sys.argv[3], fmt="edgelist", memory_limit="24M", progress=False)
    try:
        np.ones((edges, 2), dtype=np.int64)  # the edge list itself, as int64 pairs
        fits = True
    except MemoryError:
        fits = False
    print(json.dumps({"base": base, "peak": vm("VmPeak:"), "fits": fits, "torch": "torch" in sys.modules}))
""")


def _write_fixed_width_edges(path: Path, num_edges: int, seed: int, chunk: int = 1 << 20) -> None:
    """Lines ``dddd dddd`` (ids < 10^4, zero-padded) written from digit arrays: 10 bytes an edge, fast to make."""
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        for begin in range(0, num_edges, chunk):
            ids = rng.integers(0, 10_000, (min(chunk, num_edges - begin), 2))
            line = np.full((ids.shape[0], 10), ord(" "), dtype=np.uint8)
            line[:, 9] = ord("\n")
            for col in range(2):
                v = ids[:, col].copy()
                for d in range(3, -1, -1):
                    line[:, 5 * col + d] = ord("0") + v % 10
                    v //= 10
            f.write(line.tobytes())


@pytest.mark.slow
def test_out_of_core_under_a_hard_memory_cap(tmp_path):
    """Prepare an edge list larger than the whole address space the process is allowed.

    The cap (RLIMIT_AS) is the writer's baseline — interpreter, numpy, scipy: about 132 MiB here — plus 48 MiB, so
    about 180 MiB; ``prepare`` gets ``memory_limit="24M"``. The edge list has enough edges that as int64 pairs it
    exceeds the cap by 5% or more: about 12.4 M edges, 190 MiB as int64 pairs (124 MB as text). The child proves
    that the edge list does not fit by failing to allocate it after preparing it, and never imports torch.
    """
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    run = [sys.executable, "-c", _CAPPED]
    base = json.loads(subprocess.run(run + ["measure"], capture_output=True, text=True, env=env, check=True,
                                     timeout=60).stdout)["base"]
    cap = base + (48 << 20)
    edges = int(1.05 * cap / 16) + 1
    path = tmp_path / "big.txt"
    _write_fixed_width_edges(path, edges, seed=9)
    out = tmp_path / "big"
    done = subprocess.run(run + [str(cap), str(path), str(out), str(edges)], capture_output=True, text=True, env=env,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert not report["torch"] and not report["fits"] and edges * 16 > cap >= report["peak"]
    ds = PreparedDataset(out, verify=True)
    assert (ds.num_nodes, ds.num_edges) == (10_000, edges)
    # the degrees of the prepared CSRs are those of the edges written
    rng, indeg, outdeg = np.random.default_rng(9), np.zeros(10_000, np.int64), np.zeros(10_000, np.int64)
    for begin in range(0, edges, 1 << 20):
        ids = rng.integers(0, 10_000, (min(1 << 20, edges - begin), 2))
        outdeg += np.bincount(ids[:, 0], minlength=10_000)
        indeg += np.bincount(ids[:, 1], minlength=10_000)
    np.testing.assert_array_equal(np.diff(ds.arrays["in_indptr"]), indeg)
    np.testing.assert_array_equal(np.diff(ds.arrays["out_indptr"]), outdeg)


def test_edge_sorter_small_buckets_and_a_hub(tmp_path):
    """Many buckets, a hub vertex that overflows its bucket (re-split on disk), duplicates and self loops."""
    rng = np.random.default_rng(0)
    n = 300
    e = np.concatenate([rng.integers(0, n, (2, 5000)), np.stack([rng.integers(0, n, 3000), np.full(3000, 7)]),
                        [[5, 5, 5], [5, 5, 6]]], axis=1)
    for undirected in (False, True):
        for dedup in (False, True):
            work = tmp_path / f"w{undirected}{dedup}"
            work.mkdir()
            sorter = EdgeSorter(work, n, e.shape[1], undirected=undirected, dedup=dedup, bucket_edges=300)
            for b in range(0, e.shape[1], 777):
                sorter.add(e[:, b:b + 777])
            assert sorter.views[0].num_buckets > 20
            csr = sorter.finish(work)
            both = np.concatenate([e, e[::-1]], axis=1) if undirected else e  # the sorter's undirected: doubled
            ref = formats.transform(Graph(n, both, np.zeros((n, 1)), np.zeros(n), {s: np.zeros(n) for s in SPLITS},
                                          1), dedup=dedup).edge_index
            for view, (row, col) in (("in", (ref[1], ref[0])), ("out", (ref[0], ref[1]))):
                if undirected and view == "out":
                    continue
                indptr, indices = np.load(work / f"{view}_indptr.npy"), np.load(work / f"{view}_indices.npy")
                got = np.repeat(np.arange(n), np.diff(indptr)) * n + indices
                np.testing.assert_array_equal(got, np.sort(row * n + col))  # sorted by (row, column)
            a = sp.csr_matrix((np.ones(ref.shape[1]), (ref[1], ref[0])), shape=(n, n))
            a.setdiag(0)
            a.eliminate_zeros()
            np.testing.assert_array_equal(np.load(work / "degree.npy"), np.asarray(a.sum(1)).ravel() + 1)
            np.testing.assert_array_equal(csr.hat_nnz_in, np.diff(a.indptr) + 1)
            assert [p.name for p in work.iterdir() if not p.name.endswith(".npy")] == [], "bucket files left"


def test_vertex_ids_are_int32_while_the_vertex_count_fits():
    """Vertex ids are int32 while the vertex count is below 2**31 and int64 from 2**31 on, prepared and in memory
    alike: the reader refuses indices of any other dtype than the count gives, and an id of 2**31 or more narrowed
    to int32 would wrap negative."""
    for n in (0, 1, 2**31 - 1):
        assert index_dtype(n) == np.dtype(np.int32), n
    for n in (2**31, 3_000_000_000, 2**32 - 1, 2**32, 2**40):
        assert index_dtype(n) == np.dtype(np.int64), n
    assert isinstance(index_dtype(5), np.dtype)


def test_a_prepared_directory_has_the_fingerprint_of_its_graph_in_memory(tmp_path):
    """A checkpoint knows a directed graph in memory and its prepared directory as one dataset: both fingerprints
    come from the same sha256 of each array, whatever order the manifest lists the arrays in (prepare writes the
    out-CSR after the degrees, the layout lists it before); another graph has another fingerprint."""
    graph = random_graph(60, 300, features=4, classes=3, directed=True, seed=4)
    out = prepare(graph, tmp_path / "prepared", progress=False)
    prepared = PreparedDataset(out, verify=True)
    assert not prepared.symmetric
    fingerprint = InMemoryDataset(graph).fingerprint
    assert prepared.fingerprint == fingerprint and len(fingerprint) == 16
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["arrays"] = dict(reversed(manifest["arrays"].items()))
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert PreparedDataset(out).fingerprint == fingerprint
    other = random_graph(60, 300, features=4, classes=3, directed=True, seed=5)
    assert InMemoryDataset(other).fingerprint != fingerprint
    assert PreparedDataset(prepare(other, tmp_path / "other", progress=False)).fingerprint != fingerprint


def test_edgelist_chunks_match_the_whole_reader(tmp_path, src):  # noqa: F811
    path = tmp_path / "g.txt"
    lines = ["% c", "u v w"] + [f"{s} {d} 1.0  # x" for s, d in src.edge_index.T]
    path.write_text("\n".join(lines) + "\n")
    chunks = list(formats.iter_edgelist_chunks(path, chunk_edges=7))
    np.testing.assert_array_equal(np.concatenate(chunks, axis=1), formats.read_edgelist(path).edge_index)
    path.write_text("0 1\n" * 9 + "2 x\n")
    with raises_naming(path, "line 10", "'x'"):
        list(formats.iter_edgelist_chunks(path, chunk_edges=4))
    path.write_text("0 1\n" * 9 + "2 -3\n")
    with raises_naming(path, "line 10", "vertex id -3 is negative"):
        list(formats.iter_edgelist_chunks(path, chunk_edges=4))
    path.write_text("# c\n" + "0 1\n" * 9 + "2 30\n")
    with raises_naming(path, "line 11", "vertex id 30", "[0, 20)"):
        list(formats.iter_edgelist_chunks(path, chunk_edges=4, num_nodes=20))


def test_prepare_names_the_line_of_an_id_beyond_the_vertex_files(tmp_path):
    """With features (or labels) n is known before the edges stream: prepare names the line, as train does."""
    path = tmp_path / "g.txt"
    path.write_text("0 1\n" * 9 + "2 7\n")
    np.save(tmp_path / "x.npy", np.ones((5, 3), dtype=np.float32))
    for run in (lambda: prepare(path, tmp_path / "out", fmt="edgelist", features=tmp_path / "x.npy", progress=False),
                lambda: formats.read_edgelist(path, features=tmp_path / "x.npy")):
        with raises_naming(path, "line 10", "vertex id 7 is out of range [0, 5) (the rows of x.npy)"):
            run()
    assert not (tmp_path / "out").exists()


def test_balance_matches_make_partition():
    nnz = np.random.default_rng(1).integers(1, 50, 103)
    for p in (1, 2, 4, 8):
        part = make_partition(103, p, seed=0)
        want = [int(nnz[part.order[part.rows(r)][part.order[part.rows(r)] >= 0]].sum()) for r in range(p)]
        assert nnz_per_rank(nnz, p).tolist() == want


def test_progress_plain_when_not_a_terminal_and_silent_when_off(tmp_path, capsys):
    g = random_graph(30, 100, seed=1)
    prepare(g, tmp_path / "a", progress=True)
    err = capsys.readouterr().err
    assert "mggcn prepare: sorting edge buckets: 200 edges in" in err and "\r" not in err
    prepare(g, tmp_path / "b", progress=False)
    assert capsys.readouterr().err == ""
    lines = []

    class Tty:
        def isatty(self):
            return True

        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    with Progress(stream=Tty()).step("x", 10) as step:
        step.update(10)
    assert any("\r" in t for t in lines)  # a tqdm bar


def test_parse_memory():
    assert parse_memory("2G") == 2 << 30 and parse_memory("512m") == 512 << 20 and parse_memory("1.5GiB") == 3 << 29
    for bad in ("lots", "12", "-1G"):
        with pytest.raises(ConfigError, match="memory_limit"):
            parse_memory(bad)


# ----------------------------------------------------------------------------------------------------- the CLI


def test_cli_prepare_info_train(tmp_path, capsys):
    g = random_graph(40, 300, features=4, classes=3, seed=2)
    edges = tmp_path / "e.txt"
    edges.write_text("".join(f"{s} {d}\n" for s, d in g.edge_index.T))
    files = write_vertex_files(tmp_path, g)
    out = tmp_path / "prep"
    assert cli_main(["prepare", str(edges), str(out), "--format", "edgelist", "--undirected", "--quiet",
                     "--features", str(files["features"]), "--labels", str(files["labels"]),
                     "--split", str(files["split"]), "--memory-limit", "64M"]) == 0
    assert cli_main(["info", str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    pairs = {tuple(e) for e in g.edge_index.T.tolist()}
    both_ways = len(pairs | {(b, a) for a, b in pairs})  # random edges hold some pairs twice, some both ways
    for words in ("vertices    40", f"edges       {both_ways:,} (symmetric)", "in-degree   min",
                  "out-degree  min", f"train {int(g.masks['train'].sum())}", "P=1 ", "P=2 ", "P=4 ", "P=8 "):
        assert words in text, words
    assert text.splitlines()[-1] == "verified: 6 arrays match their checksums, every value is in range"
    assert cli_main(["train", str(out), "--epochs", "2", "--hidden", "8", "--quiet"]) == 0
    assert cli_main(["train", str(out), "--undirected"]) == 2
    assert "cannot change a prepared dataset" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["prepare", "{tmp}/nope.txt", "{tmp}/o", "--format", "edgelist"], ["nope.txt", "no such file"]),
    (["prepare", "{tmp}/e.txt", "{tmp}/o"], ["e.txt", "--format"]),
    (["prepare", "{tmp}/e.txt", "{tmp}/o", "--format", "ogb", "--labels", "y.npy"], ["--labels is for"]),
    (["prepare", "{tmp}/e.txt", "{tmp}/o", "--format", "edgelist", "--memory-limit", "lots"], ["--memory-limit"]),
    (["prepare", "{tmp}/e.txt", "{tmp}/e.txt", "--format", "edgelist"], ["e.txt", "already exists"]),
    (["info", "{tmp}"], ["manifest.json", "not a prepared dataset"]),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, capsys, argv, words):
    (tmp_path / "e.txt").write_text("0 1\n")
    before = set(os.listdir(tmp_path))
    assert cli_main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"mggcn {argv[0]}: error: "), err
    for w in words:
        assert w in err, err
    _no_leftovers(tmp_path, before)


# ---------------------------------------------------------------------------------------------------- bad input


def _prepare_fails(tmp_path: Path, named: Path, *words: str, **kwargs) -> None:
    """prepare(**kwargs) raises a one-line error naming ``named``, and leaves the output's parent as it was."""
    parent = tmp_path / "outputs"
    parent.mkdir(exist_ok=True)
    before = set(os.listdir(parent))
    with raises_naming(named, *words):
        prepare(out_dir=parent / "out", progress=False, **kwargs)
    _no_leftovers(parent, before)


def test_bad_input_files(tmp_path, src):  # noqa: F811
    root = write_ogb_csv(tmp_path / "ogb", src)
    (root / "raw/node-feat.csv.gz").unlink()
    _prepare_fails(tmp_path, root / "raw/node-feat.csv.gz", "missing file", source=root, fmt="ogb")
    root = write_saint(tmp_path / "saint", src)
    feats = root / "feats.npy"
    feats.write_bytes(feats.read_bytes()[:-40])
    _prepare_fails(tmp_path, feats, "truncated or corrupt", source=root, fmt="saint")
    x = src.x.copy()
    x[3, 1] = np.nan
    np.save(feats, x)
    _prepare_fails(tmp_path, feats, "NaN or inf", "row 3", source=root, fmt="saint")
    np.save(feats, src.x[:30])
    _prepare_fails(tmp_path, feats, "30 feature rows", "40 vertices", source=root, fmt="saint")

    edges = tmp_path / "e.txt"
    edges.write_text("".join(f"{s} {d}\n" for s, d in src.edge_index.T) + "3 45\n")
    files = write_vertex_files(tmp_path, src)
    last = src.num_edges + 1
    _prepare_fails(tmp_path, edges, f"line {last}", "vertex id 45", "out of range [0, 40)", source=edges,
                   fmt="edgelist", num_nodes=40)
    edges.write_text("".join(f"{s} {d}\n" for s, d in src.edge_index.T))
    np.save(files["labels"], np.where(src.y < 0, -5, src.y))
    _prepare_fails(tmp_path, files["labels"], "label -5", "negative", source=edges, fmt="edgelist", **files)
    np.save(files["labels"], src.y)
    _prepare_fails(tmp_path, files["labels"], "out of range [0, 2)", source=edges, fmt="edgelist",
                   num_classes=2, **files)
    codes = np.load(files["split"])
    np.save(files["split"], np.where(codes == 0, 1, codes))
    _prepare_fails(tmp_path, files["split"], "training split is empty", source=edges, fmt="edgelist", **files)
    masks = dict(src.masks)
    masks["val"] = masks["val"] | masks["train"]
    np.savez(tmp_path / "split.npz", **masks)
    files["split"] = tmp_path / "split.npz"
    _prepare_fails(tmp_path, files["split"], "'train' and 'val' splits overlap", source=edges, fmt="edgelist",
                   **files)


def test_failure_while_writing_leaves_nothing(tmp_path, src, monkeypatch):  # noqa: F811
    def boom(*args, **kwargs):
        raise KeyboardInterrupt  # also what Ctrl-C raises half way through

    monkeypatch.setattr("mggcn.data.prepared.writer._write_vertex_data", boom)
    before = set(os.listdir(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        prepare(src, tmp_path / "out", progress=False)
    _no_leftovers(tmp_path, before)


def test_bad_prepared_directory(tmp_path, src):  # noqa: F811
    out = prepare(src, tmp_path / "p", progress=False)
    fresh = {p.name: p.read_bytes() for p in out.iterdir()}

    def restore():
        for name, data in fresh.items():
            (out / name).write_bytes(data)

    (out / "features.npy").unlink()
    with raises_naming(out / "features.npy", "missing file"):
        PreparedDataset(out)
    restore()
    data = out / "in_indices.npy"
    data.write_bytes(fresh["in_indices.npy"][:-8])
    with raises_naming(data, "truncated"):
        open_dataset(str(out))
    data.write_bytes(fresh["in_indices.npy"][:50])
    with raises_naming(data, "truncated or corrupt .npy"):
        PreparedDataset(out)
    restore()
    corrupt = bytearray(fresh["in_indices.npy"])
    corrupt[-3] ^= 0xFF
    data.write_bytes(bytes(corrupt))
    PreparedDataset(out)  # the cheap checks do not read the data ...
    with raises_naming(data, "checksum mismatch"):
        PreparedDataset(out, verify=True)  # ... verify does
    restore()
    np.save(out / "features.npy", src.x[:39])
    with raises_naming(out / "features.npy", "[39, 5]", "expected float32 [40, 5]"):
        PreparedDataset(out)
    restore()
    manifest = json.loads(fresh["manifest.json"])
    (out / "manifest.json").write_text(json.dumps(dict(manifest, format_version=3)))
    with raises_naming(out / "manifest.json", "format version 3 is newer", "up to 2"):
        open_dataset(str(out))
    (out / "manifest.json").write_text("{\"format\": ")
    with raises_naming(out / "manifest.json", "invalid JSON"):
        PreparedDataset(out)


def test_a_symmetric_graph_is_stored_once_without_being_told(tmp_path):
    """A symmetric graph given as directed edges (GraphSAINT's adj_full, a PyG edge_index with both directions):
    its out-CSR comes out the in-CSR byte for byte, so it is stored once and marked symmetric (a rank then shares
    Â's blocks as Âᵀ's), with the same shards and training as the graph in memory; a directed graph keeps both."""
    for directed in (False, True):
        graph = random_graph(300, 2000, directed=directed, seed=2)
        out = prepare(graph, tmp_path / f"prepared-{directed}", progress=False)
        assert PreparedDataset(out, verify=True).symmetric == (not directed)
        assert (out / "out_indices.npy").exists() == directed
        (tmp_path / f"train-{directed}").mkdir()
        assert_trains_the_same(tmp_path / f"train-{directed}", out, graph)


@pytest.mark.parametrize("directed", [False, True])
def test_a_dataset_in_memory_written_whole_equals_its_preparation(tmp_path, directed):
    """write_dataset (a dataset in memory, array by array) and prepare (edges bucketed and sorted) make the same
    directory: arrays, and the manifest's counts (self loops, nonzeros of Â, balance), on a graph with parallel
    edges and self loops."""
    from mggcn.data.prepared.writer import write_dataset

    g = random_graph(500, 4000, features=5, classes=3, directed=directed, seed=2)
    extra = np.stack([np.arange(20), np.arange(20)])
    g.edge_index = np.concatenate([g.edge_index, g.edge_index[:, :100], extra, extra[:, :5]], axis=1)
    a = PreparedDataset(write_dataset(InMemoryDataset(g), tmp_path / "whole"), verify=True)
    b = PreparedDataset(prepare(g, tmp_path / "prepared", progress=False), verify=True)
    for key in ("num_edges", "symmetric", "self_loops", "nnz_hat", "balance", "split_sizes", "num_labelled"):
        assert a.manifest[key] == b.manifest[key], key
    assert a.manifest["self_loops"] >= 25  # the loops added, and those random_graph draws
    for name in b.arrays:
        np.testing.assert_array_equal(a.arrays[name], b.arrays[name], err_msg=name)
    unsummed = PreparedDataset(write_dataset(InMemoryDataset(g), tmp_path / "quick", checksums=False,
                                             fingerprint="0123456789abcdef"))
    assert unsummed.fingerprint == "0123456789abcdef"
    assert all("sha256" not in r for r in unsummed.manifest["arrays"].values())
    for key in ("self_loops", "nnz_hat", "num_labelled"):  # what info says of the dataset: checked by --verify
        manifest = json.loads((tmp_path / "prepared" / "manifest.json").read_text())
        counted = manifest[key]
        manifest[key] += 3
        (tmp_path / "prepared" / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(GraphError, match=f"manifest.json: {key} {counted + 3} disagrees with the arrays, which "
                                             f"hold {counted:,}"):
            PreparedDataset(tmp_path / "prepared", verify=True)
        manifest[key] = counted
        (tmp_path / "prepared" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GraphError, match="the parent directory .* does not exist"):
        write_dataset(InMemoryDataset(g), tmp_path / "absent" / "x")
    with pytest.raises(ConfigError, match="already exists"):
        write_dataset(InMemoryDataset(g), tmp_path / "quick")


def test_info_verify_counts_only_the_arrays_it_checked(tmp_path, capsys):
    from mggcn.tools.cli import main

    out = tmp_path / "karate"
    assert main(["prepare", "builtin:karate", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["arrays"]["notes"] = {"file": "notes.npy", "dtype": "<i8", "shape": [1], "sha256": "0" * 64}
    (out / "manifest.json").write_text(json.dumps(manifest))  # an entry no reader opens: nothing was checked of it
    capsys.readouterr()
    assert main(["info", str(out), "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "verified: 6 arrays match their checksums, every value is in range"


@pytest.mark.parametrize("dedup", [False, True])
def test_rows_sorted_by_two_keys_equal_rows_sorted_by_one(dedup):
    """Vertex ids so large that (row, column) does not fit one int64 key (width * n >= 2**63: a graph of more than
    about 3e9 vertices) take a two-key sort: it must sort by row then column, and drop repeated pairs, as the one-key
    sort does."""
    from mggcn.data.prepared.edgesort import _sort_rows

    rng = np.random.default_rng(0)
    lo, hi = 100, 160
    pairs = np.stack([rng.integers(lo, hi, 2000), rng.integers(0, 1000, 2000)], axis=1)
    pairs = np.concatenate([pairs, pairs[:300], np.stack([np.arange(lo, hi), np.arange(lo, hi)], axis=1)])
    one = _sort_rows(pairs.copy(), lo, hi, 1000, dedup, np.dtype(np.int64))
    two = _sort_rows(pairs.copy(), lo, hi, 2**58, dedup, np.dtype(np.int64))  # 60 * 2**58 >= 2**63
    for name in ("counts", "cols", "degree", "hat_nnz"):
        np.testing.assert_array_equal(getattr(two, name), getattr(one, name), err_msg=name)
    assert two.self_loops == one.self_loops


def test_an_edge_list_spilled_in_many_chunks_loses_no_edge(tmp_path):
    """An edge list whose sizes are known only at its end is kept on disk (EdgeSpill) and read back in chunks: with
    more edges than a chunk holds, every edge comes back (the prepared CSR holds the file's edges)."""
    from mggcn.data.prepared.edgesort import EdgeSpill
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.data.prepared.writer import prepare

    e = np.random.default_rng(0).integers(0, 500, (5000, 2))
    spill = EdgeSpill(tmp_path / "s")
    for b in range(0, 5000, 999):
        spill.add(e[b:b + 999].T)
    back = np.concatenate(list(spill.chunks(1024)), axis=1)
    spill.close()
    np.testing.assert_array_equal(back, e.T)
    np.savetxt(tmp_path / "g.txt", e, fmt="%d")
    out = prepare(tmp_path / "g.txt", tmp_path / "ds", fmt="edgelist", chunk_edges=1024, progress=False)
    ds = PreparedDataset(out, verify=True)
    assert ds.num_edges == 5000
    got = np.repeat(np.arange(ds.num_nodes), np.diff(ds.arrays["out_indptr"])) * 500 + ds.arrays["out_indices"]
    np.testing.assert_array_equal(got, np.sort(e[:, 0] * 500 + e[:, 1]))
