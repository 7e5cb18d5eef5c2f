"""A real HTTP server (``http.server`` in a thread, port 0) serving small datasets in each source's real layout and
archive format, and the catalog entries that point at them (test helper).

Every name of :data:`mggcn.data.catalog.CATALOG` is served under ``/NAME/FILE``, the layout ``MGGCN_DATA_URL``
names: the Planetoid files as the GCN paper's eight ``ind.NAME.*`` files (Python 2 pickles), OGB's as zips of
``arxiv/raw/*.csv.gz`` + ``arxiv/split/time/`` (``products`` with ``sales_ranking``, ``papers100M-bin`` with the
binary ``raw/data.npz``), DGL's Reddit and GraphSAINT's Flickr as zips of their files. The Planetoid entries carry
the sha256 (and for ``ind.pubmed.allx`` the git blob id) of the files served, as the real ones carry the real files'.

The handler answers ``Range`` requests (206 and ``Content-Range``) unless ``ignore_range``; ``cuts[path] = N`` sends
the first N bytes of the next response for ``path`` and closes the connection; every request is kept in ``requests``
as ``(path, Range header)``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from mggcn.data import download
from mggcn.data.catalog import CATALOG, NamedDataset
from mggcn.data.generators.spec import parse_spec
from mggcn.data.graph import Graph
from planetoid_files import make_planetoid, write_planetoid

sys.path.insert(0, str(Path(__file__).parent / "data"))
from test_formats import write_ogb_csv, write_ogb_npz, write_reddit, write_saint  # noqa: E402
from test_ogb_proteins import write_ogb_proteins  # noqa: E402


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        state = self.server
        wanted = self.headers.get("Range")
        state.requests.append((self.path, wanted))
        body = state.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        if wanted and not state.ignore_range:
            start = int(wanted.split("=")[1].split("-")[0])
            if start >= len(body):
                self.send_error(416)
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        cut = state.cuts.pop(self.path, None)
        self.wfile.write(body[start:] if cut is None else body[start:start + cut])
        self.close_connection = cut is not None

    def log_message(self, *args) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.cuts: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.ignore_range = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def start_server() -> _Server:
    server = _Server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def small_graph() -> Graph:
    """A small generated graph (60 vertices, 6 features, 3 classes) for the sources that are not Planetoid's."""
    return parse_spec("synthetic:n=60,features=6,classes=3,seed=5")


def zip_tree(root: Path, top: str | None) -> bytes:
    """The files under ``root`` as a zip, under the folder ``top`` (at the top level when None), with folder
    entries as ``zip -r`` writes them."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(root.rglob("*")):
            name = "/".join(p for p in (top, path.relative_to(root).as_posix()) if p)
            if path.is_dir():
                z.writestr(name + "/", b"")
            else:
                z.write(path, name)
    return buffer.getvalue()


_PLANETOID_SIZES = {"cora": (14, 60, 90, 7, 30, 0), "citeseer": (12, 40, 80, 6, 25, 9),
                    "pubmed": (9, 30, 70, 3, 20, 0)}
_OGB_LAYOUT = {"ogbn-arxiv": ("arxiv", "time"), "ogbn-products": ("products", "sales_ranking"),
               "ogbn-proteins": ("proteins", "species"), "ogbn-papers100M": ("papers100M-bin", None)}


def source_tree(name: str, root: Path) -> Path:
    """The files of ``name`` as its source lays them out, under ``root`` (created); returns the reader's path."""
    if name in _PLANETOID_SIZES:
        n_train, n_unlabelled, n_test, classes, features, isolated = _PLANETOID_SIZES[name]
        parts = make_planetoid(n_train, n_unlabelled, n_test, classes=classes, features=features, seed=len(name),
                               isolated=isolated)
        return write_planetoid(root, name, parts) / f"ind.{name}"
    graph = small_graph()
    if name == "ogbn-proteins":  # multi-label, and only edge features
        rng = np.random.default_rng(0)
        labels = (rng.random((graph.num_nodes, 4)) < 0.4).astype(np.uint8)
        labels[0, :2] = 1  # two labels on a vertex: not one-hot
        return write_ogb_proteins(root / "proteins", graph, labels,
                                  rng.standard_normal((graph.num_edges, 8)).astype(np.float32))
    if name in _OGB_LAYOUT:
        top, split = _OGB_LAYOUT[name]
        return write_ogb_csv(root / top, graph, split) if split else write_ogb_npz(root / top, graph)
    return write_reddit(root, graph) if name == "reddit" else write_saint(root, graph)


def serve_catalog(server: _Server, work: Path) -> dict[str, NamedDataset]:
    """Serve every dataset of the catalog from ``server``; returns the catalog entries to use instead (the
    Planetoid ones with the checksums of the files served). ``work`` receives each source's tree."""
    entries = {}
    for name, entry in CATALOG.items():
        tree = work / name
        source_tree(name, tree)
        if entry.archive:
            (file,) = entry.files
            top = _OGB_LAYOUT[name][0] if name in _OGB_LAYOUT else None
            server.files[f"/{name}/{file.name}"] = zip_tree(tree, top)
            entries[name] = entry
            continue
        files = []
        for file in entry.files:
            body = (tree / file.name).read_bytes()
            server.files[f"/{name}/{file.name}"] = body
            if file.git_blob is not None:
                blob = hashlib.sha1(f"blob {len(body)}\0".encode() + body).hexdigest()
                files.append(dataclasses.replace(file, git_blob=blob))
            else:
                files.append(dataclasses.replace(file, sha256=hashlib.sha256(body).hexdigest(), size=len(body)))
        entries[name] = dataclasses.replace(entry, files=tuple(files))
    return entries


def serving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    """The body of a ``served`` fixture: every name of the catalog served by a local server, ``MGGCN_DATA_URL``
    pointing at it and ``MGGCN_DATA`` at ``tmp_path/cache``; yields the server."""
    monkeypatch.setattr(download, "BACKOFF_S", 0.0)  # a local server needs no time to recover
    server = start_server()
    for name, entry in serve_catalog(server, tmp_path / "sources").items():
        monkeypatch.setitem(CATALOG, name, entry)
    monkeypatch.setenv("MGGCN_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("MGGCN_DATA_URL", server.url)
    yield server
    server.shutdown()
    server.server_close()
