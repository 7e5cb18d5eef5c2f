"""A failed worker never hangs the job; interrupted training resumes exactly; NaN guard; determinism."""

import json
import math
import multiprocessing as mp
import os
import re
import signal
import time

import numpy as np
import psutil
import pytest
import torch

import workers
from cli_util import popen_cli, process_alive, run_cli, worker_processes
from mggcn.config import TrainConfig
from mggcn.distributed.launch import WorkerError, run_workers
from mggcn.training.checkpoint import Checkpointer
from mggcn.training.job import TrainJob, run_train_job
from mggcn.training.trainer import NonFiniteLoss
from reference import random_graph

SPEC = "synthetic:n=3000,features=16"


def _losses(path):
    return [json.loads(line)["loss"] for line in open(path)]


def _wait_for_epochs(path, count, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited early: {proc.communicate()}")
        if os.path.exists(path) and len(open(path).read().splitlines()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError("training did not start")


def _workers_of(proc):
    return sorted(psutil.Process(proc.pid).children(recursive=True), key=lambda p: p.create_time())


@pytest.mark.slow
def test_killed_worker_fails_the_job_naming_the_rank(tmp_path):
    metrics = tmp_path / "m.jsonl"
    proc = popen_cli("train", SPEC, "--nprocs", "3", "--epochs", "100000", "--metrics", str(metrics),
                     "--timeout", "30", "--trace-epoch", "0")
    try:
        _wait_for_epochs(metrics, 2, proc)
        children = worker_processes(proc)  # the ranks only
        assert len(children) == 3
        start = time.monotonic()
        children[1].send_signal(signal.SIGKILL)  # rank 1, mid-epoch
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - start < 30
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "rank 1 was killed by signal SIGKILL (usually the out-of-memory killer's, or a scheduler's" in err
    time.sleep(0.5)
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)


def test_exception_mid_training_fails_the_job_naming_the_rank():
    graph = random_graph(40, 150)
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run_workers(workers.raise_mid_training_worker, 3, (graph, 2, 3), timeout_s=120)
    assert str(info.value).startswith("rank 2 failed: MemoryError: simulated out of memory")
    assert time.monotonic() - start < 60
    assert mp.active_children() == []


def _job(tmp_path, epochs, resume=False, every=2, **cfg):
    config = TrainConfig(hidden=(16, 16), epochs=epochs, dropout=0.3, seed=3, trace_epoch=0, **cfg)
    return TrainJob(dataset=SPEC, config=config, quiet=True, checkpoint_dir=str(tmp_path / "ck"),
                    checkpoint_every=every, resume=resume)


def _history_losses(result):
    return [r["loss"] for r in result.history]


@pytest.mark.parametrize("cfg", [{}, {"batch_norm": True}])
def test_resume_repeats_the_uninterrupted_run(tmp_path, cfg):
    full = run_train_job(_job(tmp_path / "a", 6, **cfg))
    first = run_train_job(_job(tmp_path / "b", 4, **cfg))
    assert len(first.history) == 4
    resumed = run_train_job(_job(tmp_path / "b", 6, resume=True, **cfg))
    assert resumed.resumed_from.endswith("ckpt-000004.pt")
    # same process count, same seed: the same numbers exactly, dropout included (and the batch norms' running
    # statistics, which the checkpoint carries)
    assert _history_losses(resumed) == _history_losses(full)
    for name, tensor in full.state_dict.items():
        assert torch.equal(tensor, resumed.state_dict[name]), name


def test_a_resumed_run_trains_with_its_own_optimizer_settings(tmp_path):
    """The checkpoint's Adam moments and step count continue, its settings do not: resumed with another lr, the run
    trains on with it (as a run that had that lr from epoch 5 on), not silently with the checkpoint's."""
    run_train_job(_job(tmp_path / "b", 4))
    resumed = run_train_job(_job(tmp_path / "b", 6, resume=True, lr=0.05))
    uninterrupted = _history_losses(run_train_job(_job(tmp_path / "a", 6)))
    assert _history_losses(resumed)[:5] == uninterrupted[:5]  # epoch 5's loss is the checkpoint's weights'
    assert _history_losses(resumed)[5] != uninterrupted[5]


def test_resume_skips_a_corrupt_newest_checkpoint(tmp_path, capsys):
    run_train_job(_job(tmp_path, 4))
    ckpt = Checkpointer(str(tmp_path / "ck"))
    newest = ckpt.files()[0]
    with open(newest, "r+b") as f:  # flip bytes in the middle of the payload
        f.seek(os.path.getsize(newest) // 2)
        f.write(b"\x00garbage\x00")
    resumed = run_train_job(_job(tmp_path, 6, resume=True))
    assert resumed.resumed_from.endswith("ckpt-000002.pt")
    assert "corrupt" in capsys.readouterr().err
    full = run_train_job(_job(tmp_path / "other", 6))
    assert _history_losses(resumed) == _history_losses(full)


def test_resume_refuses_another_model_or_dataset(tmp_path):
    from mggcn.training.checkpoint import CheckpointError

    run_train_job(_job(tmp_path, 2))
    bad_shape = TrainJob(dataset=SPEC, config=TrainConfig(hidden=(8,), epochs=4), quiet=True,
                         checkpoint_dir=str(tmp_path / "ck"), resume=True)
    with pytest.raises(CheckpointError, match="layer sizes"):
        run_train_job(bad_shape)
    other_data = TrainJob(dataset="synthetic:n=2000,features=16", config=TrainConfig(hidden=(16, 16), epochs=4),
                          quiet=True, checkpoint_dir=str(tmp_path / "ck"), resume=True)
    with pytest.raises(CheckpointError, match="another dataset"):
        run_train_job(other_data)
    other_model = TrainJob(dataset=SPEC, config=TrainConfig(model="sage", hidden=(16, 16), epochs=4), quiet=True,
                           checkpoint_dir=str(tmp_path / "ck"), resume=True)
    with pytest.raises(CheckpointError, match=r"a gcn model, this run trains a sage \(check model=\)$"):
        run_train_job(other_model)


def test_gin_resumes_exactly_and_refuses_another_eps(tmp_path):
    from mggcn.training.checkpoint import CheckpointError

    def job(epochs, resume=False, train_eps=True, where="ck"):
        cfg = TrainConfig(model="gin", gin_train_eps=train_eps, hidden=(16,), epochs=epochs, trace_epoch=0)
        return TrainJob(dataset="synthetic:n=500,features=8", config=cfg, quiet=True,
                        checkpoint_dir=str(tmp_path / where), checkpoint_every=2, resume=resume)

    run_train_job(job(2))
    resumed = run_train_job(job(4, resume=True))
    assert resumed.resumed_from.endswith("ckpt-000002.pt")
    assert _history_losses(resumed) == _history_losses(run_train_job(job(4, where="other")))
    with pytest.raises(CheckpointError, match=r"has gin_train_eps True, this run False \(check gin_train_eps=\)$"):
        run_train_job(job(4, resume=True, train_eps=False))


@pytest.mark.slow
def test_resume_with_another_number_of_workers(tmp_path):
    metrics = tmp_path / "m.jsonl"
    common = ["train", SPEC, "--hidden", "16", "--seed", "1", "--checkpoint-dir", str(tmp_path / "ck"),
              "--checkpoint-every", "2", "--quiet", "--metrics", str(metrics)]
    assert run_cli(*common, "--epochs", "4", "--nprocs", "2").returncode == 0
    out = run_cli(*common, "--epochs", "6", "--nprocs", "3", "--resume")
    assert out.returncode == 0, out.stderr
    resumed = _losses(metrics)
    single = tmp_path / "single.jsonl"
    assert run_cli("train", SPEC, "--hidden", "16", "--seed", "1", "--epochs", "6", "--quiet",
                   "--metrics", str(single)).returncode == 0
    # the metrics file of a resumed run continues the first one; across P only float rounding differs
    np.testing.assert_allclose(resumed, _losses(single), rtol=1e-5)


def test_nan_loss_stops_naming_the_checkpoint_whose_weights_gave_a_finite_loss(tmp_path):
    """The checkpoint of the epoch before the failing one holds the weights whose forward gave the NaN (its update
    diverged): the one named good is older, the diverged one is said, and once it is removed a resume at a sane rate
    trains on. The newest checkpoint was named good, and a resume from it failed again at any rate."""
    ck = tmp_path / "ck"

    def job(epochs, lr, resume=False):
        return TrainJob(dataset=SPEC, config=TrainConfig(hidden=(16,), epochs=epochs, lr=lr, trace_epoch=0),
                        quiet=True, checkpoint_dir=str(ck), checkpoint_every=1, resume=resume)

    run_train_job(job(2, 0.01))
    with pytest.raises(NonFiniteLoss) as err:
        run_train_job(job(50, 1e30, resume=True))
    said = str(err.value)
    failed = int(re.match(r"epoch (\d+): the loss is (nan|inf)", said).group(1))
    good, bad = ck / f"ckpt-{failed - 2:06d}.pt", ck / f"ckpt-{failed - 1:06d}.pt"
    assert said.endswith(f"; last good checkpoint: {good} ({bad} of the diverged weights: remove to resume from it)")
    bad.unlink()
    resumed = run_train_job(job(failed + 1, 0.01, resume=True))
    assert all(math.isfinite(r["loss"]) for r in resumed.history)


def test_nan_loss_stops_with_the_epoch_named(tmp_path):
    job = TrainJob(dataset=SPEC, config=TrainConfig(hidden=(16,), epochs=50, lr=1e30, trace_epoch=0), quiet=True,
                   checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=1)
    with pytest.raises(NonFiniteLoss, match=r"^epoch 2: the loss is (nan|inf).*; no checkpoint holds weights that "
                                            r"gave finite outputs$"):
        run_train_job(job)  # ckpt-000001 holds the weights whose forward gave it
    metrics = tmp_path / "m.jsonl"
    out = run_cli("train", SPEC, "--hidden", "16", "--epochs", "50", "--lr", "1e30", "--nprocs", "2", "--quiet",
                  "--metrics", str(metrics))
    assert out.returncode == 1
    # the job's failure, not a rank's: said as in one process, naming the flag
    assert out.stderr.startswith("mggcn train: error: epoch ") and out.stderr.count("\n") == 1, out.stderr
    assert "layer" in out.stderr and "rank" not in out.stderr
    assert out.stderr.endswith("(try a smaller --lr)\n") and "lr=" not in out.stderr
    # the metrics log keeps the epochs that ended before the failure, each record whole (docs/reliability.md)
    failed = int(re.search(r"error: epoch (\d+)", out.stderr).group(1))
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, failed)) and metrics.read_text().endswith("\n")


@pytest.mark.parametrize("quiet", [False, True])
def test_sigterm_stops_cleanly_with_a_checkpoint(tmp_path, quiet):
    """--quiet too says the run was stopped (on stderr), not only its accuracies, as if it had run to its end; the
    line names the outputs written of that epoch (not the last one asked for), and the model's card says it."""
    metrics, model = tmp_path / "m.jsonl", tmp_path / "model.pt"
    proc = popen_cli("train", SPEC, "--nprocs", "2", "--epochs", "100000", "--metrics", str(metrics),
                     "--checkpoint-dir", str(tmp_path / "ck"), "--trace-epoch", "0", "--save-model", str(model),
                     *(["--quiet"] if quiet else []))
    try:
        _wait_for_epochs(metrics, 2, proc)
        children = _workers_of(proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "stopped by a signal after epoch" in (err if quiet else out)
    assert f"; {model} is of that epoch\n" in (err if quiet else out)
    files = Checkpointer(str(tmp_path / "ck")).files()
    assert len(files) == 1
    epochs_done = len(_losses(metrics))
    card = json.loads((tmp_path / "model.pt.json").read_text())
    assert (card["stopped"], card["epochs"]) == ("interrupted", epochs_done)
    assert files[0].endswith(f"ckpt-{epochs_done:06d}.pt")
    time.sleep(0.5)  # the job directory's watcher ends once the launcher has (the fork server before it)
    assert not [c for c in children if process_alive(c)]


@pytest.mark.slow
def test_same_seed_same_numbers(tmp_path):
    runs = []
    for k in range(2):
        metrics = tmp_path / f"m{k}.jsonl"
        out = run_cli("train", SPEC, "--nprocs", "2", "--epochs", "5", "--dropout", "0.5", "--quiet",
                      "--metrics", str(metrics))
        assert out.returncode == 0, out.stderr
        runs.append(_losses(metrics))
    assert runs[0] == runs[1]


def test_resume_knows_the_dataset_by_content_not_by_path(tmp_path):
    from mggcn.data.generators import parse_spec

    graph = parse_spec("synthetic:n=400,features=8")
    valid = tmp_path / "valid"
    valid.mkdir()
    np.savetxt(valid / "edges.txt", graph.edge_index.T, fmt="%d")
    np.save(valid / "x.npy", graph.x)
    np.save(valid / "y.npy", graph.y)
    (tmp_path / "v").symlink_to(valid)  # the same files, spelled v/ instead of valid/

    def job(edges, epochs, resume):
        return TrainJob(dataset=str(edges), fmt="edgelist", read_options={"features": str(edges.parent / "x.npy"),
                                                                          "labels": str(edges.parent / "y.npy")},
                        config=TrainConfig(hidden=(8,), epochs=epochs, seed=2, trace_epoch=0), quiet=True,
                        checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=2, resume=resume)

    run_train_job(job(valid / "edges.txt", 2, False))
    resumed = run_train_job(job(tmp_path / "v" / "edges.txt", 4, True))
    assert resumed.resumed_from.endswith("ckpt-000002.pt") and len(resumed.history) == 4
    # other content of the same sizes (one edge moved) is another dataset, whatever the path
    edges = graph.edge_index.T.copy()
    edges[0, 1] = (edges[0, 1] + 1) % graph.num_nodes
    np.savetxt(valid / "edges.txt", edges, fmt="%d")
    from mggcn.training.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="another dataset .*fingerprint"):
        run_train_job(job(valid / "edges.txt", 6, True))


@pytest.mark.parametrize("nprocs", [1, 2])
def test_a_model_whose_last_update_diverged_is_refused_and_nothing_written(tmp_path, nprocs):
    """The losses were finite up to the last epoch, whose update made the logits NaN: the run exited 0, measured
    its accuracies on NaN, and saved a model and predictions of class 0 for every vertex."""
    model, predictions = tmp_path / "m.pt", tmp_path / "p.csv"
    out = run_cli("train", "builtin:karate", "--epochs", "1", "--lr", "1e20", "--hidden", "128,128", "--quiet",
                  "--nprocs", str(nprocs), "--save-model", str(model), "--save-predictions", str(predictions))
    assert out.returncode == 1 and out.stderr == (
        "mggcn train: error: the trained model's outputs are not finite for 34 vertices (after epoch 1; try a "
        "smaller --lr)\n"), out.stderr
    assert not model.exists() and not predictions.exists()


def test_a_batch_norm_whose_running_variance_overflowed_is_refused(tmp_path):
    """Batch statistics keep the training losses finite while the running variance, which eval mode reads, goes to
    inf: the model then predicts one class for every vertex. predict refused the file train had just saved."""
    job = TrainJob(dataset="synthetic:n=2000", config=TrainConfig(hidden=(64, 64), epochs=8, lr=1e15, batch_norm=True,
                                                                  trace_epoch=0),
                   quiet=True, save_model=str(tmp_path / "m.pt"))
    with pytest.raises(NonFiniteLoss, match=r"^the trained model's norms\.\d\.module\.running_var holds NaN or "
                                            r"infinite values \(after epoch 8; try a smaller lr=\)$"):
        run_train_job(job)
    assert not (tmp_path / "m.pt").exists()
