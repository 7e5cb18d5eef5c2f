"""Text tables read in blocks: np.loadtxt is given the path where it opens the file as mggcn does (same
decompression, same text) and only the comment marks the file holds; the result is the same table as reading the
open file line by line, and a file numpy cannot read that way still gets the line-numbered one-line error."""

from __future__ import annotations

import bz2
import gzip
import lzma
import re

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


def _fuzzed_edge_list(rng) -> str:
    """An edge list as files hold them: plain lines mostly, and now and then what the plain-block parser must hand
    to numpy's line reader (comments, blank lines, extra or missing columns, floats, words, huge or negative ids,
    tabs, CRLF, leading and trailing spaces, no final newline)."""
    odd = ["", "   ", "# c", "1 2 # t", "5", "1 2 3", "1 2 0.5", "x y", "1.5 2", "99999999999999999999 1", "-4 2",
           "\t7\t8\t", "9 10\r", " 11 12 ", "+3 4", "0x1 2", "1e2 3", "1\x002 3", "4\x0b5 6"]
    lines = []
    for _ in range(int(rng.integers(1, 60))):
        if rng.random() < 0.08:
            lines.append(odd[int(rng.integers(len(odd)))])
        else:
            lines.append(f"{rng.integers(0, 50)} {rng.integers(0, 50)}")
    text = "\n".join(lines)
    return text + ("\n" if rng.random() < 0.7 else "")


def _outcome(read):
    try:
        return read()
    except GraphError as err:
        return str(err)


def test_streamed_blocks_read_what_the_whole_file_reader_reads(tmp_path):
    """The streaming reader parses a plain block in one pass and gives any other to numpy's line reader: on a few
    hundred fuzzed files, in blocks of every size, the same edges as the whole-file reader, or the same error."""
    from mggcn.data.formats.edgelist import iter_edgelist_chunks, read_edgelist

    rng = np.random.default_rng(7)
    path = tmp_path / "g.txt"
    # lines whose token counts make up for each other: as many tokens as two per line, but not on every line
    crafted = ["0 1\n1 2 3\n5\n6 7\n", "0 1\n1 2 3 4\n\n6 7\n", "0 1\n   \n1 2 3 4\n", "1 2 3\n4\n",
               "0 1 2\n3 4 5\n6 7\n8 9 10 11\n"]
    for case in range(300):
        path.write_bytes((crafted[case] if case < len(crafted) else _fuzzed_edge_list(rng)).encode())
        whole = _outcome(lambda: read_edgelist(path, num_nodes=100).edge_index)
        for chunk in (1, 3, 1 << 20):
            streamed = _outcome(lambda chunk=chunk: np.concatenate(
                [np.zeros((2, 0), np.int64), *iter_edgelist_chunks(path, chunk_edges=chunk, num_nodes=100)],
                axis=1))
            if isinstance(whole, str) or isinstance(streamed, str):  # both refuse, naming the same line
                assert isinstance(whole, str) and isinstance(streamed, str), (case, whole, streamed)
                assert re.findall(r"line \d+", whole) == re.findall(r"line \d+", streamed), (case, whole, streamed)
            else:
                np.testing.assert_array_equal(streamed, whole, err_msg=f"{case}: {path.read_bytes()!r}")


def test_a_plain_block_is_parsed_whole(monkeypatch, tmp_path):
    """The plain files users have (two or more integer columns, spaces or tabs) never reach numpy's line reader."""
    from mggcn.data.formats import edgelist

    def refuse(*args, **kwargs):
        raise AssertionError("parsed line by line")

    path = tmp_path / "g.txt"
    monkeypatch.setattr(edgelist.np, "loadtxt", refuse)
    lines = [f"{i}\t{i + 1} {i % 3}" for i in range(10_000)]
    for text in ("\r\n".join(lines) + "\r\n", "\n".join(lines)):  # the last line with its newline or without
        path.write_text(text)
        ei = np.concatenate(list(edgelist.iter_edgelist_chunks(path, chunk_edges=1000)), axis=1)
        np.testing.assert_array_equal(ei, [np.arange(10_000), np.arange(1, 10_001)])


def test_a_number_that_is_no_integer_is_refused_on_numpy_that_only_warns(tmp_path, monkeypatch):
    """numpy 1.23 to 2.2 read '1.5' in an integer table as 1 ('1e2' as 100), with only a DeprecationWarning: the
    edge 1.5 -> 3 would silently become 1 -> 3. numpy's loadtxt stands in here for that numpy (this one refuses
    it): whole-file and streamed readers name the line, as they do with the numpy that refuses."""
    import warnings

    from mggcn.data.formats.edgelist import iter_edgelist_chunks, read_edgelist

    def old_loadtxt(source, **options):
        warnings.warn("loadtxt(): Parsing an integer via a float is deprecated.", DeprecationWarning, stacklevel=2)
        return np.array([[0, 2], [1, 3]], dtype=np.int64)

    path = tmp_path / "g.txt"
    path.write_text("0 2\n1.5 3\n")
    monkeypatch.setattr(np, "loadtxt", old_loadtxt)
    with pytest.raises(GraphError, match=r"g.txt: line 2: cannot parse '1.5' as an integer"):
        read_edgelist(path, num_nodes=4)
    with pytest.raises(GraphError, match=r"g.txt: line 2: cannot parse '1.5' as an integer"):
        list(iter_edgelist_chunks(path, num_nodes=4))
    with pytest.raises(GraphError, match=r"line 2: cannot parse '1.5' as an integer"):
        read_table(path, np.int64, ncols=2, delimiter=None)
