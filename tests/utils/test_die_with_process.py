"""A worker forked by the fork server dies with its launcher, not with the server it hangs from
(mggcn.utils.system.die_with_process), so that a killed launcher's workers stop at once instead of training on."""

import os
import signal
import subprocess
import sys

import pytest

import mggcn

WATCHER = """import os, sys, time
from mggcn.utils.system import die_with_process
die_with_process(int(sys.argv[1]))
print("watching", flush=True)
time.sleep(600)
"""


def _env() -> dict:
    """A child's environment that imports the mggcn this test imports."""
    src = os.path.dirname(os.path.dirname(mggcn.__file__))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfd_open is Linux's")
def test_a_process_dies_when_the_one_it_watches_ends():
    env = _env()
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER, str(watched.pid)], stdout=subprocess.PIPE, text=True,
                               env=env)
    try:
        assert watcher.stdout.readline() == "watching\n"
        assert watcher.poll() is None  # the watched process runs: so does the watcher
        watched.kill()
        watched.wait()
        assert watcher.wait(timeout=120) == -signal.SIGKILL
    finally:
        for p in (watched, watcher):
            if p.poll() is None:
                p.kill()


def test_watching_a_process_that_is_gone_ends_at_once():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    code = "import sys; from mggcn.utils.system import die_with_process; die_with_process(int(sys.argv[1])); print(1)"
    env = _env()
    out = subprocess.run([sys.executable, "-c", code, str(gone.pid)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == -signal.SIGKILL and out.stdout == ""
