"""Matrix Market ``coordinate`` adjacency files (plain, or gzip, bzip2 or xz compressed), with vertex data from
optional side files."""

from __future__ import annotations

import inspect

import scipy.io
import scipy.sparse as sp

from mggcn.data.formats.checks import (
    CORRUPT,
    PathLike,
    check_vertex_count,
    file_error,
    require_file,
    why,
    with_vertex_data,
)
from mggcn.data.formats.compressed import decompressor
from mggcn.data.formats.sparse import edges_from_sparse
from mggcn.data.graph import Graph

__all__ = ["read_mtx"]


# a sparse array, not the sparse matrix whose default scipy is leaving (a DeprecationWarning from 1.18 on): both
# read the same here, and scipy before the keyword returns the matrix
_SPARSE_ARRAY = {"spmatrix": False} if "spmatrix" in inspect.signature(scipy.io.mmread).parameters else {}


def read_mtx(path: PathLike, features: PathLike | None = None, labels: PathLike | None = None,
             split: PathLike | None = None, num_classes: int | None = None, seed: int = 0,
             num_features: int = 32) -> Graph:
    """Read a Matrix Market adjacency; a nonzero ``A[i, j]`` is the edge ``i -> j`` (row = source), unweighted
    whatever its value (an explicit 0 is no edge).

    Vertex data comes from the optional ``.npy``/``.npz`` files or is synthesized (see the module docstring).
    """
    path = require_file(path)
    # scipy decompresses by the suffix alone (.gz, .bz2): the content decides here, for a renamed or an .xz file,
    # and for a plain file under a .gz name
    opener = decompressor(path) or (open if path.suffix in (".gz", ".bz2") else None)
    try:
        if opener is None:
            mat = scipy.io.mmread(path, **_SPARSE_ARRAY)
        else:
            with opener(path, "rb") as f:
                mat = scipy.io.mmread(f, **_SPARSE_ARRAY)
    except CORRUPT as exc:
        raise file_error(path, f"unreadable Matrix Market file ({why(exc)})") from None
    except MemoryError:  # a dense 'array' file whose header claims more than memory
        raise file_error(path, "the header's size does not fit in memory") from None
    if not sp.issparse(mat):
        raise file_error(path, "a dense 'array' Matrix Market file; an adjacency must be in 'coordinate' format")
    if mat.shape[0] != mat.shape[1]:
        raise file_error(path, f"the adjacency matrix is {mat.shape[0]} x {mat.shape[1]}, not square")
    n = int(mat.shape[0])
    ei = edges_from_sparse(sp.coo_matrix(mat), path)
    if features is None and labels is None:  # nothing but the header says n
        check_vertex_count(path, n, ei.shape[1], "give features=/labels= for its vertices to mean it",
                           "features")
    return with_vertex_data(path, ei, n, f"{path.name} is {n} x {n}", "mtx", features, labels, split,
                            num_classes, seed, num_features)
