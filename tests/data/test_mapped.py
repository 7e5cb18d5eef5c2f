"""mggcn.data.mapped: rows of a memory-mapped .npy array read with preadv equal the array's own rows, whatever the
order of the rows, the gaps between them (read through or not) and the size of the scratch memory."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mggcn.data import mapped
from mggcn.utils.errors import GraphError


@pytest.fixture
def arrays(tmp_path):
    rng = np.random.default_rng(0)
    flat, rows = rng.integers(-2**31, 2**31, 50_000, dtype=np.int32), rng.standard_normal((3000, 5)).astype(np.float32)
    np.save(tmp_path / "flat.npy", flat)
    np.save(tmp_path / "rows.npy", rows)
    return np.load(tmp_path / "flat.npy", mmap_mode="r"), np.load(tmp_path / "rows.npy", mmap_mode="r"), flat, rows


@pytest.mark.parametrize("scratch", [1 << 18, 64])
@pytest.mark.parametrize("kind", ["sorted", "sorted-dense", "shuffled", "repeated"])
def test_gather_and_read_rows_equal_indexing(arrays, monkeypatch, scratch, kind):
    """Sorted rows far apart and close together (runs with and without gaps read through), shuffled rows (read in
    file order, put back in theirs), a row twice and empty rows; scratch memory of 256 KiB and of 64 bytes (a run
    at a time)."""
    monkeypatch.setattr(mapped, "SCRATCH_BYTES", scratch)
    mapped_flat, mapped_rows, flat, rows = arrays
    rng = np.random.default_rng(1)
    ids = {"sorted": np.sort(rng.choice(3000, 400, replace=False)), "sorted-dense": np.arange(100, 2900),
           "shuffled": rng.permutation(3000)[:700], "repeated": np.array([5, 5, 2999, 0, 17, 16])}[kind]
    assert mapped.file_of(mapped_rows) is not None
    np.testing.assert_array_equal(mapped.read_rows(mapped_rows, ids), rows[ids])
    out = np.zeros((ids.size + 2, 5), dtype=np.float32)
    mapped.read_rows(mapped_rows, ids, out[1:-1])
    np.testing.assert_array_equal(out[1:-1], rows[ids])
    assert not out[0].any() and not out[-1].any()
    starts = (ids * 16) % 49_000
    counts = rng.integers(0, 40, ids.size)
    expected = np.concatenate([flat[a:a + c] for a, c in zip(starts, counts)])
    got = mapped.gather(mapped_flat, starts, counts)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(mapped.gather(flat, starts, counts), expected)  # in memory: indexed


def test_a_file_shorter_than_its_rows_is_named(arrays, tmp_path):
    mapped_flat = arrays[0]
    with open(tmp_path / "flat.npy", "r+b") as f:
        f.truncate(f.seek(0, 2) - 400)
    with pytest.raises(GraphError, match="flat.npy: shorter than its header says"):
        mapped.gather(mapped_flat, np.array([49_000]), np.array([1000]))


def _mapped(tmp_path, name, arr):
    np.save(tmp_path / name, arr)
    return np.load(tmp_path / name, mmap_mode="r")


def test_a_block_of_rows_in_another_order_is_put_back_in_its_order(tmp_path):
    """Rows without a gap between them but asked in another order (a rank's rows of a random ordering at P = 1 are
    a permutation of all rows): read in file order, each row lands in its own place."""
    from mggcn.data import mapped

    rows = np.random.default_rng(0).standard_normal((300, 5)).astype(np.float32)
    mm = _mapped(tmp_path, "rows.npy", rows)
    for ids in (np.array([3, 2, 1, 0]), np.random.default_rng(1).permutation(300),
                np.random.default_rng(2).permutation(np.arange(100, 160))):
        np.testing.assert_array_equal(mapped.read_rows(mm, ids), rows[ids])


def test_an_empty_csr_row_at_the_start_of_a_full_one_reads_the_full_one(tmp_path):
    """A vertex without neighbours starts where the next vertex's row does: its empty span, asked after that row's,
    lies inside it (a negative gap), and must not cut that row's read short."""
    from mggcn.data import mapped

    indices = np.arange(100, 120, dtype=np.int32)
    mm = _mapped(tmp_path, "indices.npy", indices)
    for starts, counts in (([4, 4], [3, 0]), ([4, 4, 9], [3, 0, 2]), ([0, 4, 4], [2, 3, 0])):
        want = np.concatenate([indices[s:s + c] for s, c in zip(starts, counts)])
        np.testing.assert_array_equal(mapped.gather(mm, np.array(starts), np.array(counts)), want)


def _resident_bytes_of(path) -> int:
    """This process's resident bytes of the mappings of ``path`` (from /proc/self/smaps)."""
    total, counting = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                counting = len(head) >= 6 and head[5] == str(path)
            elif counting and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps")
def test_drop_pages_takes_a_mapped_arrays_pages_out_of_the_resident_set(tmp_path):
    """Rows of 1-D arrays (labels, split, indptr) are indexed out of the map, which maps their pages: drop_pages
    must take them back out of the rank's RSS, also through a view of the map."""
    from mggcn.data import mapped

    path = tmp_path / "labels.npy"
    mm = _mapped(tmp_path, "labels.npy", np.arange(1 << 20, dtype=np.int64))  # 8 MiB
    assert int(mm.sum()) > 0 and _resident_bytes_of(path) >= 4 << 20  # every page read
    mapped.drop_pages(mm[10:])
    assert _resident_bytes_of(path) < 64 << 10


def test_rows_of_a_fortran_ordered_map_are_indexed(tmp_path):
    """A map that is not C-contiguous (an .npy saved in Fortran order: the prepared reader opens one) cannot be
    read as byte ranges of rows: its rows are indexed instead, and come out right."""
    from mggcn.data import mapped

    rows = np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32)
    mm = _mapped(tmp_path, "features.npy", np.asfortranarray(rows))
    assert not mm.flags.c_contiguous and mapped.file_of(mm) is None
    ids = np.array([1, 7, 30, 7])
    np.testing.assert_array_equal(mapped.read_rows(mm, ids), rows[ids])


def test_a_view_of_a_map_is_read_from_where_it_starts(tmp_path):
    """numpy gives a view of a memory map (``mm[10:]``) its parent's offset: read from the file at that offset, its
    rows were the parent's first ones."""
    from mggcn.data.mapped import file_of, gather, read_rows

    np.save(tmp_path / "a.npy", np.arange(40, dtype=np.float32).reshape(20, 2))
    whole = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert file_of(whole)[1] == 128 and file_of(whole[10:]) is None
    assert read_rows(whole[10:], np.array([0, 1])).tolist() == [[20, 21], [22, 23]]
    assert gather(whole.reshape(-1)[6:], np.array([0]), np.array([3])).tolist() == [6, 7, 8]
