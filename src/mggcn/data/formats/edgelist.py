"""Text/CSV edge lists of 0-based vertex ids (``u v`` is ``u -> v``), read whole or streamed in chunks."""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from mggcn.data.formats.checks import (
    MAX_LINE,
    PathLike,
    check_edges,
    check_vertex_count,
    data_lines,
    file_error,
    line_of_row,
    load_npy,
    loadtxt,
    locate_bad_line,
    read_table,
    require_file,
    vertex_data,
    why,
    with_vertex_data,
)
from mggcn.data.formats.compressed import DECOMPRESS_ERRORS, open_text
from mggcn.data.graph import Graph
from mggcn.utils.errors import GraphError

__all__ = ["read_edgelist", "iter_edgelist_chunks", "edgelist_vertex_data", "known_vertex_count"]

_BLOCK_CHARS = 1 << 23  # of text parsed at once by the streaming reader, at most


def read_edgelist(path: PathLike, features: PathLike | None = None, labels: PathLike | None = None,
                  split: PathLike | None = None, delimiter: str | None = None,
                  comment: str | Sequence[str] = ("#", "%"), num_nodes: int | None = None,
                  num_classes: int | None = None, seed: int = 0, num_features: int = 32) -> Graph:
    """Read a text/CSV edge list of 0-based vertex ids: a line ``u v [ignored columns...]`` is the edge ``u -> v``.

    Args:
        delimiter: ``None`` detects: ``;`` or else ``,`` if the first data line has one, else any whitespace.
        comment: prefix(es) that start a comment, whole-line or trailing.
        num_nodes: ``n``; default: the row count of the features/labels files (an id beyond is an error), else
            max id + 1 unless that leaves more than ``ISOLATED_SLACK`` vertices beyond what the edges can touch.

    A first data line with no number where the two ids go is a header and is skipped (one with a number there is
    data: a typo in it is an error). The file may be compressed
    (gzip, bzip2 or xz, recognised by content).
    :func:`iter_edgelist_chunks` reads the same files in bounded memory.
    """
    path = require_file(path)
    comments = (comment,) if isinstance(comment, str) else tuple(comment)
    skiprows, delimiter = _edgelist_layout(path, delimiter, comments)
    table = read_table(path, np.int64, ncols=2, exact=False, delimiter=delimiter, comments=comments,
                       skiprows=skiprows)
    ei = table.T
    n, n_from = _edgelist_num_nodes(path, int(ei.max()) + 1 if ei.size else 0, ei.shape[1], num_nodes, features,
                                    labels)
    ei = check_edges(ei, n, path, lambda e: f"line {line_of_row(path, e, comments, skiprows)}", n_from)
    return with_vertex_data(path, ei, n, n_from, "edgelist", features, labels, split, num_classes,
                            seed, num_features)


def iter_edgelist_chunks(path: PathLike, chunk_edges: int = 1 << 20, delimiter: str | None = None,
                         comment: str | Sequence[str] = ("#", "%"), num_nodes: int | None = None,
                         n_from: str = "") -> Iterator[np.ndarray]:
    """Stream the edges of a file :func:`read_edgelist` reads, as ``int64 [2, k]`` chunks of at most ``chunk_edges``.

    Same layout detection (header, delimiter, comments, compression) and the same one-line errors naming the file
    and the line; ids are checked against ``num_nodes`` when given (``n_from``: where it came from), else only for
    being negative. Memory: one block of text, of about ``chunk_edges`` lines, and its table.
    """
    path = require_file(path)
    comments = (comment,) if isinstance(comment, str) else tuple(comment)
    skiprows, delimiter = _edgelist_layout(path, delimiter, comments)
    bound = np.iinfo(np.int64).max if num_nodes is None else num_nodes
    if num_nodes is None:
        n_from = "n = largest id + 1 must fit in 64 bits"
    done = 0  # data rows before this chunk

    def line_of(e: int) -> str:
        return f"line {line_of_row(path, done + e, comments, skiprows)}"

    try:
        f = open_text(path)
    except OSError as exc:  # gone or unreadable since the layout was read
        raise file_error(path, f"unreadable ({why(exc)})") from None
    with f:
        try:
            for _ in range(skiprows):
                f.readline()
            for table in _tables(f, chunk_edges, delimiter, comments):
                for begin in range(0, table.shape[0], chunk_edges):
                    ei = table[begin:begin + chunk_edges].T
                    if ei.size and int(ei.min()) < 0:
                        e = int(np.argmax((ei < 0).any(axis=0)))
                        raise file_error(path, f"{line_of(e)}: vertex id {int(ei[:, e].min())} is negative")
                    yield check_edges(ei, bound, path, line_of, n_from)
                    done += ei.shape[1]
        except ValueError as exc:
            if isinstance(exc, GraphError):
                raise
            where = locate_bad_line(path, np.int64, 2, False, delimiter, comments, skiprows)
            raise file_error(path, where or f"unparsable ({why(exc)})") from None
        except DECOMPRESS_ERRORS as exc:
            raise file_error(path, f"truncated or corrupt file ({why(exc)})") from None


def _tables(f: TextIO, chunk_edges: int, delimiter: str | None, comments: Sequence[str]) -> Iterator[np.ndarray]:
    """The data rows of ``f`` from where it stands, ``int64 [k, 2]`` tables of a block of text each (the first two
    columns): a block of about ``chunk_edges`` lines, ended at a line's end, parsed whole where it is plain (see
    :func:`_plain_table`), else line by line as numpy's ``loadtxt`` reads them."""
    block_chars = max(1 << 12, min(_BLOCK_CHARS, 12 * chunk_edges))
    while True:
        text = f.read(block_chars)
        if not text:
            return
        if not text.endswith("\n"):
            text += f.readline()
        table = _plain_table(text, delimiter, comments)
        if table is None:
            # numpy strips one comment prefix in C but several in Python, line by line (5x slower): pass only
            # the prefixes this block contains, usually none.
            present = [c for c in comments if c in text]
            table = loadtxt(io.StringIO(text), dtype=np.int64, delimiter=delimiter, usecols=(0, 1), ndmin=2,
                            comments=(present[0] if len(present) == 1 else present) or None)
        del text
        yield table


def _plain_table(text: str, delimiter: str | None, comments: Sequence[str]) -> np.ndarray | None:
    """The first two columns of ``text`` as ``int64 [k, 2]``, parsed in one pass (numpy's ``loadtxt`` reads an open
    file line by line, several times slower than a path), when the block is plain: whitespace-separated integers,
    the same number of them (at least two) on every line, no comment mark, no blank line, no id beyond int64.
    None otherwise, and the caller reads it as ``loadtxt`` does (which also says what is wrong with a line)."""
    if delimiter is not None or any(c in text for c in ("\x0b", "\x0c", *comments)):  # \v \f: loadtxt decides
        return None
    raw = np.frombuffer(text.encode("utf-8", errors="replace"), dtype=np.uint8)
    space = raw <= 32  # another control character than \t \r \n ends the parse below as no integer
    first = np.empty(raw.size, dtype=bool)  # each token's first character: one that follows a space
    first[0] = not space[0]
    np.greater(space[:-1], space[1:], out=first[1:])
    starts = np.flatnonzero(first)
    ends = np.flatnonzero(raw == 10)
    if raw[-1] != 10:
        ends = np.append(ends, raw.size)  # the file's last line, without its newline
    del raw, space, first
    rows = ends.size
    if rows == 0 or starts.size % rows or starts.size < 2 * rows:
        return None
    k = starts.size // rows
    # every line holds exactly k tokens: line i's first after the end of line i - 1, its k-th before its own end
    if not ((starts[::k] > np.concatenate(([-1], ends[:-1]))).all() and (starts[k - 1::k] < ends).all()):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # a token that is no integer ends the parse early
        try:
            values = np.fromstring(text, dtype=np.int64, sep=" ")
        except (ValueError, DeprecationWarning):
            return None
    limits = np.iinfo(np.int64)
    if values.size != starts.size or ((values == limits.max) | (values == limits.min)).any():  # saturated
        return None
    return np.ascontiguousarray(values.reshape(rows, k)[:, :2])


def edgelist_vertex_data(path: PathLike, max_id: int, features: PathLike | None = None,
                         labels: PathLike | None = None, split: PathLike | None = None,
                         num_nodes: int | None = None, num_classes: int | None = None, seed: int = 0,
                         num_features: int = 32, num_edges: int | None = None
                         ) -> tuple[int, np.ndarray, np.ndarray, dict[str, np.ndarray], int]:
    """The vertex data :func:`read_edgelist` attaches to the edges of ``path`` whose largest id is ``max_id``.

    Returns ``(n, x, y, masks, num_classes)``, checked as :func:`read_edgelist` checks them, for a reader that
    streamed the edges (:func:`iter_edgelist_chunks`) and now knows their largest id (-1: no edges) and their
    count ``num_edges`` (None: not checked against n).
    """
    path = Path(path)
    n, n_from = _edgelist_num_nodes(path, max_id + 1, num_edges, num_nodes, features, labels)
    if max_id >= n:
        raise file_error(path, f"vertex id {max_id} is out of range [0, {n}) ({n_from})")
    x, y, masks, num_classes = vertex_data(path, n, n_from, features, labels, split, num_classes, seed,
                                           num_features)
    return n, x, y, masks, num_classes


def _edgelist_layout(path: Path, delimiter: str | None, comments: Sequence[str]) -> tuple[int, str | None]:
    """``(lines to skip, delimiter)``: a first data line whose two ids are not numbers is a header; ``;`` if the first
    data line has one (the CSV spreadsheets write where ``,`` is the decimal mark), else ``,`` if it has one."""
    skiprows, first = 0, _first_data_line(path, comments, 0)
    if first is not None and _BINARY.search(first[1]):  # taken for a header, it left a graph of no vertices
        raise file_error(path, f"line {first[0]} holds binary data, not text: not an edge list (or one compressed "
                               "twice)")
    ids = first[1].replace(",", " ").replace(";", " ").split()[:2] if first is not None else []
    # a line of column names holds no number where the ids go; one with a number there is data (0 1O: a typo in an
    # edge, refused by the reader, not dropped as a header); the columns after the ids may hold any text
    if first is not None and not any(_is_number(t) for t in ids):
        skiprows = first[0]
        first = _first_data_line(path, comments, skiprows)
    if delimiter is None and first is not None:
        delimiter = next((d for d in (";", ",") if d in first[1]), None)
    return skiprows, delimiter


def _edgelist_num_nodes(path: Path, ids_end: int, num_edges: int | None, num_nodes: int | None,
                        features: PathLike | None, labels: PathLike | None) -> tuple[int, str]:
    """``n`` and where it came from: ``num_nodes``, else the rows of the features/labels files (an id beyond them
    is an error), else the largest id + 1, if that leaves at most :data:`ISOLATED_SLACK` more vertices than the
    edges can touch (a stray id must not make millions of vertices: pass ``num_nodes`` to mean it)."""
    known = known_vertex_count(num_nodes, features, labels)
    if known is not None:
        return known
    if num_edges is not None:
        check_vertex_count(path, ids_end, num_edges, "pass num_nodes= to mean it", "num_nodes")
    return ids_end, f"n = largest id in {path.name} + 1"


def known_vertex_count(num_nodes: int | None, features: PathLike | None,
                       labels: PathLike | None) -> tuple[int, str] | None:
    """``(n, where it came from)`` where it is known before the edges are read: ``num_nodes``, else the rows of the
    features/labels files; None: the edges' largest id decides."""
    if num_nodes is not None:
        return num_nodes, "the count given"  # as given: num_nodes= from Python, --num-nodes on the command line
    rows = {}
    for extra in (features, labels):
        if extra is not None:
            arr = load_npy(extra, mmap=True)  # only the row count is needed here
            rows[Path(extra).name] = int(arr.shape[0]) if arr.ndim else 0
    if rows:
        return max(rows.values()), f"the rows of {' and '.join(rows)}"
    return None


_BINARY = re.compile("[\x00-\x08\x0e-\x1f]")  # control characters: no text (gzip data has them at once)


def _first_data_line(path: Path, comments: Sequence[str], skiprows: int) -> tuple[int, str] | None:
    lines = data_lines(path, comments, skiprows, max_line=MAX_LINE)  # no header or comment line is megabytes long
    try:
        return next(lines, None)
    finally:
        lines.close()


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
