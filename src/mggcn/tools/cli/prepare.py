"""``mggcn prepare``: write a dataset once as a directory that any number of workers read their share of."""

from __future__ import annotations

import argparse

from mggcn.data.formats import FORMATS
from mggcn.tools.cli.common import positive_int, read_options

HELP = "write a dataset once, for any number of workers to read their share of"
DESCRIPTION = """Write a dataset once as a prepared directory; `mggcn train DIR --nprocs P` then reads, on each rank,
only that rank's rows. Edge lists and generated graphs stream through in chunks (out of core, bounded by
--memory-limit); the other formats are read whole first. SOURCE may also name a dataset of `mggcn datasets`
(cora, ogbn-products, reddit, ...): its files are downloaded into the cache ($MGGCN_DATA, else ~/.cache/mggcn)
once, checked, and read.

examples:
  mggcn prepare cora cora
  mggcn prepare data/ogbn_products prod --format ogb --undirected     # OGB's files hold each edge once
  mggcn prepare data/flickr flickr --format saint
  mggcn prepare data/reddit reddit --format dgl-reddit
  mggcn prepare web.mtx web --format mtx --features x.npy --labels y.npy --split split.npy
  mggcn prepare edges.csv.gz g --format edgelist --undirected --dedup --memory-limit 2G
  mggcn prepare mggcn_reddit/ reddit --format mggcn-bin
  mggcn prepare gcn/data/ind.cora cora --format planetoid --normalize-features
  mggcn prepare rmat:scale=20,edge_factor=16 rmat20
  mggcn prepare synthetic:n=10000000 big
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="SOURCE",
                   help="a file or directory with --format, synthetic:..., rmat:..., builtin:..., or a name of "
                        "`mggcn datasets`")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the directory to create")
    p.add_argument("--format", dest="fmt", default=None, choices=FORMATS, help="layout of SOURCE when it is a path")
    p.add_argument("--undirected", action="store_true",
                   help="every edge in both directions, once each (PyG's to_undirected)")
    p.add_argument("--dedup", action="store_true", help="drop duplicate edges")
    p.add_argument("--features", default=None, help="mtx/edgelist: features .npy [n, F] (default: random)")
    p.add_argument("--labels", default=None,
                   help="mtx/edgelist: labels .npy [n], -1 (or NaN) = unlabelled, or [n, C] of 0/1 for several "
                        "labels per vertex (default: random)")
    p.add_argument("--split", default=None,
                   help="mtx/edgelist: split .npy of 0/1/2/-1 or .npz of train/val/test masks (default: random "
                        "50/25/25); ogb: the split scheme, split/NAME (default: the only one)")
    p.add_argument("--normalize-features", action="store_true",
                   help="planetoid: divide each feature row by its sum, as PyG's NormalizeFeatures "
                        "(default: as stored)")
    p.add_argument("--num-nodes", type=positive_int, default=None,
                   help="edgelist: vertex count (default: the rows of --features/--labels, else largest id + 1)")
    p.add_argument("--memory-limit", default=None,
                   help="memory for edge chunks and sorting, e.g. 512M or 2G (default 2G); vertex arrays come on top")
    p.add_argument("--overwrite", action="store_true",
                   help="replace OUT_DIR if it is a prepared dataset or an empty directory")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")


def run(args: argparse.Namespace) -> int:
    from mggcn.data.catalog import named
    from mggcn.data.datasets import check_not_named
    from mggcn.data.download import dataset_lock, fetch
    from mggcn.data.prepared.reader import PreparedDataset, describe
    from mggcn.data.prepared.writer import prepare

    source, undirected = args.source, args.undirected
    check_not_named(source, args.fmt)
    entry = named(source) if args.fmt is None else None
    if entry is not None:  # read as the reader of its files reads them (--normalize-features for a Planetoid one)
        args.fmt = entry.fmt
    reader_options = read_options(args)
    if entry is not None:
        with dataset_lock(entry, progress=not args.quiet):
            source = fetch(entry, progress=not args.quiet)
        undirected = undirected or entry.undirected
    out = prepare(source, args.out_dir, fmt=args.fmt, undirected=undirected, dedup=args.dedup,
                  memory_limit=args.memory_limit, progress=not args.quiet, overwrite=args.overwrite,
                  **reader_options)
    if not args.quiet:
        print(describe(PreparedDataset(out)))
    return 0
