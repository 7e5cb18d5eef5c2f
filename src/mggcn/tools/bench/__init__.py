"""``mggcn bench``: mggcn at P = 1 and P = 2 (overlap on and off) against PyG's ``GCNConv``, on one graph, in one run.

``--model sage`` / ``gin`` trains GraphSAGE / GIN instead, against PyG's own ``GraphSAGE`` / ``GIN`` model (its
``SAGEConv`` / ``GINConv`` given the unweighted adjacency as a torch CSR, int32 or int64 indices by ``--pyg-adj``,
or the ``edge_index``), from the same initial weights.

The graph: a degree-corrected block model (:func:`mggcn.data.generators.community.community_generated`, blocks of
edges drawn on every core; ``nodes · degree`` nonzeros of A), generated once in a process of its own and written as
a prepared directory (:mod:`mggcn.data.prepared`: int32 CSR, float32 features; 4 bytes a nonzero where an int64 edge
list takes 16). ``--graph-cache DIR`` keeps it there: reused when DIR exists (refused when it holds another graph
than the options make: a prepared directory records them in its manifest, a GraphSAINT one in ``mggcn-bench.json``;
one the bench did not write is compared by its sizes). It is written in a partial directory beside DIR, locked while
its writer lives, and renamed into place: the partial directory of a bench that was killed is removed by the next
bench using DIR, never that of a bench still writing. mggcn's ranks open it as ``mggcn train DIR`` does, each
reading its share; PyG's process reads its arrays whole and forms its ``edge_index`` (source = ``in_indices``,
target = each entry's row) and the split masks. The generation's seconds and rate (nonzeros of Â per second) are
logged and reported.

Every configuration trains that graph with the same model, initial weights, epochs and thread count, each in fresh
processes of its own so that peak memories do not mix. Reported per configuration: the median epoch time after a
warm-up, the per-phase times, the setup time (to the first epoch), the test accuracy after the last epoch, the peak
resident memory, the floor of :mod:`mggcn.tools.roofline` (from the copy bandwidth and GEMM rate measured by the same
processes right after their epochs, all cores, the other ranks waiting) and the per-rank memory :mod:`mggcn.tools.plan`
predicts.

Setup: mggcn's is the time to its first epoch as ``mggcn train`` reports it, from right before a rank opens the
dataset (``dataset``, ``partition``, ``shard``, ``release``, then :func:`~mggcn.training.trainer.train_shard`'s
``device``, ``model``, ``A.X``; the bench's memory probe left out), the slowest rank's; PyG's runs from reading the
arrays to its first epoch (``read``, ``edge_index``, ``gcn_norm``, ``csr``, ``device``, ``model``, ``optimizer``).

Out of memory: a configuration whose process raises ``torch.cuda.OutOfMemoryError``, ``MemoryError`` or a
``RuntimeError`` saying an allocation failed, or is killed by SIGKILL (on Linux usually the out-of-memory killer),
is a row that says so (its numbers null, "-" in the table), for mggcn and PyG alike, and the bench goes on; ratios
against an out-of-memory PyG row are null. Other failures are listed in ``failed``. Caps (:mod:`.limits`):
``--gpu-memory SIZE`` lets each process allocate at most SIZE of its GPU (so that "fits in 64 GB" shows on a larger
GPU); ``--host-memory SIZE`` caps each process of a CPU run (RLIMIT_DATA).

Noise: on a shared machine the same run varies by 10-20% from one minute to the next. ``--repeats K`` runs the mggcn
configurations K times (PyG's too with ``--repeat-pyg``, as ``--saint-graph`` does: 3 rounds), round after round in
the same order, and reports each one's median round; the overlap
line gives the ratio off/on of every round, so a slow spell that hits one round hits both sides of its ratio. On CPU
with P > 1 the bench also measures a 16 MiB broadcast between two ranks: its rate and how busy it keeps the cores,
the room that overlapping communication with computation has on this machine. Ranks on one CPU host broadcast
through shared memory by default (:mod:`mggcn.distributed.shm`); ``--compare-shm`` runs P > 1 through gloo's broadcast
too. A rank's peak RSS then leaves out the pages of the other ranks' outboxes it reads (``peer_shm`` in the JSON): their
owners count them.

Memory: a process's peak RSS is its ``VmHWM`` (:mod:`.memory`). Each process records its RSS before it loads the
graph (the Python and PyTorch runtime: ``base``), builds what it trains on, frees the rest, then resets the peak
(``/proc/self/clear_refs``) so that ``peak`` is the peak while training; ``net = peak − base`` is what
:func:`mggcn.tools.plan.plan_memory` predicts. ``whole`` is the peak of the whole process, setup included (the larger
of the peak before the reset, ``setup_peak``, and the training peak), as a user of ``mggcn train`` sees it; beside it,
a process that only imports torch and mggcn is measured in the same run (the interpreter's baseline), and ``w/(p+b)``
= whole / (plan + that baseline). On CUDA the peak is ``torch.cuda.max_memory_allocated``.

``--saint-graph`` (issue 17's check): the benchmark writes its graph as a GraphSAINT directory (100k vertices, 5.0M
nonzeros, 128 features, 40 classes by default), prepares it once (``mggcn prepare``), and trains mggcn at
P = 1, 2, 4 with each rank reading its share of the prepared directory, plus P = 1 reading the SAINT files whole as
``mggcn train DIR --format saint`` does; PyG reads the SAINT files.

PyG's baseline is its fastest setup measured here: Â normalized once by PyG's ``gcn_norm`` (what ``cached=True``
does) into a ``torch.sparse_csr`` tensor with int32 indices (``--pyg-adj csr``); ``csr64`` keeps int64 indices,
``edge_index`` lets ``GCNConv(cached=True)`` gather and scatter ``E × d`` messages. ``SparseTensor`` needs
torch-sparse (not installed); PyG's ``EdgeIndex`` was 5-10× slower than the CSR and took 23 GB on the default graph.

Allocator: each configuration runs as it does by default. mggcn's ranks fix glibc's mmap threshold at 1 MiB
(:data:`mggcn.config.MMAP_THRESHOLD`: freed blocks go back to the system at once; an mggcn epoch allocates
nothing large, so this costs it no page faults); PyG runs under glibc's dynamic threshold, which keeps freed blocks of
up to 32 MiB in the heap and reuses them without page faults (PyG allocates its activations anew every epoch), at the
price of RSS above the live tensors. ``--mmap-threshold SIZE`` sets one threshold for every configuration (0: glibc's
dynamic one everywhere), to compare like with like.

Graph ids: ``--ids clustered`` (default) numbers the vertices community by community, as crawled and real datasets
often come with locality in their ids; ``--ids random`` keeps the generator's ids. ``--partition random-local`` keeps
that locality inside each part, ``random`` scatters it.

The report (``--out``, JSON): ``options``; ``graph`` (``nodes``, ``edges``, ``nnz`` of Â, ``features``,
``classes``, ``train``, ``generate_s``, ``write_s``, ``nnz_per_s``, ``cached``, ``baseline``); ``machine``;
``gpu_memory`` (with ``--gpu-memory``: ``cap`` and the GPUs' ``totals``); ``rows``, one per configuration: ``name``,
``kind``, ``nprocs``, ``oom``, ``epoch_s``, ``round_s``, ``epochs_s``, ``phases``, ``setup_s``, ``setup_phases``,
``test_acc``, ``loss``, ``peak``, ``net``, ``whole``, ``memory`` (per rank), ``floor``, ``over_floor``, the ratios
``time_vs_pyg``, ``setup_vs_pyg``, ``peak_vs_pyg``, ``net_vs_pyg``, ``whole_vs_pyg`` (null where either side has no
number), for mggcn ``predicted`` and its ratios; an out-of-memory row has ``oom: true``, ``error`` (the error line),
``round``, ``oom_during`` (``setup``, ``training``, or null when the process left no word) and null numbers; ``failed``
(other failures: ``name``, ``error``); ``overlap``; ``broadcast``; ``load_average``; ``complete``; ``error`` when the
bench stopped early. It is strict JSON: a number not measured (NaN or infinite: a phase no epoch recorded, a ratio of
such numbers, a loss that diverged) is null.

Modules: :mod:`.options` (every option and its default), :mod:`.memory` (RSS probes), :mod:`.limits` (caps, out of
memory), :mod:`.graph`, :mod:`.probes` (baseline, machine, broadcast), :mod:`.workers` (an mggcn rank),
:mod:`.pyg` (PyG's process), :mod:`.run` (configurations and rounds), :mod:`.summary` (rows, ratios),
:mod:`.table` (the table, the JSON).

    mggcn bench                                  # the default graph: 200k vertices, 20M nonzeros, ~5 minutes
    mggcn bench --small --out bench.json         # seconds
    mggcn bench --saint-graph                    # whole-process memory: a GraphSAINT graph, P = 1, 2, 4 and PyG
    mggcn bench --nprocs 1,2,4 --partition random-local
    mggcn bench --nprocs 2 --no-pyg --repeats 5           # overlap on/off in 5 interleaved rounds
    mggcn bench --nprocs 2 --no-pyg --compare-shm         # shared memory against gloo's broadcast
    mggcn bench --nprocs 1 --no-pyg --compare-tiles 0     # what column tiles buy: P = 1 untiled too
    mggcn bench --device cuda --nodes 20000000 --degree 50   # one GPU: P = 1 and PyG
    mggcn bench --device cuda --nprocs 1 --nodes 12000000 --degree 100 --graph-cache /tmp/g --gpu-memory 64G
"""

from __future__ import annotations

from mggcn.tools.bench.graph import bench_graph
from mggcn.tools.bench.memory import current_rss, peak_rss, release_memory, reset_peak_rss
from mggcn.tools.bench.options import PYG_ADJ, SAINT, SMALL, BenchOptions, options_from
from mggcn.tools.bench.run import run_bench
from mggcn.tools.bench.table import format_table, write_report

__all__ = ["BenchOptions", "SMALL", "SAINT", "PYG_ADJ", "options_from", "run_bench", "format_table", "write_report",
           "bench_graph", "peak_rss", "current_rss", "reset_peak_rss", "release_memory"]

_release_memory = release_memory  # the name tests/workers.py imports
