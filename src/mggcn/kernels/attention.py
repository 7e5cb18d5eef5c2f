"""Local kernels of GAT's attention on one sparse block: per-edge scores, per-row segment reductions, the per-head
weighted gather-sum and the per-edge dot products of its backward (an SDDMM), and the counter-based
attention-dropout hash.
No communication here: :mod:`mggcn.distributed.attention` runs them on the blocks an exchange hands it.

A block is a tile of a :class:`~mggcn.kernels.tiled.TiledCSR` (torch sparse CSR ``m × w``); its edges are listed in
CSR order as ``(row, col)`` pairs, ``col`` relative to the tile's first column. Per-edge values are ``[nnz, H]``
(one per attention head) and exist only for the chunk of a tile's rows being processed (:func:`tile_chunks`: the
chunks' row ids, 4 bytes per edge, are the only per-edge index array built, once per tile; the columns and values
are the tile's own). Per-row reductions over a row's edges (max, sum) are ``torch.segment_reduce`` on the row
pointers, so they need no per-edge row index and add in the row's edge order whatever the chunking.

The heads are stacked head-major: a table ``T`` ``[w, H, C]`` is copied once per tile as ``[H·w, C]``
(:func:`head_major`, head h's rows at ``h·w``), and an edge's head h reads its row ``h·w + col_e``
(:func:`head_columns`, ``[H·nnz]`` built per chunk). The weighted gather-sum ``out[r, h] = Σ_e p[e, h] · T[col_e, h]``
is then one ``torch.nn.functional.embedding_bag`` call in ``sum`` mode with per-sample weights, bag ``(h, r)``
holding row r's edges of head h (offsets: the CSR row pointers shifted by ``h·nnz``, :func:`head_rows`), the result
``[H·m, C]`` seen as ``[H, m, C]``; on x86 CPUs it runs FBGEMM's fused gather-multiply-add (float32), elsewhere
torch's own kernel (float64, CUDA). The per-edge dot products of the backward are ONE SDDMM on the same stacked
pattern (``H·m × H·w``, head h's copy on the diagonal block h), written into the pattern's own values.

Legend: m = rows of the block, w = its columns, nnz = its nonzeros, H = heads, C = channels per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mggcn.utils.system import sparse_warnings_silenced

__all__ = ["AttentionSpec", "EDGE_CHUNK", "ITEM_EDGES", "Chunk", "tile_chunks", "row_chunks", "leaky_relu_grad",
           "segment_max", "segment_sum", "head_major", "head_columns", "head_rows", "gather_heads",
           "gather_head_major", "edge_dots", "edge_dots_head_major", "splitmix64", "edge_keys", "dropout_keep"]


@dataclass(frozen=True)
class AttentionSpec:
    """What one layer's attention needs besides its tensors: ``slope`` of the score's LeakyReLU, the attention
    ``dropout`` probability (0: none), and the ``seed`` and ``layer`` its masks hash."""

    slope: float = 0.2
    dropout: float = 0.0
    seed: int = 0
    layer: int = 0


# edges per step of the attention kernels: a step holds about 60·H bytes per edge (a dozen [chunk, H] float and
# int64 temporaries), ~120 MiB at 8 heads
EDGE_CHUNK = 1 << 18
# edges per work item of a CPU's workers (mggcn.kernels.shared.run_items): enough items for every worker on a small
# graph, and few enough that the items' Python steps (a dozen ops each, the interpreter lock taken between them)
# stay rare: on a machine that other jobs share, items of 2^13 and 2^15 edges took 2.5x and 1.5x the attention time
# of 2^16 with 2 workers
ITEM_EDGES = 1 << 16

_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch holds it."""
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value


_GOLDEN, _MUL1, _MUL2 = (_signed(v) for v in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def _shr(x: torch.Tensor | int, bits: int) -> torch.Tensor | int:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic on negative values)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finalizer on int64 tensors, the multiplications wrapping modulo 2⁶⁴ (two's complement, as torch
    computes int64 products on CPU and CUDA): a bijective mix whose every output bit depends on every input bit."""
    x = x + _GOLDEN
    x = (x ^ _shr(x, 30)) * _MUL1
    x = (x ^ _shr(x, 27)) * _MUL2
    return x ^ _shr(x, 31)


def _mix_int(x: int) -> int:
    """:func:`splitmix64` on one Python integer (the same bits)."""
    x = (x + _GOLDEN) & _MASK64
    x = ((x ^ (x >> 30)) * (_MUL1 & _MASK64)) & _MASK64
    x = ((x ^ (x >> 27)) * (_MUL2 & _MASK64)) & _MASK64
    return _signed(x ^ (x >> 31))


def edge_keys(seed: int, layer: int, src: torch.Tensor, dst: torch.Tensor, heads: int) -> torch.Tensor:
    """A pseudo-random int64 ``[nnz, heads]`` per (seed, layer, head, source id, destination id): a function of
    those numbers alone, so any rank computing an edge's key, in any layout, on any device, gets the same bits."""
    base = _mix_int(_mix_int(int(seed)) ^ int(layer))
    head_keys = torch.tensor([_mix_int(base ^ h) for h in range(heads)], dtype=torch.int64, device=src.device)
    edge = splitmix64(splitmix64(src.to(torch.int64) ^ base) ^ dst.to(torch.int64))
    return splitmix64(edge[:, None] ^ head_keys)


def dropout_keep(seed: int, layer: int, src: torch.Tensor, dst: torch.Tensor, heads: int, p: float) -> torch.Tensor:
    """bool ``[nnz, heads]``: which edges' attention weights survive a dropout of probability ``p``; an edge is kept
    when the top 53 bits of its :func:`edge_keys`, read as a fraction of 2⁵³, are at least ``p``."""
    threshold = int(round(p * (1 << 53)))
    return _shr(edge_keys(seed, layer, src, dst, heads), 11) >= threshold


def row_chunks(tile: torch.Tensor, max_edges: int | None = None):
    """The CSR ``tile`` a run of whole rows at a time, about ``max_edges`` (None: :data:`EDGE_CHUNK`) edges each
    (more where one row has more):
    per chunk its first and end row ``r0``, ``r1``, its row pointers from 0 (int64), and per edge (CSR order) its
    row less ``r0`` and its column (int64) and value."""
    for chunk in tile_chunks(tile, max_edges):
        yield chunk.r0, chunk.r1, chunk.crow, chunk.row.to(torch.int64), chunk.col.to(torch.int64), chunk.val


@dataclass(frozen=True)
class Chunk:
    """A run of whole rows ``r0:r1`` of a CSR tile: ``crow`` its row pointers from 0 (int64, ``r1 − r0 + 1``),
    per edge in CSR order ``row`` (less ``r0``, int32 where it fits) and ``col`` and ``val`` (views of the
    tile's own columns and values)."""

    r0: int
    r1: int
    crow: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    val: torch.Tensor


def tile_chunks(tile: torch.Tensor, max_edges: int | None = None) -> list[Chunk]:
    """The nonempty :class:`Chunk` s of ``tile``, about ``max_edges`` (None: :data:`EDGE_CHUNK`) edges each (more
    where one row has more). Index arrays per edge: the row ids, 4 bytes (8 past 2³¹ rows); ``col`` and ``val``
    are views."""
    crow, col, val = tile.crow_indices(), tile.col_indices(), tile.values()
    m, nnz = tile.shape[0], col.numel()
    max_edges = EDGE_CHUNK if max_edges is None else max_edges
    rows = [0, m]
    if nnz > max_edges:
        marks = torch.arange(max_edges, nnz, max_edges, dtype=crow.dtype, device=crow.device)
        rows = sorted({0, m, *torch.searchsorted(crow, marks).tolist()})
    ptr = crow[rows].tolist()
    row_type = torch.int32 if m < 2**31 else torch.int64
    chunks = []
    for k in range(len(rows) - 1):
        r0, r1, first, last = rows[k], rows[k + 1], ptr[k], ptr[k + 1]
        if first == last:
            continue
        local = crow[r0: r1 + 1].to(torch.int64) - first
        row = torch.repeat_interleave(torch.arange(r1 - r0, dtype=row_type, device=crow.device), local.diff(),
                                      output_size=last - first)
        chunks.append(Chunk(r0, r1, local, row, col[first:last], val[first:last]))
    return chunks


def leaky_relu_grad(grad: torch.Tensor, pre: torch.Tensor, slope: float) -> torch.Tensor:
    """``grad`` times the derivative of LeakyReLU at ``pre``: ``grad`` where positive, ``slope · grad`` elsewhere
    (PyG's and torch's choice at 0), a new tensor (torch's own backward of LeakyReLU: one pass)."""
    return torch.ops.aten.leaky_relu_backward(grad, pre, slope, False)


def segment_max(crow: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``out[r] = max over the edges e of row r of values[e]`` (``-inf`` where none); ``values`` [nnz, H] in the
    CSR order of the row pointers ``crow`` (int64, from 0): [m, H]."""
    return torch.segment_reduce(values, "max", offsets=crow, axis=0)


def segment_sum(crow: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``out[r] = Σ over the edges e of row r of values[e]`` (0 where none), as :func:`segment_max`."""
    return torch.segment_reduce(values, "sum", offsets=crow, axis=0)


def head_major(table: torch.Tensor) -> torch.Tensor:
    """``table`` [w, H, C] as ``[H·w, C]``, head h's rows at ``h·w`` (a copy: the layout :func:`head_columns`
    index, one head's rows contiguous as the SDDMM reads them)."""
    w, heads, channels = table.shape
    return table.detach().transpose(0, 1).reshape(heads * w, channels)


def head_columns(col: torch.Tensor, heads: int, width: int) -> torch.Tensor:
    """``[H·nnz]``: ``h·width + col_e`` for each head h, then each edge in CSR order (the rows of a
    :func:`head_major` table of ``width`` rows per head), in ``col``'s index type where it fits."""
    index_type = col.dtype if heads * width < 2**31 else torch.int64
    shift = torch.arange(0, heads * width, width, dtype=index_type, device=col.device)
    return (col.to(index_type)[None, :] + shift[:, None]).reshape(-1)


def head_rows(crow: torch.Tensor, heads: int, index_type: torch.dtype) -> torch.Tensor:
    """``[H·m + 1]``: the row pointers of the ``H`` copies of a CSR pattern stacked head-major (``crow`` from 0)."""
    nnz = crow[-1:]
    shift = torch.arange(heads, dtype=crow.dtype, device=crow.device)[:, None] * nnz
    return torch.cat([(crow[None, :-1] + shift).reshape(-1), nnz * heads]).to(index_type)


def gather_heads(crow: torch.Tensor, col: torch.Tensor, weights: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``out[r, h] = Σ_e p[e, h] · table[col_e, h]`` over the edges e of row r (CSR ``crow``, ``col``, weights ``p``
    [nnz, H]) with ``table`` [w, H, C]: ``[m, H, C]`` (a view of a head-major result). One embedding_bag call (the
    module docstring)."""
    heads = weights.shape[1]
    cols = head_columns(col, heads, table.shape[0])
    return gather_head_major(head_rows(crow, heads, cols.dtype)[:-1], cols, weights, head_major(table))


def gather_head_major(offsets: torch.Tensor, cols: torch.Tensor, weights: torch.Tensor,
                      flat: torch.Tensor) -> torch.Tensor:
    """:func:`gather_heads` on a :func:`head_major` table ``flat`` with the bags' ``offsets`` (:func:`head_rows`
    less its last) and indices ``cols`` (:func:`head_columns`) given: ``[m, H, C]``."""
    nnz, heads = weights.shape
    out = F.embedding_bag(cols, flat, offsets, mode="sum", per_sample_weights=weights.t().reshape(-1))
    return out.view(heads, -1, flat.shape[1]).transpose(0, 1)


def edge_dots(crow: torch.Tensor, col: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``out[e, h] = <left[row_e, h], right[col_e, h]>`` over the edges e of the CSR ``crow``, ``col`` (m × w) for
    ``left`` [m, H, C] and ``right`` [w, H, C]: [nnz, H] in CSR order."""
    heads = left.shape[1]
    cols = head_columns(col, heads, right.shape[0])
    return edge_dots_head_major(head_rows(crow, heads, cols.dtype), cols, left, head_major(right))


def edge_dots_head_major(rows: torch.Tensor, cols: torch.Tensor, left: torch.Tensor,
                         flat: torch.Tensor) -> torch.Tensor:
    """:func:`edge_dots` with the heads' stacked pattern given (``rows`` :func:`head_rows`, ``cols``
    :func:`head_columns`) and ``right`` as a :func:`head_major` table ``flat``: ONE sampled dense-dense product
    (``torch.sparse.sampled_addmm``, the SDDMM: no ``[nnz, C]`` operand is gathered) of the ``H·m × H·w`` pattern,
    head h's copy on the diagonal block h. [nnz, H], contiguous (the head-major values copied)."""
    m, heads, channels = left.shape
    # the SDDMM has no 16-bit kernels: bfloat16 and half operands are multiplied in float32
    work = torch.float32 if left.element_size() < 4 else left.dtype
    a = left.transpose(0, 1).reshape(heads * m, channels).to(work)
    with sparse_warnings_silenced():  # torch calls the CSR layout beta on every construction
        pattern = torch.sparse_csr_tensor(rows, cols, torch.zeros(cols.numel(), dtype=work, device=left.device),
                                          size=(heads * m, flat.shape[0]))
        # into the pattern itself (out=): no copy of its values into a new result
        torch.sparse.sampled_addmm(pattern, a, flat.to(work).t(), beta=0.0, out=pattern)
    values = pattern.values().view(heads, -1).t()
    # edge-major, as the per-edge values it meets: an op between a transposed and a plain [nnz, H] is several
    # times slower than the copy
    return torch.empty(values.shape, dtype=left.dtype, device=left.device).copy_(values)
