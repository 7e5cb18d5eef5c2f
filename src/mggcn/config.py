"""Every training option, its default and its allowed values, in one place that loads no torch.

The modules that implement an option take its choices from here (``mggcn.nn.norm`` the normalizations,
``mggcn.nn.model`` the orders and activations, ``mggcn.distributed.*`` the orderings, exchanges and transports);
the command line builds its flags from here, so ``mggcn --help`` needs no torch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["__version__", "TrainConfig", "MODELS", "OPERATORS", "SYMMETRIC_OPERATORS",
           "NORMS", "ORDERS", "ACTIVATIONS", "ORDERINGS", "COMM_MODES", "SHM_MODES", "TRAIN_COLUMNS", "DEVICES",
           "PRECISIONS", "TILE_BYTES", "GATHER_BYTES", "MMAP_THRESHOLD", "MMAP_THRESHOLD_MAX", "TIMEOUT_MAX",
           "DEFAULT_DATASET"]

__version__ = "0.1.0"

MODELS = ("gcn", "sage", "gin", "gat")  # mggcn.nn.models: GCN, GraphSAGE (mean, root weight), GIN (2-layer MLP), GAT
NORMS = ("sym", "mean")  # the GCN's: D^-1/2 (A+I) D^-1/2 (PyG GCNConv) or D^-1 (A+I) (the original MG-GCN)
# every Â a shard can be built with (mggcn.nn.norm): the GCN's, GraphSAGE's D_in^-1 A, GIN's A, GAT's pattern
# (A with one unit self loop per vertex, the edge counts as values)
OPERATORS = NORMS + ("in-mean", "sum", "gat")
SYMMETRIC_OPERATORS = ("sym", "sum", "gat")  # Â = Âᵀ when A is symmetric (an undirected graph)
ORDERS = ("auto", "aggregate-first", "transform-first")  # per layer: (Â·H)·W, Â·(H·W), or the narrower SpMM
ACTIVATIONS = ("relu", "leaky_relu", "elu")
ORDERINGS = ("random", "none", "random-local", "metis")  # the vertex order before the row split
COMM_MODES = ("broadcast", "sparse", "auto")  # staged broadcast (MG-GCN) or only the referenced rows
SHM_MODES = ("auto", "on", "off")  # CPU ranks of one host broadcast through shared memory, or gloo
# the last layer's backward on a copy of Âᵀ's training columns: auto (when at most half the vertices train), on, off
TRAIN_COLUMNS = ("auto", "on", "off")
DEVICES = ("cpu", "cuda", "auto")
# what features, activations and exchanged rows are stored in (weights, their gradients' sums, Adam and the loss stay
# float32): fp32; tf32 (float32 storage, the GEMMs on tensor cores: CUDA only); bf16 (bfloat16 storage)
PRECISIONS = ("fp32", "tf32", "bf16")
TILE_BYTES = 4 << 20  # CPU SpMM: bytes of the dense operand one column tile reads, per machine
GATHER_BYTES = 32 << 20  # CPU SpMM: a dense operand up to this size (per machine) is read whole by the gather kernel
MMAP_THRESHOLD = 1 << 20  # ranks return host blocks above this size to the system when freed
# the largest mmap threshold glibc documents (mallopt(3): DEFAULT_MMAP_THRESHOLD_MAX, 4 MiB per byte of a long: 32 MiB
# on 64-bit); older glibc refuse more, and mallopt takes a C int, which past 2 GiB wraps to another threshold
MMAP_THRESHOLD_MAX = 4 * 1024 * 1024 * struct.calcsize("l")
# seconds: the launcher waits for its ranks with poll(2), which counts milliseconds in a C int (about 24.8 days)
TIMEOUT_MAX = (2**31 - 1) // 1000
DEFAULT_DATASET = "synthetic"


@dataclass(frozen=True)
class TrainConfig:
    """Every training option and its default (the CLI's flags mirror these names, but ``betas`` and ``eps``, which
    have none, and ``overlap``: ``--no-overlap``)."""

    model: str = "gcn"  # one of MODELS
    hidden: tuple[int, ...] = (128,)
    epochs: int = 100
    lr: float = 1e-2
    weight_decay: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    dropout: float = 0.0
    input_dropout: float = 0.0
    activation: str = "relu"
    norm: str = "sym"  # the GCN's Â; GraphSAGE and GIN have their own (operator)
    gin_train_eps: bool = False  # GIN: learn ε (default: fixed at 0)
    batch_norm: bool = False  # a batch norm after each hidden layer, before σ (PyG's BasicGNN norm="batch_norm")
    gin_mlp_batch_norm: bool = False  # GIN: batch-normalize each MLP's hidden layer (PyG's MLP(norm="batch_norm"))
    heads: int = 8  # GAT: attention heads per layer (hidden sizes are totals over the heads)
    output_heads: int | None = None  # GAT: the last layer's heads, which it averages (None: heads)
    attention_dropout: float = 0.0  # GAT: dropout on the attention coefficients
    order: str = "auto"
    overlap: bool = True
    partition: str = "random-local"  # random parts (MG-GCN's balance), the original order inside each (locality)
    comm: str = "broadcast"  # "sparse" / "auto": mggcn.distributed.exchange.SparseExchangeSpMM
    shm: str = "auto"  # CPU ranks of one host: broadcast through shared memory (mggcn.distributed.shm) or gloo
    train_columns: str = "auto"  # one of TRAIN_COLUMNS (mggcn.distributed.spmm.keeps_training_columns)
    seed: int = 0
    patience: int = 0  # stop after this many epochs without a better validation accuracy (0: never)
    trace_epoch: int = 2  # record a per-rank timeline of this epoch in its record (0: none)
    tile_bytes: int | None = None  # CPU SpMM: bytes of B per column tile (None: TILE_BYTES; 0: untiled)
    precision: str = "fp32"  # one of PRECISIONS

    def dims(self, num_features: int, num_classes: int) -> list[int]:
        """The layer widths of the model: the features, the hidden sizes, the classes."""
        return [num_features, *self.hidden, num_classes]

