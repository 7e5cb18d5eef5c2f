"""``.npy`` vertex data that is not an array of numbers: np.load takes any file without numpy's header for a pickle
and says "pickled (object) data ... load it unsafely"; the error names what the file is instead."""

import numpy as np
import pytest

from mggcn.data.formats.checks import load_npy
from mggcn.utils.errors import GraphError


@pytest.mark.parametrize("content, said", [
    (b"not a npy file at all\n", "not an .npy file: it begins as text, without numpy's header"),
    (b"\x00\x01\x02\x03\xff\xfe\x10", "not an .npy file: it begins as data"),
    (b"1 2 3\n4 5 6\n", "not an .npy file: it begins as text"),
])
def test_a_file_that_is_no_npy_array_says_so(tmp_path, content, said):
    path = tmp_path / "x.npy"
    path.write_bytes(content)
    with pytest.raises(GraphError, match=f"x.npy: {said}") as err:
        load_npy(path)
    assert "pickle" not in str(err.value) and "\n" not in str(err.value)


def test_an_array_of_python_objects_is_refused_as_such(tmp_path):
    path = tmp_path / "y.npy"
    np.save(path, np.array([{"a": 1}, 2], dtype=object), allow_pickle=True)
    with pytest.raises(GraphError, match=r"y.npy: holds Python objects \(dtype object\), not numbers"):
        load_npy(path)


def test_arrays_of_numbers_and_truncated_headers_are_as_before(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(load_npy(path), np.arange(12, dtype=np.float32).reshape(3, 4))
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(GraphError, match="truncated or corrupt .npy file"):
        load_npy(path)


@pytest.mark.parametrize("labels", [np.zeros((5, 0)), np.array(3)])
def test_labels_of_no_column_name_both_forms_an_edge_list_takes(tmp_path, labels):
    """An edge list takes labels [n] or a 0/1 matrix [n, C]: the error for [n, 0] or a scalar says both (it said
    the format holds one class per vertex)."""
    from mggcn.data.formats.edgelist import read_edgelist

    np.savetxt(tmp_path / "g.txt", [[0, 1], [1, 2], [3, 4]], fmt="%d")
    np.save(tmp_path / "y.npy", labels)
    with pytest.raises(GraphError, match=r"y.npy: labels must be a vector \[n\] \(one class per vertex\) or a 0/1 "
                                         r"matrix \[n, C\]"):
        read_edgelist(tmp_path / "g.txt", labels=tmp_path / "y.npy", num_nodes=5)


def _damaged(array: np.ndarray, old: bytes, new: bytes) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    data = buffer.getvalue()
    assert old in data
    return data.replace(old, new.ljust(len(old)), 1)  # the header keeps its length: only its words are damaged


@pytest.mark.parametrize("old, new, said", [
    (b"(6,), }", b"(6,+, }", r"its header cannot be read: .*EOF in multi-line statement"),  # tokenize.TokenError
    (b"(6,), }", b"(6*1,), }", r"its header cannot be read: malformed node or string"),  # no memory address
    (b"(6,), }", b"(6, 9223372036854775807), }",  # a size past 64 bits: no numpy overflow warning
     r"its header says float32 \[6, 9223372036854775807\], 221,360,928,884,514,619,368 bytes, and the file holds \d+"),
    (b"(6,), }", b"(7,), }", r"its header says float32 \[7\], 28 bytes, and the file holds 24 after it"),
])
def test_a_damaged_npy_header_is_one_line_in_every_reader(tmp_path, recwarn, old, new, said):
    """A header whose Python literal is damaged (a flipped byte) or whose shape claims more than the file holds is
    one line naming the file, in the vertex-data reader, in a prepared directory's arrays and inside an ``.npz``;
    never numpy's tokenize traceback, an object's address or an overflow warning."""
    from mggcn.data.formats.checks import load_npz
    from mggcn.data.generators import parse_spec
    from mggcn.data.prepared.reader import PreparedDataset
    from mggcn.data.prepared.writer import prepare

    bad = _damaged(np.arange(6, dtype=np.float32), old, new)
    (tmp_path / "x.npy").write_bytes(bad)
    with pytest.raises(GraphError, match=f"x.npy: truncated or corrupt .npy file \\({said}") as err:
        load_npy(tmp_path / "x.npy")
    assert "\n" not in str(err.value) and " at 0x" not in str(err.value)
    import zipfile

    with zipfile.ZipFile(tmp_path / "a.npz", "w") as z:
        z.writestr("label.npy", bad)
    with pytest.raises(GraphError, match=r"a.npz: truncated or corrupt .npz file") as err:
        load_npz(tmp_path / "a.npz", ["label"])
    assert "\n" not in str(err.value) and " at 0x" not in str(err.value)
    prepare(parse_spec("synthetic:n=6,features=3,classes=2"), tmp_path / "prep", progress=False)
    labels = np.load(tmp_path / "prep" / "labels.npy")
    assert labels.shape == (6,)
    (tmp_path / "prep" / "labels.npy").write_bytes(_damaged(labels, old, new))
    with pytest.raises(GraphError, match=r"labels.npy: truncated or corrupt .npy file") as err:
        PreparedDataset(tmp_path / "prep")
    assert "\n" not in str(err.value) and " at 0x" not in str(err.value)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
