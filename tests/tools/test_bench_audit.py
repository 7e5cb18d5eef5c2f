"""`mggcn bench` and `mggcn plan` at their edges: a cached graph that other options made, a cache that cannot be
written or was half written, options the generator or every configuration would refuse only after the bench began,
a `--memory` of no bytes, and tables of reports with nothing measured."""

from __future__ import annotations

import json
import os

import pytest

from mggcn.tools import bench
from mggcn.tools.bench import graph as bench_graph
from mggcn.tools.bench import run as bench_run
from mggcn.tools.bench.table import format_markdown, format_table
from mggcn.tools.cli import main
from mggcn.utils.errors import ConfigError
from mggcn.utils.parallel import available_cores
from script_modules import load_script


def _saint(cache, **overrides):
    return bench.options_from(small=True, saint=True, graph_cache=str(cache), **{"nodes": 400, "degree": 4.0,
                                                                                **overrides})


def _graph_step(opts, tmp_path):
    report = {}
    bench_run._graph_step(opts, 1, str(tmp_path), lambda line: None, report)
    return report["graph"]


def test_a_saint_graph_cache_of_other_options_is_refused(tmp_path, in_process):
    cache = tmp_path / "saint"
    assert not _graph_step(_saint(cache), tmp_path)["cached"]
    assert _graph_step(_saint(cache), tmp_path)["cached"]  # the same options: reused
    for option, value in (("nodes", 500), ("degree", 5.0), ("features", 16), ("classes", 3), ("seed", 1),
                          ("ids", "random")):
        with pytest.raises(ConfigError, match=f"graph_cache: {cache} holds the graph of .*{option}") as err:
            _graph_step(_saint(cache, **{option: value}), tmp_path)
        assert err.value.option == "graph_cache"
    # a GraphSAINT directory the bench did not write: compared by its sizes
    os.remove(cache / bench_graph.SAINT_MADE)
    assert _graph_step(_saint(cache, seed=1), tmp_path)["cached"]
    with pytest.raises(ConfigError, match="holds the graph of nodes 400, features 32, classes 4; the options ask "
                                          "for nodes 500"):
        _graph_step(_saint(cache, nodes=500), tmp_path)


def test_a_saint_graph_written_halfway_leaves_no_cache(tmp_path, in_process, monkeypatch):
    from mggcn.data.formats import saint

    def killed(graph, root):  # as a bench killed between two of its files
        os.makedirs(root, exist_ok=True)
        open(os.path.join(root, "adj_full.npz"), "wb").close()
        raise KeyboardInterrupt

    monkeypatch.setattr(saint, "write_saint", killed)
    cache = tmp_path / "saint"
    with pytest.raises(KeyboardInterrupt):
        _graph_step(_saint(cache), tmp_path)
    assert sorted(os.listdir(tmp_path)) == []  # neither the cache nor a partial one beside it


def test_a_graph_cache_under_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    cache = tmp_path / "file" / "graph"
    assert main(["bench", "--small", "--no-pyg", "--nprocs", "1", "--graph-cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert err == f"mggcn bench: error: --graph-cache: {cache}: cannot make its folder {tmp_path / 'file'} (File " \
                  "exists)\n"


def test_a_graph_cache_that_cannot_be_written_or_is_the_report_is_one_line_before_the_graph(tmp_path, capsys):
    """A --graph-cache where no file can be made (/proc) failed after the graph was generated, with a rank's
    FileNotFoundError (exit 1); one that is also --out was found only once the report overwrote the graph."""
    assert main(["bench", "--small", "--no-pyg", "--nprocs", "1", "--graph-cache", "/proc/mggcn-graph"]) == 2
    assert capsys.readouterr().err == "mggcn bench: error: --graph-cache /proc/mggcn-graph: cannot write in /proc " \
                                      "(No such file or directory)\n"
    both = str(tmp_path / "g")
    assert main(["bench", "--small", "--no-pyg", "--nprocs", "1", "--graph-cache", both, "--out", both]) == 2
    assert capsys.readouterr().err == f"mggcn bench: error: --graph-cache {both}: is the same file as --out {both}; " \
                                      "give each output a path of its own\n"
    assert not os.path.exists(both)


@pytest.mark.parametrize("overrides, option", [
    ({"nodes": 1}, "nodes"),
    ({"degree": 0.0}, "degree"),
    ({"degree": -1.0}, "degree"),
    ({"degree": float("nan")}, "degree"),
    ({"nodes": 100, "degree": 100.0}, "degree"),  # more nonzeros than A of 100 vertices holds without self loops
    ({"classes": 3001}, "classes"),
    ({"nodes": 3, "degree": 1.0, "classes": 2, "nprocs": (1, 4)}, "nprocs"),
    ({"warmup": -1}, "warmup"),
    ({"epochs": 0}, "epochs"),
    ({"threads": available_cores() + 1}, "threads"),
    ({"model": "gat", "hidden": (15,), "heads": 4}, "heads"),
])
def test_options_refused_before_the_bench_begins(overrides, option):
    with pytest.raises(ConfigError) as err:
        bench.options_from(small=True, **overrides)
    assert err.value.option == option
    assert option == "heads" or str(err.value).startswith(option)  # check_config's message names hidden first


def test_option_limits_that_work():
    opts = bench.options_from(small=True, nodes=2, degree=1.0, classes=2, nprocs=(1, 2), warmup=5, epochs=1)
    assert (opts.nodes, opts.warmup, opts.epochs) == (2, 5, 1)


def test_degree_beyond_the_vertices_is_one_line_naming_it(capsys):
    assert main(["bench", "--small", "--nodes", "2000", "--degree", "5000"]) == 2
    assert capsys.readouterr().err == ("mggcn bench: error: --degree must be more than 0 and at most nodes - 1 = 1999 "
                                       "(nonzeros of A = nodes x degree, no self loops), got 5000.0\n")


@pytest.mark.parametrize("memory", ["0", "0.1"])
def test_plan_memory_of_no_bytes_is_one_line(memory, capsys):
    args = ["plan", "--nodes", "1000", "--edges", "5000", "--features", "16", "--classes", "4", "--memory", memory]
    assert main(args) == 2
    assert capsys.readouterr().err == "mggcn plan: error: --memory must be more than 0 bytes, got 0\n"


def _empty_report() -> dict:
    return {"options": {"threads": 2, "device": "cpu"}, "load_average": {"before": [1.0], "after": None},
            "graph": {"nodes": 10, "nnz": 30, "baseline": {"import": 100 << 20, "warm": 120 << 20}},
            "machine": None, "rows": [], "failed": [], "complete": True}


def test_tables_of_a_report_with_no_row():
    table = format_table(_empty_report())
    assert "(no configuration finished)" in table and "over plan" not in table and "()" not in table
    assert format_markdown(_empty_report()).endswith("|---|---|---|---|---|---|---|---|---|---|\n\n"
                                                     "(no configuration finished)")


def test_a_measured_zero_is_a_number_not_a_dash():
    report = _empty_report()
    report["rows"] = [{"name": "mggcn P=1", "kind": "mggcn", "oom": False, "epoch_s": 0.5, "net": 0,
                       "predicted": 1 << 20, "measured_over_predicted": 0.0, "machine": None}]
    line = format_markdown(report).splitlines()[-1]
    assert line == "| mggcn P=1 | 0.5000 | - | - | - | - | 0 | - | 1 | 0.00 |"


@pytest.mark.parametrize("text", ["[]", "null", "{}", '{"rows": ["x"]}'])
def test_the_table_script_refuses_json_that_is_no_report(text, tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(text)
    assert load_script("bench_table").main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"bench_table: {path}: not a report of mggcn bench (")
    assert captured.err.count("\n") == 1


def test_the_saint_cache_records_what_made_it(tmp_path, in_process):
    cache = tmp_path / "saint"
    _graph_step(_saint(cache, seed=2), tmp_path)
    made = json.loads((cache / bench_graph.SAINT_MADE).read_text())
    assert made == {"nodes": 400, "degree": 4.0, "features": 32, "classes": 4, "seed": 2, "ids": "clustered"}
    assert oct(os.stat(cache).st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_configuration_stopped_by_a_signal_stops_the_bench(tmp_path, monkeypatch):
    """SIGTERM reached a configuration's workers only: the bench counted it as one failed configuration, ran all
    the others and called its report complete. It now stops as Ctrl-C does, its report saying it is not."""
    from mggcn.distributed.launch import JobInterrupted

    def stopped(*_args, **_kwargs):
        raise JobInterrupted(0, "was stopped by SIGTERM before it could stop by itself")

    monkeypatch.setattr(bench_run, "run_one", stopped)
    out = tmp_path / "bench.json"
    opts = bench.options_from(small=True, pyg=False, nprocs=(1,))
    with pytest.raises(KeyboardInterrupt):
        bench_run.run_bench(opts, log=lambda line: None, out=str(out))
    report = json.loads(out.read_text())
    assert report["complete"] is False and report["failed"] == []
    assert report["error"] == "KeyboardInterrupt: rank 0 was stopped by SIGTERM before it could stop by itself"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is visible")
@pytest.mark.parametrize("args, said", [(["--device", "cuda"], "--device cuda: no CUDA device is visible"),
                                        (["--precision", "tf32"], "--precision tf32 runs the GEMMs on CUDA")])
def test_a_device_the_machine_lacks_is_refused_before_the_graph(args, said, capsys, tmp_path):
    """Every configuration failed in its rank (an AssertionError of torch), after the graph was made."""
    assert main(["bench", "--small", "--no-pyg", "--nprocs", "1", "--out", str(tmp_path / "b.json"), *args]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "b.json").exists()


def test_a_prepared_graph_cache_given_for_a_saint_graph_is_refused(tmp_path, in_process):
    """--saint-graph on a cache the bench filled without it failed in a rank, naming an fmt= option nobody gave."""
    cache = tmp_path / "cache"
    _graph_step(bench.options_from(small=True, graph_cache=str(cache), nodes=400, degree=4.0), tmp_path)
    with pytest.raises(ConfigError, match=f"graph_cache: {cache} holds a prepared graph, not GraphSAINT's files") \
            as err:
        _graph_step(_saint(cache), tmp_path)
    assert err.value.option == "graph_cache"
