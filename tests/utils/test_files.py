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


def test_a_temporary_file_a_killed_writer_left_is_removed_by_the_next_write_there(tmp_path):
    """A writer killed mid-write (SIGKILL, out of memory) leaves its temporary file, as large as a checkpoint, which
    nothing else would remove: the next write into that directory removes it once it is an hour old and no process
    holds its lock. A live writer's file, however old, and a fresh one stay."""
    import os
    import subprocess
    import sys
    import time

    def writer(kill: bool) -> subprocess.Popen:
        code = ("import os, signal, sys, time\nfrom mggcn.utils.files import atomic_write\n"
                "def write(tmp):\n    open(tmp, 'w').write('half')\n    print(tmp, flush=True)\n"
                f"    os.kill(os.getpid(), signal.SIGKILL) if {kill} else time.sleep(120)\n"
                f"atomic_write({str(tmp_path / 'ckpt.pt')!r}, write)\n")
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)

    dead, fresh, live = writer(True), writer(True), writer(False)
    try:
        paths = [p.stdout.readline().strip() for p in (dead, fresh, live)]
        assert dead.wait(60) == -9 and fresh.wait(60) == -9
        users = tmp_path / ".mggcn-notes.txt"  # a name like the writer's, not the writer's
        users.write_text("mine")
        old = time.time() - 2 * 3600
        for path in (paths[0], paths[2], users):
            os.utime(path, (old, old))
        atomic_write(str(tmp_path / "other.pt"), lambda tmp: open(tmp, "w").write("whole"))
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["other.pt", users.name,
                                                                     *(os.path.basename(p) for p in paths[1:])])
    finally:
        live.kill()
        live.wait()
