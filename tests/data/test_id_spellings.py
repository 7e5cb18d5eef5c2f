"""A vertex id in a text or JSON file is read only as decimal digits: Python's ``int`` also reads ``1_0`` (10),
``+5``, `` 5``, ``05`` and other scripts' digits, so a damaged id became another vertex's without a word (a GraphSAINT
class map with ``"1"`` and ``"01"`` gave vertex 1 the second label), and an edge list's first line with a typo was
dropped as a header."""

import json
import re

import numpy as np
import pytest

from mggcn.data.formats.checks import decimal_int
from mggcn.data.formats.edgelist import read_edgelist
from mggcn.data.formats.planetoid import read_planetoid
from mggcn.data.formats.saint import read_saint, write_saint
from mggcn.data.generators import parse_spec
from mggcn.utils.errors import GraphError
from planetoid_files import cora_like


def test_decimal_int_reads_ascii_digits_with_a_sign_only():
    assert [decimal_int(t) for t in ("0", "17", "-3", "+4", "007")] == [0, 17, -3, 4, 7]
    assert [decimal_int(t) for t in ("1_0", " 5", "5 ", "\u0665", "0x1", "1.0", "", "1e3")] == [None] * 8


@pytest.mark.parametrize("key", ["01", "+1", " 1", "1 ", "\u0661", "1_0"])
def test_a_saint_class_map_key_spelled_otherwise_than_json_writes_an_id_is_refused(tmp_path, key):
    write_saint(parse_spec("synthetic:n=30,features=4,classes=3"), tmp_path)
    path = tmp_path / "class_map.json"
    class_map = json.loads(path.read_text())
    assert read_saint(tmp_path).y[1] == class_map["1"]
    class_map[key] = (class_map["1"] + 1) % 3  # would name vertex 1 (10 for 1_0) a second time, silently
    path.write_text(json.dumps(class_map))
    said = re.escape(f"class_map.json: key {key!r} is not a vertex id as JSON writes one")
    with pytest.raises(GraphError, match=said) as err:
        read_saint(tmp_path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("spelled", ["5_9", "\u0665", "0x5", "5.0"])
def test_a_planetoid_test_index_line_that_is_not_decimal_digits_is_refused(tmp_path, spelled):
    folder = cora_like(tmp_path)
    index = folder / "ind.cora.test.index"
    lines = index.read_text().splitlines()
    read_planetoid(folder)
    index.write_text("\n".join([spelled, *lines[1:]]) + "\n")
    with pytest.raises(GraphError, match=re.escape(f"test.index: line 1: expected one vertex id, found {spelled!r}")):
        read_planetoid(folder)


@pytest.mark.parametrize("first", ["0 1O", "0x1 2", "0 one"])
def test_an_edge_lists_first_line_with_a_number_where_the_ids_go_is_data_not_a_header(tmp_path, first):
    """``0 1O`` (a typo) was skipped as a header: the graph lost that edge without a word. A line with no number
    where the ids go is still a header."""
    path = tmp_path / "g.txt"
    path.write_text(f"{first}\n1 2\n2 0\n")
    with pytest.raises(GraphError, match=r"g.txt: line 1") as err:
        read_edgelist(path)
    assert "\n" not in str(err.value)
    for header in ("source target", "src,dst", "from to weight"):
        path.write_text(f"{header}\n0 1\n1 2\n2 0\n".replace(" ", "," if "," in header else " "))
        np.testing.assert_array_equal(np.sort(read_edgelist(path).edge_index[0]), [0, 1, 2])


def test_an_edge_list_compressed_twice_is_binary_data_not_a_header_and_no_graph(tmp_path):
    """Decompressed once, a gzip inside a gzip is binary: its first line was taken for a header and the rest gave
    "the graph has no vertices"."""
    import gzip

    from mggcn.data.prepared.writer import prepare

    path = tmp_path / "g.txt.gz"
    path.write_bytes(gzip.compress(gzip.compress(b"0 1\n1 2\n2 0\n")))
    for read in (lambda: read_edgelist(path), lambda: prepare(path, tmp_path / "out", fmt="edgelist", progress=False)):
        with pytest.raises(GraphError, match=r"g.txt.gz: line 1 holds binary data, not text: not an edge list \(or one "
                                             r"compressed twice\)"):
            read()
    assert not (tmp_path / "out").exists()
