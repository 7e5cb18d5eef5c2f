"""The one atomic writer (mggcn.utils.files): a file is replaced whole, or left as it was."""

import os
import subprocess
import sys
import time

import pytest

from mggcn.utils import system
from mggcn.utils.files import atomic_write, clipped, link_to_nothing


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


def test_a_path_as_long_as_the_limit_is_shown_whole():
    assert clipped("a" * 100) == "a" * 100
    assert clipped("a" * 50 + "b" * 51) == "a" * 50 + "..." + "b" * 50


def test_a_link_that_leads_somewhere_is_no_link_to_nothing(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data")
    assert link_to_nothing(tmp_path / "link" / "missing.txt") is None  # the file is missing, the link is fine
    assert link_to_nothing(tmp_path / "link") is None


def test_a_temporary_file_younger_than_an_hour_stays_though_no_lock_is_seen(tmp_path):
    """Where locks are only local (some NFS mounts) a live writer on another host holds none visible here: its
    temporary file, ten minutes unchanged (a slow checkpoint), must not be swept as abandoned."""
    from mggcn.utils.files import atomic_write

    other_hosts = tmp_path / ".mggcn-tmp-abcd1234.pt"
    other_hosts.write_text("half")
    old = time.time() - 600
    os.utime(other_hosts, (old, old))
    atomic_write(str(tmp_path / "other.pt"), lambda tmp: open(tmp, "w").write("x"))
    assert other_hosts.exists()


def test_torch_threads_are_put_back_when_the_block_raises():
    import torch

    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), system.torch_threads(before + 1):
        raise RuntimeError("a probe that failed (out of memory)")
    assert torch.get_num_threads() == before


def test_a_synced_write_reaches_the_disk_before_the_rename(tmp_path, monkeypatch):
    from mggcn.utils.files import atomic_write

    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    atomic_write(str(tmp_path / "ckpt.pt"), lambda tmp: open(tmp, "w").write("x"), sync=True)
    assert len(synced) == 1 and os.path.basename(synced[0]).startswith(".mggcn-tmp-")  # the temporary, not yet renamed
