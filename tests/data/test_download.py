"""Datasets by name against a real HTTP server (tests/dataset_server.py): every name downloads, is checked, extracted
and read; a cut connection resumes; a wrong checksum, a corrupt or hostile zip and a dead server are refused in one
line, and nothing of theirs is read; files placed by hand are used."""

from __future__ import annotations

import dataclasses
import io
import socket
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dataset_server import serving, source_tree
from mggcn.data import download, formats
from mggcn.data.catalog import CATALOG, cache_dir, download_dir, find, named
from mggcn.data.datasets import cached_state, load_graph, named_dataset_dir, open_dataset
from mggcn.data.download import DownloadError, fetch, raw_dir
from mggcn.data.graph import SPLITS
from mggcn.utils.errors import ConfigError, GraphError


@pytest.fixture
def served(tmp_path, monkeypatch):
    yield from serving(tmp_path, monkeypatch)


def reference(name: str, tmp_path: Path):
    """The graph the source's files hold, read straight from a copy of them (as the reader reads them)."""
    entry = CATALOG[name]
    graph = formats.read(source_tree(name, tmp_path / "reference" / name), entry.fmt)
    return formats.transform(graph, undirected=True) if entry.undirected else graph


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize("name", list(CATALOG))
def test_every_name_downloads_checks_and_reads(served, tmp_path, name):
    ref = reference(name, tmp_path)
    graph = load_graph(name)
    assert (graph.num_nodes, graph.num_edges, graph.num_features) == (ref.num_nodes, ref.num_edges,
                                                                      ref.num_features)
    np.testing.assert_array_equal(graph.x, ref.x)
    for split in SPLITS:
        np.testing.assert_array_equal(graph.masks[split], ref.masks[split])
    dataset = open_dataset(name)  # prepared into the cache from the files already there
    assert Path(dataset.path) == cache_dir() / "prepared" / name
    assert (dataset.num_nodes, dataset.num_edges) == (ref.num_nodes, ref.num_edges)
    assert cached_state(CATALOG[name]) == "prepared"
    asked = len(served.requests)
    assert len({path for path, _ in served.requests}) == len(CATALOG[name].files)  # each file fetched once
    open_dataset(name.upper())  # names in any case; read from the cache
    assert len(served.requests) == asked
    leftovers = [p.name for p in cache_dir().rglob("*") if p.name.endswith(".part") or ".partial-" in p.name]
    assert leftovers == []


def test_an_archive_is_extracted_then_removed(served):
    entry = CATALOG["ogbn-arxiv"]
    path = fetch(entry, progress=False)
    assert path == raw_dir(entry) / "." and (path / "raw" / "edge.csv.gz").is_file()
    assert (path / "split" / "time" / "train.csv.gz").is_file()
    assert not (download_dir(entry) / "arxiv.zip").exists()


@pytest.mark.parametrize("name, file", [("cora", "ind.cora.allx"), ("reddit", "reddit.zip")])
def test_a_cut_connection_resumes_where_it_stopped(served, name, file):
    served.cuts[f"/{name}/{file}"] = 1000
    fetch(CATALOG[name], progress=False)
    ranges = [r for path, r in served.requests if path == f"/{name}/{file}"]
    assert ranges == [None, "bytes=1000-"]
    load_graph(name)  # and what was put together reads


def test_the_next_run_continues_a_partial_file(served, monkeypatch):
    monkeypatch.setattr(download, "ATTEMPTS", 1)
    served.cuts["/cora/ind.cora.graph"] = 700
    with pytest.raises(DownloadError) as err:
        fetch(CATALOG["cora"], progress=False)
    text = one_line(err)
    assert "ind.cora.graph" in text and "next run continues" in text
    folder = download_dir(CATALOG["cora"])
    assert (folder / "ind.cora.graph.part").stat().st_size == 700 and not (folder / "ind.cora.graph").exists()
    assert cached_state(CATALOG["cora"]) == "partial"
    fetch(CATALOG["cora"], progress=False)
    assert [r for p, r in served.requests if p == "/cora/ind.cora.graph"] == [None, "bytes=700-"]
    load_graph("cora")


def test_a_server_that_ignores_range_restarts_the_file(served):
    served.ignore_range = True
    served.cuts["/flickr/flickr.zip"] = 500
    fetch(CATALOG["flickr"], progress=False)
    assert [r for p, r in served.requests if p == "/flickr/flickr.zip"] == [None, "bytes=500-"]
    load_graph("flickr")  # the 200 answer replaced the 500 bytes instead of being appended to them


def test_a_partial_file_already_whole_is_fetched_again(served):
    """A run stopped after the last byte but before the rename: the server has nothing after it (416)."""
    folder = download_dir(CATALOG["cora"])
    folder.mkdir(parents=True)
    body = served.files["/cora/ind.cora.x"]
    (folder / "ind.cora.x.part").write_bytes(body)
    fetch(CATALOG["cora"], progress=False)
    assert [r for p, r in served.requests if p == "/cora/ind.cora.x"] == [f"bytes={len(body)}-", None]
    assert (folder / "ind.cora.x").read_bytes() == body


def test_processes_fetching_at_once_download_once(served):
    results, errors = [], []

    def run() -> None:
        try:
            results.append(open_dataset("citeseer").path)
        except Exception as exc:  # reported below, with the thread's result
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and len(results) == 3 and len(set(results)) == 1
    paths = [p for p, _ in served.requests]
    assert sorted(paths) == sorted(set(paths)) and len(paths) == len(CATALOG["citeseer"].files)


def test_a_wrong_checksum_is_refused_and_nothing_is_kept(served, monkeypatch):
    entry = CATALOG["cora"]
    bad = tuple(dataclasses.replace(f, sha256="0" * 64) if f.name == "ind.cora.tx" else f for f in entry.files)
    monkeypatch.setitem(CATALOG, "cora", dataclasses.replace(entry, files=bad))
    with pytest.raises(DownloadError) as err:
        open_dataset("cora")
    text = one_line(err)
    assert "corrupt" in text and "sha256" in text and "ind.cora.tx" in text
    folder = download_dir(entry)
    assert not (folder / "ind.cora.tx").exists() and not (folder / "ind.cora.tx.part").exists()
    assert not (cache_dir() / "prepared").exists()


def test_a_file_of_the_wrong_size_is_refused(served, monkeypatch):
    entry = CATALOG["citeseer"]
    short = tuple(dataclasses.replace(f, size=f.size + 1) if f.name == "ind.citeseer.y" else f for f in entry.files)
    monkeypatch.setitem(CATALOG, "citeseer", dataclasses.replace(entry, files=short))
    with pytest.raises(DownloadError) as err:
        load_graph("citeseer")
    assert "bytes, expected" in one_line(err)


def test_pubmed_allx_is_checked_by_its_git_blob_id(served, monkeypatch):
    entry = CATALOG["pubmed"]
    other = tuple(dataclasses.replace(f, git_blob="1" * 40) if f.git_blob else f for f in entry.files)
    monkeypatch.setitem(CATALOG, "pubmed", dataclasses.replace(entry, files=other))
    with pytest.raises(DownloadError) as err:
        load_graph("pubmed")
    assert "git blob id" in one_line(err) and "ind.pubmed.allx" in str(err.value)
    monkeypatch.setitem(CATALOG, "pubmed", entry)
    assert load_graph("pubmed").num_nodes > 0


def _rezip(body: bytes, edit) -> bytes:
    """``body`` (a zip) with each member's bytes passed through ``edit(name, data)``, stored uncompressed."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(body)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            name, data = edit(info.filename, src.read(info))
            dst.writestr(name, data)
    return out.getvalue()


def test_a_corrupt_zip_is_refused_and_nothing_is_extracted(served):
    body = _rezip(served.files["/reddit/reddit.zip"], lambda name, data: (name, data))
    at = body.index(b"reddit_graph")  # a byte of a stored member's data, after its local header
    at = body.index(b"PK", at + 200) - 50
    served.files["/reddit/reddit.zip"] = body[:at] + bytes([body[at] ^ 0xFF]) + body[at + 1:]
    with pytest.raises(DownloadError) as err:
        load_graph("reddit")
    text = one_line(err)
    assert "reddit.zip" in text and "corrupt zip" in text and "removed" in text
    assert not raw_dir(CATALOG["reddit"]).exists()
    assert [p.name for p in raw_dir(CATALOG["reddit"]).parent.iterdir()] == []
    assert not (download_dir(CATALOG["reddit"]) / "reddit.zip").exists()


def test_a_corrupt_zip_placed_by_hand_is_named_and_kept(served):
    folder = download_dir(CATALOG["flickr"])
    folder.mkdir(parents=True)
    (folder / "flickr.zip").write_bytes(served.files["/flickr/flickr.zip"][:-100])  # cut short
    with pytest.raises(GraphError) as err:
        load_graph("flickr")
    text = one_line(err)
    assert str(folder / "flickr.zip") in text and "corrupt zip" in text and "delete it" in text
    assert (folder / "flickr.zip").exists() and not raw_dir(CATALOG["flickr"]).exists()


def test_a_zip_member_outside_its_directory_is_refused(served, tmp_path):
    served.files["/flickr/flickr.zip"] = _rezip(served.files["/flickr/flickr.zip"],
                                                lambda name, data: ("../../escaped.npy" if name == "feats.npy" else
                                                                    name, data))
    with pytest.raises(GraphError) as err:
        load_graph("flickr")
    assert "outside" in one_line(err)
    assert not list(tmp_path.rglob("escaped.npy"))
    assert not raw_dir(CATALOG["flickr"]).exists()


def test_an_archive_without_the_dataset_is_refused(served):
    served.files["/flickr/flickr.zip"] = _rezip(served.files["/reddit/reddit.zip"], lambda name, data: (name, data))
    with pytest.raises(GraphError) as err:
        load_graph("flickr")
    assert "adj_full.npz" in one_line(err)


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there now: connection refused


@pytest.mark.parametrize("name", ["cora", "ogbn-products"])
def test_offline_one_line_names_the_urls_and_where_to_put_them(served, monkeypatch, name):
    monkeypatch.setenv("MGGCN_DATA_URL", _dead_url())
    with pytest.raises(DownloadError) as err:
        open_dataset(name)
    text = one_line(err)
    entry = CATALOG[name]
    assert "cannot connect" in text and f"{download_dir(entry)}/" in text
    for file in entry.files:
        assert entry.url(file) in text
    assert not (cache_dir() / "prepared").exists()


def test_the_sources_urls_without_a_mirror(monkeypatch):
    monkeypatch.delenv("MGGCN_DATA_URL", raising=False)
    assert find("cora").url(find("cora").files[0]) == \
        "https://github.com/kimiyoung/planetoid/raw/master/data/ind.cora.x"
    assert find("ogbn-papers100M").url(find("ogbn-papers100M").files[0]) == \
        "http://snap.stanford.edu/ogb/data/nodeproppred/papers100M-bin.zip"
    monkeypatch.setenv("MGGCN_DATA_URL", "http://mirror.example/data/")
    assert find("reddit").url(find("reddit").files[0]) == "http://mirror.example/data/reddit/reddit.zip"


@pytest.mark.parametrize("name", ["cora", "ogbn-arxiv", "flickr"])
def test_files_placed_by_hand_are_used(served, monkeypatch, name):
    entry = CATALOG[name]
    folder = download_dir(entry)
    folder.mkdir(parents=True)
    for file in entry.files:
        (folder / file.name).write_bytes(served.files[f"/{name}/{file.name}"])
    monkeypatch.setenv("MGGCN_DATA_URL", _dead_url())
    assert cached_state(entry) == "downloaded"
    dataset = open_dataset(name)
    assert dataset.num_nodes > 0 and served.requests == []


def test_a_wrong_file_placed_by_hand_is_named(served):
    entry = CATALOG["cora"]
    folder = download_dir(entry)
    folder.mkdir(parents=True)
    (folder / "ind.cora.ty").write_bytes(b"not the labels")
    with pytest.raises(GraphError) as err:
        load_graph("cora")
    text = one_line(err)
    assert str(folder / "ind.cora.ty") in text and "delete it" in text
    assert (folder / "ind.cora.ty").read_bytes() == b"not the labels"  # a user's file is theirs to remove


def test_a_path_of_that_name_is_read_as_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert named("cora") is find("cora")
    (tmp_path / "cora").mkdir()
    assert named("cora") is None


def test_variants_are_prepared_apart_and_options_checked(served):
    plain = named_dataset_dir(CATALOG["cora"], progress=False)
    both = named_dataset_dir(CATALOG["cora"], undirected=True, dedup=True, progress=False)
    normalized = named_dataset_dir(CATALOG["cora"], read_options={"normalize_features": True}, progress=False)
    assert [p.name for p in (plain, both, normalized)] == ["cora", "cora+undirected+dedup", "cora+normalize_features"]
    products = named_dataset_dir(CATALOG["ogbn-products"], undirected=True, progress=False)
    assert products.name == "ogbn-products"  # OGB's loader adds the reverse edges already
    with pytest.raises(ConfigError) as err:
        open_dataset("reddit", read_options={"features": "x.npy"})
    assert "reddit" in one_line(err) and "features" in str(err.value)


def test_a_cache_that_cannot_be_created_is_named(served, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("MGGCN_DATA", str(tmp_path / "a-file"))
    with pytest.raises(GraphError) as err:
        open_dataset("cora")
    text = one_line(err)
    assert str(tmp_path / "a-file") in text and "MGGCN_DATA" in text
    assert served.requests == []
