"""Datasets by name: where each is downloaded from, how its files are checked, and which reader reads them.

``mggcn train cora``, ``mggcn prepare ogbn-products DIR`` and ``mggcn.train("reddit")`` name a dataset of
:data:`CATALOG`; :mod:`mggcn.data.download` fetches its files into the cache (:func:`cache_dir`), checks them, and
:mod:`mggcn.data.datasets` reads them with the existing reader of its format and keeps the prepared directory there.

A file is checked by its sha256 where it is known (the Planetoid files: those of the GCN paper's repository,
tkipf/gcn, which are the same blobs as kimiyoung/planetoid's, where PyG downloads them from), by its git blob id
where only that is known (``ind.pubmed.allx``), else by the length the server announces and the zip's own CRCs
while it is extracted (OGB's, DGL's and GraphSAINT's archives: none of them publishes a checksum or a size).

``MGGCN_DATA_URL`` replaces every source by one mirror: a file ``F`` of dataset ``NAME`` is then fetched from
``$MGGCN_DATA_URL/NAME/F`` (a copy of the cache's ``downloads/`` directory served as it is).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CATALOG", "NamedDataset", "RemoteFile", "cache_dir", "download_dir", "find", "named"]

CACHE_ENV, MIRROR_ENV = "MGGCN_DATA", "MGGCN_DATA_URL"


@dataclass(frozen=True)
class RemoteFile:
    """One file to download: its name in the cache, where it comes from, and what it must hash to (when known)."""

    name: str
    url: str
    sha256: str | None = None
    git_blob: str | None = None  # sha1 of "blob SIZE\\0" + content: git's id of the file
    size: int | None = None


@dataclass(frozen=True)
class NamedDataset:
    """A dataset of :data:`CATALOG`.

    ``fmt`` is the reader (:data:`mggcn.data.formats.FORMATS`); ``archive``: the files are zips whose extracted tree
    holds, at some depth, the directory that ``fmt`` reads, recognised by ``marker`` (a file or directory in it);
    ``reader_path`` is the path the reader is given, relative to that directory. ``undirected``: the source stores
    each edge once and its own loader adds the reverse (OGB's ``add_inverse_edge``). ``stats``: vertices, edges,
    features and classes as the source's own loader reports them; ``download``: bytes, about.
    """

    name: str
    fmt: str
    source: str
    files: tuple[RemoteFile, ...]
    stats: tuple[int, int, int, int]
    download: int | None
    archive: bool = False
    marker: str = ""
    reader_path: str = "."
    undirected: bool = False

    def url(self, file: RemoteFile) -> str:
        """Where ``file`` is fetched from: its source, or the mirror of ``MGGCN_DATA_URL``."""
        mirror = os.environ.get(MIRROR_ENV, "").strip()
        if mirror:
            return f"{mirror.rstrip('/')}/{self.name}/{file.name}"
        return file.url


_PLANETOID = "https://github.com/kimiyoung/planetoid/raw/master/data/"
# name, sha256 (None: only the git blob id is known), git blob id, bytes; of the files in tkipf/gcn's gcn/data/,
# the same git blobs as kimiyoung/planetoid's data/
_PLANETOID_FILES = {
    "cora": (
        ("x", "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab", 22119),
        ("tx", "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a", 148025),
        ("allx", "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543", 257305),
        ("y", "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1", 4054),
        ("ty", "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad", 28135),
        ("ally", "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71", 47959),
        ("graph", "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d", 59847),
        ("test.index", "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875", 5000)),
    "citeseer": (
        ("x", "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6", 31087),
        ("tx", "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21", 260321),
        ("allx", "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668", 595021),
        ("y", "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924", 3014),
        ("ty", "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce", 24135),
        ("ally", "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95", 55623),
        ("graph", "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7", 61987),
        ("test.index", "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4", 5000)),
    "pubmed": (
        ("x", "fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33", 23172),
        ("tx", "4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d", 405505),
        ("allx", "git:3b86bccf08111c37c632a9dd8ab63db25ea76361", None),
        ("y", "e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3", 854),
        ("ty", "ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd", 12135),
        ("ally", "0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e", 224739),
        ("graph", "5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9", 471808),
        ("test.index", "b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5", 6000)),
}
_PLANETOID_STATS = {"cora": (2708, 10556, 1433, 7), "citeseer": (3327, 9104, 3703, 6),
                    "pubmed": (19717, 88648, 500, 3)}


def _planetoid(name: str) -> NamedDataset:
    files = []
    for part, digest, size in _PLANETOID_FILES[name]:
        fname = f"ind.{name}.{part}"
        git = digest.removeprefix("git:") if digest.startswith("git:") else None
        files.append(RemoteFile(fname, _PLANETOID + fname, sha256=None if git else digest, git_blob=git, size=size))
    known = sum(f.size for f in files if f.size is not None)
    return NamedDataset(name, "planetoid", "Planetoid: the GCN paper's files (as PyG)",
                        tuple(files), _PLANETOID_STATS[name], download=None if name == "pubmed" else known,
                        reader_path=f"ind.{name}")


_OGB = "http://snap.stanford.edu/ogb/data/nodeproppred/"
_DGL = "https://data.dgl.ai/dataset/"


def _zipped(name: str, fmt: str, source: str, url: str, stats: tuple[int, int, int, int], download: int | None,
            marker: str, undirected: bool = False) -> NamedDataset:
    return NamedDataset(name, fmt, source, (RemoteFile(url.rsplit("/", 1)[1], url),), stats, download,
                        archive=True, marker=marker, undirected=undirected)


_GIB, _MIB = 2**30, 2**20  # OGB gives its archives' sizes in GiB (its "GB": size / 2**30)

CATALOG: dict[str, NamedDataset] = {d.name: d for d in (
    _planetoid("cora"), _planetoid("citeseer"), _planetoid("pubmed"),
    _zipped("ogbn-arxiv", "ogb", "OGB", _OGB + "arxiv.zip", (169343, 1166243, 128, 40), 81 * _MIB, "raw"),
    _zipped("ogbn-products", "ogb", "OGB", _OGB + "products.zip", (2449029, 123718280, 100, 47), int(1.38 * _GIB),
            "raw", undirected=True),
    _zipped("ogbn-proteins", "ogb", "OGB", _OGB + "proteins.zip", (132534, 79122504, 8, 112), int(0.21 * _GIB), "raw",
            undirected=True),
    _zipped("ogbn-papers100M", "ogb", "OGB", _OGB + "papers100M-bin.zip", (111059956, 1615685872, 128, 172),
            int(56.17 * _GIB), "raw"),
    _zipped("reddit", "dgl-reddit", "DGL's RedditDataset", _DGL + "reddit.zip", (232965, 114615892, 602, 41), None,
            "reddit_data.npz"),
    _zipped("flickr", "saint", "GraphSAINT's files (DGL's zip)", _DGL + "flickr.zip",
            (89250, 899756, 500, 7), None, "adj_full.npz"),
)}


def find(spec: str) -> NamedDataset | None:
    """The catalog's dataset named ``spec`` (any case), or None."""
    if not isinstance(spec, str):
        return None
    lowered = spec.lower()
    return next((d for name, d in CATALOG.items() if name.lower() == lowered), None)


def named(spec: object) -> NamedDataset | None:
    """The dataset ``spec`` names, when it is a name of :data:`CATALOG` and no file or directory of that name
    exists here (a path given is always read as a path)."""
    if not isinstance(spec, str) or os.path.exists(spec):
        return None
    return find(spec)


def cache_dir() -> Path:
    """Where named datasets are kept: ``$MGGCN_DATA``, else ``~/.cache/mggcn``."""
    root = os.environ.get(CACHE_ENV, "").strip()
    return Path(root).expanduser().absolute() if root else Path.home() / ".cache" / "mggcn"


def download_dir(dataset: NamedDataset) -> Path:
    """Where the files of ``dataset`` are downloaded to, or placed by hand: ``CACHE/downloads/NAME/``."""
    return cache_dir() / "downloads" / dataset.name
