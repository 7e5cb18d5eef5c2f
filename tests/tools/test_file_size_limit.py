"""Outputs that a write fails in the middle of (a full disk, simulated by a file size limit: RLIMIT_FSIZE makes a
write past it fail with EFBIG as a full disk fails with ENOSPC): one line naming the file, nothing half-written left;
and output paths that name a directory ("out/") refused before anything runs."""

import json
import os
import resource
import signal
import subprocess
import sys

import pytest

from cli_util import run_cli

TRAIN = ["train", "builtin:karate", "--quiet", "--trace-epoch", "0", "--threads", "1"]


def _limited(limit: int, *args: str, cwd) -> subprocess.CompletedProcess:
    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "mggcn", *args], preexec_fn=limit_file_size, capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def _one_error_line(out, *words: str) -> None:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize("nprocs", ["1", "2"])
def test_a_model_file_that_does_not_fit_is_one_line_and_no_file(tmp_path, nprocs):
    """torch.save reports the failed write as a RuntimeError of its own (the OSError behind it): still one line, the
    same at any P (rank 0's output is the job's: not "rank 0 failed: OutputError")."""
    # the dataset the launcher hands its workers fits (a few KB), the model of hidden 512 (70 KB) does not
    out = _limited(20_000, *TRAIN, "--epochs", "2", "--hidden", "512", "--save-model", "m.pt", "--nprocs", nprocs,
                   cwd=tmp_path)
    assert out.returncode == 1
    _one_error_line(out, "mggcn train: error: m.pt: cannot write: File too large")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_write_that_torch_reports_as_its_own_error_is_said_as_the_disk_s(tmp_path):
    """torch.save into a file object on a full disk raises a RuntimeError of its writer ("unexpected pos") while
    handling the OSError of the write: the output's error says the OSError."""
    from mggcn.utils.files import OutputError, write_output

    def torch_like(f) -> None:
        try:
            raise OSError(28, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1536 vs 1488") from None

    with pytest.raises(OutputError, match="m.pt: cannot write: No space left on device"):
        write_output(str(tmp_path / "m.pt"), torch_like)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="not a write"):  # an error with no OSError behind it stays itself
        write_output(str(tmp_path / "m.pt"), lambda f: (_ for _ in ()).throw(RuntimeError("not a write")))


def test_a_metrics_file_that_fills_the_disk_keeps_whole_records(tmp_path):
    out = _limited(3000, *TRAIN, "--epochs", "30", "--metrics", "m.jsonl", cwd=tmp_path)
    assert out.returncode == 1
    _one_error_line(out, "m.jsonl: cannot write: File too large")
    text = (tmp_path / "m.jsonl").read_text()
    assert text and text.endswith("\n") and len(text) <= 3000
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, len(records) + 1))


@pytest.mark.parametrize("option", ["--save-predictions", "--metrics", "--save-model"])
def test_an_output_path_ending_in_a_separator_is_refused_before_training(tmp_path, option):
    out = run_cli(*TRAIN, "--epochs", "1", option, str(tmp_path / "out") + "/")
    assert out.returncode == 2
    _one_error_line(out, option, "the name of a directory")
    assert list(tmp_path.iterdir()) == []


def test_predict_out_ending_in_a_separator_is_refused(tmp_path):
    model = tmp_path / "m.pt"
    assert run_cli(*TRAIN, "--epochs", "1", "--save-model", str(model)).returncode == 0
    out = run_cli("predict", str(model), "builtin:karate", "--out", str(tmp_path / "p") + "/")
    assert out.returncode == 2
    _one_error_line(out, "the name of a directory")
    assert not (tmp_path / "p").exists()


def test_two_runs_given_one_metrics_file_do_not_tear_it(tmp_path):
    """Each opened the file for writing at its own offset: torn lines that are no JSON, both runs exit 0. The
    second now refuses in one line, and the file holds the first run's records whole."""
    from mggcn.utils.files import OutputError, open_output

    path = tmp_path / "m.jsonl"
    path.write_text("an older run's records\n")
    first = open_output(str(path))
    assert path.read_text() == ""  # this run's now
    first.write('{"epoch": 1}\n')
    first.flush()
    with pytest.raises(OutputError, match="m.jsonl: another process is writing it"):
        open_output(str(path))
    assert path.read_text() == '{"epoch": 1}\n'
    first.close()
    again = open_output(str(path))  # free once the first has closed it
    again.close()
    assert path.read_text() == ""


def test_a_metrics_file_another_run_writes_is_refused_before_training(tmp_path):
    """A run given the metrics file of a run still training is refused before its workers start (not after its
    setup and first epoch), by the command and the Python API alike, and the other run's records are left whole;
    the file of a run that has ended is this run's to write."""
    import mggcn
    from mggcn.utils.errors import ConfigError
    from mggcn.utils.files import open_output

    path = tmp_path / "m.jsonl"
    other = open_output(str(path))  # what a run's rank 0 holds from its first epoch to its end
    other.write('{"epoch": 1}\n')
    other.flush()
    out = run_cli(*TRAIN, "--epochs", "2", "--metrics", str(path), "--save-model", str(tmp_path / "m.pt"))
    assert out.returncode == 2
    _one_error_line(out, f"mggcn train: error: --metrics {path}: another process is writing it")
    assert "epoch" not in out.stdout and not (tmp_path / "m.pt").exists()
    with pytest.raises(ConfigError, match="another process is writing it") as refused:
        mggcn.train("builtin:karate", epochs=1, metrics=str(path), quiet=True)
    assert refused.value.option == "metrics"
    assert path.read_text() == '{"epoch": 1}\n'
    other.close()
    out = run_cli(*TRAIN, "--epochs", "2", "--metrics", str(path))
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["epoch"] for line in path.read_text().splitlines()] == [1, 2]


@pytest.mark.parametrize("errno_name", ["EBADF", "ENOLCK"])
def test_an_output_where_locks_fail_otherwise_is_not_taken_for_a_held_one(tmp_path, monkeypatch, errno_name):
    """NFS's flock wants the file open for writing (EBADF on one opened for reading), some file systems have no
    locks (ENOLCK): the probe cannot tell, and an existing output there is written as the writer then writes it,
    unlocked, not refused as another run's."""
    import errno
    import fcntl

    from mggcn.utils.files import check_not_held

    path = tmp_path / "m.jsonl"
    path.write_text("an older run's records\n")

    def no_locks(fd, operation):
        raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    check_not_held("metrics", str(path))


def test_a_metrics_stream_reached_in_place_keeps_what_was_there_before_it(tmp_path):
    """--metrics /dev/stdout appended to a file (`>> log`): a failed write cuts back to the last whole record this
    run wrote, never into what the file held before it."""
    log = tmp_path / "log.txt"
    log.write_text("an earlier line\\n" * 100)
    before = log.read_text()

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 500, len(before) + 500))

    with open(log, "a") as out:
        done = subprocess.run([sys.executable, "-m", "mggcn", *TRAIN, "--epochs", "30", "--metrics", "/dev/stdout"],
                              preexec_fn=limit_file_size, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert log.read_text().startswith(before)
