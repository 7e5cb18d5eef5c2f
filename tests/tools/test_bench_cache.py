"""``mggcn bench --graph-cache DIR``: the graph is written in a partial directory beside DIR and renamed into place. A
bench killed while writing it (SIGKILL, the OOM killer: no cleanup runs) leaves that partial directory behind; the
next bench using DIR removes it, and never the partial directory of a bench that is still writing (another process,
alive)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from mggcn.tools import bench
from mggcn.tools.bench import run as bench_run

# A bench's graph worker for DIR (argv[2]), stopped halfway through writing the graph (``saint-*``: GraphSAINT files,
# ``prepared-*``: a prepared directory): ``*-killed`` kills itself there, ``*-live`` says "ready" and waits there
# until its stdin closes.
_WRITER = """
import os, signal, sys
from mggcn.tools.bench import graph, options

how, cache = sys.argv[1], sys.argv[2]


def stop():
    if how.endswith("killed"):
        os.kill(os.getpid(), signal.SIGKILL)
    print("ready", flush=True)
    sys.stdin.read()
    os.kill(os.getpid(), signal.SIGKILL)


if how.startswith("saint"):
    from mggcn.data.formats import saint

    def write_saint(g, root):
        os.makedirs(root, exist_ok=True)
        open(os.path.join(root, "adj_full.npz"), "wb").close()
        stop()

    saint.write_saint = write_saint
else:
    from mggcn.data.prepared.edgesort import NpyWriter

    close = NpyWriter.close

    def closed(self):
        close(self)
        stop()

    NpyWriter.close = closed
opts = options.options_from(small=True, saint=how.startswith("saint"), graph_cache=cache, nodes=400, degree=4.0)
graph.generate_worker(opts, cache, 1)
"""


def _writer(how: str, cache) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WRITER, how, str(cache)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _graph_step(cache, saint: bool, tmp_path) -> dict:
    opts = bench.options_from(small=True, saint=saint, graph_cache=str(cache), nodes=400, degree=4.0)
    report = {}
    bench_run._graph_step(opts, 1, str(tmp_path / "work"), lambda line: None, report)
    return report["graph"]


@pytest.mark.parametrize("kind", ["saint", "prepared"])
def test_the_partial_cache_of_a_killed_bench_is_removed_and_a_live_ones_kept(kind, tmp_path, in_process):
    parent = tmp_path / "caches"
    parent.mkdir()
    (tmp_path / "work").mkdir()
    cache = parent / "g"
    killed = _writer(f"{kind}-killed", cache)
    _, err = killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL, err
    (dead,) = os.listdir(parent)
    assert dead.startswith(".g.")
    live = _writer(f"{kind}-live", cache)
    try:
        assert live.stdout.readline() == "ready\n", live.stderr.read()
        (alive,) = set(os.listdir(parent)) - {dead}
        assert not _graph_step(cache, kind == "saint", tmp_path)["cached"]
        assert sorted(os.listdir(parent)) == sorted([alive, "g"])  # the killed bench's partial, and only it, gone
    finally:
        live.kill()
        live.communicate(timeout=60)
    assert _graph_step(cache, kind == "saint", tmp_path)["cached"]  # reused; its writer gone, the partial too
    assert os.listdir(parent) == ["g"]
