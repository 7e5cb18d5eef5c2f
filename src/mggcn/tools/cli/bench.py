"""``mggcn bench``: mggcn at several P against PyG, on one graph, in one run (see :mod:`mggcn.tools.bench`)."""

from __future__ import annotations

import argparse
import os
import sys

from mggcn.config import MODELS, SHM_MODES
from mggcn.tools.cli.common import (
    add_precision_option,
    byte_size,
    byte_sizes,
    hidden_sizes,
    int_list,
    mmap_threshold_size,
    orderings,
    path_arg,
    positive_int,
    precisions,
)

HELP = "mggcn at P = 1, 2 (overlap on and off) against PyG's GCNConv (GraphSAGE, GIN), in one run"


DESCRIPTION = """Time mggcn against PyG on one generated graph: mggcn at P = 1 and 2 (broadcasts overlapped and not) and
PyG's GCNConv, each in fresh processes, and print a table of seconds per epoch, the setup's seconds (to the first
epoch), where the time goes (SpMM, waiting, GEMM, all-reduce), the ratio to the time the memory traffic and arithmetic
need at least (the roofline floor), and peak memory beside what `mggcn plan` predicts. The default graph has 200,000
vertices and 20 million nonzeros; it is generated on every core and written as a prepared directory (--graph-cache
keeps it). A configuration that runs out of memory (or is killed by SIGKILL) is a row that says so, and the bench
goes on; --gpu-memory and --host-memory cap what each configuration's process may use.

examples:
  mggcn bench --small                                # seconds: a tiny graph, to check that it runs
  mggcn bench --repeats 3 --compare-shm --out bench.json
  mggcn bench --device cuda --nprocs 1,2,4,8 --nodes 2000000
  mggcn bench --device cuda --nprocs 1 --nodes 12000000 --degree 100 --graph-cache /tmp/g12m --gpu-memory 64G
"""


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model each configuration trains, and in which precisions."""
    p.add_argument("--model", choices=MODELS,
                   help="gcn (default) against PyG's GCNConv, sage against its GraphSAGE, gin against its GIN, gat "
                        "against its GAT")
    p.add_argument("--heads", type=positive_int, help="--model gat: attention heads per layer (default 8)")
    p.add_argument("--gin-mlp-batch-norm", action="store_true", default=None,
                   help="--model gin: a batch norm in each MLP, PyG's too (GINConv(MLP(..., norm='batch_norm')))")
    p.add_argument("--hidden", type=hidden_sizes, help="hidden layer sizes (default 128)")
    add_precision_option(p)
    p.add_argument("--compare-precision", type=precisions, metavar="LIST",
                   help="more precisions (e.g. bf16) for every P of the main partition: the table then says each "
                        "one's epoch time against --precision's and its change of test accuracy")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from mggcn.tools import bench

    d = bench.BenchOptions()
    p.add_argument("--small", action="store_true", help="a tiny graph and model that run in seconds")
    p.add_argument("--saint-graph", action="store_true",
                   help="write the graph as a GraphSAINT directory, prepare it, and train P ranks from the prepared "
                        "directory (and P = 1 from the SAINT files, as `mggcn train DIR --format saint`); defaults: "
                        "100,000 vertices, degree 50 (5.0M nonzeros), P = 1,2,4, partition random-local (as mggcn "
                        "train), 1+3 epochs (with --small, --small's defaults instead, all of them)")
    p.add_argument("--nodes", type=positive_int, help=f"vertices (default {d.nodes:,})")
    p.add_argument("--degree", type=float, help=f"mean degree: nonzeros = nodes x degree (default {d.degree:g})")
    p.add_argument("--features", type=positive_int, help=f"default {d.features}")
    p.add_argument("--classes", type=positive_int, help=f"default {d.classes}")
    _add_model_arguments(p)
    p.add_argument("--epochs", type=positive_int, help=f"timed epochs after the warm-up (default {d.epochs})")
    p.add_argument("--warmup", type=int, help=f"untimed epochs first (default {d.warmup})")
    p.add_argument("--repeats", type=positive_int,
                   help="rounds over the mggcn configurations, interleaved; each row reports the median round "
                        f"(default {d.repeats})")
    p.add_argument("--repeat-pyg", action="store_true", default=None,
                   help="PyG in every round too, not only the first (--saint-graph does)")
    p.add_argument("--threads", type=positive_int, help="CPU threads per configuration (default: the cores)")
    p.add_argument("--nprocs", type=int_list, help="process counts to run (default 1,2)")
    p.add_argument("--partition", dest="partitions", type=orderings,
                   help="orderings, the first being the main one (default random-local,random)")
    p.add_argument("--ids", choices=("clustered", "random"), help="vertex ids of the graph (default clustered)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default cpu")
    p.add_argument("--no-pyg", dest="pyg", action="store_false", default=None, help="skip the PyG baseline")
    p.add_argument("--pyg-adj", choices=bench.PYG_ADJ,
                   help="what PyG's GCNConv (SAGEConv, GINConv) is given (default csr)")
    p.add_argument("--seed", type=int, help="seeds the graph and the weights (default 0)")
    p.add_argument("--graph-cache", type=path_arg, metavar="DIR",
                   help="a directory holding the graph, prepared (with --saint-graph: GraphSAINT's files): reused "
                        "when it exists, written when not")
    p.add_argument("--timeout", dest="timeout_s", type=float, help="seconds per configuration (default 3600)")
    p.add_argument("--mmap-threshold", type=mmap_threshold_size,
                   help="one glibc M_MMAP_THRESHOLD for every configuration, e.g. 1M (0: glibc's dynamic one); "
                        "default: mggcn 1M, PyG glibc's")
    p.add_argument("--tile-bytes", type=byte_size,
                   help="mggcn's --tile-bytes for every mggcn configuration (0: untiled)")
    p.add_argument("--compare-tiles", type=byte_sizes,
                   help="more --tile-bytes values, e.g. 0,1M: each also runs at P = 1 for every --partition")
    p.add_argument("--shm", choices=SHM_MODES, help="mggcn's --shm for every mggcn configuration (default auto)")
    p.add_argument("--compare-shm", action="store_true", default=None,
                   help="also run P > 1 through gloo's broadcast (--shm off), overlap on and off, in the same rounds")
    p.add_argument("--gpu-memory", metavar="SIZE",
                   help="with --device cuda: each configuration's process may allocate at most SIZE (e.g. 64G) of "
                        "its GPU; a configuration that needs more is an out-of-memory row")
    p.add_argument("--host-memory", metavar="SIZE",
                   help="with --device cpu: each configuration's process (every rank) may hold at most SIZE (e.g. "
                        "8G) of private memory (RLIMIT_DATA; memory-mapped files and shared memory are outside it)")
    p.add_argument("--out", type=path_arg, help="write the report as JSON")


def check_pyg(pyg: bool) -> None:
    """The PyG baseline runs in a process of its own, late: that torch-geometric is missing is said before anything
    runs (in one line, naming the extra that installs it), unless --no-pyg leaves the baseline out."""
    if pyg:
        from mggcn.utils.optional import require

        require("torch_geometric", "bench", "the PyG baseline", hint="or leave it out: --no-pyg")


def _modified(path: str | None) -> int | None:
    """When ``path`` was last written (ns), None when there is none."""
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None


def run(args: argparse.Namespace) -> int:
    from mggcn.distributed.launch import JobInterrupted, WorkerError
    from mggcn.tools.bench import format_table, options_from, run_bench

    keys = ("model", "nodes", "degree", "features", "classes", "hidden", "epochs", "warmup", "repeats", "repeat_pyg",
            "threads", "nprocs", "partitions", "ids", "device", "pyg", "pyg_adj", "seed", "graph_cache", "timeout_s",
            "mmap_threshold", "tile_bytes", "compare_tiles", "shm", "compare_shm", "gpu_memory", "host_memory",
            "heads", "gin_mlp_batch_norm", "precision", "compare_precision")
    opts = options_from(args.small, saint=args.saint_graph, **{k: getattr(args, k) for k in keys})
    check_pyg(opts.pyg)
    before = _modified(args.out)  # a report there before this run is not "the report so far"
    try:  # with --out, the report is written as it grows and before the table is printed
        report = run_bench(opts, log=lambda line: print(line, flush=True), out=args.out,
                           command=getattr(args, "command_line", None))
    except (KeyboardInterrupt, JobInterrupted):  # a signal in any step, the workers' too: the report so far stays,
        # marked so, which a later reader must not take for a whole one
        saved = f" (the report so far, \"complete\": false: {args.out})" if _modified(args.out) != before else ""
        print(f"mggcn bench: interrupted{saved}", file=sys.stderr)
        return 130
    except WorkerError as err:  # a step every configuration needs (the graph) failed: the report names it
        saved = f" (the report so far: {args.out})" if args.out else ""
        print(f"mggcn bench: error: {err}{saved}", file=sys.stderr)
        return 1
    print(format_table(report))
    # running out of memory is a result (a row); an mggcn configuration that fails otherwise, or no row, is not
    failed = [f["name"] for f in report["failed"] if f.get("kind") == "mggcn" and not f.get("oom")]
    if failed or not report["rows"]:
        print(f"mggcn bench: failed: {', '.join(failed) or 'every configuration'}", file=sys.stderr)
        return 1
    return 0
