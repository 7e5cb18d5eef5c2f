"""The download, the catalog, the named datasets' cache, the label checks and crafted sparse ``.npz`` files at the
places a bug would change what a user gets and no other test looks: a server that ignores Range or answers another
one, an absolute zip member, the sources and checksums the docs give, OGB graphs stored one way, the cache variable,
a rank that waited for another's prepare, options a name or a prepared directory refuses."""

from __future__ import annotations

import io
import os
import stat
import zipfile

import numpy as np
import pytest

from dataset_server import serving, zip_tree
from mggcn.data import download
from mggcn.data.catalog import CATALOG, cache_dir, download_dir
from mggcn.data.download import DownloadError, fetch, fetch_files, raw_dir
from mggcn.utils.errors import GraphError


@pytest.fixture
def served(tmp_path, monkeypatch):
    yield from serving(tmp_path, monkeypatch)


# --- download.py --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, file", [("cora", "ind.cora.graph"), ("flickr", "flickr.zip")])
def test_a_server_that_ignores_range_rewrites_the_partial_file_whole(served, name, file):
    """(D5) a 200 answer to a Range request replaces the .part's bytes: the file kept is the server's, byte for
    byte (a zip tolerates bytes before it, so the flickr case alone passed with them appended)."""
    served.ignore_range = True
    served.cuts[f"/{name}/{file}"] = 500
    paths = fetch_files(CATALOG[name], progress=False)
    (path,) = [p for p in paths if p.name == file]
    assert path.read_bytes() == served.files[f"/{name}/{file}"]


def test_a_206_for_another_range_than_asked_restarts_the_file(served, monkeypatch):
    """(D4) a server answering 206 with a Content-Range that does not start where the .part ends (here: the whole
    file, from byte 0) sends the file whole: it replaces the .part instead of being appended to it."""
    import dataset_server

    real = dataset_server._Handler.do_GET

    def whole_as_206(self):
        wanted = self.headers.get("Range")
        body = self.server.files.get(self.path)
        if not wanted or body is None:
            return real(self)
        self.server.requests.append((self.path, wanted))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes 0-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    monkeypatch.setattr(dataset_server._Handler, "do_GET", whole_as_206)
    served.cuts["/cora/ind.cora.graph"] = 700
    fetch_files(CATALOG["cora"], progress=False)
    assert (download_dir(CATALOG["cora"]) / "ind.cora.graph").read_bytes() == served.files["/cora/ind.cora.graph"]


def test_retries_wait_longer_each_time(served, monkeypatch):
    """(D9) the wait before each retry doubles: BACKOFF_S, 2·BACKOFF_S, 4·BACKOFF_S, over ATTEMPTS tries."""
    waits, tries = [], []
    monkeypatch.setattr(download, "BACKOFF_S", 0.5)
    monkeypatch.setattr(download.time, "sleep", waits.append)

    def cut(url, part, progress):
        tries.append(url)
        raise download._Cut("the connection broke after 0 bytes (test)")

    monkeypatch.setattr(download, "_download", cut)
    with pytest.raises(DownloadError, match=f"{download.ATTEMPTS} tries"):
        fetch_files(CATALOG["cora"], progress=False)
    assert len(tries) == download.ATTEMPTS
    assert waits == [0.5 * 2**i for i in range(download.ATTEMPTS - 1)]


def test_an_absolute_zip_member_is_refused_and_nothing_is_written_outside(served, tmp_path):
    """(D13) a member named by an absolute path ("/.../escaped.npy") would be written there: refused as leading
    outside the directory it is extracted into."""
    outside = tmp_path / "elsewhere" / "escaped.npy"
    body = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(served.files["/flickr/flickr.zip"])) as src, zipfile.ZipFile(body, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        dst.writestr(str(outside), b"not yours")
    served.files["/flickr/flickr.zip"] = body.getvalue()
    with pytest.raises(GraphError, match="outside"):
        fetch(CATALOG["flickr"], progress=False)
    assert not outside.exists() and not raw_dir(CATALOG["flickr"]).exists()


def test_the_extracted_tree_follows_the_umask(served):
    """(D14) the extraction directory is private (mkdtemp, 0700); the tree kept in the cache gets the umask's mode,
    as every file the cache holds, so that others sharing the cache can read it."""
    old = os.umask(0o022)
    try:
        fetch(CATALOG["flickr"], progress=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(raw_dir(CATALOG["flickr"]).stat().st_mode) == 0o755


# --- catalog.py ---------------------------------------------------------------------------------------------------

def _docs_urls() -> set[str]:
    """The source URLs docs/datasets.md gives, brace lists expanded (``.../ind.NAME.{x,tx}`` for each Planetoid
    name)."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "datasets.md").read_text()
    urls = set()
    for url in re.findall(r"`(https?://[^`]+)`", page):
        names = ["cora", "citeseer", "pubmed"] if "NAME" in url else [None]
        for name in names:
            u = url.replace("NAME", name) if name else url
            m = re.search(r"\{([^}]*)\}", u)
            urls |= {u[:m.start()] + part + u[m.end():] for part in m.group(1).split(",")} if m else {u}
    return urls


def test_every_source_url_is_the_one_the_docs_give(monkeypatch):
    """(C7) the catalog's source URLs (not the mirror's, which every other test uses) are those docs/datasets.md
    lists: a typo in one would fail every real download of that dataset, and no served test would notice."""
    monkeypatch.delenv("MGGCN_DATA_URL", raising=False)
    used = {entry.url(f) for entry in CATALOG.values() for f in entry.files}
    assert used == _docs_urls()


def test_the_download_sizes_are_the_docs_round_figures():
    """(C10) each archive's size, as `mggcn datasets` prints it, within 5% of the docs table's "about N UNIT"."""
    import re
    from pathlib import Path

    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    page = (Path(__file__).resolve().parents[2] / "docs" / "datasets.md").read_text()
    for name, entry in CATALOG.items():
        m = re.search(rf"^\| {re.escape(name)} \|[^|]*\| about ([\d.]+) (\w+) \|", page, re.M)
        if entry.archive and entry.download is not None:
            assert m, name
            want = float(m.group(1)) * units[m.group(2)]
            assert abs(entry.download - want) <= 0.05 * want, (name, entry.download, want)


@pytest.mark.parametrize("name, top, split, both_ways", [("ogbn-products", "products", "sales_ranking", True),
                                                         ("ogbn-proteins", "proteins", "species", True),
                                                         ("ogbn-arxiv", "arxiv", "time", False)])
def test_ogb_datasets_that_store_each_edge_once_get_the_reverse(served, tmp_path, name, top, split, both_ways):
    """(C9, S12, S15) ogbn-products and ogbn-proteins store each edge once and OGB's loader adds the reverse
    (add_inverse_edge); ogbn-arxiv is directed. Served here as a graph with each edge once (the served catalog's
    generated graph holds both directions already, so the flag made no difference there)."""
    from test_formats import write_ogb_csv
    from test_ogb_proteins import write_ogb_proteins

    from mggcn.data.datasets import load_graph, open_dataset
    from reference import random_graph

    g = random_graph(40, 120, directed=True, seed=3)
    keep = g.edge_index[0] < g.edge_index[1]  # each pair once, one way, no self loop, no parallel edge
    from mggcn.data.graph import Graph
    once = np.unique(g.edge_index[:, keep], axis=1)
    g = Graph(g.num_nodes, once, g.x, g.y, g.masks, name="once").validate()
    tree = tmp_path / "tree" / top
    if name == "ogbn-proteins":
        labels = (np.random.default_rng(0).random((g.num_nodes, 3)) < 0.4).astype(np.uint8)
        labels[0, :2] = 1
        write_ogb_proteins(tree, g, labels, np.ones((g.num_edges, 8), np.float32))
    else:
        write_ogb_csv(tree, g, split)
    served.files[f"/{name}/{CATALOG[name].files[0].name}"] = zip_tree(tree.parent, None)
    want = 2 * g.num_edges if both_ways else g.num_edges
    assert load_graph(name).num_edges == want
    assert open_dataset(name, progress=False).num_edges == want


def test_the_cache_variable_blank_or_with_a_tilde(tmp_path, monkeypatch):
    """(C4, C5) MGGCN_DATA of blanks is unset (the default cache), and ~ in it is the home directory (as set in a
    service's environment file, where no shell expands it)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MGGCN_DATA", "  ")
    assert cache_dir() == tmp_path / ".cache" / "mggcn"
    monkeypatch.setenv("MGGCN_DATA", "~/graphs")
    assert cache_dir() == tmp_path / "graphs"


# --- datasets.py, tools/cli/datasets.py ---------------------------------------------------------------------------

def test_a_process_that_waited_while_another_prepared_does_not_prepare_again(served, monkeypatch):
    """(S5) the ranks of one host wait for the one preparing a named dataset; once it is prepared, a process that
    waited reads it: it does not prepare it again over the directory (overwrite) that others may be reading."""
    import fcntl
    import threading
    import time

    from mggcn.data.datasets import named_dataset_dir
    from mggcn.data.prepared import writer

    entry, calls, results = CATALOG["citeseer"], [], []
    real = writer.prepare
    monkeypatch.setattr(writer, "prepare", lambda *a, **k: (calls.append(a), real(*a, **k))[1])
    folder = download_dir(entry)
    folder.mkdir(parents=True)
    with open(folder / ".lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # another process holds the lock ...
        waiter = threading.Thread(target=lambda: results.append(named_dataset_dir(entry, progress=False)))
        waiter.start()
        time.sleep(0.5)
        out = cache_dir() / "prepared" / "citeseer"
        out.parent.mkdir(parents=True)
        real(fetch(entry, progress=False), out, fmt="planetoid", progress=False)  # ... and prepares it meanwhile
        manifest = (out / "manifest.json").stat().st_mtime_ns
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    waiter.join(60)
    assert results == [out] and calls == []
    assert (out / "manifest.json").stat().st_mtime_ns == manifest


@pytest.mark.parametrize("name", ["reddit", "ogbn-arxiv", "flickr"])
def test_normalize_features_on_a_name_that_is_not_planetoid_is_refused_in_one_line(served, name):
    """(S6) normalize_features is for the Planetoid names: another name refuses it by name (a ConfigError), before
    anything is downloaded, not with a TypeError of its reader."""
    from mggcn.data.datasets import load_graph, open_dataset
    from mggcn.utils.errors import ConfigError

    for call in (open_dataset, load_graph):
        with pytest.raises(ConfigError) as err:
            call(name, read_options={"normalize_features": True})
        assert "\n" not in str(err.value) and "normalize_features" in str(err.value) and name in str(err.value)
        if call is open_dataset:
            assert served.requests == []  # (load_graph downloads first, then refuses: see the report)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_csr_by_lexsort_where_keys_would_overflow(monkeypatch, dtype):
    """(S8) the lexsort path of _csr (taken for n > MAX_KEY_NODES, ~3·10⁹ vertices, so never by the existing test,
    whose _CHUNK patch does not reach it): forced here, it gives the CSR that lexsort gives, a few at a time."""
    from mggcn.data import datasets

    monkeypatch.setattr(datasets, "MAX_KEY_NODES", 0)
    monkeypatch.setattr(datasets, "_CHUNK", 5)
    rng = np.random.default_rng(1)
    n = 37
    keys, values = rng.integers(0, n, 400).astype(dtype), rng.integers(0, n, 400).astype(dtype)
    keys[:10], values[:10] = 4, 4
    indptr, indices = datasets._csr(keys, values, n)
    order = np.lexsort((values, keys))
    assert np.array_equal(indptr, np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=n))]))
    assert np.array_equal(indices, values[order]) and indices.dtype == np.int64


def test_mggcn_datasets_right_aligns_the_numbers(served, capsys):
    """(S13) the numeric columns of `mggcn datasets` are right-aligned under their headers (the docs' console
    sample shows them so); the name, cached and source columns left-aligned."""
    from mggcn.tools.cli import main

    assert main(["datasets"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()[:-1]
    for i, column in enumerate(("vertices", "edges", "features", "classes")):
        end = header.index(column) + len(column)
        for line, entry in zip(rows, CATALOG.values()):
            assert line[:end].endswith(f" {entry.stats[i]:,}"), (column, line)
    for line, name in zip(rows, CATALOG):
        assert line.startswith(f"{name} ")


def test_the_planetoid_checksums_are_those_verified_against_the_source():
    """(C8, C13) every served test replaces the Planetoid files' checksums by those of the files it serves, so an
    edit of one in the catalog (all users' downloads then refused as corrupt) went unnoticed. The digest below is
    of the catalog's (name, sha256, git blob id, size) rows as verified against kimiyoung/planetoid's data/ (every
    sha256 and size of the 23 files, and the git blob id of ind.pubmed.allx from its tree): change it only after
    verifying the new values against the files themselves."""
    import hashlib

    rows = sorted((f.name, f.sha256, f.git_blob, f.size) for e in CATALOG.values() for f in e.files if not e.archive)
    assert len(rows) == 24 and all((f[1] is None) != (f[2] is None) for f in rows)
    assert hashlib.sha256(repr(rows).encode()).hexdigest() == \
        "1ab2bdb7060d7a2bf911b70c29e774bfb753e8e309f2c3b723800701c71b69e5"


def test_a_download_cut_in_its_first_file_is_partial(served, monkeypatch):
    """(S1) a run cut while downloading a dataset's first (or only) file leaves just FILE.part: `mggcn datasets`
    says "partial" (a download to continue), not "no"."""
    from mggcn.data.datasets import cached_state

    monkeypatch.setattr(download, "ATTEMPTS", 1)
    served.cuts["/reddit/reddit.zip"] = 700
    with pytest.raises(DownloadError):
        fetch(CATALOG["reddit"], progress=False)
    assert (download_dir(CATALOG["reddit"]) / "reddit.zip.part").is_file()
    assert cached_state(CATALOG["reddit"]) == "partial"


def test_undirected_alone_shares_the_undirected_dedup_copy(served, monkeypatch):
    """(S4) an undirected graph is made without parallel edges (PyG's to_undirected) whether dedup is asked or not:
    `--undirected` and `--undirected --dedup` read one prepared copy, prepared once."""
    from mggcn.data.datasets import named_dataset_dir
    from mggcn.data.prepared import writer

    calls, real = [], writer.prepare
    monkeypatch.setattr(writer, "prepare", lambda *a, **k: (calls.append(k), real(*a, **k))[1])
    both = named_dataset_dir(CATALOG["cora"], undirected=True, dedup=True, progress=False)
    alone = named_dataset_dir(CATALOG["cora"], undirected=True, progress=False)
    assert alone == both and len(calls) == 1 and calls[0]["dedup"] is True


def test_a_file_named_like_a_dataset_is_read_with_its_format(tmp_path, monkeypatch):
    """(S7) a path given with a format is read as that path even where its name is a catalog's (a file `cora`
    here): only a name that is no path is refused with fmt=."""
    from mggcn.data.datasets import check_not_named, load_graph

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cora").write_text("0 1\n1 2\n2 0\n")
    check_not_named("cora", "edgelist")
    graph = load_graph("cora", "edgelist")
    assert graph.num_nodes == 3 and graph.num_edges == 3
    (tmp_path / "cora").unlink()
    with pytest.raises(GraphError, match="a dataset known by name"):
        check_not_named("cora", "edgelist")


def test_reader_options_on_a_prepared_directory_are_refused(tmp_path):
    """(S10) a prepared directory is read as prepared: reader options (normalize_features, features=...) cannot
    change it, and are refused by name rather than ignored."""
    from mggcn.data.datasets import open_dataset
    from mggcn.data.prepared.writer import prepare
    from mggcn.utils.errors import ConfigError

    out = tmp_path / "prepared"
    prepare("synthetic:n=40,features=4,classes=2,seed=1", out, progress=False)
    assert open_dataset(str(out)).num_nodes == 40
    for options in ({"normalize_features": True}, {"features": "x.npy"}):
        with pytest.raises(ConfigError, match="cannot change a prepared dataset"):
            open_dataset(str(out), read_options=options)


# --- formats/labels.py --------------------------------------------------------------------------------------------

def test_ogb_labels_have_no_minus_one_sentinel(tmp_path):
    """(L1) OGB marks an unlabelled vertex with NaN: a -1 in its label file is an error naming the file and the
    vertex (elsewhere -1 is unlabelled)."""
    import gzip

    from test_formats import write_ogb_csv

    from mggcn.data.formats import read
    from mggcn.data.formats.labels import check_labels
    from reference import random_graph

    root = write_ogb_csv(tmp_path / "ogbn_x", random_graph(20, 60, seed=1))
    labels = root / "raw" / "node-label.csv.gz"
    lines = gzip.decompress(labels.read_bytes()).decode().splitlines()
    lines[3] = "-1"
    labels.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(GraphError) as err:
        read(root, "ogb")
    assert str(labels) in str(err.value) and "label -1 of vertex 3 is negative" in str(err.value)
    assert check_labels(np.array([0, -1, 1]), "y.npy", 3, "x", nan_is_unlabelled=False).tolist() == [0, -1, 1]


def test_a_label_equal_to_the_vertex_count_is_refused(tmp_path):
    """(L2) a label of n with n vertices makes n + 1 classes, more than the vertices (the bound is >=, not >)."""
    from mggcn.data.formats.labels import check_class_count, check_labels

    y = np.array([0, 1, 2, 4, 1])
    check_class_count(np.array([0, 1, 4, 3, 2]), "y.npy")  # n - 1: n classes, allowed
    with pytest.raises(GraphError, match=r"y\.npy.*label 5 of vertex 3 would make 6 classes, more than the 5 vertices"):
        check_labels(np.where(y == 4, 5, y), "y.npy", 5, "x", nan_is_unlabelled=False)


# --- formats/sparse.py --------------------------------------------------------------------------------------------

def _sparse_npz(path, fmt: bytes, **arrays):
    np.savez(path, format=np.array(fmt), **arrays)
    return path


@pytest.mark.parametrize("fmt, arrays, words", [
    (b"coo", dict(shape=np.array([-3, -3]), data=np.zeros(0), row=np.zeros(0, np.int32), col=np.zeros(0, np.int32)),
     "shape [-3, -3] is not two non-negative integers"),  # P1: read as n = -3
    (b"csr", dict(shape=np.array([3, 3]), data=np.ones(1), indptr=np.array([0, 1, 2, 2]), indices=np.array([1, 2])),
     "'data' has 1 entries for 2 indices"),  # P5: a numpy ValueError (a traceback)
    (b"csr", dict(shape=np.array([3, 3]), data=np.ones(2), indptr=np.array([0, 1, 1, 1, 2]),
                  indices=np.array([1, 2])),
     "'indptr' has 5 entries for 3 rows (expected 4)"),  # P6: entry 1's row never written (np.empty garbage)
    (b"csr", dict(shape=np.array([3, 3]), data=np.ones(3), indptr=np.array([1, 2, 3, 3]),
                  indices=np.array([1, 2, 0])),
     "'indptr' runs from 1 to 3, not from 0"),  # P7: entry 0's row never written (garbage vertex id)
    (b"csr", dict(shape=np.array([3, 3]), data=np.ones(2), indptr=np.array([0, 1, 2, 2]), indices=np.array([1, 3])),
     "'indices'[1]: vertex id 3 is out of range [0, 3)"),  # P9: id n passed on (caught later, naming no file)
])
def test_a_sparse_npz_with_inconsistent_arrays_is_refused_naming_the_file(tmp_path, fmt, arrays, words):
    from mggcn.data.formats.sparse import load_sparse

    path = _sparse_npz(tmp_path / "adj.npz", fmt, **arrays)
    with pytest.raises(GraphError) as err:
        load_sparse(path)
    text = str(err.value)
    assert "\n" not in text and text.startswith(str(path)) and words in text


def test_load_graph_refuses_an_option_of_a_named_dataset_before_downloading_it(served):
    """load_graph (in the package's __all__) checked the options only after the download: ogbn-papers100M's 56 GiB
    fetched to say that a name takes no features file."""
    from mggcn.data.datasets import load_graph
    from mggcn.utils.errors import ConfigError

    with pytest.raises(ConfigError, match="flickr: a named dataset takes no features"):
        load_graph("flickr", read_options={"features": "x.npy"})
    assert served.requests == [] and not (raw_dir(CATALOG["flickr"])).exists()
