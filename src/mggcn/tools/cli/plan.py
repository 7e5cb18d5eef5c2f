"""``mggcn plan``: per-rank memory and communication of a training run, before running it."""

from __future__ import annotations

import argparse

from mggcn.config import MODELS, ORDERS, SYMMETRIC_OPERATORS, TRAIN_COLUMNS, TrainConfig
from mggcn.tools.cli.common import (
    add_precision_option,
    byte_size,
    fraction,
    graph_count,
    hidden_sizes,
    int_list,
    positive_int,
)
from mggcn.utils.errors import ConfigError, GraphError

HELP = "per-rank memory and communication of a training run, before running it"

DEFAULTS = TrainConfig()


DESCRIPTION = """Before training, how much memory each rank will hold (the adjacency blocks, features, weights, Adam's
state, the broadcast buffers and every activation and gradient of an epoch) and how many bytes it receives per
epoch, for a graph of the given sizes or a known dataset, at one or several P. With --memory, whether it fits:
the exit status is 1 when one of the P given does not.

examples:
  mggcn plan --dataset products --nprocs 8 --memory 80G
  mggcn plan --nodes 1000000 --edges 20000000 --features 128 --classes 40 --nprocs 1,2,4 --device cpu
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from mggcn.tools import plan

    p.add_argument("--dataset", choices=sorted(plan.PRESETS),
                   help="the sizes of a graph of MG-GCN's paper: ogbn-products, ogbn-papers100M made undirected "
                        "(3.2B nonzeros; as stored, directed, give --edges 1615685872), PyG's Reddit, or the protein "
                        "graph of CAGNET and MG-GCN (8.7M vertices, not ogbn-proteins); other options override")
    p.add_argument("--nodes", type=lambda text: graph_count(text, 1), help="vertices")
    p.add_argument("--edges", type=graph_count,
                   help="nonzeros of A: both directions of an undirected edge, no self loops")
    p.add_argument("--features", type=positive_int, help="input features per vertex")
    p.add_argument("--classes", type=positive_int, help="classes (the width of the last layer)")
    p.add_argument("--multilabel", action="store_true",
                   help="the labels are a 0/1 matrix of --classes labels per vertex (PPI, Yelp, ogbn-proteins): "
                        "binary cross-entropy; its labels and loss buffers are counted")
    p.add_argument("--model", choices=MODELS, default=DEFAULTS.model,
                   help="gcn, sage, gin or gat: its parameters, buffers and Â (GraphSAGE and GIN add no self loops)")
    p.add_argument("--gin-train-eps", action="store_true", help="--model gin with a learnable ε")
    p.add_argument("--batch-norm", action="store_true", help="a batch norm after each hidden layer")
    p.add_argument("--gin-mlp-batch-norm", action="store_true", help="--model gin with a batch norm in each MLP")
    p.add_argument("--heads", type=positive_int, default=DEFAULTS.heads,
                   help=f"--model gat: attention heads per layer (default {DEFAULTS.heads}; hidden sizes are totals "
                        "over the heads)")
    p.add_argument("--output-heads", type=positive_int, default=None, metavar="H",
                   help="--model gat: the last layer's heads (default: --heads)")
    p.add_argument("--hidden", type=hidden_sizes, default=DEFAULTS.hidden, help="hidden layer sizes (default 128)")
    p.add_argument("--nprocs", type=int_list, default=(1,), help="ranks, or a list such as 1,2,4,8 (default 1)")
    p.add_argument("--memory", type=byte_size, default=None,
                   help="memory per GPU (e.g. 80G or 141G), or with --device cpu of the machine the ranks share")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda (default): one GPU per rank, whole blocks; cpu: the ranks share one machine, blocks "
                        "cut in column tiles (--tile-bytes)")
    p.add_argument("--tile-bytes", type=byte_size, default=None, help="with --device cpu: as for mggcn train")
    p.add_argument("--train", type=fraction, default=None, help="fraction of vertices in the training split, in (0, 1]")
    p.add_argument("--order", choices=ORDERS, default=DEFAULTS.order, help="as for mggcn train")
    p.add_argument("--train-columns", choices=TRAIN_COLUMNS, default=DEFAULTS.train_columns,
                   help="as for mggcn train: whether the copy of Âᵀ's training columns is counted (default auto)")
    p.add_argument("--input-dropout", type=float, default=0.0,
                   help="as for mggcn train (above 0, Â·X is recomputed every epoch)")
    p.add_argument("--dropout", type=float, default=0.0, help="as for mggcn train")
    p.add_argument("--attention-dropout", type=float, default=DEFAULTS.attention_dropout, metavar="P",
                   help="--model gat, as for mggcn train (above 0, or with any dropout or batch norm, each epoch "
                        "exchanges a forward more, to measure the accuracies)")
    add_precision_option(p)
    p.add_argument("--directed", action="store_true",
                   help="Â differs from Âᵀ (a directed graph, or --norm mean; always for --model sage): the blocks "
                        "of Âᵀ are stored too")


def run(args: argparse.Namespace) -> int:
    from mggcn.kernels.policy import gather_kernel
    from mggcn.nn.models import model_options, operator_for
    from mggcn.tools.plan import PRESETS, format_plan, plan_memory
    from mggcn.training.precision import check_precision_device
    from mggcn.training.settings import check_config, check_tile_bytes
    from mggcn.training.trainer import epoch_tile_columns

    preset = PRESETS.get(args.dataset)
    sizes = {k: getattr(args, k) if getattr(args, k) is not None else getattr(preset, k, None)
             for k in ("nodes", "edges", "features", "classes", "train")}
    missing = [k for k in ("nodes", "edges", "features", "classes") if sizes[k] is None]
    if missing:
        raise GraphError(f"give --dataset or --{' --'.join(missing)}")
    most = sizes["nodes"] * (sizes["nodes"] - 1)  # no self loops (Â adds them)
    if sizes["edges"] > most:  # the option given that makes a preset's sizes impossible
        option = "edges" if args.edges is not None else "nodes"
        raise ConfigError(f"{option} {sizes[option]}: {sizes['edges']} nonzeros do not fit in the adjacency matrix "
                          f"of {sizes['nodes']} vertices without self loops (at most {most})", option)
    check_precision_device(args.precision, args.device)  # tf32 on a CPU: refused as train refuses it
    check_tile_bytes(args.tile_bytes, args.device)
    args.nprocs = list(dict.fromkeys(args.nprocs))  # each P once
    if preset is not None:
        print(f"{preset.name}: {preset.source}")
    cfg = TrainConfig(model=args.model, gin_train_eps=args.gin_train_eps, gin_mlp_batch_norm=args.gin_mlp_batch_norm,
                      batch_norm=args.batch_norm,
                      heads=args.heads, output_heads=args.output_heads, attention_dropout=args.attention_dropout,
                      hidden=args.hidden,
                      order=args.order, dropout=args.dropout, input_dropout=args.input_dropout,
                      tile_bytes=args.tile_bytes, precision=args.precision)
    check_config(cfg)  # what train refuses (an option of another model, a dropout of nan), plan refuses alike
    options = model_options(cfg)  # the model's own settings (GAT's heads); GIN's ε is plan_memory's train_eps
    train_eps = options.pop("train_eps", False)
    fits = True
    for nprocs in args.nprocs:
        tiles = epoch_tile_columns(cfg, sizes["nodes"], sizes["edges"], sizes["features"], sizes["classes"], nprocs,
                                   args.device, nprocs)
        plan = plan_memory(sizes["nodes"], sizes["edges"], sizes["features"], sizes["classes"], args.hidden,
                           nprocs, order=args.order, dropout=args.dropout, input_dropout=args.input_dropout,
                           train=sizes["train"] if sizes["train"] is not None else 0.5,
                           symmetric=not args.directed and operator_for(args.model) in SYMMETRIC_OPERATORS,
                           tile_cols=tiles, model=args.model, train_eps=train_eps, train_columns=args.train_columns,
                           gather=gather_kernel(args.device), device=args.device, precision=args.precision,
                           multilabel=args.multilabel, **options)
        precision = "" if args.precision == "fp32" else f", {args.precision}"
        print(format_plan(plan, f"{preset.name if preset else 'graph'}, {args.model}{precision}", args.memory,
                          args.device))
        fits = fits and (args.memory is None or plan.fits(args.memory, args.device))
    return 0 if fits else 1
