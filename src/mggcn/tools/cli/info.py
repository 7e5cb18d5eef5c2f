"""``mggcn info``: what a prepared dataset holds, and with --verify whether it is intact."""

from __future__ import annotations

import argparse

HELP = "what a prepared dataset holds"
DESCRIPTION = ("Sizes, degree statistics, split sizes and per-P nonzero balance of a directory written by "
               "`mggcn prepare`.\n\nexample:\n  mggcn info mygraph --verify")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="a prepared dataset directory")
    p.add_argument("--verify", action="store_true", help="also check every checksum and value (reads it all)")


def run(args: argparse.Namespace) -> int:
    from mggcn.data.prepared.reader import PreparedDataset, describe

    print(describe(PreparedDataset(args.dir, verify=args.verify)))
    return 0
