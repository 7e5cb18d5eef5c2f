"""The epoch floor (mggcn.tools.roofline): the bytes and flops of an epoch, counted by hand for a small model."""


import pytest

from mggcn.nn.model import spmm_widths
from mggcn.tools import roofline
from mggcn.tools.roofline import Machine, epoch_floor, mggcn_work, pyg_work

F = 4  # bytes of a float32


def test_mggcn_work_counts_the_gemms_and_spmms_of_one_rank():
    n, nnz, dims = 10, 30, [8, 4, 2]
    work = mggcn_work(n, nnz, dims, nprocs=2)
    m = 5
    # layer 0: forward and ∂W; layer 1: forward, ∂W and ∂H
    assert work.gemms == ((m, 8, 4), (4, m, 8), (m, 4, 2), (2, m, 4), (m, 2, 4))
    assert work.gemm_flops == sum(2 * a * b * c for a, b, c in work.gemms)
    widths = spmm_widths(dims, "auto", True)
    assert widths == [2, 2]  # layer 0 aggregates X once before training; layer 1 transforms first, both passes
    # each SpMM: P row pointers + nonzeros (int32 index + value) + the output rows, plus one row of B per nonzero
    fixed = 2 * (m + 1) * 4 + 15 * (4 + F) + F * m * 2
    assert work.spmm_bytes == 2 * (fixed + F * 15 * 2)
    assert work.spmm_bytes_min == 2 * (fixed + F * n * 2)
    assert work.comm_bytes == 2 * (1 * m * 2 * F)  # P - 1 blocks of m rows received per SpMM
    assert mggcn_work(n, nnz, dims, nprocs=1).comm_bytes == 0


def test_pyg_transforms_first_in_every_layer():
    work = pyg_work(10, 30, [8, 4, 2])
    assert work.gemms == ((10, 8, 4), (4, 10, 8), (10, 4, 2), (2, 10, 4), (10, 2, 4))
    assert work.comm_bytes == 0
    assert work.spmm_bytes > mggcn_work(10, 30, [8, 4, 2]).spmm_bytes  # two SpMMs at width 4 more than mggcn's


def test_epoch_floor_is_bytes_over_bandwidth_plus_gemm_time():
    machine = Machine(device="cpu", threads=1, bandwidth=1e9, gemm_rate=1e9)
    work = mggcn_work(1000, 5000, [16, 8, 4], nprocs=2)
    floor = epoch_floor(work, machine, nprocs=2, shared=True)
    gemm_s = sum(max(2 * a * b * c / 1e9, F * (a * b + b * c + a * c) / 1e9) for a, b, c in work.gemms)
    expected = 2 * (work.spmm_bytes / 1e9 + gemm_s + work.comm_bytes / 1e9)  # two ranks share the machine
    assert floor["floor_s"] == pytest.approx(expected)
    assert floor["floor_min_s"] <= floor["floor_s"]
    alone = epoch_floor(work, machine, nprocs=2, shared=False)  # one machine per rank: no sharing, no copy
    assert alone["floor_s"] == pytest.approx(work.spmm_bytes / 1e9 + gemm_s) and alone["comm_s"] == 0.0


@pytest.mark.parametrize("kind", ["sage", "gin"])
def test_pyg_sage_and_gin_aggregate_first_and_the_first_layer_has_no_backward_aggregation(kind):
    """SAGEConv / GINConv aggregate at d_in, and their first layer needs no Âᵀ·∂: one SpMM in the first layer, two in
    the others (the docstring of pyg_work)."""
    from mggcn.nn.models import model_type
    from mggcn.tools.roofline import pyg_work

    layers = model_type(kind)
    assert layers.pyg_spmm_widths(8, 4, True) == [8]
    assert layers.pyg_spmm_widths(4, 2, False) == [4, 4]
    # SpMM bytes grow with the widths: three SpMMs of width 8, 4, 4 read less than the GCN's four of width 4, 4, 2, 2
    assert pyg_work(1000, 30000, [8, 4, 2], model=kind).spmm_bytes < pyg_work(1000, 30000, [8, 8, 2],
                                                                              model=kind).spmm_bytes


def test_rows_and_nonzeros_per_rank_round_up():
    """11 vertices and 31 nonzeros over 2 ranks: a rank holds 6 rows and 16 nonzeros (the larger share), not 5/15."""
    work = mggcn_work(11, 31, [8, 4, 2], nprocs=2)
    m, nnz = 6, 16
    assert work.gemms == ((m, 8, 4), (4, m, 8), (m, 4, 2), (2, m, 4), (m, 2, 4))
    fixed = 2 * (m + 1) * 4 + nnz * (4 + F) + F * m * 2
    assert work.spmm_bytes == 2 * (fixed + F * nnz * 2)


def test_measured_bandwidth_counts_the_read_and_the_write(monkeypatch):
    monkeypatch.setattr(roofline, "_best_seconds", lambda fn, repeats, sync: 0.5)
    machine = roofline.measure_machine("cpu", copy_bytes=1 << 12, gemm_size=8, repeats=1)
    assert machine.bandwidth == 2 * (1 << 12) / 0.5  # a copy reads and writes each byte
    assert machine.gemm_rate == 2 * 8**3 / 0.5


def test_the_compulsory_floor_counts_each_row_of_b_once():
    machine = Machine(device="cpu", threads=1, bandwidth=1e9, gemm_rate=1e9)
    work = mggcn_work(1000, 5000, [16, 8, 4], nprocs=2)
    floor = epoch_floor(work, machine, nprocs=2, shared=True)
    assert work.spmm_bytes_min < work.spmm_bytes
    assert floor["floor_min_s"] == pytest.approx(floor["floor_s"] - 2 * (work.spmm_bytes - work.spmm_bytes_min) / 1e9)


def test_gin_first_layer_keeps_the_input_gradient_of_its_second_linear():
    m = 5
    work = mggcn_work(10, 30, [8, 4, 2], nprocs=2, model="gin")
    assert work.gemms == ((m, 8, 4), (4, m, 8), (m, 4, 4), (4, m, 4), (m, 4, 4),  # layer 0: no ∂H of its first
                          (m, 4, 2), (2, m, 4), (m, 2, 4), (m, 2, 2), (2, m, 2), (m, 2, 2))


def test_the_last_backward_spmm_reads_only_the_training_columns():
    """train=0.1 (≤ TRAINING_COLUMNS_MAX): the last SpMM (width 2, not the first layer's 4) reads 10% of the columns
    and of the nonzeros."""
    n, nnz, dims = 1000, 5000, [16, 8, 4, 2]
    from mggcn.nn.model import spmm_widths

    assert spmm_widths(dims, "auto", True) == [4, 4, 2, 2]
    full, part = mggcn_work(n, nnz, dims, train=1.0), mggcn_work(n, nnz, dims, train=0.1)

    def spmm(cols, z, w):
        fixed = (n + 1) * 4 + z * (4 + F) + F * n * w
        return fixed + F * z * w, fixed + F * cols * w

    (a, a_min), (b, b_min) = spmm(n, nnz, 2), spmm(100, 500, 2)
    assert full.spmm_bytes - part.spmm_bytes == a - b
    assert full.spmm_bytes_min - part.spmm_bytes_min == a_min - b_min
