"""Outputs into special files and failing writes (mggcn.utils.files): a device or a FIFO is written to where it is,
never renamed over; a write that fails raises OutputError naming the file; a regular file is never half-written.

Run as root here, so permission bits stop nothing: a directory that takes no files is a chmod'ed one for other
users, else one on a file system that refuses new files to root too (sysfs)."""

import errno
import os
import stat
import threading

import numpy as np
import pytest

from mggcn.utils.errors import ConfigError
from mggcn.utils.files import OutputError, atomic_write, is_special, open_output, write_output


def _is_char_device(path: str) -> bool:
    return stat.S_ISCHR(os.stat(path).st_mode)


def test_a_link_stays_a_link_and_the_file_it_points_to_is_replaced(tmp_path):
    (tmp_path / "real.csv").write_text("old\n")
    (tmp_path / "link.csv").symlink_to("real.csv")
    write_output(str(tmp_path / "link.csv"), lambda f: f.write("new\n"), text=True)
    assert (tmp_path / "link.csv").is_symlink() and (tmp_path / "real.csv").read_text() == "new\n"
    assert sorted(os.listdir(tmp_path)) == ["link.csv", "real.csv"]


def test_stdout_redirected_to_a_file_is_written_through_not_replaced(tmp_path):
    log = tmp_path / "stdout.txt"
    with open(log, "w") as stdout:  # what /dev/stdout is after `> stdout.txt`: /proc/self/fd/N, a link to the file
        stdout.write("a line printed before\n")
        stdout.flush()
        through = f"/proc/self/fd/{stdout.fileno()}"
        write_output(through, lambda f: np.savetxt(f, np.arange(3), fmt="%d"), text=True)
        inode = os.fstat(stdout.fileno()).st_ino
    assert os.stat(log).st_ino == inode  # the same file the stream writes to, not one renamed over it
    assert log.read_text() == "a line printed before\n0\n1\n2\n"


def test_a_full_device_is_named_with_the_reason_and_stays_a_device():
    with pytest.raises(OutputError) as info:
        write_output("/dev/full", lambda f: np.save(f, np.arange(100_000)))
    assert str(info.value) == "/dev/full: cannot write: No space left on device"
    assert info.value.errno == errno.ENOSPC and info.value.filename == "/dev/full"
    assert _is_char_device("/dev/full")  # written to, not replaced by a regular file


def test_dev_null_is_written_to_not_renamed_over():
    assert is_special("/dev/null")
    write_output("/dev/null", lambda f: f.write("vertex,prediction\n0,1\n"), text=True)
    atomic_write("/dev/null", lambda p: open(p, "w").write("x"))
    assert _is_char_device("/dev/null")
    assert not [n for n in os.listdir("/dev") if n.startswith(".mggcn-")]  # no temporary beside it


def test_a_fifo_without_a_reader_is_refused_at_once(tmp_path):
    fifo = str(tmp_path / "out.csv")
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="out.csv: a FIFO that no process is reading"):
        write_output(fifo, lambda f: f.write(b"never"))
    with pytest.raises(OutputError, match="no process is reading"):
        open_output(fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_fifo_with_a_reader_gets_the_bytes_and_stays_a_fifo(tmp_path):
    fifo = str(tmp_path / "out.npy")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader now, so the writer does not wait
    held = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # the reader sees no end of file before the writer comes
    got = []
    drain = threading.Thread(target=lambda: got.append(_read_all(reader)))
    drain.start()
    write_output(fifo, lambda f: np.save(f, np.arange(5)))
    os.close(held)
    drain.join(timeout=30)
    assert not drain.is_alive()
    assert got[0].startswith(b"\x93NUMPY") and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["out.npy"]


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, True)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def test_a_reader_that_goes_away_is_a_broken_pipe_naming_the_file(tmp_path):
    fifo = str(tmp_path / "pipe")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def write(f) -> None:
        f.write(b"first")
        f.flush()
        os.close(reader)  # the reader leaves mid-write
        f.write(b"x" * (1 << 20))
        f.flush()

    with pytest.raises(OutputError) as info:
        write_output(fifo, write)
    assert info.value.errno == errno.EPIPE and str(info.value) == f"{fifo}: cannot write: Broken pipe"


def test_a_failed_write_of_a_regular_file_names_it_and_leaves_the_old_content(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"old")

    def disk_full(f) -> None:
        f.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OutputError) as info:
        write_output(str(path), disk_full)
    assert str(info.value) == f"{path}: cannot write: No space left on device"
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["model.pt"]


def test_a_path_that_is_a_directory_or_under_a_file_is_named(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(OutputError, match=f"^{tmp_path}/d: cannot write: Is a directory$"):
        write_output(str(tmp_path / "d"), lambda f: f.write(b"x"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match=f"^{tmp_path}/f/out.csv: cannot write in {tmp_path}/f: Not a directory$"):
        write_output(str(tmp_path / "f" / "out.csv"), lambda f: f.write(b"x"))
    assert sorted(os.listdir(tmp_path)) == ["d", "f"]


def test_a_directory_that_takes_no_files_is_named(readonly_dir):
    target = os.path.join(readonly_dir, "out.json")
    with pytest.raises(OutputError) as info:
        write_output(target, lambda f: f.write("{}"), text=True)
    assert str(info.value).startswith(f"{target}: cannot write in {readonly_dir}: ")
    assert "\n" not in str(info.value)


def test_a_log_stream_names_its_file_when_the_device_is_full():
    stream = open_output("/dev/full")
    stream.write("{}\n" * 10)
    with pytest.raises(OutputError, match="^/dev/full: cannot write: No space left on device$"):
        stream.flush()
    stream.close()  # the buffer is dropped: closing again says nothing more
    assert _is_char_device("/dev/full")


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory in which creating a file fails, for root too where the test runs as root."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    candidates = [str(locked), "/sys/kernel", "/proc/self"]
    try:
        for directory in candidates:
            probe = os.path.join(directory, ".mggcn-test-probe")
            try:
                fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except OSError:
                yield directory
                return
            os.close(fd)
            os.unlink(probe)
        pytest.skip("no directory here refuses new files")
    finally:
        locked.chmod(0o755)


def test_the_output_check_lets_special_and_proc_paths_through_and_follows_links(tmp_path):
    from mggcn.training.outputs import check_output

    with open(tmp_path / "stdout.txt", "w") as stdout:
        check_output("save_predictions", f"/proc/self/fd/{stdout.fileno()}")  # /proc/self/fd takes no new files
    for special in ("/dev/null", "/dev/full"):
        check_output("save_model", special, sidecar=True)  # no FILE.json beside a device
    (tmp_path / "out").mkdir()
    (tmp_path / "link.csv").symlink_to(tmp_path / "out" / "p.csv")
    check_output("save_predictions", str(tmp_path / "link.csv"))


def test_a_file_written_in_place_that_no_one_may_write_is_refused_before_anything_runs():
    """/proc/version: root's access() says yes, and its write failed with EINVAL after the training."""
    from mggcn.training.outputs import check_output

    with pytest.raises(ConfigError, match=r"^save_model /proc/version: is read-only \(mode 0444\)"):
        check_output("save_model", "/proc/version", sidecar=True)


def test_links_that_loop_or_lead_nowhere_are_found_on_the_way_to_a_path(tmp_path):
    """A loop is asked of the system (os.stat's ELOOP), not of Path.resolve, which from Python 3.13 returns a looping
    path as it is; the nearest name on the way to a path that is such a link is the one named."""
    from mggcn.utils.files import LINK_LOOP, link_to_nothing, resolve_links

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    (tmp_path / "dir").mkdir()
    assert resolve_links(tmp_path / "a") is None and resolve_links(tmp_path / "dir", tmp_path / "a" / "x") is None
    assert resolve_links(tmp_path / "dir", tmp_path / "new") == [tmp_path.resolve() / "dir", tmp_path.resolve() / "new"]
    assert link_to_nothing(tmp_path / "a" / "sub" / "x") == f"{tmp_path / 'a'} is {LINK_LOOP}"
    assert link_to_nothing(tmp_path / "gone" / "x") == f"{tmp_path / 'gone'} is a link to {tmp_path / 'nowhere'}, " \
        "which does not exist"
    assert link_to_nothing(tmp_path / "dir" / "new" / "x") is None and link_to_nothing(tmp_path / "dir") is None


def test_stdout_redirected_to_a_file_keeps_the_outputs_and_the_lines_printed_whole(tmp_path):
    """``--out /dev/stdout > file`` (not ``>>``): the outputs go through the shell's descriptor, whose offset the
    lines printed share. Opened anew, the file had an offset of its own, and the line printed after the
    predictions wrote over their start (and the epochs' lines over the metrics')."""
    import json
    import subprocess
    import sys

    model = tmp_path / "m.pt"
    train = [sys.executable, "-m", "mggcn", "train", "builtin:karate", "--epochs", "3"]
    subprocess.run([*train, "--quiet", "--save-model", str(model)], check=True, capture_output=True, timeout=300)
    log = tmp_path / "predict.txt"
    with open(log, "w") as stdout:
        subprocess.run([sys.executable, "-m", "mggcn", "predict", str(model), "builtin:karate", "--out",
                        "/dev/stdout"], check=True, stdout=stdout, timeout=300)
    lines = log.read_text().splitlines()
    assert lines[0] == "vertex,prediction" and [line.split(",")[0] for line in lines[1:35]] == list(map(str, range(34)))
    assert lines[35:] == ["mggcn: wrote the predicted class of each of 34 vertices to /dev/stdout"]
    log = tmp_path / "train.txt"
    with open(log, "w") as stdout:
        subprocess.run([*train, "--metrics", "/dev/stdout"], check=True, stdout=stdout, timeout=300)
    lines = log.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert [r["epoch"] for r in records if "epoch" in r] == [1, 2, 3]
    assert sum(line.startswith("epoch ") for line in lines) == 3 and lines[-1].startswith("mggcn: trained model")
    assert all(line.startswith(("{", "epoch ", "mggcn: ")) for line in lines), lines


def test_a_regular_file_under_dev_is_replaced_as_any_other():
    """/dev/shm is a tmpfs where outputs may go: a file there written twice holds the second write (it was appended
    to, as /dev/stdout redirected to a file is, and np.load read the first run's array)."""
    if not os.access("/dev/shm", os.W_OK) or not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    path = f"/dev/shm/mggcn-test-{os.getpid()}.npy"
    try:
        for run in (1, 2):
            write_output(path, lambda f, run=run: np.save(f, np.full(3, run)))
        assert np.load(path).tolist() == [2, 2, 2] and os.path.getsize(path) == 128 + 3 * 8
    finally:
        if os.path.exists(path):
            os.remove(path)
