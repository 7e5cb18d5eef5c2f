"""The ``DATASET`` spec strings that name generated and built-in datasets: ``synthetic[:...]``, ``rmat:...``,
``builtin:karate``, ``builtin:digits``.

:func:`generate_spec` builds the dataset a spec names (:class:`~mggcn.data.generators.common.GeneratedGraph`: its
CSR and vertex data, what ``mggcn train`` trains on); :func:`parse_spec` the same as a validated
:class:`~mggcn.data.graph.Graph`; :func:`stream_spec` a :class:`~mggcn.data.generators.common.GraphStream` that
``mggcn prepare`` writes to disk chunk by chunk, at sizes that do not fit in memory.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable

from mggcn.data.csr import MAX_KEY_NODES
from mggcn.data.generators.builtin import DIGITS_NODES, digits_generated, karate_generated
from mggcn.data.generators.common import GeneratedGraph, GraphStream
from mggcn.data.generators.community import (
    DEFAULT_CLASSES,
    DEFAULT_DEGREE,
    DEFAULT_FEATURES,
    DEFAULT_NODES,
    community_generated,
    community_stream,
)
from mggcn.data.generators.rmat import MAX_MEMORY_SCALE, rmat_generated, rmat_stream
from mggcn.data.graph import Graph
from mggcn.utils.errors import GraphError

__all__ = ["BUILTINS", "GENERATED_PREFIXES", "SPEC_PREFIXES", "is_generated", "generate_spec", "parse_spec",
           "physical_memory", "stream_spec"]


def _pos_int(spec: str, key: str, value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        v = 0
    if v < 1:
        raise GraphError(f"{spec}: {key} must be a positive integer, got {value!r}")
    return v


def _nonneg_int(spec: str, key: str, value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        v = -1
    if v < 0:
        raise GraphError(f"{spec}: {key} must be a non-negative integer, got {value!r}")
    return v


def _float_in(lo: float, hi: float, lo_open: bool = False) -> Callable[[str, str, str], float]:
    def parse(spec: str, key: str, value: str) -> float:
        try:
            v = float(value)
        except ValueError:
            v = float("nan")
        ok = (v > lo if lo_open else v >= lo) and v <= hi and math.isfinite(v)  # NaN fails every comparison
        if not ok:
            rng = f"{'(' if lo_open else '['}{lo}, {'inf)' if math.isinf(hi) else f'{hi}]'}"
            raise GraphError(f"{spec}: {key} must be a number in {rng}, got {value!r}")
        return v
    return parse


_Parser = Callable[[str, str, str], object]

# spec key -> (keyword argument, parser)
_SYNTHETIC_KEYS: dict[str, tuple[str, _Parser]] = {
    "n": ("num_nodes", _pos_int),
    "classes": ("num_classes", _pos_int),
    "features": ("num_features", _pos_int),
    "degree": ("avg_degree", _float_in(0.0, float("inf"), lo_open=True)),
    "seed": ("seed", _nonneg_int),
    "p_in": ("p_in", _float_in(0.0, 1.0)),
    "noise": ("noise", _float_in(0.0, float("inf"))),
    "exponent": ("degree_exponent", _float_in(2.0, float("inf"), lo_open=True)),
}
_RMAT_KEYS: dict[str, tuple[str, _Parser]] = {
    "scale": ("scale", _pos_int),
    "edge_factor": ("edge_factor", _pos_int),
    "seed": ("seed", _nonneg_int),
    "classes": ("num_classes", _pos_int),
    "features": ("num_features", _pos_int),
    "noise": ("noise", _float_in(0.0, float("inf"))),
    "a": ("a", _float_in(0.0, 1.0)),
    "b": ("b", _float_in(0.0, 1.0)),
    "c": ("c", _float_in(0.0, 1.0)),
}
_DIGITS_KEYS: dict[str, tuple[str, _Parser]] = {"k": ("k", _pos_int), "seed": ("seed", _nonneg_int)}
_KARATE_KEYS: dict[str, tuple[str, _Parser]] = {"seed": ("seed", _nonneg_int)}

# The one list of dataset specs that need no file: their first words, and the full forms an error lists.
BUILTINS = ("karate", "digits")
GENERATED_PREFIXES = ("synthetic", "rmat", "builtin")
SPEC_PREFIXES = ("synthetic", "rmat") + tuple(f"builtin:{name}" for name in BUILTINS)


def is_generated(spec: str) -> bool:
    """Whether ``spec`` names a generated or built-in dataset (``synthetic...``, ``rmat...``, ``builtin:...``)."""
    return spec.strip().split(":", 1)[0] in GENERATED_PREFIXES



def _options(spec: str, text: str, keys: dict[str, tuple[str, _Parser]]) -> dict[str, object]:
    """``"k1=v1,k2=v2"`` -> keyword arguments, each value parsed and checked; errors name the spec and the key."""
    out: dict[str, object] = {}
    items = [s.strip() for s in text.split(",")]
    if items[-1] == "":
        items.pop()  # a trailing comma, as Python's lists allow
    for item in items:
        if not item:
            raise GraphError(f"{spec}: an empty item between commas (write key=value,key=value)")
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key not in keys:
            raise GraphError(f"{spec}: unknown key '{key}' (known: {', '.join(keys)})")
        if not eq or not value:
            raise GraphError(f"{spec}: {key} needs a value, as in {key}=...")
        kwarg, parse = keys[key]
        if kwarg in out:
            raise GraphError(f"{spec}: {key} is given twice")
        out[kwarg] = parse(spec, key, value)
    return out


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


# Bytes per vertex that a streamed dataset holds in memory (labels, communities or degrees, weights, split), and
# that an in-memory one holds besides its features (labels, row offsets, degrees, split codes and masks).
_STREAM_VERTEX_BYTES = 32
_MEMORY_VERTEX_BYTES = 36


def _check_size(spec: str, keys: str, n: int, features: int, edges: int, stream: bool) -> None:
    """Refuse, before anything is allocated, sizes beyond the int64 keys ``row · n + col`` the in-memory CSR is sorted
    by, or whose final arrays alone (no temporaries counted) would exceed this machine's memory. ``edges``: about the
    directed edges (both directions of each undirected pair)."""
    if not stream and n > MAX_KEY_NODES:
        raise GraphError(f"{spec}: {keys.split(',')[0]} = {n:,} vertices is beyond the {MAX_KEY_NODES:,} that an "
                         "in-memory graph's int64 edge keys can index")
    if stream:  # the edges go to disk chunk by chunk: only the vertex count matters
        keys, need = keys.split(",")[0], n * _STREAM_VERTEX_BYTES
        what = f"the per-vertex arrays of {n:,} vertices"
    else:
        need = n * (4 * features + _MEMORY_VERTEX_BYTES) + edges * (4 if n < 2**31 else 8)
        what = f"the arrays of {n:,} vertices, {features:,} features and {edges:,} directed edges"
    memory = physical_memory()
    if memory is not None and need > memory:
        raise GraphError(f"{spec}: too large for this machine ({keys}): {what} would take about "
                         f"{need / 2**30:,.1f} GiB, more than its {memory / 2**30:,.1f} GiB of memory")


def _synthetic_options(spec: str, rest: str, stream: bool = False) -> dict[str, object]:
    kw = _options(spec, rest, _SYNTHETIC_KEYS)
    n = kw.get("num_nodes", DEFAULT_NODES)
    if kw.get("num_classes", DEFAULT_CLASSES) > n:
        raise GraphError(f"{spec}: classes must not exceed n")
    if n < 2:
        raise GraphError(f"{spec}: n must be at least 2")
    pairs = min(int(round(kw.get("avg_degree", DEFAULT_DEGREE) * n / 2)), n * (n - 1) // 2)  # as community's
    _check_size(spec, "n, features, degree", n, kw.get("num_features", DEFAULT_FEATURES), 2 * pairs, stream)
    return kw


def _rmat_options(spec: str, rest: str, max_scale: int, stream: bool = False) -> dict[str, object]:
    kw = _options(spec, rest, _RMAT_KEYS)
    kw.setdefault("scale", 12)
    if kw["scale"] > max_scale:
        where = "for an in-memory graph (mggcn prepare streams larger ones)" if max_scale == MAX_MEMORY_SCALE else ""
        raise GraphError(f"{spec}: scale must be at most {max_scale} {where}".rstrip())
    if kw.get("a", 0.57) + kw.get("b", 0.19) + kw.get("c", 0.19) > 1.0:
        raise GraphError(f"{spec}: a + b + c must be at most 1")
    if kw.get("num_classes", 4) > 1 << kw["scale"]:
        raise GraphError(f"{spec}: classes must not exceed 2^scale")
    n = 1 << kw["scale"]
    _check_size(spec, "scale, edge_factor, features", n, kw.get("num_features", 16),
                kw.get("edge_factor", 16) * n, stream)  # draws: symmetrised, less duplicates and self loops
    return kw


def stream_spec(spec: str) -> GraphStream:
    """The :class:`GraphStream` of a ``synthetic:...`` or ``rmat:...`` spec (same keys as :func:`parse_spec`).

    ``rmat:`` streams :func:`rmat_graph`'s dataset exactly, at scales up to 40; ``synthetic:`` streams
    :func:`community_stream`, the same model as :func:`community_graph` with edges drawn block by block.
    """
    spec = spec.strip()
    head, _, rest = spec.partition(":")
    if head not in ("synthetic", "rmat"):
        raise GraphError(f"{spec}: only synthetic: and rmat: specs stream (builtin: datasets are small)")
    stream = (community_stream(**_synthetic_options(spec, rest, stream=True)) if head == "synthetic"
              else rmat_stream(**_rmat_options(spec, rest, max_scale=40, stream=True)))
    return dataclasses.replace(stream, name=spec)


def generate_spec(spec: str) -> GeneratedGraph:
    """Build the dataset a spec string names (forms: :func:`parse_spec`).

    Raises:
        GraphError: unknown prefix (the message lists the known ones), unknown key, or a bad value (the message names
            the spec and the key, e.g. ``"synthetic:n=abc: n must be a positive integer, got 'abc'"``).
    """
    spec = spec.strip()
    head, _, rest = spec.partition(":")
    if head == "synthetic":
        g = community_generated(**_synthetic_options(spec, rest))
    elif head == "rmat":
        g = rmat_generated(**_rmat_options(spec, rest, max_scale=MAX_MEMORY_SCALE))
    elif head == "builtin":
        name, _, opts = rest.partition(":")
        if name == BUILTINS[0]:
            g = karate_generated(**_options(spec, opts, _KARATE_KEYS))
        elif name == BUILTINS[1]:
            kw = _options(spec, opts, _DIGITS_KEYS)
            if kw.get("k", 10) >= DIGITS_NODES:
                raise GraphError(f"{spec}: k must be below the {DIGITS_NODES} vertices")
            g = digits_generated(**kw)
        else:
            raise GraphError(f"{spec}: unknown dataset spec (known: {', '.join(SPEC_PREFIXES)})")
    else:
        raise GraphError(f"{spec}: unknown dataset spec (known: {', '.join(SPEC_PREFIXES)})")
    g.name = spec
    return g


def parse_spec(spec: str) -> Graph:
    """Build the dataset a spec string names, as a :class:`Graph` that has passed :meth:`Graph.validate`.

    Forms (options are ``key=value`` pairs separated by commas, all optional):

    * ``synthetic[:n=,classes=,features=,degree=,seed=,p_in=,noise=,exponent=]`` —
      :func:`~mggcn.data.generators.community.community_graph`.
    * ``rmat[:scale=,edge_factor=,seed=,classes=,features=,noise=,a=,b=,c=]`` —
      :func:`~mggcn.data.generators.rmat.rmat_graph`, scale default 12.
    * ``builtin:karate[:seed=]`` — :func:`~mggcn.data.generators.builtin.karate_graph`.
    * ``builtin:digits[:k=,seed=]`` — :func:`~mggcn.data.generators.builtin.digits_graph`.

    Raises:
        GraphError: as :func:`generate_spec`.
    """
    return generate_spec(spec).to_graph()
