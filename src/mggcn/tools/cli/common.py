"""What several commands share: argument types, the dataset options, the reader keywords, launch facts."""

from __future__ import annotations

import argparse
import os

from mggcn.config import ORDERINGS
from mggcn.data.graph import GraphError
from mggcn.utils.units import parse_bytes

__all__ = ["hidden_sizes", "byte_size", "byte_sizes", "positive_int", "int_list", "orderings", "add_dataset_options",
           "read_options", "under_torchrun", "exit_status"]


def hidden_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 128,128, got '{text}'") from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"hidden sizes must be positive, got '{text}'")
    return sizes


def byte_size(text: str) -> int:
    try:
        value = parse_bytes(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 4M or 512K, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a size of at least 0, got '{text}'")
    return value


def byte_sizes(text: str) -> tuple[int, ...]:
    return tuple(byte_size(t) for t in text.split(",") if t.strip())


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return value


def int_list(text: str) -> tuple[int, ...]:
    sizes = hidden_sizes(text)
    if not sizes:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers such as 1,2, got '{text}'")
    return sizes


def orderings(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in ORDERINGS]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected orderings among {', '.join(ORDERINGS)}, got '{text}'")
    return names


def add_dataset_options(p: argparse.ArgumentParser) -> None:
    """How a DATASET path is read (train and predict)."""
    p.add_argument("--format", dest="fmt", default=None, help="layout of a dataset path (see `mggcn prepare -h`)")
    p.add_argument("--features", default=None, help="mtx/edgelist: features .npy [n, F] (default: random)")
    p.add_argument("--labels", default=None, help="mtx/edgelist: labels .npy [n], -1 = unlabelled (default: random)")
    p.add_argument("--split", default=None,
                   help="mtx/edgelist: split .npy of 0/1/2/-1 (train/val/test/none) or .npz of masks "
                        "(default: random 50/25/25)")
    p.add_argument("--undirected", action="store_true", help="add the reverse of every edge")
    p.add_argument("--dedup", action="store_true", help="drop duplicate edges")


def read_options(args: argparse.Namespace) -> dict:
    """The reader keywords of mtx/edge-list sources (``--features/--labels/--split``, and ``--num-nodes`` where
    the command has it); refused for formats that carry their own vertex data."""
    names = ("features", "labels", "split", "num_nodes")
    options = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    if options and args.fmt not in ("mtx", "edgelist"):
        raise GraphError(f"--{next(iter(options)).replace('_', '-')} is for --format mtx or edgelist; "
                         "other sources carry their vertex data")
    if "num_nodes" in options and args.fmt != "edgelist":
        raise GraphError("--num-nodes is for --format edgelist (a Matrix Market header gives n)")
    return options


def under_torchrun() -> bool:
    """This process is one rank of a torchrun (or other launcher's) job, not a command that starts workers."""
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MGGCN_INIT_METHOD" not in os.environ)


def exit_status(result) -> int:
    """0, or 130 when a signal stopped training (the shell's code for an interrupted command)."""
    return 130 if result.stopped == "interrupted" else 0
