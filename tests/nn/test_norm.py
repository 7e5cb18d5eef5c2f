import numpy as np
import pytest
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
