"""``mggcn report``: PNG plots of a run from its --metrics file."""

from __future__ import annotations

import argparse

from mggcn.tools.cli.common import path_arg

HELP = "plot a run from its --metrics file"
DESCRIPTION = ("PNG plots of a run: loss and accuracies per epoch (curves.png), the per-phase time of every epoch "
               "(phases.png), and the traced epoch's timeline per rank, broadcasts against multiplications "
               "(timeline.png).\n\nexample:\n"
               "  mggcn report run.jsonl --out plots          # after mggcn train --metrics run.jsonl")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("metrics", type=path_arg, help="a file written by `mggcn train --metrics`")
    p.add_argument("--out", type=path_arg, required=True,
                   help="the directory to write the PNGs to (created if missing)")
    p.add_argument("--epoch", type=int, default=None,
                   help="the traced epoch to draw (default: the first one traced, see --trace-epoch)")


def run(args: argparse.Namespace) -> int:
    from mggcn.tools.report import write_report
    from mggcn.utils.optional import require

    require("matplotlib", "plots", "plotting")  # before the metrics are read: a missing package is said first
    for path in write_report(args.metrics, args.out, args.epoch):
        print(path)
    return 0
