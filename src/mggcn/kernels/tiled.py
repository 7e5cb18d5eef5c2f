"""A column block of Â stored as column tiles: the CPU SpMM reads B one cache-sized tile of rows at a time.

A CSR SpMM ``C = A·B`` walks A row by row and, for each nonzero, reads one row of B. When B (``w × d`` floats) is
larger than the cache, those reads go to memory — on a CPU the SpMM is bound by them, not by its flops. Cutting A's
columns into tiles ``[s_t, s_t + w_t)`` and computing ``C = Σ_t A[:, tile t] · B[tile t]`` reads only ``w_t × d``
floats of B per pass, which stay in cache while the pass streams A's indices and values; the price is one more pass
over C per tile. The tiles are chosen so that ``w_t × d × 4`` bytes fit :data:`~mggcn.config.TILE_BYTES` (FeatGraph,
SC'20, calls this graph partitioning for cache; MG-GCN's P column blocks are the same cut, at the scale of ranks).

Two CPU kernels. On other vendors' CPUs than Intel's, torch's CSR matmul (MKL) spends many cycles per nonzero at
narrow widths even with B in cache, so where B fits the last-level cache (:data:`~mggcn.config.GATHER_BYTES` per
machine, e.g. 100k rows at width 40) a block stays whole and is multiplied by the gather-sum kernel instead:
``torch.nn.functional.embedding_bag`` in ``sum`` mode with the values as per-sample weights is exactly a CSR SpMM
(bag r = row r, its indices the row's columns), and on x86 it runs FBGEMM's fused gather-multiply-add
(docs/benchmarks.md compares the two). It runs a chunk of rows at a time (:data:`GATHER_CHUNK` output elements: the
chunk's result is a new tensor just under the allocator's mmap threshold, so it reuses heap memory instead of faulting
in fresh pages, then is copied or added into ``out``). A wider B is cut into tiles for MKL as above (the gather
kernel gains nothing once B is past the cache, and tiles cost it a pass over every row per tile). On Intel's CPUs,
MKL's product is the faster one at every width, quiet and beside another process, and blocks are tiled for it as
above; so they are where FBGEMM is not (no AVX2, other CPUs) or the operands are not float32.
:func:`~mggcn.kernels.policy.cpu_spmm` says which kernel runs here.

Storage: each tile is a torch sparse CSR ``m × w_t`` with its own row pointers (int32 indices where they fit), so a
block of ``T`` tiles costs ``T · (m + 1)`` row pointers besides its nonzeros. Which kernel runs where and how wide
the tiles are is :mod:`mggcn.kernels.policy`'s choice (:func:`~mggcn.kernels.policy.tile_columns`). Sums run tile by
tile, so results differ from the untiled product by float rounding only.

Legend: m = rows of the block, w = its columns, d = width of B, T = tiles.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from mggcn.config import MMAP_THRESHOLD
from mggcn.kernels.policy import gather_kernel, index_bytes, shared_threads
from mggcn.kernels.shared import run_items
from mggcn.utils.system import sparse_warnings_silenced

__all__ = ["GATHER_CHUNK", "TiledCSR", "num_tiles", "csr_to_torch", "gather_matmul", "gather_rows",
           "gather_chunk_bytes"]

# output elements per gather call: as many float32 as stay 16 KiB under the mmap threshold (1 MiB), so that each
# call's result comes from the heap, not from fresh pages (larger chunks, fewer calls)
GATHER_CHUNK = (MMAP_THRESHOLD - (16 << 10)) // 4


def gather_rows(width: int) -> int:
    """Rows per :func:`gather_matmul` call at ``width``: :data:`GATHER_CHUNK` output elements."""
    return max(1, GATHER_CHUNK // max(1, width))


def gather_chunk_bytes(rows: int, width: int, nnz: int = 0) -> int:
    """Bytes one :func:`gather_matmul` call holds at once on a block of ``rows`` rows at ``width``: the chunk's
    result, its row offsets, and embedding_bag's two per-bag vectors."""
    step = min(rows, gather_rows(width))
    return step * width * 4 + 3 * (step + 1) * index_bytes(nnz, rows)


def gather_matmul(csr: torch.Tensor, b: torch.Tensor, out: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
    """``out = csr·b`` (or ``out += csr·b``) by embedding_bag, :data:`GATHER_CHUNK` output elements at a time; ``csr``
    a torch sparse CSR ``m × w``, ``b`` ``w × d`` (float32, CPU). With ``shared`` kernels
    (:func:`~mggcn.kernels.policy.shared_threads`) the threads take chunks as they are free, each a share of that
    size, so the chunks in flight together stay that size."""
    crow, col, val = csr.crow_indices(), csr.col_indices(), csr.values()
    m, d = out.shape
    b = b.detach().contiguous()  # embedding_bag's forward-only path: no per-bag vectors kept for a backward
    threads = shared_threads(out.device)
    rows = list(range(0, m, max(1, gather_rows(d) // threads))) + [m]
    ptr = crow[rows].tolist()

    def chunk(k: int, _worker: int) -> None:
        r0, r1, first, last = rows[k], rows[k + 1], ptr[k], ptr[k + 1]
        part = F.embedding_bag(col[first:last], b, crow[r0: r1 + 1] - first, mode="sum",
                               per_sample_weights=val[first:last], include_last_offset=True)
        if accumulate:
            out[r0:r1].add_(part)
        else:
            out[r0:r1].copy_(part)

    run_items(len(rows) - 1, chunk, threads)
    return out


def csr_to_torch(mat: sp.csr_matrix, device: torch.device | str = "cpu", double: bool = False) -> torch.Tensor:
    """A scipy CSR as a torch sparse CSR tensor of float32 values (``double``: float64), with int32 indices when
    they fit (a bit faster in MKL)."""
    idx = np.int32 if index_bytes(mat.nnz, max(mat.shape)) == 4 else np.int64
    crow = torch.from_numpy(np.ascontiguousarray(mat.indptr, dtype=idx))
    col = torch.from_numpy(np.ascontiguousarray(mat.indices, dtype=idx))
    val = torch.from_numpy(np.ascontiguousarray(mat.data, dtype=np.float64 if double else np.float32))
    with sparse_warnings_silenced():  # torch calls the CSR layout beta on every construction: it is MG-GCN's layout
        return torch.sparse_csr_tensor(crow, col, val, size=mat.shape, device=device)


def num_tiles(cols: int, tile_cols: int | None) -> int:
    """Tiles of a block of ``cols`` columns cut every ``tile_cols`` (None: 1)."""
    return 1 if tile_cols is None or cols <= tile_cols else -(-cols // tile_cols)


class TiledCSR:
    """One ``m × w`` block of Â as column tiles; ``tile_columns=None`` keeps it whole (one tile).

    Args:
        tiles: sparse CSR tensors ``m × w_t``, their columns relative to the tile's first column.
        starts: the first column of each tile; tile t covers ``[starts[t], starts[t] + w_t)``.
        width: ``w``, the block's columns.
    """

    def __init__(self, tiles: Sequence[torch.Tensor], starts: Sequence[int], width: int) -> None:
        if len(tiles) != len(starts) or not tiles:
            raise ValueError("TiledCSR: one start column per tile, at least one tile")
        self.tiles, self.starts, self.width = list(tiles), [int(s) for s in starts], int(width)
        self.rows = int(self.tiles[0].shape[0])
        self.nnz = sum(int(t._nnz()) for t in self.tiles)

    @classmethod
    def from_scipy(cls, mat: sp.csr_matrix, tile_cols: int | None = None,
                   device: torch.device | str = "cpu") -> TiledCSR:
        """Cut ``mat`` into tiles of ``tile_cols`` columns (the last one narrower); ``None``: one tile."""
        width = mat.shape[1]
        if num_tiles(width, tile_cols) == 1:
            return cls([csr_to_torch(mat, device)], [0], width)
        mat = mat.tocsr()
        starts = list(range(0, width, tile_cols))
        tiles = [csr_to_torch(mat[:, s: s + tile_cols], device) for s in starts]  # scipy's C slicing, 2 passes
        return cls(tiles, starts, width)

    @classmethod
    def from_torch(cls, csr: torch.Tensor) -> TiledCSR:
        """A torch sparse CSR as a block of one tile (shares its tensors)."""
        return cls([csr], [0], csr.shape[1])

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, self.width

    @property
    def device(self) -> torch.device:
        return self.tiles[0].device

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for tile in self.tiles for t in (tile.crow_indices(), tile.col_indices(), tile.values()))

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> TiledCSR:
        """The block on ``device``, its values in ``dtype`` (None: as they are)."""
        return TiledCSR([t.to(device=device, dtype=dtype) for t in self.tiles], self.starts, self.width)

    def spans(self) -> list[tuple[int, int]]:
        """``(first column, columns)`` of every tile."""
        return [(s, int(t.shape[1])) for s, t in zip(self.starts, self.tiles)]

    def matmul(self, b: torch.Tensor, out: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
        """``out = A·b`` (or ``out += A·b``), one tile at a time; ``b`` is ``w × d``, ``out`` ``m × d``. A whole
        block multiplies float32 on the CPU with the gather kernel where it runs (:func:`gather_kernel`)."""
        if len(self.tiles) == 1 and self.tiles[0].values().dtype == b.dtype and gather_kernel(b.device, b.dtype):
            return gather_matmul(self.tiles[0], b, out, accumulate)
        if b.dtype == torch.bfloat16 and b.device.type == "cpu":  # MKL has no bfloat16 CSR product; the gather has
            for k, (tile, (start, cols)) in enumerate(zip(self.tiles, self.spans())):
                gather_matmul(tile, b[start: start + cols], out, accumulate or k > 0)
            return out
        for k, (tile, (start, cols)) in enumerate(zip(self.tiles, self.spans())):
            rows = b[start: start + cols]
            if k == 0 and not accumulate:
                torch.addmm(out, tile, rows, beta=0, out=out)
            else:
                out.addmm_(tile, rows)
        return out

    def columns(self) -> torch.Tensor:
        """The distinct columns holding a nonzero, sorted (int64, on the CPU)."""
        found = [torch.unique(t.col_indices().to(torch.int64).cpu()) + s
                 for t, s in zip(self.tiles, self.starts) if t._nnz()]
        return torch.cat(found) if found else torch.empty(0, dtype=torch.int64)

    def compact(self, needed: torch.Tensor) -> TiledCSR:
        """The block with its columns renumbered to positions in ``needed`` (sorted, a superset of
        :meth:`columns`): ``m × len(needed)``, tile by tile (tile t keeps the positions of its columns)."""
        needed = needed.to(torch.int64).cpu()
        tiles, starts = [], []
        for tile, (start, cols) in zip(self.tiles, self.spans()):
            first = int(torch.searchsorted(needed, start))
            count = int(torch.searchsorted(needed, start + cols)) - first
            if count == 0:
                continue
            col = tile.col_indices()
            new = torch.searchsorted(needed.to(col.device), col.to(torch.int64) + start) - first
            tiles.append(torch.sparse_csr_tensor(tile.crow_indices(), new.to(col.dtype), tile.values(),
                                                 size=(self.rows, count), device=tile.device))
            starts.append(first)
        if not tiles:  # nothing referenced: an empty block of no columns
            empty = torch.sparse_csr_tensor(torch.zeros(self.rows + 1, dtype=torch.int32),
                                            torch.zeros(0, dtype=torch.int32), torch.zeros(0),
                                            size=(self.rows, 0), device=self.device)
            return TiledCSR([empty], [0], 0)
        return TiledCSR(tiles, starts, needed.numel())

    def keep_columns(self, keep: torch.Tensor) -> TiledCSR:
        """The block with only the nonzeros whose column ``keep`` (bool [w]) marks: same shape, tiles and column
        numbers, so it multiplies the same ``b``; rows of ``b`` in the other columns are never read. Tile by tile:
        besides the result, one byte and one index per nonzero of a tile at a time."""
        tiles = []
        for tile, (start, cols) in zip(self.tiles, self.spans()):
            crow, col = tile.crow_indices(), tile.col_indices()
            kept = torch.index_select(keep[start: start + cols].to(col.device), 0, col)
            # kept entries before each row's first: the running count of kept entries, read at the row pointers
            before = torch.zeros(kept.numel() + 1, dtype=crow.dtype, device=crow.device)
            torch.cumsum(kept, 0, dtype=crow.dtype, out=before[1:])
            crow = torch.index_select(before, 0, crow)
            del before
            with sparse_warnings_silenced():
                tiles.append(torch.sparse_csr_tensor(crow, col[kept], tile.values()[kept], size=tile.shape,
                                                     device=tile.device))
        return TiledCSR(tiles, self.starts, self.width)

    def to_scipy(self) -> sp.csr_matrix:
        """The whole block as one scipy CSR (tests, checks)."""
        parts = []
        for tile, (start, _) in zip(self.tiles, self.spans()):
            t = sp.csr_matrix((tile.values().cpu().numpy(), tile.col_indices().cpu().numpy() + start,
                               tile.crow_indices().cpu().numpy()), shape=(self.rows, self.width))
            parts.append(t)
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        out.sort_indices()
        return out.tocsr()

    def __repr__(self) -> str:
        return f"TiledCSR({self.rows} x {self.width}, {self.nnz} nonzeros, {len(self.tiles)} tile(s))"
