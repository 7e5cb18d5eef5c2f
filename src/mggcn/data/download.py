"""Downloading a named dataset's files (:mod:`mggcn.data.catalog`) into the cache: resumable, checked, extracted.

A file ``F`` of dataset ``NAME`` is fetched with urllib into ``CACHE/downloads/NAME/F.part``, continuing with an HTTP
``Range`` request after a cut (in the same run, a few times, and in the next run from what the ``.part`` holds; a
server that ignores ``Range`` sends the whole file again, and the ``.part`` restarts). Only a file of the announced
length that matches its checksum (where the catalog knows one) is renamed to ``F``: a partial or corrupt download is
never read. A zip is then extracted into a new directory (no member may lead outside it; its CRCs are checked as
it is read), and the directory that the reader reads is renamed into ``CACHE/raw/NAME`` whole.

Offline, or when the server fails, one line says which URLs to download and the directory to put them in: files
placed there by hand are checked and used as downloaded ones.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from mggcn.config import __version__
from mggcn.data.catalog import MIRROR_ENV, NamedDataset, RemoteFile, cache_dir, download_dir
from mggcn.utils.errors import GraphError
from mggcn.utils.outputs import follow_umask
from mggcn.utils.progress import Progress

__all__ = ["DownloadError", "dataset_lock", "fetch", "fetch_files", "raw_dir"]

_BLOCK = 1 << 20
ATTEMPTS = 4  # connections tried for one file in one run before saying what to download by hand
TIMEOUT_S = 60.0  # a connection that sends nothing for this long is cut (and resumed)
BACKOFF_S = 1.0  # the wait before the second try, doubled before each one after


class DownloadError(GraphError):
    """A dataset's files could not be downloaded; the message says what to fetch by hand and where to put it."""

    # a failed run, not bad input: the same command works once the network or the files are there
    exit_status = 1


class _Cut(Exception):
    """The connection ended before the file did (resumable)."""


class _BadArchive(Exception):
    """An archive that is not the source's: corrupt, a member leading outside, or without the dataset."""


# what zipfile raises for damaged bytes besides BadZipFile: a broken deflate stream (zlib.error), an "encrypted" flag
# (RuntimeError), a member name that is no UTF-8 (ValueError), an offset before the file's start (OSError, EINVAL)
_CORRUPT = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError, zlib.error, RuntimeError,
            ValueError, OSError)


def raw_dir(dataset: NamedDataset) -> Path:
    """Where the reader's directory of an archived dataset is kept: ``CACHE/raw/NAME``."""
    return cache_dir() / "raw" / dataset.name


@contextlib.contextmanager
def dataset_lock(dataset: NamedDataset, progress: bool = True) -> Iterator[None]:
    """Held while a dataset is downloaded or prepared, so that processes started together (the ranks of one host)
    wait for the one doing it instead of writing the same ``.part``; one waiting says so on stderr (unless not
    ``progress``), as a download of hours would otherwise look like a hang."""
    folder = _folder(dataset)
    try:
        import fcntl
    except ImportError:  # no advisory locks here: processes must not fetch the same dataset at once
        yield
        return
    try:
        handle = open(folder / ".lock", "a+b")
    except OSError as exc:  # a cache no one can write (read-only): nothing to wait for; a write will say why
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise GraphError(f"{folder / '.lock'}: cannot lock the dataset cache ({exc.strerror or exc})") from None
        yield
        return
    with handle:
        waited_since = None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                print(f"mggcn: {dataset.name}: waiting for another process that is downloading or preparing it "
                      f"(it holds {folder / '.lock'})", file=sys.stderr, flush=True)
            waited_since = time.time()
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            _raise_failure_meanwhile(folder, waited_since)
            try:
                yield
            except DownloadError as exc:
                _note_failure(folder, str(exc))
                raise
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# the message of a download that failed, kept for the processes that waited for it (the ranks of one host): they end
# with it at once instead of each trying again, one after the other, for as long again
_FAILED = ".failed"


def _note_failure(folder: Path, message: str) -> None:
    with contextlib.suppress(OSError):
        (folder / _FAILED).write_text(message + "\n", encoding="utf-8")


def _raise_failure_meanwhile(folder: Path, waited_since: float | None) -> None:
    """Raise the :class:`DownloadError` of a download that failed while this process waited for it; a process that
    did not wait tries afresh."""
    failed = folder / _FAILED
    try:
        if waited_since is not None and failed.stat().st_mtime >= waited_since - 1.0:
            message = failed.read_text(encoding="utf-8").strip()
            raise DownloadError(f"{message} (the download this process waited for, by another process)")
        failed.unlink(missing_ok=True)
    except (OSError, UnicodeDecodeError):
        pass


def _folder(dataset: NamedDataset) -> Path:
    """``CACHE/downloads/NAME/``, created if missing."""
    folder = download_dir(dataset)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GraphError(f"{folder}: cannot create the dataset cache ({exc.strerror or exc}); set MGGCN_DATA to a "
                         "writable directory") from None
    return folder


def fetch(dataset: NamedDataset, progress: bool = True) -> Path:
    """The path the reader of ``dataset`` reads, its files downloaded and checked (and extracted) first if needed."""
    if not dataset.archive:
        fetch_files(dataset, progress)
        return download_dir(dataset) / dataset.reader_path
    target = raw_dir(dataset)
    if target.is_dir():  # extracted; an archive still here is one a stopped run had not removed yet
        for file in dataset.files:
            with contextlib.suppress(OSError):  # a cache this process may not change keeps it
                (download_dir(dataset) / file.name).unlink(missing_ok=True)
    else:
        placed = all((download_dir(dataset) / f.name).is_file() for f in dataset.files)
        (archive,) = fetch_files(dataset, progress)
        try:
            _extract(dataset, archive, target, progress)
        except _BadArchive as exc:
            if placed:  # a file placed by hand is the user's to remove
                raise GraphError(f"{archive}: {exc}; delete it, and run again to download it") from None
            archive.unlink()
            raise DownloadError(f"{dataset.name}: {dataset.url(dataset.files[0])}: the download is not the source's "
                                f"archive ({exc}) and was removed") from None
        except OSError as exc:
            raise GraphError(f"{exc.filename or target}: cannot extract {archive.name} there "
                             f"({exc.strerror or exc})") from None
        archive.unlink()  # the extracted tree is kept instead
    return target / dataset.reader_path


def fetch_files(dataset: NamedDataset, progress: bool = True) -> list[Path]:
    """Every file of ``dataset`` in ``CACHE/downloads/NAME/``, checked; those missing are downloaded."""
    folder = _folder(dataset)
    paths, missing = [], []
    for file in dataset.files:
        path = folder / file.name
        if path.is_file():
            problem = _problem(file, path)
            if problem:
                raise GraphError(f"{path}: {problem}: not the file of {dataset.url(file)}; delete it, and run again "
                                 "to download it")
        else:
            missing.append(file)
        paths.append(path)
    for i, file in enumerate(missing):
        try:
            _fetch_file(dataset, file, folder / file.name, progress)
        except OSError as exc:  # the cache's disk, not the connection
            raise GraphError(f"{exc.filename or folder}: cannot write the download ({exc.strerror or exc})") from None
        except DownloadError as exc:
            urls = [dataset.url(f) for f in missing[i:]]
            them = "them" if len(urls) > 1 else "it"
            raise DownloadError(f"{dataset.name}: {exc}; to place the files by hand, download {' '.join(urls)} and "
                                f"put {them} in {folder}/ under the same name, then run again") from None
    return paths


def _fetch_file(dataset: NamedDataset, file: RemoteFile, dest: Path, progress: bool) -> None:
    url = dataset.url(file)
    part = dest.with_name(dest.name + ".part")
    for attempt in range(ATTEMPTS):
        try:
            _download(url, part, progress)
            break
        except _Cut as cut:
            if attempt == ATTEMPTS - 1:
                kept = (f"{part} holds what came, and the next run continues from it" if part.is_file() else
                        "the next run starts over")
                raise DownloadError(f"{url}: {cut} ({ATTEMPTS} tries; {kept})") from None
            time.sleep(BACKOFF_S * 2**attempt)
    problem = _problem(file, part)
    if problem:
        part.unlink()
        raise DownloadError(f"{url}: the download is corrupt ({problem}) and was removed")
    os.replace(part, dest)


def _request(url: str, start: int) -> http.client.HTTPResponse:
    headers = {"User-Agent": f"mggcn/{__version__}"}
    if start:
        headers["Range"] = f"bytes={start}-"
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)
    except ValueError as exc:  # no URL urllib can fetch ("http://[::1": an invalid IPv6 host)
        mirror = f" (from {MIRROR_ENV})" if os.environ.get(MIRROR_ENV, "").strip() else ""
        raise DownloadError(f"{url}{mirror}: not a URL that can be fetched ({' '.join(str(exc).split())})") from None
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and start:  # nothing after what the .part holds: the next attempt starts over
            raise _Cut("the server has nothing after the partial file's end") from None
        # urllib's reason for a redirect loop spans three lines
        raise DownloadError(f"{url}: HTTP {exc.code} {' '.join(str(exc.reason).split())}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        why = " ".join(str(getattr(reason, "strerror", None) or reason).split())
        raise DownloadError(f"{url}: cannot connect ({why})") from None


def _download(url: str, part: Path, progress: bool) -> None:
    """Download ``url`` into ``part``, continuing after the bytes it holds; raise :class:`_Cut` when the
    connection ends before the announced length (what came stays in ``part``)."""
    start = part.stat().st_size if part.is_file() else 0
    try:
        response = _request(url, start)
    except _Cut:
        part.unlink()
        raise
    with response:
        resumed = start and response.status == 206 and _range_start(response) == start
        if not resumed:
            start = 0  # the server sent the whole file (it ignores Range, or the range was not ours)
        length = response.headers.get("Content-Length")
        total = start + int(length) if length and length.isascii() and length.isdigit() else None
        done = start
        with open(part, "ab" if resumed else "wb") as out, \
                Progress(total, f"download {part.name[:-5]}", "B", done=start, prefix="mggcn", stream=sys.stderr,
                         quiet=not progress, summary=True) as bar:
            while block := _read(response, done):
                out.write(block)  # an error here is the disk's (full, quota): fetch_files says so, not a retry
                done += len(block)
                bar.update(len(block))
    if total is not None and done != total:
        raise _Cut(f"the connection ended after {done:,} of {total:,} bytes")


def _read(response: http.client.HTTPResponse, done: int) -> bytes:
    """The next block of ``response`` (empty at its end); :class:`_Cut` when the connection breaks."""
    try:
        return response.read(_BLOCK)
    except (OSError, http.client.HTTPException) as exc:
        raise _Cut(f"the connection broke after {done:,} bytes ({exc.__class__.__name__})") from None


def _range_start(response: http.client.HTTPResponse) -> int | None:
    """The first byte of a 206 response (``Content-Range: bytes START-END/TOTAL``)."""
    text = response.headers.get("Content-Range", "")
    try:
        return int(text.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return None


def _problem(file: RemoteFile, path: Path) -> str | None:
    """What is wrong with ``path`` as ``file`` (size, sha256, git blob id), or None."""
    size = path.stat().st_size
    if file.size is not None and size != file.size:
        return f"{size:,} bytes, expected {file.size:,}"
    if file.sha256 is None and file.git_blob is None:
        return None
    digest = hashlib.sha256() if file.sha256 else hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    expected = file.sha256 or file.git_blob
    if digest.hexdigest() != expected:
        kind = "sha256" if file.sha256 else "git blob id"
        return f"{kind} {digest.hexdigest()}, expected {expected}"
    return None


def _extract(dataset: NamedDataset, archive: Path, target: Path, progress: bool) -> None:
    """Extract ``archive`` into a new directory beside ``target``, and rename the directory the reader reads (the
    one holding ``dataset.marker``) to ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink():  # not a directory (fetch saw none): os.replace would name the work
        raise NotADirectoryError(errno.ENOTDIR, "not a directory; delete it, and run again", str(target))
    _remove_partials(target)
    work = Path(tempfile.mkdtemp(prefix=f".{dataset.name}.partial-", dir=target.parent))
    try:
        _unzip(archive, work, progress)
        root = _find_root(work, dataset.marker)
        if root is None:
            raise _BadArchive(f"no {dataset.marker} in it")
        os.replace(root, target)
        follow_umask(target, directory=True)  # the extraction directory was private (mkdtemp)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _remove_partials(target: Path) -> None:
    """Remove the ``.NAME.partial-*`` directories beside ``target`` that a run killed while extracting left: as
    large as the dataset, and nothing else would ever remove them. Called with the dataset's lock held (every caller
    of :func:`fetch` holds it), so no live process is writing them."""
    try:
        stale = [p for p in target.parent.iterdir()
                 if p.name.startswith(f".{target.name}.partial-") and p.is_dir() and not p.is_symlink()]
    except OSError:
        return
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)


def _unzip(archive: Path, into: Path, progress: bool) -> None:
    """Every member of the zip ``archive`` under ``into``; one leading outside it, or a bad CRC, is refused."""
    with open(archive, "rb") as file:  # opened here: an OSError from zipfile below is then the content's
        try:
            z = zipfile.ZipFile(file)
            members = z.infolist()
        except _CORRUPT as exc:
            raise _BadArchive(_corrupt(exc)) from None
        for info in members:
            _inside(info.filename)
        with z, Progress(sum(i.file_size for i in members), f"extract {archive.name}", "B", prefix="mggcn",
                         stream=sys.stderr, quiet=not progress, summary=True) as bar:
            for info in members:
                dest = into.joinpath(*PurePosixPath(info.filename).parts)
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with open(dest, "wb") as out:
                    for block in _member(z, info):
                        out.write(block)
                        bar.update(len(block))


def _member(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The bytes of one member, a block at a time; damage (a bad CRC among it) raises :class:`_BadArchive`."""
    try:
        with z.open(info) as src:
            while block := src.read(_BLOCK):
                yield block
    except _CORRUPT as exc:
        raise _BadArchive(_corrupt(exc, info.filename)) from None


def _corrupt(exc: BaseException, member: str | None = None) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"a corrupt zip: {member!r}: {text}" if member else f"a corrupt zip: {text}"


def _inside(name: str) -> None:
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not parts or name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
        raise _BadArchive(f"member {name!r} would be written outside the directory it is extracted into")


def _find_root(tree: Path, marker: str, depth: int = 3) -> Path | None:
    """The shallowest directory under ``tree`` (``tree`` itself included) holding ``marker``."""
    level = [tree]
    for _ in range(depth + 1):
        for folder in level:
            if (folder / marker).exists():
                return folder
        level = [child for folder in level for child in sorted(folder.iterdir()) if child.is_dir()]
    return None
