"""A rank waiting at the job's rendezvous (for a rank 0 that is not there, or for ranks that never come) stops on
SIGINT or SIGTERM as at any other moment of the job, and a wait in torch's store never runs long past --timeout:
torch's store waits block in C++, where Python's handlers cannot run, so the wait is done in a thread of its own
(:func:`mggcn.distributed.context._awaited`)."""

import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from test_launch import _env, _free_port

from mggcn.distributed import context

GRAPH = "synthetic:n=200,features=8,classes=3"
STOP_S = 30  # how soon a stopped rank must have ended: its interpreter's start and teardown, on a busy machine


def _rank(tmp_path, rank: int, port: int) -> subprocess.Popen:
    env, _ = _env(tmp_path)
    env.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # --timeout far beyond STOP_S: a rank that ended within STOP_S did not wait it out
    return subprocess.Popen([sys.executable, "-m", "mggcn", "train", GRAPH, "--epochs", "1", "--timeout", "600",
                             "--threads", "1", "--quiet"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stopped(rank: subprocess.Popen, sig: int) -> tuple[int, str]:
    rank.send_signal(sig)
    try:
        out, err = rank.communicate(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        rank.kill()
        out, err = rank.communicate()
        pytest.fail(f"the rank still waited {STOP_S} s after signal {sig}: {err[-2000:]}")
    return rank.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_rank_connected_to_a_rendezvous_that_never_answers_stops_on_a_signal(tmp_path, sig):
    """Rank 1's connection is taken (a listener that accepts and says nothing, as a rank 0 stuck before it
    serves): once it is, the rank is inside torch's wait, and the signal ends it with an interrupted command's
    status and one line."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(120)
        rank = _rank(tmp_path, 1, listener.getsockname()[1])
        try:
            conn, _ = listener.accept()  # the rank has reached the rendezvous
        except TimeoutError:
            rank.kill()
            pytest.fail(f"the rank never connected: {rank.communicate()[1][-2000:]}")
        with conn:
            time.sleep(1.0)  # well inside the wait for the answer
            code, err = _stopped(rank, sig)
    assert code == 130, err
    assert err.strip() == "mggcn train: interrupted", err


def test_rank_0_waiting_for_a_rank_that_never_comes_stops_on_sigterm(tmp_path):
    """Rank 0 serves the store and waits for rank 1, which is never started (a scheduler that stops the job)."""
    port = _free_port()
    rank = _rank(tmp_path, 0, port)
    deadline = time.monotonic() + 120
    while True:  # the store listens: rank 0 is in its wait for the others
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or rank.poll() is not None:
                rank.kill()
                pytest.fail(f"rank 0 never served its store: {rank.communicate()[1][-2000:]}")
            time.sleep(0.2)
    time.sleep(1.0)
    code, err = _stopped(rank, signal.SIGTERM)
    assert code == 130, err
    assert err.strip() == "mggcn train: interrupted", err


def test_awaited_gives_the_value_the_error_or_gives_up_after_the_timeout(monkeypatch):
    """The wait's value and its error come back as if it had run in place; a wait that outlives its timeout by
    _OVERRUN_S is given up with the error ``late`` makes, while the thread left waiting is a daemon."""
    assert context._awaited(lambda: 7, 5.0, RuntimeError) == 7
    with pytest.raises(KeyError, match="missing"):
        context._awaited(lambda: {}["missing"], 5.0, RuntimeError)
    monkeypatch.setattr(context, "_OVERRUN_S", 0.3)
    release = threading.Event()
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"no answer after 0\.5 s"):
        context._awaited(lambda: release.wait(60), 0.2, TimeoutError)
    assert time.monotonic() - began < 30  # not the 60 s the work would have taken
    stuck = [t for t in threading.enumerate() if t.name == "mggcn-rendezvous"]
    assert stuck and all(t.daemon for t in stuck)
    release.set()


def test_awaited_off_the_main_thread_runs_the_work_where_it_is():
    seen = []
    worker = threading.Thread(target=lambda: seen.append(
        context._awaited(lambda: threading.current_thread().name, 5.0, RuntimeError)), name="callers-thread")
    worker.start()
    worker.join(30)
    assert seen == ["callers-thread"]
