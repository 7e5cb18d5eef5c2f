"""Every option of ``mggcn bench`` and its default, in one place, and the presets ``--small`` and ``--saint-graph``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mggcn.config import TrainConfig
from mggcn.utils.errors import ConfigError
from mggcn.utils.units import parse_bytes

__all__ = ["BenchOptions", "SMALL", "SAINT", "PYG_ADJ", "IDS", "model_settings", "options_from"]

PYG_ADJ = ("csr", "csr64", "edge_index")
IDS = ("clustered", "random")


@dataclass(frozen=True)
class BenchOptions:
    """Every option of ``mggcn bench`` and its default, in one place."""

    nodes: int = 200_000
    degree: float = 100.0  # mean degree: nonzeros of A = nodes · degree
    features: int = 128
    classes: int = 40
    hidden: tuple[int, ...] = (128,)
    model: str = "gcn"  # gcn, sage, gin or gat (mggcn.nn.models), against PyG's GCNConv, GraphSAGE, GIN or GAT
    heads: int = 8  # GAT's attention heads per layer
    gin_mlp_batch_norm: bool = False  # GIN's MLPs with a batch norm (PyG's GINConv(MLP(..., norm="batch_norm")) too)
    precision: str = "fp32"  # mggcn's --precision for every mggcn configuration
    compare_precision: tuple[str, ...] = ()  # more precisions, each run at every P of the main partition
    epochs: int = 8  # timed epochs, after the warm-up
    warmup: int = 2
    repeats: int = 1  # rounds over the mggcn configurations, interleaved (their medians are reported)
    repeat_pyg: bool = False  # PyG in every round too (its median round is then the ratios' denominator)
    threads: int | None = None  # per configuration (P ranks get threads // P each); default: the cores
    nprocs: tuple[int, ...] = (1, 2)
    partitions: tuple[str, ...] = ("random-local", "random")  # the first is the main one
    ids: str = "clustered"
    device: str = "cpu"
    pyg: bool = True
    pyg_adj: str = "csr"
    seed: int = 0
    graph_cache: str | None = None  # a prepared directory to reuse (written when missing); --saint-graph: SAINT's
    timeout_s: float = 3600.0
    mmap_threshold: int | None = None  # for every configuration (0: glibc's dynamic one); None: each its default
    tile_bytes: int | None = None  # mggcn's --tile-bytes (None: its default; 0: untiled blocks)
    compare_tiles: tuple[int, ...] = ()  # more --tile-bytes values, each run at P = 1 for every partition
    shm: str = "auto"  # mggcn's --shm for every mggcn configuration
    compare_shm: bool = False  # also run P > 1 through gloo's broadcast (overlap on and off), in the same rounds
    saint_graph: bool = False  # the graph as a GraphSAINT directory, prepared once; see the package docstring
    probe_gemm: int = 4096  # the machine's rates: a probe_gemm² matmul and a probe_copy-byte copy (x2, x4 on CUDA)
    probe_copy: int = 512 << 20
    gpu_memory: int | None = None  # bytes each configuration's process may allocate on its GPU (None: all)
    host_memory: int | None = None  # RLIMIT_DATA of each configuration's process on a CPU run (None: none)

    @property
    def dims(self) -> list[int]:
        return [self.features, *self.hidden, self.classes]


SMALL = BenchOptions(nodes=3000, degree=10.0, features=32, classes=4, hidden=(16,), epochs=3, warmup=1,
                     probe_gemm=1024, probe_copy=64 << 20)
# --saint-graph: issue 17's graph (100k vertices, 5.0M nonzeros of A, 128 features, 40 classes) in GraphSAINT's
# layout, at P = 1, 2, 4 against PyG, in mggcn train's order; few epochs (the whole-process peak is reached in the
# first)
SAINT = BenchOptions(nodes=100_000, degree=50.0, epochs=3, warmup=1, nprocs=(1, 2, 4),
                     partitions=(TrainConfig.partition,),
                     saint_graph=True, repeats=3, repeat_pyg=True)


def model_settings(opts: BenchOptions) -> dict:
    """The models' own settings the bench offers, as :class:`~mggcn.config.TrainConfig` fields: every mggcn and PyG
    configuration, and the plan, train the model with them."""
    return {"heads": opts.heads, "gin_mlp_batch_norm": opts.gin_mlp_batch_norm}


_RUN_LISTS = ("nprocs", "partitions", "compare_tiles", "compare_precision")  # lists of the configurations to run


def options_from(small: bool = False, saint: bool = False, **overrides) -> BenchOptions:
    """The defaults (or :data:`SMALL`, or :data:`SAINT`; ``small`` and ``saint``: the small graph in GraphSAINT's
    layout) with the given options replaced (``None`` keeps the default). ``gpu_memory`` and ``host_memory`` may be
    given as text (``64G``)."""
    base = replace(SMALL, saint_graph=saint) if small else SAINT if saint else BenchOptions()
    for key in ("gpu_memory", "host_memory"):
        if overrides.get(key) is not None:
            overrides[key] = parse_bytes(overrides[key], key)
    for key in _RUN_LISTS:  # a value given twice would run its configuration twice, under the same name
        if overrides.get(key) is not None:
            overrides[key] = tuple(dict.fromkeys(overrides[key]))
    opts = replace(base, **{k: v for k, v in overrides.items() if v is not None})
    from mggcn.nn.models import MODEL_TYPES, models_taking  # torch: not for the command line's --help

    kind = MODEL_TYPES.get(opts.model)
    if kind is None:
        raise ConfigError(f"model must be one of {', '.join(MODEL_TYPES)}, got '{opts.model}'", "model")
    if kind.pyg_one_hidden_width and opts.pyg and len(set(opts.hidden)) > 1:
        raise ConfigError(f"model {opts.model}: PyG's {kind.pyg_name} has one hidden width, got hidden="
                          f"{','.join(map(str, opts.hidden))} (or give pyg=False)", "model")
    for option, value in model_settings(opts).items():
        if value != getattr(BenchOptions, option) and option not in kind.options:
            raise ConfigError(f"{option} is for model {models_taking(option)}, not {opts.model}", option)
    if opts.ids not in IDS:
        raise ConfigError(f"ids must be one of {', '.join(IDS)}, got '{opts.ids}'", "ids")
    from mggcn.training.settings import check_timeout, seed_limit  # train's limits: the bench trains the same way

    if isinstance(opts.seed, bool) or not isinstance(opts.seed, int) or not 0 <= opts.seed <= seed_limit():
        raise ConfigError(f"seed must be an integer from 0 to {seed_limit()}, got {opts.seed!r}", "seed")
    check_timeout(opts.timeout_s)
    _check_graph(opts)
    _check_runs(opts)
    _check_caps(opts)
    return opts


def _check_graph(opts: BenchOptions) -> None:
    """Sizes the generator can make (it would fail, or silently make fewer nonzeros, only after the bench began)."""
    if isinstance(opts.nodes, bool) or not isinstance(opts.nodes, int) or opts.nodes < 2:
        raise ConfigError(f"nodes must be an integer of at least 2, got {opts.nodes!r}", "nodes")
    if not 0 < opts.degree <= opts.nodes - 1:  # also refuses nan
        raise ConfigError(f"degree must be more than 0 and at most nodes - 1 = {opts.nodes - 1} (nonzeros of A = "
                          f"nodes x degree, no self loops), got {opts.degree}", "degree")
    if opts.classes > opts.nodes:
        raise ConfigError(f"classes {opts.classes}: more than the {opts.nodes} vertices", "classes")
    if max(opts.nprocs) > opts.nodes:
        raise ConfigError(f"nprocs {max(opts.nprocs)} is larger than the graph's {opts.nodes} vertices", "nprocs")
    from mggcn.data.generators.spec import physical_memory

    need = opts.nodes * (4 * opts.features + 36) + int(opts.nodes * opts.degree) * 8  # its features, ids and keys
    memory = physical_memory()
    if memory is not None and need > memory:
        raise ConfigError(f"nodes {opts.nodes:,} with features {opts.features:,} and degree {opts.degree:g}: the "
                          f"graph would take about {need / 2**30:,.1f} GiB, more than this machine's "
                          f"{memory / 2**30:,.1f} GiB", "nodes")


def _check_runs(opts: BenchOptions) -> None:
    """What every configuration would refuse on its own, one at a time, after the graph was made: the model's
    settings, the epochs, the threads."""
    from mggcn.training.job import check_threads
    from mggcn.training.settings import check_config

    check_config(TrainConfig(model=opts.model, hidden=opts.hidden, epochs=opts.epochs, precision=opts.precision,
                             tile_bytes=opts.tile_bytes, **model_settings(opts)))
    if isinstance(opts.warmup, bool) or not isinstance(opts.warmup, int) or opts.warmup < 0:
        raise ConfigError(f"warmup must be an integer of at least 0, got {opts.warmup!r}", "warmup")
    if opts.epochs < 1:
        raise ConfigError(f"epochs must be at least 1 (the timed epochs), got {opts.epochs}", "epochs")
    check_threads(opts.threads)
    from mggcn.training.settings import check_model_size

    check_model_size(TrainConfig(model=opts.model, hidden=opts.hidden, **model_settings(opts)), opts.features,
                     opts.classes, opts.nodes, max(opts.nprocs))


def _check_caps(opts: BenchOptions) -> None:
    """What can be said of the memory caps without a GPU at hand (the GPU's size is checked by the bench)."""
    if opts.gpu_memory is not None and opts.device != "cuda":
        raise ConfigError(f"gpu_memory caps a GPU's memory: give device=cuda (the device is {opts.device})",
                          "gpu_memory")
    if opts.host_memory is not None and opts.device != "cpu":
        raise ConfigError("host_memory caps a CPU run (a CUDA process reserves host address space far beyond what "
                          "it uses): give device=cpu, or gpu_memory=", "host_memory")
    for key in ("gpu_memory", "host_memory"):
        if getattr(opts, key) == 0:
            raise ConfigError(f"{key} must be more than 0", key)
        if getattr(opts, key) is not None and getattr(opts, key) >= 2**63:  # beyond what a limit can say
            raise ConfigError(f"{key} must be less than 8 EiB, got {getattr(opts, key):,} bytes", key)
