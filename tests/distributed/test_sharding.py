"""build_shard's chunks, threads and sort keys: the shard is the same whatever cuts the work.

The rows are read in chunks, batches of chunks built on the rank's threads and placed in chunk order, each chunk's
entries sorted as int64 keys that carry their column's degree where it fits: none of these may change a bit of the
shard (blocks, tiles, their index dtypes, which blocks are shared) nor which error damaged data raises.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mggcn.data.datasets import InMemoryDataset
from mggcn.data.prepared.reader import PreparedDataset
from mggcn.data.prepared.writer import prepare
from mggcn.distributed import sharding
from mggcn.distributed.partition import make_partition
from mggcn.distributed.sharding import build_shard, partition_dataset
from mggcn.nn.norm import adjacency, entry_values, normalize
from mggcn.utils import parallel
from mggcn.utils.errors import GraphError
from reference import random_graph


def _tensors(shard) -> list:
    """Every tensor of ``shard`` with its dtype, and which backward blocks are the forward ones."""
    out = [[t.crow_indices(), t.col_indices(), t.values()] for block in shard.adj + shard.adj_t for t in block.tiles]
    out.append([b.starts for b in shard.adj + shard.adj_t])
    out.append([a is t for a, t in zip(shard.adj, shard.adj_t)])
    return out + [shard.x, shard.y, *shard.masks.values()]


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def _graph(directed: bool):
    """Parallel edges (500 vertices, 6,000 edges), self loops, and a vertex 7 with no edge at all."""
    graph = random_graph(500, 6000, features=4, classes=3, directed=directed, seed=5)
    graph.edge_index = graph.edge_index[:, (graph.edge_index != 7).all(axis=0)]
    return graph


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharding")
    out = {}
    for directed in (True, False):
        graph = _graph(directed)
        out[f"memory-{directed}"] = InMemoryDataset(graph)
        out[f"prepared-{directed}"] = PreparedDataset(prepare(graph, root / f"p{directed}", progress=False))
    return out


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of ~200 edges, on 3 threads from 2 chunks up, 2 chunks per thread in a batch: many batches."""
    monkeypatch.setattr(sharding, "SHARD_CHUNK_EDGES", 200)
    monkeypatch.setattr(sharding, "MIN_CHUNK_EDGES", 64)
    monkeypatch.setattr(sharding, "THREAD_CHUNK_EDGES", 0)
    monkeypatch.setattr(sharding, "BATCH_CHUNKS", 2)
    threads = parallel.configured_threads()
    yield
    parallel.set_threads(threads)


@pytest.mark.parametrize("kind", ["memory-True", "memory-False", "prepared-True", "prepared-False"])
@pytest.mark.parametrize("norm", ["sym", "mean", "in-mean", "sum"])
def test_shard_is_the_same_whatever_the_threads_chunks_and_keys(datasets, small_chunks, monkeypatch, kind, norm):
    """One thread on chunks of a few hundred edges, against 3 threads on chunks of ~100 (several batches), and
    against keys without the degrees (as when they do not fit in 63 bits): P = 1 and 3 (padding rows), blocks whole
    and in tiles."""
    dataset = datasets[kind]
    for parts, tile_cols in ((1, None), (3, None), (3, 50)):
        part = partition_dataset(dataset, parts, 0, "random-local" if parts == 1 else "random")
        shards = {}
        for case, (threads, chunk, key_bits) in {"one": (1, 1 << 10, 63), "three": (3, 200, 63),
                                                  "no-degrees": (3, 200, 0)}.items():
            parallel.set_threads(threads)
            monkeypatch.setattr(sharding, "SHARD_CHUNK_EDGES", chunk)
            monkeypatch.setattr(sharding, "KEY_BITS", key_bits)
            shards[case] = [_tensors(build_shard(dataset, part, rank, norm, tile_cols)) for rank in range(parts)]
        assert _equal(shards["three"], shards["one"]), (parts, tile_cols)
        assert _equal(shards["no-degrees"], shards["one"]), (parts, tile_cols)


@pytest.mark.parametrize("norm", ["sym", "mean", "in-mean", "sum"])
def test_symmetric_graph_blocks_are_the_normalized_adjacency_and_its_transpose(norm):
    """A symmetric A (parallel edges, self loops): the rows of A serve as the rows of Aᵀ, weighted both ways; Âᵀ's
    blocks are exactly the transpose of mggcn.nn.norm's Â, also where Â's values are kept once (sym: a product of
    two factors, the same either way where an entry counts one edge)."""
    graph = _graph(directed=False)
    dataset = InMemoryDataset(graph)
    assert dataset.symmetric
    exact = normalize(adjacency(graph.edge_index, graph.num_nodes), norm).toarray()
    for parts in (1, 2):
        part = make_partition(graph.num_nodes, parts, seed=3, ordering="none")
        m = part.rows_per_part
        for rank in range(parts):
            shard = build_shard(dataset, part, rank, norm, tile_cols=64)
            rows = part.order[part.rows(rank)]
            real = rows >= 0
            for j in range(parts):
                cols = part.order[j * m:(j + 1) * m]
                ok = np.ix_(np.flatnonzero(real), np.flatnonzero(cols >= 0))
                want = exact[np.ix_(rows[real], cols[cols >= 0])]
                np.testing.assert_array_equal(shard.adj[j].to_scipy().toarray()[ok], want)
                np.testing.assert_array_equal(shard.adj_t[j].to_scipy().toarray()[ok],
                                              exact.T[np.ix_(rows[real], cols[cols >= 0])])


def test_sym_values_of_one_edge_do_not_depend_on_the_order_of_the_degrees():
    """What the symmetric case relies on to keep Â's values for Âᵀ where an entry counts one edge."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(1, 1 << 40, 100_000), rng.integers(1, 1 << 40, 100_000)
    ones = np.ones(a.size, dtype=np.int64)
    np.testing.assert_array_equal(entry_values(ones, a, b, "sym"), entry_values(ones, b, a, "sym"))


def test_the_first_damage_in_row_order_is_reported_whatever_the_threads(tmp_path, small_chunks):
    """Two out-of-range ids in in_indices, one in an early chunk and one in a late one: the early one is named,
    with one thread or three."""
    graph = _graph(directed=True)
    root = prepare(graph, tmp_path / "p", progress=False)
    indices = np.load(root / "in_indices.npy")
    indices[10], indices[-10] = -5, 10**6
    np.save(root / "in_indices.npy", indices)
    dataset = PreparedDataset(root)
    part = make_partition(graph.num_nodes, 1, 0, "none")
    for threads in (1, 3):
        parallel.set_threads(threads)
        with pytest.raises(GraphError, match=r"vertex id -5 is out of range \[0, 500\)"):
            build_shard(dataset, part, 0, "sym")
