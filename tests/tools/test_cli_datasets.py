"""``mggcn datasets``, and the commands that take a dataset by name (``prepare NAME DIR``, ``train NAME``,
``info NAME``, ``mggcn.train(NAME)``), against a real HTTP server (tests/dataset_server.py)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

import mggcn
from dataset_server import serving
from mggcn.data.catalog import CATALOG, cache_dir
from mggcn.data.prepared.reader import PreparedDataset
from mggcn.tools.cli import main
from mggcn.utils.units import format_bytes


@pytest.fixture
def served(tmp_path, monkeypatch):
    yield from serving(tmp_path, monkeypatch)


def listing(capsys) -> dict[str, list[str]]:
    """``mggcn datasets``'s rows by name, as cells (two spaces or more part them)."""
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert re.split(r"\s{2,}", out[0]) == ["name", "vertices", "edges", "features", "classes", "download", "cached",
                                            "source"]
    assert out[-1].startswith(f"cache: {cache_dir()} ")
    rows = [re.split(r"\s{2,}", line.strip()) for line in out[1:-1]]
    return {row[0]: row for row in rows}


def test_datasets_lists_every_name_its_sizes_and_what_is_cached(served, tmp_path, capsys):
    rows = listing(capsys)
    assert list(rows) == list(CATALOG)
    for name, entry in CATALOG.items():
        assert rows[name][1:5] == [f"{v:,}" for v in entry.stats], name
        assert rows[name][6:] == ["no", entry.source]
    assert rows["ogbn-products"][1:5] == ["2,449,029", "123,718,280", "100", "47"]
    assert (rows["cora"][5], rows["pubmed"][5]) == (format_bytes(CATALOG["cora"].download), "?")
    assert main(["prepare", "cora", str(tmp_path / "cora"), "--quiet"]) == 0  # downloads into the cache
    assert main(["train", "citeseer", "--epochs", "1", "--quiet"]) == 0  # prepares there too
    capsys.readouterr()
    cached = {name: row[6] for name, row in listing(capsys).items()}
    assert (cached["cora"], cached["citeseer"], cached["pubmed"]) == ("downloaded", "prepared", "no")


def test_prepare_name_writes_the_directory_from_the_downloaded_files(served, tmp_path, capsys):
    out = tmp_path / "cora"
    assert main(["prepare", "cora", str(out)]) == 0
    captured = capsys.readouterr()
    assert "download ind.cora.allx" in captured.err  # the progress of each file
    dataset = PreparedDataset(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["built"]["format"] == "planetoid"
    assert dataset.num_nodes == 14 + 500 + 60 + 90
    assert not (cache_dir() / "prepared").exists()  # DIR is the prepared directory; the cache keeps the downloads
    normalized = tmp_path / "normalized"
    assert main(["prepare", "cora", str(normalized), "--normalize-features", "--quiet"]) == 0
    rows = PreparedDataset(normalized).arrays["features"].sum(axis=1)
    assert abs(float(rows.max()) - 1.0) < 1e-5


def test_prepare_name_with_a_wrong_checksum_exits_1_in_one_line(served, tmp_path, monkeypatch, capsys):
    entry = CATALOG["citeseer"]
    bad = tuple(dataclasses.replace(f, sha256="f" * 64) if f.name == "ind.citeseer.graph" else f for f in entry.files)
    monkeypatch.setitem(CATALOG, "citeseer", dataclasses.replace(entry, files=bad))
    assert main(["prepare", "citeseer", str(tmp_path / "out"), "--quiet"]) == 1  # a failed download: a failed run
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("mggcn prepare: error: citeseer: ") and "sha256" in err
    assert not (tmp_path / "out").exists()


def test_train_name_offline_exits_1_naming_what_to_download_and_where(served, monkeypatch, capsys):
    monkeypatch.setenv("MGGCN_DATA_URL", "http://127.0.0.1:9")  # the discard port: refused
    assert main(["train", "reddit", "--epochs", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "http://127.0.0.1:9/reddit/reddit.zip" in err and f"{cache_dir()}/downloads/reddit/" in err


def test_train_name_end_to_end_then_from_the_cache(served, tmp_path, capsys):
    model = tmp_path / "model.pt"
    assert main(["train", "cora", "--epochs", "2", "--save-model", str(model)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^mggcn: trained model \(after epoch 2, eval mode\): train [\d.]+ val [\d.]+ test [\d.]+",
                     out, re.M), out
    assert (cache_dir() / "prepared" / "cora" / "manifest.json").is_file()
    asked = len(served.requests)
    assert main(["train", "cora", "--epochs", "2", "--quiet"]) == 0
    assert main(["info", "cora"]) == 0
    assert "vertices" in capsys.readouterr().out
    assert main(["predict", str(model), "cora", "--out", str(tmp_path / "classes.npy")]) == 0
    assert np.load(tmp_path / "classes.npy").shape == (14 + 500 + 60 + 90,)
    assert len(served.requests) == asked  # read from the cache: nothing downloaded again


def test_api_trains_a_name(served):
    result = mggcn.train("flickr", epochs=2, hidden=8)
    assert len(result.history) == 2 and 0.0 <= result.final["test_acc"] <= 1.0


@pytest.mark.parametrize("argv, words", [
    (["prepare", "reddit", "OUT", "--features", "x.npy"], "--features is for --format mtx or edgelist"),
    (["prepare", "reddit", "OUT", "--format", "dgl-reddit"], "reddit: a dataset known by name"),
    (["train", "reddit", "--format", "saint"], "reddit: a dataset known by name"),
])
def test_a_name_with_options_it_cannot_take_is_refused_in_one_line(served, tmp_path, capsys, argv, words):
    argv = [str(tmp_path / a) if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err
    assert served.requests == [] and not (tmp_path / "OUT").exists()


def test_the_docs_table_is_the_catalog():
    """docs/datasets.md's table of the names says what the catalog says."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "datasets.md").read_text()
    rows = [line.strip("|").split("|") for line in page.splitlines() if line.startswith("| ") and "|---" not in line]
    table = {cells[0].strip(): [c.strip() for c in cells] for cells in rows if cells[0].strip() in CATALOG}
    assert list(table) == list(CATALOG)
    for name, entry in CATALOG.items():
        cells = table[name]
        assert cells[1] == entry.source and cells[3:7] == [f"{v:,}" for v in entry.stats], name
        assert ("sha256" in cells[7]) == any(f.sha256 for f in entry.files), name
        if entry.download is None:
            assert cells[2] == "?", name
        elif entry.archive:  # the sources' round figures
            assert cells[2].startswith("about "), name
        else:
            assert cells[2] == format_bytes(entry.download), name


def test_train_name_quiet_downloads_and_prepares_without_a_word(served, capsys):
    assert main(["train", "cora", "--epochs", "1", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress of the download, the extraction or the preparation
    assert captured.out.startswith("mggcn: trained model") and len(captured.out.splitlines()) == 1
    assert (cache_dir() / "prepared" / "cora" / "manifest.json").is_file() and served.requests


def test_the_cache_line_says_where_the_cache_comes_from_and_warns_of_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MGGCN_DATA", raising=False)
    assert main(["datasets"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1].startswith(f"cache: {cache_dir()} (the default; MGGCN_DATA sets another)")
    assert captured.err == ""
    monkeypatch.setenv("MGGCN_DATA", str(tmp_path / "cache"))
    assert main(["datasets"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1].startswith(f"cache: {tmp_path / 'cache'} (from MGGCN_DATA);")
    assert captured.err == ""  # not there yet: the first download makes it
    (tmp_path / "cache").write_text("a file")
    assert main(["datasets"]) == 0
    assert capsys.readouterr().err == (f"mggcn datasets: warning: the cache {tmp_path / 'cache'} is not a directory; "
                                       "set MGGCN_DATA to one\n")


def test_train_a_planetoid_name_with_normalized_features(served, capsys):
    """``mggcn train cora --normalize-features`` was refused with a pointer to ``--format planetoid``, which a name
    refuses; it trains on the cache's variant with row-normalized features, as ``mggcn prepare`` and the API do."""
    assert main(["train", "cora", "--normalize-features", "--epochs", "1", "--quiet"]) == 0
    assert main(["train", "cora", "--epochs", "1", "--quiet"]) == 0
    plain = np.asarray(PreparedDataset(cache_dir() / "prepared" / "cora").arrays["features"])
    variant = np.asarray(PreparedDataset(cache_dir() / "prepared" / "cora+normalize_features").arrays["features"])
    # PyG's NormalizeFeatures: each row over its sum, a sum below 1 taken as 1
    np.testing.assert_allclose(variant, plain / np.maximum(plain.sum(axis=1, keepdims=True), 1.0), rtol=1e-6)
    assert not np.array_equal(variant, plain)
    assert main(["train", "karate", "--normalize-features", "--epochs", "1", "--quiet"]) == 2
    assert "--normalize-features is for --format planetoid and the Planetoid datasets by name" in \
        capsys.readouterr().err


def test_a_cache_whose_name_the_file_system_refuses_is_one_line_naming_the_variable(tmp_path, monkeypatch, capsys):
    """A name longer than the file system takes makes every look into the cache fail: the table is not printed half,
    and the line names the variable that placed the cache there."""
    monkeypatch.setenv("MGGCN_DATA", str(tmp_path / ("a" * 300)))
    assert main(["datasets"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mggcn datasets: error: ")
    assert lines[0].endswith("cannot read the dataset cache (File name too long); set MGGCN_DATA to a readable "
                             "directory"), lines
