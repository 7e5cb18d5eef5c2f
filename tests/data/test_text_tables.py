"""Text tables read in blocks: np.loadtxt is given the path where it opens the file as mggcn does (same
decompression, same text) and only the comment marks the file holds; the result is the same table as reading the
open file line by line, and a file numpy cannot read that way still gets the line-numbered one-line error."""

from __future__ import annotations

import bz2
import gzip
import lzma

import numpy as np
import pytest

from mggcn.data.formats import compressed
from mggcn.data.formats.checks import read_table
from mggcn.data.formats.compressed import numpy_opens, open_text, present_prefixes
from mggcn.utils.errors import GraphError

TEXT = "# edges\n0 1\n1 2 0.5\n% a remark\n\n2 0 # trailing\n3 1\n"
ROWS = [[0, 1], [1, 2], [2, 0], [3, 1]]


def _line_by_line(path, comments):
    """The reference: the open file, every comment mark passed, numpy's line-by-line reading."""
    with open_text(path) as f:
        return np.loadtxt(f, dtype=np.int64, comments=list(comments), usecols=(0, 1), ndmin=2)


WRITERS = {"plain": lambda p, b: p.write_bytes(b), "gzip": lambda p, b: p.write_bytes(gzip.compress(b)),
           "bzip2": lambda p, b: p.write_bytes(bz2.compress(b)), "xz": lambda p, b: p.write_bytes(lzma.compress(b))}


@pytest.mark.parametrize("kind,name,by_numpy", [
    ("plain", "g.txt", True), ("gzip", "g.txt.gz", True), ("bzip2", "g.txt.bz2", True),
    ("gzip", "g.txt", False),  # compressed, but numpy would read it as text: by content, line by line
    ("plain", "g.gz", False),  # a plain file named .gz, which numpy would try to decompress
    ("xz", "g.txt.xz", False),
])
def test_same_table_whichever_way_the_file_is_read(tmp_path, kind, name, by_numpy):
    path = tmp_path / name
    WRITERS[kind](path, ("\ufeff" + TEXT).encode())  # with the byte order mark some editors write
    assert numpy_opens(path) is by_numpy
    table = read_table(path, np.int64, ncols=2, exact=False, delimiter=None, comments=("#", "%"))
    np.testing.assert_array_equal(table, ROWS)
    np.testing.assert_array_equal(table, _line_by_line(path, ("#", "%")))


def test_only_the_marks_the_file_holds(tmp_path, monkeypatch):
    path = tmp_path / "g.txt"
    path.write_text("0 1\n// c\n1 2\n")
    assert present_prefixes(path, ("#", "%", "//")) == ["//"]
    assert present_prefixes(path, ("#",)) == ["#"]  # one mark: numpy's C reading takes it, no scan needed
    assert present_prefixes(path, ()) == []
    # a mark cut by the end of a scanned block is found whole with the next block
    monkeypatch.setattr(compressed, "_SCAN_BLOCK", 4)
    for text in ("0 1\n1 // 2\n", "0 1 //\n", "//0 1\n"):
        path.write_text(text)
        assert present_prefixes(path, ("#", "//")) == ["//"], text
    path.write_text("0 1 /\n/ 2\n")  # a newline between the two characters: no mark
    assert present_prefixes(path, ("#", "//")) == []


@pytest.mark.parametrize("name", ["g.txt", "g.txt.gz"])
def test_a_bad_line_is_still_named(tmp_path, name):
    path = tmp_path / name
    data = b"0 1\n1 2\n2 \xff\xfe\n"  # not UTF-8: numpy's strict decoding fails, the replacing reader names the line
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(GraphError, match=r"g\.txt(\.gz)?: line 3: cannot parse"):
        read_table(path, np.int64, ncols=2, exact=False, delimiter=None, comments=("#", "%"))
    path.write_bytes(b"0 1\n1 x\n")
    with pytest.raises(GraphError, match="line 2: cannot parse 'x'"):
        read_table(path, np.int64, ncols=2, exact=False, delimiter=None, comments=("#", "%"))


def test_a_truncated_compressed_file_is_named(tmp_path):
    path = tmp_path / "g.txt.gz"
    path.write_bytes(gzip.compress(b"0 1\n" * 10_000)[:-20])
    with pytest.raises(GraphError, match=r"g\.txt\.gz: truncated or corrupt"):
        read_table(path, np.int64, ncols=2, exact=False, delimiter=None, comments=("#",))
