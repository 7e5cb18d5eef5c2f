"""An unsharded single-process GCN written without mggcn's code: the oracle of the distributed tests.

Â comes from PyG's ``gcn_norm`` (``sym``) or from a few torch ops (``mean``), the SpMM is torch's COO
``torch.sparse.mm`` with autograd, the layers are ``Â·H·Wᵀ + b`` in the textbook order.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_remaining_self_loops, scatter

from mggcn.data.graph import Graph


def adj_hat(edge_index: np.ndarray, n: int, norm: str = "sym") -> torch.Tensor:
    """Dense [n, n] Â, rows = targets."""
    ei = torch.as_tensor(edge_index, dtype=torch.long)
    if norm == "sym":
        ei, w = gcn_norm(ei, None, n, improved=False, add_self_loops=True)
    else:
        ei, _ = add_remaining_self_loops(ei, None, 1.0, n)
        w = torch.ones(ei.shape[1])
        deg = scatter(w, ei[1], dim=0, dim_size=n, reduce="sum")
        w = w / deg[ei[1]]
    dense = torch.zeros(n, n, dtype=torch.float64)
    dense.index_put_((ei[1], ei[0]), w.double(), accumulate=True)
    return dense


def gcn_losses(graph: Graph, weights: list[tuple[torch.Tensor, torch.Tensor]], epochs: int, lr: float,
               weight_decay: float, norm: str = "sym", activation: str = "relu") -> list[float]:
    """Training losses of a plain full-batch GCN (float64, dense Â) started from ``weights``."""
    a = adj_hat(graph.edge_index, graph.num_nodes, norm)
    x = torch.as_tensor(graph.x, dtype=torch.float64)
    y = torch.as_tensor(graph.y)
    train = torch.as_tensor(graph.masks["train"])
    params = []
    for w, b in weights:
        params += [w.detach().double().clone().requires_grad_(), b.detach().double().clone().requires_grad_()]
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        h = x
        for i in range(0, len(params), 2):
            h = a @ (h @ params[i].t()) + params[i + 1]
            if i + 2 < len(params):
                h = F.relu(h) if activation == "relu" else F.elu(h) if activation == "elu" else F.leaky_relu(h, 0.01)
        loss = F.cross_entropy(h[train], y[train])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def random_graph(n: int, e: int, features: int = 8, classes: int = 3, directed: bool = True, seed: int = 0,
                 self_loops: bool = True) -> Graph:
    """A small random graph with features, labels, and disjoint splits; some vertices unlabelled."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    if not self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    ei = np.stack([src, dst])
    if not directed:
        ei = np.concatenate([ei, ei[::-1]], axis=1)
    y = rng.integers(0, classes, n)
    role = rng.integers(0, 4, n)  # 3 = in no split
    masks = {"train": role == 0, "val": role == 1, "test": role == 2}
    masks["train"][0] = True
    masks["val"][0] = masks["test"][0] = False
    return Graph(n, ei, rng.standard_normal((n, features)).astype(np.float32), y, masks, num_classes=classes,
                 name="random")


def pyg_model_losses(graph: Graph, kind: str, state: dict[str, torch.Tensor], hidden: int, num_layers: int,
                     epochs: int, lr: float, weight_decay: float, train_eps: bool = False,
                     mlp_batch_norm: bool = False, final: dict | None = None,
                     batch_norm: bool = False, activation: str = "relu") -> list[float]:
    """Training losses of PyG's own ``GCN`` (``kind="gcn"``), ``GraphSAGE`` (``"sage"``) or ``GIN`` (``"gin"``) in
    float64, one process, started from ``state`` (mggcn's initial weights under PyG's names), Adam on every
    parameter, cross-entropy (for a multi-label graph ``BCEWithLogitsLoss``). ``batch_norm``: the model's
    ``norm="batch_norm"`` (after each hidden layer); ``mlp_batch_norm``: each GINConv's MLP is PyG's
    ``MLP(..., norm="batch_norm")``; ``final``: filled with the state dict after training; ``activation``: the
    models' ``act``."""
    from torch_geometric.nn.models import GCN, GIN, MLP, GraphSAGE

    norm = "batch_norm" if batch_norm else None
    options = {"norm": norm, "act": activation}
    if kind == "sage":
        model = GraphSAGE(graph.num_features, hidden, num_layers, graph.num_classes, **options)
    elif kind == "gcn":
        model = GCN(graph.num_features, hidden, num_layers, graph.num_classes, **options)
    else:
        model = GIN(graph.num_features, hidden, num_layers, graph.num_classes, train_eps=train_eps, **options)
        if batch_norm or mlp_batch_norm:  # PyG's GIN(norm=...) puts the norm in its MLPs too
            for conv in model.convs:
                lins = conv.nn.lins
                conv.nn = MLP([lins[0].in_channels, lins[0].out_channels, lins[1].out_channels],
                              norm="batch_norm" if mlp_batch_norm else None, act=activation)
    model.load_state_dict(state, strict=True)
    model = model.double()
    x = torch.as_tensor(graph.x, dtype=torch.float64)
    ei = torch.as_tensor(graph.edge_index)
    y = torch.as_tensor(graph.y)
    train = torch.as_tensor(graph.masks["train"])
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        out = model(x, ei)[train]
        # a multi-label graph (y [n, C] of 0/1) trains as PyG's PPI example does
        loss = (F.binary_cross_entropy_with_logits(out, y[train].double()) if graph.multilabel
                else F.cross_entropy(out, y[train]))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if final is not None:
        final.update(model.state_dict())
    return losses
