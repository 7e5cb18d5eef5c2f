"""GAT across ranks (mggcn/nn/gat.py on mggcn/distributed/attention.py): at P = 1..4, with every exchange (broadcast,
sparse, auto), with and without overlap, whole and tiled blocks, each rank's rows of the logits and of the input
gradient and the sum over ranks of the parameter gradients equal PyG's GAT on the whole directed graph (parallel
edges, self loops, isolated vertices, n not divisible by 3 or 4), with the last layer's heads as the others' or one
(output_heads, PyG's GAT example); with attention dropout, every P draws the masks P = 1 draws."""

import pytest
import torch
from torch_geometric.nn import GATConv
from torch_geometric.nn.models import GAT as PygGAT

import workers
from gat_graph import CLASSES, FEATURES, N, gat_graph
from mggcn.distributed.launch import run_workers
from mggcn.distributed.partition import make_partition
from mggcn.nn.gat import GAT

HEADS, HIDDEN = 3, 12
SEED = 3  # the partition's
# float64 end to end (PyG and mggcn): only the summation order differs (online softmax across blocks, per-tile
# sums), a few ulps of values of order 1-10
TOL64 = dict(rtol=1e-9, atol=1e-10)
# float32: the same, at float32's ulp (~1e-7) over two layers of sums of ~10 terms
TOL32 = dict(rtol=1e-5, atol=1e-5)


def _state(seed: int, output_heads: int | None = None) -> dict[str, torch.Tensor]:
    """Initial weights with random biases, so that every term shows."""
    model = GAT([FEATURES, HIDDEN, CLASSES], heads=HEADS, output_heads=output_heads, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for k, v in state.items():
        if k.endswith("bias"):
            state[k] = torch.randn(v.shape, generator=gen) * 0.5
    return state


def _cases():
    graph = gat_graph()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(N, FEATURES, generator=gen)
    g = torch.randn(N, CLASSES, generator=gen)
    options = {"hidden": [HIDDEN], "heads": HEADS}
    cases = [(graph, comm, overlap, tiles, options, _state(k), x, g, torch.float64, None)
             for k, (comm, overlap, tiles) in enumerate(
                 [(c, o, None) for c in ("broadcast", "sparse", "auto") for o in (True, False)]
                 + [("broadcast", True, 3), ("sparse", True, 3)])]
    cases.append((graph, "sparse", True, None, options, _state(9), x, g, torch.float32, None))
    dropped = options | {"attention_dropout": 0.4}
    cases += [(graph, comm, overlap, None, dropped, _state(10), x, g, torch.float64, 7)
              for comm, overlap in (("broadcast", True), ("sparse", False), ("auto", True))]
    one_head = options | {"output_heads": 1}
    cases += [(graph, comm, overlap, None, one_head, _state(11 + k, 1), x, g, torch.float64, None)
              for k, (comm, overlap) in enumerate((("broadcast", True), ("sparse", False)))]
    return cases


def _pyg_reference(graph, state, x, g, dtype):
    if state["convs.1.att_src"].shape[1] == HEADS:
        model = PygGAT(FEATURES, HIDDEN, 2, CLASSES, heads=HEADS)
    else:  # one output head: GATConv layers as PyG's example builds them
        model = torch.nn.Module()
        model.convs = torch.nn.ModuleList([GATConv(FEATURES, HIDDEN // HEADS, heads=HEADS),
                                           GATConv(HIDDEN, CLASSES, heads=1, concat=False)])
        model.forward = lambda h, ei: model.convs[1](model.convs[0](h, ei).relu(), ei)
    model.load_state_dict(state, strict=True)
    model = model.to(dtype)
    xr = x.to(dtype).clone().requires_grad_()
    out = model(xr, torch.from_numpy(graph.edge_index))
    out.backward(g.to(dtype))
    return out.detach(), xr.grad, {n: p.grad for n, p in model.named_parameters()}


def _gather(per_rank, nprocs, k):
    """Case ``k``'s outputs and input gradients in original vertex order, and the parameter gradients summed."""
    position = torch.from_numpy(make_partition(N, nprocs, SEED).position)
    rows = [dict(per_rank)[r][k] for r in range(nprocs)]
    out = torch.cat([r[0] for r in rows])[position]
    grad_x = torch.cat([r[1] for r in rows])[position]
    grads = {name: sum(r[2][name] for r in rows) for name in rows[0][2]}  # the trainer all-reduces these
    return out, grad_x, grads


@pytest.fixture(scope="module")
def single():
    """Every case at P = 1, in this process."""
    return [workers.gat_worker(_cases(), SEED)]


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_gat_across_ranks_equals_pyg(nprocs, single):
    cases = _cases()
    per_rank = single if nprocs == 1 else run_workers(workers.gat_worker, nprocs, (cases, SEED), timeout_s=300)
    for k, (graph, comm, overlap, tiles, _, state, x, g, dtype, attention_seed) in enumerate(cases):
        out, grad_x, grads = _gather(per_rank, nprocs, k)
        label = f"P={nprocs} case {k} ({comm}, overlap {overlap}, tiles {tiles}, {dtype})"
        if attention_seed is None:
            ref, ref_x, ref_grads = _pyg_reference(graph, state, x, g, dtype)
        else:  # attention dropout: the masks P = 1 draws (original ids hashed), and not no dropout at all
            ref, ref_x, ref_grads = _gather(single, 1, k)
            plain, _, _ = _pyg_reference(graph, state, x, g, dtype)
            assert not torch.allclose(ref, plain, rtol=1e-3, atol=1e-3), label
        tol = TOL64 if dtype == torch.float64 else TOL32
        torch.testing.assert_close(out, ref, **tol, msg=lambda m, s=label: f"{s} logits: {m}")
        torch.testing.assert_close(grad_x, ref_x, **tol, msg=lambda m, s=label: f"{s} dX: {m}")
        assert set(grads) == set(ref_grads)
        for name, want in ref_grads.items():
            torch.testing.assert_close(grads[name], want, **tol, msg=lambda m, s=label, n=name: f"{s} {n}: {m}")
