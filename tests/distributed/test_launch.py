import multiprocessing as mp
import time

import pytest

import workers
from mggcn.distributed.launch import WorkerError, run_workers


def test_results_come_back_in_rank_order():
    results = run_workers(workers.ok_worker, 3, (10,), timeout_s=120)
    # all_reduce of 10 + rank over ranks 0..2
    assert [r[0] for r in results] == [33.0, 33.0, 33.0]
    assert all(list(r[1]) == [0, 1, 2] for r in results)


@pytest.mark.parametrize("mode, expected", [("raise", "failed: RuntimeError: boom from the test"),
                                            ("kill", "was killed by signal SIGKILL")])
def test_a_failing_rank_fails_the_job_and_is_named(mode, expected):
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run_workers(workers.failing_worker, 3, (1, mode), timeout_s=120)
    assert info.value.rank == 1
    assert str(info.value).startswith("rank 1 ")
    assert expected in str(info.value)
    assert time.monotonic() - start < 60  # the other ranks were stopped, not left waiting for the timeout
    assert mp.active_children() == []


@pytest.mark.slow
def test_a_hanging_rank_is_stopped_at_the_timeout():
    with pytest.raises(WorkerError) as info:
        run_workers(workers.failing_worker, 2, (1, "hang"), timeout_s=15)
    assert "did not finish within 15 s" in str(info.value)
    assert "1" in str(info.value).split("still running")[1]
    assert mp.active_children() == []
