"""Small Planetoid datasets written byte for byte in the layout of the GCN paper's files (test helper).

The originals are Python 2 pickles, protocol 2: numpy arrays and scipy CSR matrices under their Python 2 module names
(``numpy.core.multiarray``, ``scipy.sparse.csr``, ``__builtin__``), strings and array bytes as Python 2 byte
strings (``SHORT_BINSTRING`` / ``BINSTRING``, which Python 3 reads as latin-1). :class:`Py2Pickler` writes the same
opcodes, so the readers under test meet what they meet in the real files.
"""

from __future__ import annotations

import pickle
import struct
from collections import defaultdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp

_PY2_MODULES = {"numpy._core.multiarray": "numpy.core.multiarray", "scipy.sparse._csr": "scipy.sparse.csr",
                "builtins": "__builtin__"}


class Py2Pickler(pickle._Pickler):
    """Protocol 2 as Python 2 wrote it: byte strings for ``str`` and ``bytes``, Python 2 module names."""

    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, file) -> None:
        super().__init__(file, protocol=2)

    def save_py2_str(self, obj) -> None:
        data = obj if isinstance(obj, bytes) else obj.encode("latin1")
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str
    dispatch[str] = save_py2_str

    def save_global(self, obj, name=None) -> None:
        module = _PY2_MODULES.get(obj.__module__, obj.__module__)
        self.write(pickle.GLOBAL + f"{module}\n{name or obj.__qualname__}\n".encode("ascii"))
        self.memoize(obj)


def py2_pickle(obj, path: Path) -> None:
    with open(path, "wb") as f:
        Py2Pickler(f).dump(obj)


def make_planetoid(n_train: int, n_unlabelled: int, n_test: int, classes: int, features: int, seed: int,
                   isolated: int = 0, degree: int = 3) -> dict:
    """A random dataset in the Planetoid layout: ``n_train`` labelled training vertices, then 500 validation
    vertices, then ``n_unlabelled`` more in ``allx``; then a test range of ``n_test + isolated`` vertices of which
    ``isolated`` (spread through the range, as CiteSeer's) are listed nowhere. The graph dict is symmetric, and
    holds a few self loops and duplicated neighbours, as the originals do."""
    rng = np.random.default_rng(seed)
    num_all = n_train + 500 + n_unlabelled
    n = num_all + n_test + isolated
    test_range = np.arange(num_all, n)
    left_out = rng.choice(test_range, size=isolated, replace=False) if isolated else np.empty(0, np.int64)
    test = rng.permutation(np.setdiff1d(test_range, left_out))  # test.index is not sorted in the originals
    labels = rng.integers(0, classes, size=n)
    onehot = np.eye(classes, dtype=np.int32)[labels]
    dense = (rng.random((n, features)) < 0.2) * rng.random((n, features)).astype(np.float32)
    graph: defaultdict = defaultdict(list)
    listed = np.setdiff1d(np.arange(n), left_out)
    for _ in range(degree * n // 2):
        u, v = (int(t) for t in rng.choice(listed, size=2))
        graph[u].append(v)
        graph[v].append(u)
    first = int(listed[0])
    graph[first].append(first)  # a self loop
    graph[first].append(graph[first][0])  # a duplicate
    return {
        "x": sp.csr_matrix(dense[:n_train]), "y": onehot[:n_train],
        "allx": sp.csr_matrix(dense[:num_all]), "ally": onehot[:num_all],
        "tx": sp.csr_matrix(dense[test]), "ty": onehot[test],
        "graph": graph, "test.index": test,
    }


def write_planetoid(folder: Path, name: str, parts: dict) -> Path:
    """Write ``parts`` (as :func:`make_planetoid` returns them) as ``folder/ind.name.*``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for part, obj in parts.items():
        path = folder / f"ind.{name}.{part}"
        if part == "test.index":
            path.write_text("".join(f"{int(i)}\n" for i in obj))
        else:
            py2_pickle(obj, path)
    return folder


def cora_like(folder: Path, seed: int = 0) -> Path:
    return write_planetoid(folder, "cora", make_planetoid(14, 60, 90, classes=7, features=30, seed=seed))


def citeseer_like(folder: Path, seed: int = 1) -> Path:
    return write_planetoid(folder, "citeseer",
                           make_planetoid(12, 40, 80, classes=6, features=25, seed=seed, isolated=9))
