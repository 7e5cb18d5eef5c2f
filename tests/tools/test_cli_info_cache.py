"""``mggcn info NAME`` on a named dataset whose prepared copy in the cache is damaged, or which something else is in the
way of: the same one-line hint as ``mggcn train NAME`` (delete the cache's copy and run again), against a real HTTP
server (tests/dataset_server.py) so that nothing is downloaded from the network."""

from __future__ import annotations

import shutil

import pytest

from dataset_server import serving
from mggcn.data.catalog import CATALOG
from mggcn.data.datasets import named_dataset_dir
from mggcn.tools.cli import main


@pytest.fixture
def served(tmp_path, monkeypatch):
    yield from serving(tmp_path, monkeypatch)


def _damage(out, how: str) -> None:
    if how == "manifest":
        (out / "manifest.json").write_text("{")
    elif how == "truncated":
        features = out / "features.npy"
        features.write_bytes(features.read_bytes()[:-10])
    elif how == "flipped":  # only a checksum tells
        features = out / "features.npy"
        data = bytearray(features.read_bytes())
        data[-1] ^= 0xFF
        features.write_bytes(bytes(data))
    else:  # a folder of other files where the prepared copy goes
        shutil.rmtree(out)
        out.mkdir()
        (out / "notes.txt").write_text("mine")


@pytest.mark.parametrize("how, verify", [("manifest", False), ("truncated", False), ("truncated", True),
                                         ("flipped", True), ("in the way", False)])
def test_info_name_on_a_damaged_cache_copy_says_to_delete_it_as_train_does(served, how, verify, capsys):
    out = named_dataset_dir(CATALOG["cora"], progress=False)
    _damage(out, how)
    capsys.readouterr()
    assert main(["info", "cora", *(["--verify"] if verify else [])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"mggcn info: error: {out}") and "delete" in err and "run again" in err, err
    if how != "flipped":  # what train says of the same copy, word for word after the command's name
        assert main(["train", "cora", "--epochs", "1", "--quiet"]) == 2
        assert capsys.readouterr().err == err.replace("mggcn info:", "mggcn train:")


def test_info_name_on_an_intact_cache_copy_still_describes_it(served, capsys):
    named_dataset_dir(CATALOG["cora"], progress=False)
    capsys.readouterr()
    assert main(["info", "cora", "--verify"]) == 0
    assert "verified:" in capsys.readouterr().out
