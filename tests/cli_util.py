"""Running the ``mggcn`` command in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys


def run_cli(*args: str, timeout: float = 240, cwd: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "mggcn", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env)


def popen_cli(*args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "mggcn", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, **kwargs)
