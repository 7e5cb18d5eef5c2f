"""``mggcn info``: what a prepared dataset holds, and with --verify whether it is intact."""

from __future__ import annotations

import argparse

from mggcn.tools.cli.common import path_arg

HELP = "what a prepared dataset holds"
DESCRIPTION = ("Sizes, degree statistics, split sizes and per-P nonzero balance of a directory written by "
               "`mggcn prepare`, or of a dataset of `mggcn datasets` by its name (prepared into the cache first if "
               "it is not there).\n\nexamples:\n  mggcn info mygraph --verify\n  mggcn info cora")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=path_arg, help="a prepared dataset directory, or a name of `mggcn datasets`")
    p.add_argument("--verify", action="store_true", help="also check every checksum and value (reads it all)")


def run(args: argparse.Namespace) -> int:
    from mggcn.data.catalog import named
    from mggcn.data.datasets import cache_copy_error, named_dataset_dir
    from mggcn.data.prepared.reader import PreparedDataset, describe
    from mggcn.utils.errors import GraphError

    entry = named(args.dir)
    path = named_dataset_dir(entry) if entry is not None else args.dir
    try:
        dataset = PreparedDataset(path, verify=args.verify)
        summary = describe(dataset)
    except GraphError as exc:
        if entry is None:
            raise
        raise cache_copy_error(exc, entry.name, path) from None  # as `mggcn train NAME` says it
    print(summary)
    if args.verify:  # it raised on the first problem: reaching here is the answer
        arrays = dataset.manifest["arrays"]
        names = set(arrays) & set(dataset.arrays)  # the files (a symmetric dataset's out_* are its in_*)
        summed = sum("sha256" in arrays[name] for name in names)
        unsummed = f" ({len(names) - summed} without one)" if summed < len(names) else ""
        print(f"verified: {summed} arrays match their checksums{unsummed}, every value is in range")
    return 0
