"""mggcn.data.mapped: rows of a memory-mapped .npy array read with preadv equal the array's own rows, whatever the
order of the rows, the gaps between them (read through or not) and the size of the scratch memory."""

from __future__ import annotations

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
