"""Generated and built-in datasets, one module per job: :mod:`.community` (the DC-SBM, ``synthetic:``),
:mod:`.rmat` (R-MAT, ``rmat:``), :mod:`.builtin` (karate, digits), :mod:`.common` (what they share: the graph of
drawn pairs, splits, features, labels) and :mod:`.spec` (the ``DATASET`` spec strings that name them).

Every generator draws its edges and features in blocks, each from a generator seeded by ``(seed, block)``, on every
core at once: a seed gives the same dataset whatever the thread count.
"""

from mggcn.data.generators.builtin import digits_graph, karate_graph
from mggcn.data.generators.common import GeneratedGraph, GraphStream
from mggcn.data.generators.community import community_graph, community_stream
from mggcn.data.generators.rmat import rmat_edges, rmat_graph, rmat_stream
from mggcn.data.generators.spec import (
    GENERATED_PREFIXES,
    SPEC_PREFIXES,
    generate_spec,
    is_generated,
    parse_spec,
    stream_spec,
)

__all__ = ["GENERATED_PREFIXES", "SPEC_PREFIXES", "GeneratedGraph", "GraphStream", "community_graph",
           "community_stream", "digits_graph", "generate_spec", "is_generated", "karate_graph", "parse_spec",
           "rmat_edges", "rmat_graph", "rmat_stream", "stream_spec"]
