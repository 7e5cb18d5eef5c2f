"""Column-tiled blocks (mggcn.kernels.tiled) and the tiling policy (mggcn.kernels.policy): the product, the
structure and the policy, against scipy."""

import os
import platform

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from mggcn.config import GATHER_BYTES, TILE_BYTES
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard
from mggcn.kernels import policy, tiled
from mggcn.kernels.policy import CPU_SPMM_ENV, MIN_TILE_COLUMNS, cpu_spmm, gather_kernel, max_tiles, tile_columns
from mggcn.kernels.tiled import TiledCSR, gather_matmul, num_tiles
from mggcn.tools.cli.common import flag_message
from mggcn.tools.plan import plan_memory
from mggcn.utils.errors import ConfigError
from reference import random_graph


def _block(rows=41, cols=57, density=0.15, seed=0):
    """A random block with an empty row and an empty column."""
    mat = sp.random(rows, cols, density=density, format="lil", random_state=seed, dtype=np.float32)
    mat[3, :] = 0
    mat[:, 7] = 0
    mat = mat.tocsr()
    mat.eliminate_zeros()
    return mat


@pytest.mark.parametrize("tile_cols", [None, 1, 5, 56, 57, 100])
def test_tiled_product_equals_the_whole_block(tile_cols):
    mat = _block()
    block = TiledCSR.from_scipy(mat, tile_cols)
    assert len(block.tiles) == num_tiles(57, tile_cols) and block.nnz == mat.nnz and block.shape == (41, 57)
    assert block.spans()[-1][0] + block.spans()[-1][1] == 57 and all(c <= (tile_cols or 57) for _, c in block.spans())
    b = torch.randn(57, 6)
    expected = torch.from_numpy(mat.toarray()) @ b
    out = torch.full((41, 6), float("nan"))  # not read: the first tile writes
    # float32 sums of <= ~12 products, tile by tile instead of row by row: a few ulps
    torch.testing.assert_close(block.matmul(b, out), expected, rtol=1e-5, atol=1e-6)
    start = torch.randn(41, 6)
    torch.testing.assert_close(block.matmul(b, start.clone(), accumulate=True), start + expected, rtol=1e-5, atol=1e-6)
    assert (block.to_scipy() != mat).nnz == 0


@pytest.mark.parametrize("tile_cols", [None, 4, 13])
def test_a_bfloat16_product_on_the_cpu_adds_every_tile(tile_cols):
    """MKL has no bfloat16 CSR product: on the CPU each tile goes through the gather kernel, the first writing (or
    adding, with ``accumulate``) and the others adding. bfloat16 values and products of ≤ ~12 terms: within 2%."""
    mat = _block()
    block = TiledCSR.from_scipy(mat, tile_cols).to("cpu", torch.bfloat16)
    b = torch.randn(57, 6)
    expected = torch.from_numpy(mat.toarray()) @ b
    got = block.matmul(b.bfloat16(), torch.full((41, 6), float("nan"), dtype=torch.bfloat16))
    torch.testing.assert_close(got.float(), expected, rtol=0.02, atol=0.05)
    start = torch.randn(41, 6)
    summed = block.matmul(b.bfloat16(), start.bfloat16(), accumulate=True)
    torch.testing.assert_close(summed.float(), start + expected, rtol=0.02, atol=0.05)


@pytest.mark.parametrize("tile_cols", [None, 4, 13])
def test_columns_and_compaction(tile_cols):
    mat = _block(density=0.05, seed=2)
    block = TiledCSR.from_scipy(mat, tile_cols)
    cols = block.columns()
    assert cols.tolist() == np.unique(mat.indices).tolist() and 7 not in cols.tolist()
    compact = block.compact(cols)
    assert compact.shape == (41, cols.numel()) and compact.nnz == mat.nnz
    b = torch.randn(57, 3)
    out = compact.matmul(b[cols], torch.empty(41, 3))  # only the referenced rows of B are needed
    torch.testing.assert_close(out, torch.from_numpy(mat.toarray()) @ b, rtol=1e-5, atol=1e-6)
    empty = TiledCSR.from_scipy(sp.csr_matrix((41, 57), dtype=np.float32), tile_cols)
    assert empty.columns().numel() == 0 and empty.compact(empty.columns()).nnz == 0


def test_tile_columns_policy():
    # MKL's tiles (an explicit tile size, or B past GATHER_BYTES where the gather kernel runs)
    rows, dense_nnz, tb = 200_000, 20_000_000, TILE_BYTES  # the benchmark's block: 100 nonzeros per row
    cols = tile_columns(40, rows, dense_nnz, tile_bytes=tb)
    assert cols == TILE_BYTES // (4 * 40)  # a tile reads TILE_BYTES of B
    assert tile_columns(40, rows, dense_nnz, local_ranks=2, tile_bytes=tb) == cols // 2  # ranks share the cache
    assert tile_columns(40, rows, dense_nnz, device="cuda") is None  # cuSPARSE: whole blocks
    assert tile_columns(40, rows, dense_nnz, tile_bytes=0) is None
    assert tile_columns(4096, rows, 10 * dense_nnz) == MIN_TILE_COLUMNS  # no narrower than 1024 columns
    assert tile_columns(4096, rows, dense_nnz) == rows // 25  # at most 25 tiles: 1/8 of 8 bytes per nonzero
    assert tile_columns(40, 10_000, 10**6, tile_bytes=tb) is None  # B's 10k rows fit one tile
    # few nonzeros per row: tiles widen until their row pointers cost <= 1/8 of the nonzeros' bytes
    sparse = tile_columns(40, rows, 5 * rows, tile_bytes=tb)
    assert max_tiles(rows, 5 * rows) == 2 and sparse == rows // 2
    assert (num_tiles(rows, sparse) - 1) * (rows + 1) * 4 <= 0.125 * 5 * rows * 8
    assert tile_columns(40, rows, 4 * rows, tile_bytes=tb) is None  # 4 nonzeros per row: a second tile costs more


def test_the_cpu_spmm_is_mkl_on_intel_cpus_and_the_gather_kernel_elsewhere(monkeypatch):
    monkeypatch.delenv(CPU_SPMM_ENV, raising=False)
    mkl, read_vendor = torch.backends.mkl.is_available(), policy._cpu_vendor
    for vendor, expected in (("GenuineIntel", "mkl" if mkl else "gather"), ("AuthenticAMD", "gather"), ("", "gather")):
        monkeypatch.setattr(policy, "_cpu_vendor", lambda v=vendor: v)
        assert cpu_spmm() == expected
        monkeypatch.setenv(CPU_SPMM_ENV, "")  # empty: as unset
        assert cpu_spmm() == expected
        monkeypatch.delenv(CPU_SPMM_ENV)
    for value in ("gather", "mkl"):
        monkeypatch.setenv(CPU_SPMM_ENV, value)
        assert cpu_spmm() == value
    monkeypatch.setenv(CPU_SPMM_ENV, "MKL")
    with pytest.raises(ConfigError) as err:
        cpu_spmm()
    assert flag_message(err.value) == "MGGCN_CPU_SPMM must be one of gather, mkl, not 'MKL'"
    read_vendor.cache_clear()
    vendor = read_vendor()  # this machine's, from /proc/cpuinfo
    assert vendor == vendor.strip() and (vendor != "" or platform.machine() not in ("x86_64", "AMD64")
                                         or not os.path.exists("/proc/cpuinfo"))


@pytest.mark.parametrize("spmm", ["gather", "mkl"])
def test_blocks_stay_whole_for_the_gather_kernel_while_b_fits(monkeypatch, spmm):
    monkeypatch.setenv(CPU_SPMM_ENV, spmm)
    rows, nnz = 100_000, 5_100_000  # issue 17's graph at P = 1: B at width 40 is 16 MB
    gathers = gather_kernel("cpu")
    assert gathers == (spmm == "gather" and "fbgemm" in torch.backends.quantized.supported_engines
                       and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"))
    assert not gather_kernel("cpu", torch.float64) and not gather_kernel("cuda")
    mkl = tile_columns(40, rows, nnz, tile_bytes=TILE_BYTES)
    assert mkl == TILE_BYTES // 160
    assert tile_columns(40, rows, nnz) == (None if gathers else mkl)
    assert rows * 40 * 4 * 2 <= GATHER_BYTES < rows * 40 * 4 * 4  # two ranks of a machine fit, four do not
    assert tile_columns(40, rows, nnz, local_ranks=2) == (None if gathers else mkl // 2)
    four = tile_columns(40, rows, nnz, local_ranks=4, tile_bytes=TILE_BYTES)
    assert four is not None and tile_columns(40, rows, nnz, local_ranks=4) == four
    assert tile_columns(128, rows, nnz) == TILE_BYTES // 512  # 51 MB of B: MKL's tiles


@pytest.mark.parametrize("chunk", [None, 7, 41 * 6, 1])
def test_gather_kernel_equals_the_block_product(monkeypatch, chunk):
    """The embedding_bag SpMM, one chunk of rows at a time (chunk: output elements per call; 7 with width 6 is one
    row, 41 * 6 the whole block), writing and accumulating, on a block with an empty row and column; int32 and
    int64 indices; B not contiguous."""
    if chunk is not None:
        monkeypatch.setattr(tiled, "GATHER_CHUNK", chunk)
    mat = _block()
    expected_b = torch.randn(6, 57).t()  # 57 x 6, not contiguous
    expected = torch.from_numpy(mat.toarray()) @ expected_b
    for idx in (torch.int32, torch.int64):
        csr = torch.sparse_csr_tensor(torch.from_numpy(mat.indptr).to(idx), torch.from_numpy(mat.indices).to(idx),
                                      torch.from_numpy(mat.data), size=mat.shape)
        out = torch.full((41, 6), float("nan"))
        # float32 sums of <= ~12 products in another order than the dense product: a few ulps
        torch.testing.assert_close(gather_matmul(csr, expected_b, out), expected, rtol=1e-5, atol=1e-6)
        start = torch.randn(41, 6)
        torch.testing.assert_close(gather_matmul(csr, expected_b, start.clone(), accumulate=True), start + expected,
                                   rtol=1e-5, atol=1e-6)
    empty = torch.sparse_csr_tensor(torch.zeros(42, dtype=torch.int32), torch.zeros(0, dtype=torch.int32),
                                    torch.zeros(0), size=(41, 57))
    assert gather_matmul(empty, expected_b, torch.full((41, 6), float("nan"))).eq(0).all()


@pytest.mark.parametrize("spmm", ["gather", "mkl"])
def test_whole_float32_blocks_multiply_with_the_gather_kernel(monkeypatch, spmm):
    monkeypatch.setenv(CPU_SPMM_ENV, spmm)
    calls = []
    real = tiled.gather_matmul
    monkeypatch.setattr(tiled, "gather_matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    mat = _block()
    b = torch.randn(57, 6)
    TiledCSR.from_scipy(mat).matmul(b, torch.empty(41, 6))
    assert len(calls) == int(gather_kernel("cpu"))
    TiledCSR.from_scipy(mat, 13).matmul(b, torch.empty(41, 6))  # tiles: MKL
    assert len(calls) == int(gather_kernel("cpu"))


def test_shard_of_tiles_matches_the_plan():
    graph = random_graph(301, 6000, features=12, classes=5, directed=True, seed=3)
    part = make_partition(graph.num_nodes, 2, 0, "random")
    whole = build_shard(graph, part, 1, "sym")
    cut = build_shard(graph, part, 1, "sym", tile_cols=40)
    assert [len(b.tiles) for b in cut.adj] == [4, 4]  # m = 151 columns per block
    assert (cut.tile_cols, whole.tile_cols) == (40, None)
    for a, b in zip(whole.adj + whole.adj_t, cut.adj + cut.adj_t):
        assert (a.to_scipy() != b.to_scipy()).nnz == 0
    plan = plan_memory(graph.num_nodes, graph.num_edges, 12, 5, (16,), 2, rank_nnz=cut.nnz,
                       rank_nnz_t=sum(b.nnz for b in cut.adj_t), tile_cols=40)
    assert plan.parts["adjacency A"] == sum(b.nbytes for b in cut.adj)
    assert plan.parts["adjacency A^T"] == sum(b.nbytes for b in cut.adj_t)


def test_int32_indices_only_where_the_nonzero_count_fits_int32():
    """A block of 2**31 nonzeros has a row pointer of 2**31, past int32 (TiledCSR's indices would wrap negative)."""
    from mggcn.kernels.policy import index_bytes

    assert index_bytes(2**31 - 1, 1000) == 4
    assert index_bytes(2**31, 1000) == 8
    assert index_bytes(1000, 2**31 + 1) == 8
