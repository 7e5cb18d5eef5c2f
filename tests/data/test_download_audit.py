"""Datasets by name as users meet them, beyond tests/data/test_download.py: a zip damaged in the ways zipfile reports
other than BadZipFile, a server that redirects in a loop or stalls, a run killed while extracting or preparing, what is
in the way in the cache, and a process that waits for another one's download."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dataset_server import serving
from mggcn.data import download
from mggcn.data.catalog import CATALOG, cache_dir, download_dir
from mggcn.data.datasets import load_graph, named_dataset_dir, open_dataset
from mggcn.data.download import DownloadError, raw_dir
from mggcn.utils.errors import GraphError


@pytest.fixture
def served(tmp_path, monkeypatch):
    yield from serving(tmp_path, monkeypatch)


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


def _damaged(body: bytes, kind: str) -> bytes:
    """``body`` (a deflated zip) damaged so that reading its first file member raises what ``kind`` names:
    ``deflate`` zlib.error, ``encrypted`` RuntimeError, ``name`` UnicodeDecodeError, ``offset`` OSError (EINVAL)."""
    b = bytearray(body)
    cd = b.index(b"PK\x01\x02")
    while b[cd + 46 + struct.unpack_from("<H", b, cd + 28)[0] - 1] == ord("/"):  # a folder entry: the next one
        n, m, k = struct.unpack_from("<HHH", b, cd + 28)
        cd += 46 + n + m + k
    local = struct.unpack_from("<I", b, cd + 42)[0]
    if kind == "deflate":
        n, m = struct.unpack_from("<HH", b, local + 26)
        b[local + 30 + n + m] = 0xFF  # a deflate block of the reserved type
    elif kind == "encrypted":
        b[cd + 8] |= 0x01
    elif kind == "name":  # the name flagged UTF-8, and not
        b[cd + 9] |= 0x08
        b[cd + 46] = 0xFF
    else:  # the central directory said to start 64 KiB later: every member's offset goes before the file's start
        b[b.rindex(b"PK\x05\x06") + 18] += 1
    return bytes(b)


@pytest.mark.parametrize("kind", ["deflate", "encrypted", "name", "offset"])
def test_a_damaged_zip_is_refused_in_one_line_and_removed(served, kind):
    served.files["/flickr/flickr.zip"] = _damaged(served.files["/flickr/flickr.zip"], kind)
    with pytest.raises(DownloadError) as err:
        load_graph("flickr")
    text = one_line(err)
    assert "flickr.zip" in text and "corrupt zip" in text and "removed" in text
    assert not (download_dir(CATALOG["flickr"]) / "flickr.zip").exists()
    assert not raw_dir(CATALOG["flickr"]).exists()
    assert [p.name for p in raw_dir(CATALOG["flickr"]).parent.iterdir()] == []


class _Odd(BaseHTTPRequestHandler):
    """Redirects every request to itself (``/loop/...``), or sends headers and 10 bytes, then nothing."""

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        if self.path.startswith("/loop/"):
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(b"PK" * 5)
        self.wfile.flush()
        self.server.release.wait(60)  # until the test is over

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def odd():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Odd)
    server.daemon_threads = True
    server.release = threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.release.set()
    server.shutdown()
    server.server_close()


def test_a_redirect_loop_is_one_line(served, odd, monkeypatch):
    monkeypatch.setenv("MGGCN_DATA_URL", f"{odd}/loop")
    with pytest.raises(DownloadError) as err:
        load_graph("reddit")
    text = one_line(err)
    assert "HTTP 302" in text and "reddit.zip" in text and f"{download_dir(CATALOG['reddit'])}/" in text


def test_a_stalled_server_is_cut_by_the_timeout_in_one_line(served, odd, monkeypatch):
    monkeypatch.setenv("MGGCN_DATA_URL", odd)
    monkeypatch.setattr(download, "TIMEOUT_S", 0.3)
    monkeypatch.setattr(download, "ATTEMPTS", 2)
    with pytest.raises(DownloadError) as err:
        load_graph("flickr")
    text = one_line(err)
    assert "TimeoutError" in text and "2 tries" in text and "flickr.zip.part" in text


_KILLED = """
import os
from mggcn.data import download
from mggcn.data.datasets import open_dataset
unzip = download._unzip
download._unzip = lambda *args: (unzip(*args), os._exit(9))
open_dataset("flickr", progress=False)
"""


def test_what_a_run_killed_while_extracting_left_is_removed_by_the_next(served):
    """A run killed while extracting (SIGKILL, the OOM killer: no cleanup runs) leaves a ``.flickr.partial-*`` tree
    in ``raw/``, as large as the dataset; the next run, holding the dataset's lock, removes it (another dataset's
    stays)."""
    raw = cache_dir() / "raw"
    done = subprocess.run([sys.executable, "-c", _KILLED], timeout=120, capture_output=True, text=True)
    assert done.returncode == 9, done.stderr
    assert [p.name.startswith(".flickr.partial-") for p in raw.iterdir()] == [True]
    (raw / ".reddit.partial-x").mkdir()
    assert open_dataset("flickr", progress=False).num_nodes > 0
    assert sorted(p.name for p in raw.iterdir()) == [".reddit.partial-x", "flickr"]


@pytest.mark.parametrize("what", ["file", "folder"])
def test_something_in_the_way_of_the_prepared_copy_is_named(served, what):
    out = cache_dir() / "prepared" / "cora"
    out.parent.mkdir(parents=True)
    if what == "file":
        out.write_text("mine")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    with pytest.raises(GraphError) as err:
        open_dataset("cora", progress=False)
    text = one_line(err)
    assert text.startswith(f"{out}:") and "delete it" in text and "overwrite" not in text
    assert (out if what == "file" else out / "notes.txt").read_text() == "mine"


def test_a_damaged_prepared_copy_says_how_to_prepare_it_again(served):
    out = named_dataset_dir(CATALOG["cora"], progress=False)
    (out / "manifest.json").write_text("{")
    with pytest.raises(GraphError) as err:
        open_dataset("cora", progress=False)
    assert f"delete {out}, and run again" in one_line(err)


def test_a_file_where_the_extracted_tree_goes_is_named(served):
    target = raw_dir(CATALOG["reddit"])
    target.parent.mkdir(parents=True)
    target.write_text("mine")
    with pytest.raises(GraphError) as err:
        load_graph("reddit")
    text = one_line(err)
    assert text.startswith(f"{target}:") and "not a directory" in text and ".partial-" not in text
    assert target.read_text() == "mine"


def test_a_process_waiting_for_another_ones_download_says_so(served, capsys):
    entry = CATALOG["citeseer"]
    folder = download_dir(entry)
    folder.mkdir(parents=True)
    results = []
    with open(folder / ".lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # as a process downloading it would
        waiter = threading.Thread(target=lambda: results.append(named_dataset_dir(entry, progress=True)),
                                  daemon=True)
        waiter.start()
        said = ""
        for _ in range(200):
            said += capsys.readouterr().err
            if "waiting" in said or not waiter.is_alive():
                break
            time.sleep(0.05)
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    waiter.join(timeout=60)
    assert "citeseer: waiting for another process" in said and str(folder / ".lock") in said
    assert results == [cache_dir() / "prepared" / "citeseer"]


def test_a_failed_download_ends_the_processes_that_waited_for_it_at_once(served, monkeypatch):
    """The ranks of one host wait for the one that downloads: when its download failed, each took the lock in turn
    and tried again for as long (a minute each against a server that never answers); they now end with its error,
    and a later run tries afresh."""
    entry = CATALOG["citeseer"]
    ready, attempts, errors = threading.Event(), [], []

    def first():
        try:
            with download.dataset_lock(entry, progress=False):
                attempts.append("first")
                ready.set()
                time.sleep(0.5)
                raise DownloadError("citeseer: http://x/ind.citeseer.x: cannot connect (timed out)")
        except DownloadError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=first, daemon=True)
    thread.start()
    ready.wait(30)
    with pytest.raises(DownloadError) as err, download.dataset_lock(entry, progress=False):
        attempts.append("second")  # not reached: the failure it waited for is its own
    thread.join(30)
    assert attempts == ["first"] and errors
    text = one_line(err)
    assert text.startswith(errors[0]) and "waited for" in text
    with download.dataset_lock(entry, progress=False):  # did not wait: tries afresh
        attempts.append("later")
    assert attempts == ["first", "later"]
    assert named_dataset_dir(entry, progress=False).is_dir()


def test_a_full_disk_during_a_download_is_said_as_such_and_not_retried(served, monkeypatch):
    """A write that fails (a full disk, a quota) was taken for a broken connection: retried with backoff, then said
    as 'the connection broke'; it is the disk's error, at once."""
    real_open, tries = open, []

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, block):
            tries.append(len(block))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.f.name)

    def opening(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return Full(f) if str(path).endswith(".part") and "b" in mode and "+" not in mode else f

    monkeypatch.setattr(download, "open", opening, raising=False)
    with pytest.raises(GraphError) as err:
        open_dataset("cora", progress=False)
    text = one_line(err)
    assert "cannot write the download (No space left on device)" in text and "connection" not in text
    assert len(tries) == 1


@pytest.mark.parametrize("code", [errno.EROFS, errno.EIO])
def test_a_cache_whose_lock_cannot_be_written(served, monkeypatch, code):
    """A read-only cache (errno EROFS, or one this user may not write) has no writer to wait for: a dataset it holds
    is read without the lock (it was a traceback); another failure to open the lock is one line naming it."""
    named_dataset_dir(CATALOG["cora"], progress=False)
    prepared = cache_dir() / "prepared"
    shutil.rmtree(prepared)  # the cache holds the downloads only: reading it again prepares, under the lock
    real_open = open

    def opening(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(download, "open", opening, raising=False)
    if code == errno.EROFS:
        assert open_dataset("cora", progress=False).num_nodes > 0
        assert (prepared / "cora").is_dir()
    else:
        with pytest.raises(GraphError) as err:
            open_dataset("cora", progress=False)
        assert one_line(err).endswith("cora/.lock: cannot lock the dataset cache (Input/output error)")


def test_an_archive_a_stopped_run_left_beside_its_tree_is_removed(served):
    """A run stopped between extracting an archive and removing it left the archive (56 GiB for papers100M) for
    good: later runs skip the extraction. The next run that fetches the dataset removes it."""
    entry = CATALOG["flickr"]
    download.fetch(entry, progress=False)
    archive = download_dir(entry) / entry.files[0].name
    archive.write_bytes(b"left by a stopped run")
    download.fetch(entry, progress=False)
    assert not archive.exists() and raw_dir(entry).is_dir()


def test_a_mirror_that_is_no_url_is_one_line_naming_the_variable(served, monkeypatch):
    monkeypatch.setenv("MGGCN_DATA_URL", "http://[::1")
    with pytest.raises(DownloadError) as err:
        open_dataset("cora", progress=False)
    text = one_line(err)
    assert "http://[::1/cora/" in text and "(from MGGCN_DATA_URL): not a URL that can be fetched" in text
