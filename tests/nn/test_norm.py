import numpy as np
import pytest
import scipy.sparse as sp
import torch

from mggcn.nn.norm import adjacency, normalize
from reference import adj_hat


def _edges():
    # directed, with a self loop on 0, a duplicated edge 1->2, and an isolated vertex 4
    return np.array([[0, 1, 1, 2, 3, 0], [0, 2, 2, 0, 1, 3]])


@pytest.mark.parametrize("norm", ["sym", "mean"])
def test_normalize_matches_pyg_gcn_norm(norm):
    a = normalize(adjacency(_edges(), 5), norm).toarray()
    torch.testing.assert_close(torch.from_numpy(a).double(), adj_hat(_edges(), 5, norm), rtol=1e-6, atol=1e-7)


def test_rows_are_targets_and_self_loops_appear_once():
    a = adjacency(_edges(), 5).toarray()
    assert a[2, 1] == 2  # two edges 1 -> 2, aggregated by vertex 2
    assert a[1, 2] == 0
    hat = normalize(adjacency(_edges(), 5), "mean").toarray()
    assert np.allclose(np.diag(hat) > 0, True)  # every vertex, the isolated one included, has its loop
    # vertex 0: in-edges from 0 (loop, once) and 2 -> degree 2
    assert hat[0, 0] == pytest.approx(0.5) and hat[0, 2] == pytest.approx(0.5)
    assert hat[4, 4] == pytest.approx(1.0)
    np.testing.assert_allclose(hat.sum(axis=1), 1.0, rtol=1e-6)


def test_sym_by_hand():
    # 0 <-> 1 undirected: degrees with loops are 2, so every entry is 1/2
    hat = normalize(adjacency(np.array([[0, 1], [1, 0]]), 2), "sym").toarray()
    np.testing.assert_allclose(hat, np.full((2, 2), 0.5), rtol=1e-6)


def test_unknown_norm_is_refused():
    with pytest.raises(ValueError, match="norm must be one of sym, mean"):
        normalize(adjacency(_edges(), 5), "both")


@pytest.mark.parametrize("norm", ["sym", "mean", "in-mean", "sum"])
@pytest.mark.parametrize("directed", [True, False])
def test_normalized_adjacency_is_normalize_of_adjacency_bit_for_bit(norm, directed, monkeypatch):
    """Self loops in the input, parallel edges, isolated vertices; chunks of 100 edges so that every pass runs
    several chunks and the last one is partial."""
    import mggcn.nn.norm as norm_module

    monkeypatch.setattr(norm_module, "_CHUNK", 100)
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 150, 1000), rng.integers(0, 150, 1000)
    if not directed:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    loops = np.arange(20)
    edge_index = np.stack([np.concatenate([src, loops, src[:30]]), np.concatenate([dst, loops, dst[:30]])])
    n = 160  # the last ten vertices have no edge
    want = normalize(adjacency(edge_index, n), norm)
    got = norm_module.normalized_adjacency(edge_index, n, norm)
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data.view(np.int32), want.data.view(np.int32))  # the same float32 bits


def test_degrees_are_exact_beyond_float32s_integers(monkeypatch):
    """A hub of more than 2^24 in-edges: its degree is counted exactly (a float32 sum of its ones rounds it to a
    multiple of 2) by the degrees of normalize and normalized_adjacency (row_sums), whose float64 operator then has
    1 / k; and row_sums equals the counts of the edges on a CSR whose rows cross its chunks of nonzeros, empty rows
    first and last."""
    from mggcn.nn import norm as norm_module

    k = 2**24 + 3
    indptr = np.full(k + 2, k, dtype=np.int64)
    indptr[0] = 0
    hub = sp.csr_matrix((np.ones(k, dtype=np.float32), np.arange(1, k + 1, dtype=np.int32), indptr),
                        shape=(k + 1, k + 1))  # k edges into vertex 0
    assert normalize(hub, "in-mean", dtype=np.float64).data[0] == 1.0 / k
    del hub, indptr
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 300, 5000), rng.integers(2, 290, 5000)
    counts = adjacency(np.stack([src, dst]), 300)
    for chunk in (1, 7, 1 << 20):
        monkeypatch.setattr(norm_module, "_CHUNK", chunk)
        np.testing.assert_array_equal(norm_module.row_sums(counts), np.bincount(dst, minlength=300))


@pytest.mark.parametrize("norm", ["sym", "mean", "gat"])
def test_replacing_the_self_loops_warns_of_nothing(norm, monkeypatch):
    """The input's self loops are dropped in place, not by scipy's setdiag, which (scipy 1.9) warns that changing
    a CSR's sparsity is expensive on every graph without a loop on each vertex: here setdiag raises, whatever the
    scipy, and the result is still the GCN's."""
    import warnings

    def no_setdiag(*args, **kwargs):
        raise AssertionError("setdiag changes a CSR's sparsity (scipy 1.9 warns)")

    monkeypatch.setattr(sp.csr_matrix, "setdiag", no_setdiag)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hat = normalize(adjacency(_edges(), 5), norm).toarray()
    assert (np.diag(hat) > 0).all() and hat[2, 1] > 0
