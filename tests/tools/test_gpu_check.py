"""scripts/rank_check.py, the GPU check's shared-GPU and reproducibility steps: its verdicts (a difference over the
tolerance, a NaN, a run that differs the second time, a kernel torch names non-deterministic, an error are FAIL
lines and exit status 1), and scripts/gpu_check.sh's new steps and time budget rehearsed on the CPU."""

import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch

from script_modules import SCRIPTS, load_script

GPU_CHECK = os.path.join(SCRIPTS, "gpu_check.sh")


def _rank_check():
    return load_script("rank_check")


def _fake_runs(monkeypatch, module, losses):
    """rank_check's runs replaced by ``losses(nprocs, options)``; the calls are recorded."""
    calls = []

    def train_losses(args, nprocs, **options):
        calls.append((nprocs, options))
        return losses(nprocs, options)

    monkeypatch.setattr(module, "train_losses", train_losses)
    return calls


def test_the_largest_relative_difference_and_what_cannot_pass():
    rc = _rank_check()
    assert rc.max_relative_difference([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert rc.max_relative_difference([1.0, 2.0002], [1.0, 2.0]) == pytest.approx(1e-4)
    assert rc.max_relative_difference([1.0, math.nan], [1.0, 2.0]) == math.inf
    assert rc.max_relative_difference([1.0], [1.0, 2.0]) == math.inf  # a run that stopped early


def test_ranks_fail_over_the_tolerance_and_on_an_error_and_the_others_still_run(monkeypatch, capsys, tmp_path):
    rc = _rank_check()
    norms = {"model": "gin", "batch_norm": True, "gin_mlp_batch_norm": True}

    def losses(nprocs, options):
        if nprocs == 3 and options == {"comm": "sparse", "overlap": False}:
            raise RuntimeError("a rank\nfailed")
        over = nprocs == 3 and options["comm"] in ("auto", "broadcast" if options.get("batch_norm") else "")
        off = 1e-3 if over else 1e-7  # over / under the default 1e-4
        return [2.0 * (1 + off * (nprocs > 1)), 1.0]

    calls = _fake_runs(monkeypatch, rc, losses)
    out = tmp_path / "ranks.json"
    assert rc.main(["ranks", "--device", "cpu", "--out", str(out)]) == 1
    assert calls[:2] == [(1, {}), (1, norms)] and len(calls) == 16
    assert {(n, o["comm"], o["overlap"]) for n, o in calls[2:] if "model" not in o} == \
        {(n, c, v) for n in (2, 3) for c in ("broadcast", "sparse", "auto") for v in (True, False)}
    # the norms' statistics summed over ranks: one configuration per P, against their own P = 1
    assert [(n, o) for n, o in calls[2:] if "model" in o] == \
        [(n, {"comm": "broadcast", "overlap": True, **norms}) for n in (2, 3)]
    printed = capsys.readouterr().out.splitlines()
    assert "P=2: ranks on cpu, cpu over gloo" in printed
    verdicts = {line[:32].strip(): line.split()[-3] for line in printed if line.startswith(("P=", "gin+norms"))
                and "(" in line}
    failed = {"P=3 sparse overlap=off", "P=3 auto overlap=on", "P=3 auto overlap=off", "gin+norms P=3 broadcast"}
    assert {name for name, v in verdicts.items() if v == "FAIL"} == failed and len(verdicts) == 16
    assert verdicts["gin+norms P=1"] == verdicts["gin+norms P=2 broadcast"] == "PASS"
    assert any(line.startswith("P=3 sparse overlap=off") and "RuntimeError: a rank failed" in line for line in printed)
    assert printed[-1] == ("rank_check: 12 of 16 passed; failed: P=3 sparse overlap=off, P=3 auto overlap=on, "
                           "P=3 auto overlap=off, gin+norms P=3 broadcast")
    rows = json.loads(out.read_text())["rows"]
    assert [r["pass"] for r in rows].count(False) == 4
    assert rows[-1]["max_relative_difference"] == pytest.approx(1e-3)


def test_ranks_without_a_reference_run_none_of_its_comparisons(monkeypatch, capsys):
    """A P = 1 run that fails is a FAIL line, and the configurations compared with it are not run; the other
    reference's still are."""
    rc = _rank_check()

    def losses(nprocs, options):
        if nprocs == 1 and not options:
            raise RuntimeError("no reference")
        return [1.0]

    calls = _fake_runs(monkeypatch, rc, losses)
    assert rc.main(["ranks", "--device", "cpu", "--nprocs", "2"]) == 1
    assert [(n, o.get("batch_norm", False)) for n, o in calls] == [(1, False), (1, True), (2, True)]
    assert capsys.readouterr().out.splitlines()[-1] == "rank_check: 2 of 3 passed; failed: P=1"


def test_a_p_whose_ranks_are_refused_is_one_fail_line(monkeypatch, capsys):
    """On CUDA without the switch, 2 ranks on fewer GPUs are refused: that P's line fails, naming the switch."""
    rc = _rank_check()
    _fake_runs(monkeypatch, rc, lambda nprocs, options: [1.0])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("MGGCN_SHARE_DEVICE", raising=False)
    assert rc.main(["ranks", "--device", "cuda", "--nprocs", "2"]) == 1
    printed = capsys.readouterr().out
    assert "ConfigError: nprocs 2 needs 2 GPUs, 1 visible (or set MGGCN_SHARE_DEVICE=1" in printed
    monkeypatch.setenv("MGGCN_SHARE_DEVICE", "1")
    assert rc.main(["ranks", "--device", "cuda", "--nprocs", "2"]) == 0
    assert "P=2: ranks on cuda:0, cuda:0 over gloo" in capsys.readouterr().out


def test_repeat_fails_where_a_second_run_differs_and_where_torch_names_a_kernel(monkeypatch, capsys, tmp_path):
    rc = _rank_check()
    seen = {}

    def losses(nprocs, options):
        key = (nprocs, options.get("model") + ("+norms" if options.get("batch_norm") else ""))
        seen[key] = seen.get(key, 0) + 1
        if torch.are_deterministic_algorithms_enabled() and options["model"] == "sage":
            torch.zeros(3).put_(torch.tensor([0]), torch.tensor([1.0]))  # torch knows put_ as non-deterministic
        assert options["dropout"] > 0  # the masks must take part
        return [1.0, 0.5 + (1e-9 if key == (2, "gin") and seen[key] == 2 else 0.0)]

    _fake_runs(monkeypatch, rc, losses)
    out = tmp_path / "repeat.json"
    assert rc.main(["repeat", "--device", "cpu", "--out", str(out)]) == 1
    assert not torch.are_deterministic_algorithms_enabled()  # put back for what runs after
    printed = capsys.readouterr().out.splitlines()
    verdicts = {r["name"]: (r["detail"], r["pass"]) for r in json.loads(out.read_text())["rows"]}
    assert verdicts["gcn P=1 twice"] == ("bitwise equal", True)
    assert verdicts["gin P=2 twice"] == ("differ from epoch 2", False)
    assert verdicts["sage P=1 torch audit"] == ("put_ does not have a deterministic implementation", False)
    assert verdicts["gcn P=1 torch audit"] == ("no non-deterministic kernel named", True)
    assert verdicts["gin+norms P=2 twice"] == ("bitwise equal", True)
    assert len(verdicts) == 12 and sum(ok for _, ok in verdicts.values()) == 10
    assert seen[(1, "gin+norms")] == 3  # twice, then the audit: with both norms on
    assert any(line.startswith("gin P=2 twice") and " FAIL  (" in line for line in printed)
    assert printed[-1] == "rank_check: 10 of 12 passed; failed: gin P=2 twice, sage P=1 torch audit"
    calls = _fake_runs(monkeypatch, rc, lambda nprocs, options: [1.0])
    assert rc.main(["repeat", "--device", "cpu", "--models", "gat"]) == 0
    assert [(n, o["model"]) for n, o in calls] == [(1, "gat")] * 2 + [(2, "gat")] * 2 + [(1, "gat")]  # + the audit


# every step of the check at a tiny size, rehearsed on the CPU
TINY = {"GPU_CHECK_DEVICE": "cpu", "GPU_NODES": "1500", "GPU_DEGREE": "6", "GPU_FEATURES": "8", "GPU_HIDDEN": "8",
        "GPU_CLASSES": "3", "GPU_EPOCHS": "2", "GPU_RANK_NODES": "300", "GPU_RANK_EPOCHS": "2",
        "GPU_MODEL_NODES": "800", "GPU_MODEL_DEGREE": "4", "GPU_MODEL_FEATURES": "8", "GPU_MODEL_HIDDEN": "8,8",
        "GPU_MODEL_CLASSES": "3"}


def _gpu_check(tmp_path, **env):
    out = tmp_path / "out"
    env = dict(os.environ, **TINY, OUT_DIR=str(out), PYTHON=sys.executable, **env)
    start = time.monotonic()
    done = subprocess.run(["bash", GPU_CHECK], env=env, capture_output=True, text=True, timeout=1200)
    return done, out, time.monotonic() - start


STEPS = ["imports", "CUDA tests", "plan", "bench", "shared GPU", "models", "reproducible"]


@pytest.mark.slow
def test_gpu_check_rehearses_the_shared_gpu_and_reproducibility_steps_on_cpu(tmp_path):
    """At a tiny size on the CPU: the seven steps pass, in order; step 5's 16 runs (14 at P > 1, two of them GIN
    with batch norms) agree with P = 1 and step 7's runs are bitwise equal with no kernel named, their rows in
    gpu_ranks.json and gpu_repeat.json."""
    passing = tmp_path / "tests" / "test_cuda_passes.py"
    passing.parent.mkdir()
    passing.write_text("def test_cuda_step():\n    pass\n")
    done, out, _ = _gpu_check(tmp_path, GPU_CHECK_TESTS=str(passing), GPU_CHECK_BUDGET="3000")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert done.stdout.rstrip().splitlines()[-1] == "gpu_check: every step passed"
    log = (out / "gpu_check.log").read_text()
    assert [line[3:] for line in log.splitlines() if line.startswith("== ")] == STEPS
    table = json.loads((out / "gpu_check.json").read_text())
    assert [(s["step"], s["exit"]) for s in table["steps"]] == [(name, 0) for name in STEPS]
    ranks = json.loads((out / "gpu_ranks.json").read_text())["rows"]
    assert len(ranks) == 16 and all(r["pass"] for r in ranks)
    compared = [r for r in ranks if "max_relative_difference" in r]
    assert len(compared) == 14 and all(r["max_relative_difference"] <= 1e-4 for r in compared)
    repeat = json.loads((out / "gpu_repeat.json").read_text())["rows"]
    assert len(repeat) == 12 and all(r["pass"] for r in repeat)
    assert "P=3 auto overlap=off" in log and "gin+norms P=3 broadcast" in log
    assert "rank_check: 12 of 12 passed" in log


@pytest.mark.slow
def test_gpu_check_ends_within_its_budget_whatever_hangs(tmp_path):
    """A CUDA test that hangs: it is stopped when the budget runs out (less the kill grace), each later step gets
    the one second left and is stopped too, each named; the whole check ends within the budget."""
    hanging = tmp_path / "tests" / "test_cuda_hangs.py"
    hanging.parent.mkdir()
    hanging.write_text("import time\n\ndef test_cuda_hangs():\n    time.sleep(600)\n")
    budget = 60
    done, out, took = _gpu_check(tmp_path, GPU_CHECK_TESTS=str(hanging), GPU_CHECK_BUDGET=str(budget))
    assert took < budget + 5, took
    steps = json.loads((out / "gpu_check.json").read_text())["steps"]
    assert [s["step"] for s in steps] == STEPS and steps[0]["exit"] == 0
    assert all(s["exit"] in (124, 137) for s in steps[1:]), steps
    assert done.returncode == 2 + 4 + 8 + 16 + 32 + 64
    assert "gpu_check: CUDA tests: stopped after its" in done.stdout
