"""Fixtures the tool tests share."""

import pytest

from mggcn.tools.bench import run as bench_run
from mggcn.utils.parallel import configured_threads, set_threads


@pytest.fixture
def in_process(monkeypatch):
    """The bench's workers run in this process (the graph step's, not a configuration's)."""
    threads = configured_threads()
    monkeypatch.setattr(bench_run, "run_workers", lambda fn, n, args=(), timeout_s=None: [fn(*args)])
    yield
    set_threads(threads)  # generate_worker sets this process's threads
