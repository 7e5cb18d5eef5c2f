"""scripts/load_check.py rehearsed on a tiny graph: its table and that no busy process outlives it (no timings)."""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "load_check.py"


def _load_check():
    spec = importlib.util.spec_from_file_location("load_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _group_gone(pgid: int, wait_s: float = 10.0) -> bool:
    """Whether no process is left in the busy process's group (a killed one may take a moment to be reaped)."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_load_check_prints_its_table_and_stops_its_busy_process(capsys, tmp_path):
    """One path, quiet and loaded (two short processes): the table's columns and the JSON's keys."""
    out = tmp_path / "load.json"
    _load_check().main(["--nodes", "300", "--degree", "4", "--features", "8", "--hidden", "8", "--epochs", "1",
                        "--warmup", "1", "--repeats", "1", "--paths", "simple", "--out", str(out)])
    text = capsys.readouterr().out
    started = [int(p) for p in re.findall(r"busy processes (\d+) started", text)]
    stopped = [int(p) for p in re.findall(r"busy processes (\d+) stopped", text)]
    assert len(started) == 1 and started == stopped  # the loaded run
    assert all(_group_gone(pid) for pid in started)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("path "))
    assert lines[header].split() == ["path", "quiet", "s", "loaded", "s", "loaded/quiet", "quiet/simple",
                                     "loaded/simple"]
    name, quiet, loaded, ratio, *against = lines[header + 1].split()
    assert name == "simple" and float(quiet) > 0 and float(loaded) > 0
    rounds = json.loads(out.read_text())["results"]["simple"]
    # the printed ratio is of the measured seconds, not of their 3-decimal print (a tiny epoch's rounding is large)
    assert float(ratio) == pytest.approx(rounds[0]["loaded"]["epoch_s"] / rounds[0]["quiet"]["epoch_s"], abs=0.01)
    assert against == ["1.00", "1.00"]  # the simple path against itself
    assert lines[header + 2] == "losses bitwise equal to simple's: simple"
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"simple"}
    assert {"epoch_s", "spmm", "gemm", "losses"} <= set(report["results"]["simple"][0]["loaded"])


def test_load_check_refuses_an_unknown_path(capsys):
    with pytest.raises(SystemExit):
        _load_check().main(["--paths", "shared,fast,static+spin,fast+spin,shared+float+spin,shared+fast,"
                            "shared+gather+float,shared+gather+mkl"])
    assert "--paths: unknown fast, fast+spin, shared+fast, shared+gather+mkl (choose from" in capsys.readouterr().err


def test_a_paths_suffixes_set_openmps_waiting_and_the_workers_pinning(monkeypatch):
    """Each path's process gets the kernels, OpenMP's wait policy, the workers' pinning and the SpMM kernel its name
    says: asleep (mggcn's) unless +spin, one worker per core unless +float, the CPU's own SpMM unless +gather or
    +mkl; a caller's settings of these do not leak in."""
    module = _load_check()
    seen = []

    def run(cmd, env, **kwargs):
        seen.append((env[module.CPU_KERNELS_ENV], env.get(module.OPENMP_WAIT_ENV), env.get(module.PIN_WORKERS_ENV),
                     env.get(module.CPU_SPMM_ENV)))
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"epoch_s": 1.0}) + "\n", "")

    monkeypatch.delenv(module.OPENMP_WAIT_ENV, raising=False)
    monkeypatch.setenv(module.PIN_WORKERS_ENV, "0")
    monkeypatch.setenv(module.CPU_SPMM_ENV, "gather")
    monkeypatch.setattr(module.subprocess, "run", run)
    args = argparse.Namespace(nodes=10, degree=2, features=4, hidden=4, epochs=1, warmup=0, seed=0, timeout=5)
    for path in ("shared", "shared+spin", "shared+float", "shared+spin+float", "simple", "shared+mkl",
                 "static+gather+float"):
        module._measure(args, path, 0)
    assert seen == [("shared", "PASSIVE", None, None), ("shared", None, None, None), ("shared", "PASSIVE", "0", None),
                    ("shared", None, "0", None), ("simple", "PASSIVE", None, None), ("shared", "PASSIVE", None, "mkl"),
                    ("static", "PASSIVE", "0", "gather")]


@pytest.mark.slow
def test_the_pyg_line_gives_mggcns_epoch_and_floor_against_pygs(capsys, tmp_path):
    """--pyg runs mggcn bench once (mggcn at P = 1 and PyG) and prints both epochs and mggcn's roofline floor, each
    over PyG's epoch, as the JSON has them."""
    out = tmp_path / "load.json"
    _load_check().main(["--nodes", "300", "--degree", "4", "--features", "8", "--hidden", "8", "--epochs", "1",
                        "--warmup", "1", "--repeats", "1", "--paths", "simple", "--busy", "0", "--pyg",
                        "--out", str(out)])
    pyg = json.loads(out.read_text())["pyg"]
    assert pyg["mggcn_s"] > 0 and pyg["pyg_s"] > 0 and 0 < pyg["floor_s"]
    assert pyg["ratio"] == pytest.approx(pyg["mggcn_s"] / pyg["pyg_s"])
    assert pyg["floor_ratio"] == pytest.approx(pyg["floor_s"] / pyg["pyg_s"])
    line = capsys.readouterr().out.splitlines()[-1]
    assert line == (f"quiet, mggcn bench's graph: mggcn {pyg['mggcn_s']:.3f} s, PyG {pyg['pyg_s']:.3f} s, "
                    f"mggcn/PyG {pyg['ratio']:.3f}; mggcn's floor {pyg['floor_s']:.3f} s, floor/PyG "
                    f"{pyg['floor_ratio']:.3f}")
