"""The one atomic writer (mggcn.utils.files): a file is replaced whole, or left as it was."""

import pytest

from mggcn.utils.files import atomic_write


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")

    def fail(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(str(path), fail)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    atomic_write(str(path), lambda tmp: open(tmp, "w").write("new"), sync=True)
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
