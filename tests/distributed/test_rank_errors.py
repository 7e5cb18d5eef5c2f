"""Bad data that only a rank finds (the rows it reads of a prepared directory) at P = 2: the rank that found it is
named with the file and its problem, in one line, exit status 2 (bad input), never a peer's lost connection."""

import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "data"))
import test_hostile_inputs as hostile  # noqa: E402  (the crafted directories and the check of their outcome)

from mggcn.distributed.launch import (  # noqa: E402
    _PEER_LOST,
    WorkerError,
    _all_interrupted,
    _Failure,
    _kind_of,
    _root_cause,
)


def _at_two_ranks(case):
    def at_two(tmp):
        argv, named, outputs = case(tmp)
        argv[argv.index("--nprocs") + 1] = "2"
        return argv, named, outputs

    return at_two


# Row offsets that decrease inside make the in-edges of the rows after them wrong too: the rank reading those rows
# may find it first by their degrees (degree.npy), as legitimately as the rank reading the offsets themselves.
_EITHER = {"prepared: in_indptr decreases inside": ("in_indptr.npy", "degree.npy")}


def test_crafted_prepared_directories_at_two_ranks_name_the_file(tmp_path):
    cases = {name: _at_two_ranks(case) for name, case in hostile.ITEM_5.items()
             if name.startswith("prepared") and name not in _EITHER}
    for where in ("one", "either"):
        (tmp_path / where).mkdir()
    hostile.assert_all_clean(cases, tmp_path / "one")
    either = {name: _at_two_ranks(hostile.ITEM_5[name]) for name in _EITHER}
    for name, _, result, left, _ in hostile.run_cases(either, tmp_path / "either"):
        assert hostile.outcome(result) == "clean" and not left, (name, result["stderr"])
        assert any(f in result["stderr"] for f in _EITHER[name]), (name, result["stderr"])


def test_bad_input_found_by_a_rank_is_the_cause_even_when_a_peer_failed_first():
    """A peer loses its connection to the rank that raised (gloo's words vary: connectFullMesh during the
    rendezvous, a reset connection later); the rank's own error is reported, with its kind."""
    assert _kind_of(ValueError("x")) == "bad_input" and _kind_of(RuntimeError("x")) == "error"
    for lost in ("RuntimeError: Gloo connectFullMesh failed with [pair.cc:144] no error",
                 "DistBackendError: [pair.cc:534] Read error: Connection reset by peer"):
        assert _PEER_LOST.search(lost), lost
        failed = {0: _Failure(0, 1.0, f"failed: {lost}", peer_lost=True),
                  1: _Failure(1, 2.0, "failed: GraphError: d/labels.npy: label 17", kind="bad_input")}
        cause = _root_cause(failed)
        assert isinstance(cause, WorkerError) and cause.rank == 1 and cause.kind == "bad_input"
        assert str(cause) == "rank 1 failed: GraphError: d/labels.npy: label 17"


def test_the_earliest_failure_that_is_no_lost_connection_is_the_cause():
    """Two ranks fail with errors of their own: the one that failed first is said (the other's may follow from it),
    the lower rank where they failed at once; a later lost connection is no cause."""
    first = _Failure(1, 100.0, "failed: ValueError: bad shard", kind="bad_input")
    later = _Failure(0, 101.5, "failed: RuntimeError: boom")
    lost = _Failure(2, 102.0, "failed: DistBackendError: Connection reset by peer", peer_lost=True)
    assert _root_cause({0: later, 1: first, 2: lost}).rank == 1
    assert _root_cause({2: _Failure(2, 5.0, "failed: RuntimeError: a"), 0: _Failure(0, 5.0, "failed: RuntimeError: b")}
                       ).rank == 0


def test_a_peer_that_lost_an_interrupted_rank_counts_as_interrupted():
    """Ctrl-C that reaches one worker while the other still waits on it (the workers start): the peer fails on
    the lost connection, and the job was stopped, not failed (exit 130, not a KeyboardInterrupt named as a
    failure); a lost connection alone, or beside a real error, is no interrupt."""
    ctrl_c = _Failure(1, 2.0, "failed: KeyboardInterrupt: ", kind="interrupt")
    lost = _Failure(0, 1.0, "failed: DistBackendError: Connection reset by peer", peer_lost=True)
    error = _Failure(0, 1.0, "failed: RuntimeError: boom")
    assert _all_interrupted({0: lost, 1: ctrl_c}, None)
    assert _all_interrupted({1: ctrl_c}, signal.SIGINT)
    assert not _all_interrupted({0: lost}, signal.SIGINT)
    assert not _all_interrupted({0: error, 1: ctrl_c}, None)


@pytest.mark.parametrize("kind, status", [("bad_input", 2), ("error", 1)])
def test_the_command_exits_2_for_bad_input_a_rank_found(kind, status, capsys):
    from mggcn.tools.cli.common import job_failure_status

    assert job_failure_status(WorkerError(1, "failed: GraphError: f.npy: bad", kind=kind)) == status
    assert capsys.readouterr().err == "mggcn: rank 1 failed: GraphError: f.npy: bad\n"
    # a setting the worker's error names: its flag, in the worker's own words only
    named = WorkerError(1, "failed: GraphError: fmt=mtx: f.npy: bad", kind=kind, option="fmt",
                        reason="fmt=mtx: f.npy: bad")
    assert job_failure_status(named) == status
    assert capsys.readouterr().err == "mggcn: rank 1 failed: GraphError: --format mtx: f.npy: bad\n"


def test_a_ranks_report_leaves_out_where_in_torchs_sources_its_backend_raised(tmp_path):
    """gloo and c10d start their messages with a C++ source location ("[/__w/pytorch/.../unbound_buffer.cc:78]"):
    a rank's one line says what happened without it, and a peer lost is still recognised."""
    import json

    from mggcn.distributed.launch import _report_failure
    from mggcn.utils.errors import without_source_locations

    raw = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
           "5000ms for recv operation to complete")
    _report_failure(str(tmp_path), 1, RuntimeError(raw))
    report = json.loads((tmp_path / "error.1").read_text())
    assert report["error"] == "RuntimeError: Timed out waiting 5000ms for recv operation to complete"
    assert _PEER_LOST.search(report["error"])
    # torch's own failed checks: where, and the check's expression, before the words that say what failed
    assert without_source_locations("[enforce fail at inline_container.cc:672] . unexpected pos 1536 vs 1488") == \
        "unexpected pos 1536 vs 1488"
    allocator = "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory"
    assert without_source_locations(allocator) == "RuntimeError: DefaultCPUAllocator: can't allocate memory"
    kept = "[rank 0] failed. [a.cc] x == y. done"  # brackets without a source location, a check without one
    assert without_source_locations(kept) == kept
