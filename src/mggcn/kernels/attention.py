"""Local kernels of GAT's attention on one sparse block: per-edge scores, per-row segment reductions, the per-head
weighted gather-sum and the per-edge dot products of its backward (an SDDMM), and the counter-based
attention-dropout hash.
No communication here: :mod:`mggcn.distributed.attention` runs them on the blocks an exchange hands it.

A block is a tile of a :class:`~mggcn.kernels.tiled.TiledCSR` (torch sparse CSR ``m × w``); its edges are listed in
CSR order as ``(row, col)`` pairs, ``col`` relative to the tile's first column. Per-edge values are ``[nnz, H]``
(one per attention head) and exist only for the chunk of a tile's rows being processed (:func:`row_chunks`).

The weighted gather-sum ``out[r, h] = Σ_e p[e, h] · T[col_e, h]`` (``T`` ``[w, H, C]``) is one
``torch.nn.functional.embedding_bag`` call in ``sum`` mode with per-sample weights: ``T`` viewed as ``[w·H, C]``,
bag ``(h, r)`` holding the indices ``col_e·H + h`` of row r's edges, bags ordered head-major (the offsets of head h
are the CSR row pointers shifted by ``h·nnz``), so the result is ``[H·m, C]``, seen as ``[H, m, C]``. On x86 CPUs it
runs FBGEMM's fused gather-multiply-add (float32), elsewhere torch's own kernel (float64, CUDA).

Legend: m = rows of the block, w = its columns, nnz = its nonzeros, H = heads, C = channels per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mggcn.utils.system import sparse_warnings_silenced

__all__ = ["AttentionSpec", "EDGE_CHUNK", "row_chunks", "leaky_relu_slope", "segment_max", "segment_sum",
           "gather_heads", "edge_dots", "splitmix64", "edge_keys", "dropout_keep"]


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
    crow, col, val = tile.crow_indices(), tile.col_indices(), tile.values()
    m, nnz = tile.shape[0], col.numel()
    max_edges = EDGE_CHUNK if max_edges is None else max_edges
    rows = [0, m]
    if nnz > max_edges:
        marks = torch.arange(max_edges, nnz, max_edges, dtype=crow.dtype, device=crow.device)
        rows = sorted({0, m, *torch.searchsorted(crow, marks).tolist()})
    ptr = crow[rows].tolist()
    for k in range(len(rows) - 1):
        r0, r1, first, last = rows[k], rows[k + 1], ptr[k], ptr[k + 1]
        if first == last:
            continue
        local = crow[r0: r1 + 1].to(torch.int64) - first  # int64 like the columns: one index type (cuSPARSE)
        row = torch.repeat_interleave(torch.arange(r1 - r0, device=crow.device), local[1:] - local[:-1])
        yield r0, r1, local, row, col[first:last].to(torch.int64), val[first:last]


def leaky_relu_slope(pre: torch.Tensor, slope: float) -> torch.Tensor:
    """The derivative of LeakyReLU at ``pre``: 1 where positive, ``slope`` elsewhere (PyG's and torch's choice at 0)."""
    return torch.where(pre > 0, torch.ones((), dtype=pre.dtype, device=pre.device),
                       torch.full((), slope, dtype=pre.dtype, device=pre.device))


def segment_max(index: torch.Tensor, values: torch.Tensor, size: int) -> torch.Tensor:
    """``out[r] = max over e with index[e] = r of values[e]`` (``-inf`` where none); ``values`` [nnz, H]."""
    out = torch.full((size, values.shape[1]), float("-inf"), dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, index[:, None].expand_as(values), values, "amax")


def segment_sum(index: torch.Tensor, values: torch.Tensor, size: int) -> torch.Tensor:
    """``out[r] = Σ over e with index[e] = r of values[e]``; ``values`` [nnz, H]."""
    out = torch.zeros((size, values.shape[1]), dtype=values.dtype, device=values.device)
    return out.index_add_(0, index, values)


def gather_heads(crow: torch.Tensor, col: torch.Tensor, weights: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``out[r, h] = Σ_e p[e, h] · table[col_e, h]`` over the edges e of row r (CSR ``crow``, ``col``, weights ``p``
    [nnz, H]) with ``table`` [w, H, C]: ``[m, H, C]`` (a view of a head-major result). One embedding_bag call (the
    module docstring)."""
    nnz, heads = weights.shape
    channels = table.shape[2]
    m = crow.numel() - 1
    flat = table.detach().reshape(-1, channels)  # [w·H, C], a copy only where table is not contiguous
    head = torch.arange(heads, device=col.device)
    indices = (col[None, :] * heads + head[:, None]).reshape(-1)  # head-major: head h's edges in CSR order
    offsets = (crow.to(torch.int64)[None, :-1] + head[:, None] * nnz).reshape(-1)
    out = F.embedding_bag(indices, flat, offsets, mode="sum", per_sample_weights=weights.t().reshape(-1))
    return out.view(heads, m, channels).transpose(0, 1)


def edge_dots(crow: torch.Tensor, col: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``out[e, h] = <left[row_e, h], right[col_e, h]>`` over the edges e of the CSR ``crow``, ``col`` (m × w) for
    ``left`` [m, H, C] and ``right`` [w, H, C]: [nnz, H] in CSR order (a transposed view). One sampled dense-dense
    product per head (``torch.sparse.sampled_addmm``, the SDDMM: no ``[nnz, C]`` operand is gathered)."""
    m, heads = left.shape[0], left.shape[1]
    # the SDDMM has no 16-bit kernels: bfloat16 and half operands are multiplied in float32, a head at a time
    work = torch.float32 if left.element_size() < 4 else left.dtype
    with sparse_warnings_silenced():  # torch calls the CSR layout beta on every construction
        pattern = torch.sparse_csr_tensor(crow, col, torch.zeros(col.numel(), dtype=work, device=left.device),
                                          size=(m, right.shape[0]))
    out = torch.empty(heads, col.numel(), dtype=left.dtype, device=left.device)  # each head's values contiguous
    for h in range(heads):
        a, b = left[:, h].to(work), right[:, h].t().to(work)
        out[h] = torch.sparse.sampled_addmm(pattern, a, b, beta=0.0).values()
    return out.t()
