"""Option values at and past the limits of what they feed (a float's infinity, a C int, a float32, a 64-bit seed, the
launcher's wait), empty paths, and outputs that would replace each other or an input: each refused up front in one
line naming the option (the flag on the command line, exit status 2), never a traceback, a silently different value
or an output written over another."""

from __future__ import annotations

import os

import pytest
import torch

import mggcn
from cli_util import run_cli
from mggcn.nn.adam import Adam
from mggcn.tools.cli import main
from mggcn.training.outputs import check_output
from mggcn.utils.errors import ConfigError
from mggcn.utils.system import set_mmap_threshold
from mggcn.utils.units import parse_bytes

MMAP_THRESHOLD_MAX = 32 << 20  # mallopt(3)'s DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
TIMEOUT_MAX = (2**31 - 1) // 1000  # seconds: milliseconds in a C int, Python's poll()
KARATE = ["train", "builtin:karate", "--epochs", "1", "--quiet", "--trace-epoch", "0"]
PLAN = ["plan", "--nodes", "10", "--edges", "10", "--features", "2", "--classes", "2"]


def _refused(argv: list[str], capsys, *words: str) -> str:
    """``mggcn ARGV`` exits 2 with one line on stderr holding ``words``, whether the parser or the command refused."""
    try:
        status = main(argv)
    except SystemExit as exited:
        status = exited.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


# -- byte sizes --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["1e400", "1e308G", "inf", "nan"])
def test_a_size_no_float_holds_is_refused_naming_the_option(text):
    with pytest.raises(ConfigError, match=f"^memory_limit: expected a .*size .*got '{text}'") as err:
        parse_bytes(text, "memory_limit")
    assert err.value.option == "memory_limit"


@pytest.mark.parametrize("argv, flag", [
    (["train", "--tile-bytes", "1e400"], "--tile-bytes"),
    (["train", "--mmap-threshold", "1e400"], "--mmap-threshold"),
    ([*PLAN, "--memory", "1e400"], "--memory"),
    ([*PLAN, "--tile-bytes", "1e400"], "--tile-bytes"),
    (["prepare", "builtin:karate", "never-written", "--memory-limit", "1e400"], "--memory-limit"),
])
def test_the_commands_refuse_an_infinite_size_in_one_line(argv, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(argv, capsys, flag, "1e400")
    assert not os.listdir(tmp_path)


# -- the mmap threshold: mallopt's int, glibc's largest ----------------------------------------------------------------

@pytest.mark.parametrize("size", ["1e30", "99999999999999999999999G", "4G", "64M"])
def test_an_mmap_threshold_beyond_glibcs_largest_is_refused(size, capsys):
    _refused([*KARATE, "--mmap-threshold", size], capsys, "--mmap-threshold", "32M")
    _refused(["bench", "--small", "--mmap-threshold", size], capsys, "--mmap-threshold")


def test_the_api_and_the_allocator_refuse_an_mmap_threshold_beyond_glibcs_largest():
    from mggcn.config import MMAP_THRESHOLD_MAX as largest

    assert largest == MMAP_THRESHOLD_MAX
    with pytest.raises(ConfigError, match="^mmap_threshold must be at most 33554432") as err:
        mggcn.train("builtin:karate", epochs=1, quiet=True, mmap_threshold=MMAP_THRESHOLD_MAX + 1)
    assert err.value.option == "mmap_threshold"
    with pytest.raises(ConfigError, match="^mmap_threshold must be at most"):  # never reaches mallopt's C int
        set_mmap_threshold(2**63)


# -- Adam's learning rate, weight decay and eps: float32 ---------------------------------------------------------------

@pytest.mark.parametrize("argv, kwargs", [
    (["--lr", "1e38"], {"lr": 1e38}),
    (["--lr", "1e300"], {"lr": 1e300}),
    (["--weight-decay", "1e39"], {"weight_decay": 1e39}),
])
def test_an_optimizer_setting_beyond_float32_is_refused_before_training(argv, kwargs, capsys):
    _refused([*KARATE, *argv], capsys, f"{argv[0]} must be at most", "float32", f"got {float(argv[1])!r}")
    option = next(iter(kwargs))
    with pytest.raises(ConfigError, match=f"^{option} must be at most") as err:
        mggcn.train("builtin:karate", epochs=1, quiet=True, **kwargs)
    assert err.value.option == option


def test_the_largest_lr_follows_adams_first_bias_correction():
    with pytest.raises(ConfigError, match="lr / 0.1"):
        mggcn.train("builtin:karate", epochs=1, quiet=True, lr=4e37)
    with pytest.raises(ConfigError, match="^eps must be at most"):
        mggcn.train("builtin:karate", epochs=1, quiet=True, eps=1e39)
    with pytest.raises(FloatingPointError):  # β₁ = 0: the step is lr itself, a float32; the loss then says so
        mggcn.train("builtin:karate", epochs=2, quiet=True, lr=4e37, betas=(0.0, 0.999))


def test_adam_makes_the_weights_non_finite_where_a_step_overflows_float32():
    p = torch.nn.Parameter(torch.ones(3))
    optimizer = Adam([p], lr=1e38, weight_decay=1e39)
    p.grad = torch.tensor([1.0, 0.0, -1.0])
    optimizer.step()  # torch would refuse the scalar (RuntimeError: value cannot be converted ... without overflow)
    assert not torch.isfinite(p).any()


# -- the seed: 64-bit dropout seeds of every epoch and rank ------------------------------------------------------------

def test_a_seed_whose_epoch_seeds_overflow_64_bits_is_refused(capsys):
    from mggcn.training.settings import seed_limit

    limit = seed_limit()
    assert 2**32 < limit < 2**62
    _refused([*KARATE, "--seed", str(2**62)], capsys, "--seed must be at most", str(limit))
    _refused([*KARATE, "--seed", str(limit + 1)], capsys, "--seed must be at most")
    trained = mggcn.train("builtin:karate", epochs=2, quiet=True, seed=limit, dropout=0.5)  # the limit itself trains
    assert len(trained.history) == 2


# -- the timeout: the launcher's wait ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["train", "predict"])
def test_a_timeout_beyond_the_launchers_wait_is_refused_at_any_process_count(command, capsys, tmp_path):
    head = KARATE if command == "train" else ["predict", str(tmp_path / "m.pt"), "builtin:karate", "--out",
                                              str(tmp_path / "p.csv")]
    for timeout in ("1e16", str(TIMEOUT_MAX + 1)):
        _refused([*head, "--nprocs", "2", "--timeout", timeout], capsys, "--timeout must be at most",
                 str(TIMEOUT_MAX))
    assert not os.listdir(tmp_path)


def test_the_largest_timeout_runs_two_ranks():
    from mggcn.config import TIMEOUT_MAX as largest

    assert largest == TIMEOUT_MAX
    out = run_cli(*KARATE, "--nprocs", "2", "--timeout", str(TIMEOUT_MAX))
    assert out.returncode == 0, out.stderr


# -- empty paths -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, flag", [
    ([*KARATE, "--format", "edgelist", "--features", ""], "--features"),
    ([*KARATE, "--labels", ""], "--labels"),
    ([*KARATE, "--split", ""], "--split"),
    ([*KARATE, "--tensorboard", ""], "--tensorboard"),
    ([*KARATE, "--metrics", ""], "--metrics"),
    ([*KARATE, "--save-model", ""], "--save-model"),
    ([*KARATE, "--checkpoint-dir", ""], "--checkpoint-dir"),
    (["predict", "m.pt", "builtin:karate", "--out", ""], "--out"),
    (["predict", "", "builtin:karate", "--out", "p.csv"], "model"),
    (["report", "m.jsonl", "--out", ""], "--out"),
])
def test_an_empty_path_is_refused_naming_the_option(argv, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(argv, capsys, f"argument {flag}: expected a path, got ''")
    assert not os.listdir(tmp_path)


def test_prepare_refuses_an_empty_readers_path(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "edges.txt").write_text("0 1\n1 2\n")
    _refused(["prepare", "edges.txt", "out", "--format", "edgelist", "--split", ""], capsys,
             "--split '': an empty path names no file")
    assert os.listdir(tmp_path) == ["edges.txt"]


def test_the_library_refuses_an_empty_output_or_input_path():
    with pytest.raises(ConfigError, match="^out '': an empty path names no file") as err:
        check_output("out", "")
    assert err.value.option == "out"
    with pytest.raises(ConfigError, match="^features '': an empty path names no file"):
        mggcn.train("builtin:karate", fmt="edgelist", features="", epochs=1, quiet=True)


# -- outputs that would replace each other or an input -----------------------------------------------------------------

@pytest.mark.parametrize("options, words", [
    (["--metrics", "X", "--save-model", "X"], ["--save-model X: is the same file as --metrics X"]),
    (["--metrics", "X.json", "--save-model", "X"], ["--save-model X: its model description X.json", "--metrics"]),
    (["--save-predictions", "Y", "--tensorboard", "./Y"], ["--tensorboard ./Y", "--save-predictions Y"]),
    (["--metrics", "Z", "--checkpoint-dir", "Z"], ["--checkpoint-dir Z", "--metrics Z"]),
    (["--metrics", "link", "--save-predictions", "target"], ["--save-predictions target", "--metrics link"]),
])
def test_two_outputs_of_one_file_are_refused_before_training(options, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.symlink("target", "link")  # a link to a file not written yet: the file it will be
    _refused([*KARATE, *options], capsys, *words, "give each output a path of its own")
    assert os.listdir(tmp_path) == ["link"]


def test_special_files_take_several_outputs(capsys):
    assert main([*KARATE, "--metrics", "/dev/null", "--save-predictions", "/dev/null"]) == 0


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.pt"
    assert main([*KARATE, "--save-model", str(path)]) == 0
    return path


@pytest.mark.parametrize("out", ["m.pt", "./m.pt.json", "hard.pt", "soft.pt"])
def test_predict_refuses_to_write_over_the_model_it_reads(out, model, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(model.parent)
    for name, make in (("hard.pt", os.link), ("soft.pt", os.symlink)):
        if not os.path.lexists(name):
            make("m.pt", name)
    before = model.read_bytes(), (model.parent / "m.pt.json").read_bytes()
    _refused(["predict", "m.pt", "builtin:karate", "--out", out], capsys, f"--out {out}: would replace the model",
             "which this run reads")
    assert (model.read_bytes(), (model.parent / "m.pt.json").read_bytes()) == before


def test_outputs_refuse_to_replace_the_dataset_and_checkpoints_they_read(capsys, tmp_path):
    data, ck = tmp_path / "data", tmp_path / "ck"
    assert main(["prepare", "builtin:karate", str(data), "--quiet"]) == 0
    manifest = (data / "manifest.json").read_bytes()
    _refused([*KARATE[:1], str(data), *KARATE[2:], "--save-model", str(data / "manifest.json")], capsys,
             "--save-model", "would replace the prepared dataset's")
    assert (data / "manifest.json").read_bytes() == manifest
    ck.mkdir()
    (ck / "ckpt-000002.pt").write_bytes(b"kept")
    _refused([*KARATE, "--checkpoint-dir", str(ck), "--metrics", str(ck / "ckpt-000002.pt")], capsys,
             "--metrics", "would replace the checkpoint")
    assert (ck / "ckpt-000002.pt").read_bytes() == b"kept"
    from mggcn.training.outputs import check_distinct

    with pytest.raises(ConfigError, match="^save_predictions .*would replace features=") as err:  # a reader's file
        check_distinct([("save_predictions", str(ck / "ckpt-000002.pt"))], [("features=", str(ck / "ckpt-000002.pt"))])
    assert err.value.option == "save_predictions"
    # beside the dataset and the checkpoints, a new output (or an earlier run's) is written as asked
    assert main([*KARATE[:1], str(data), *KARATE[2:], "--save-model", str(data / "model.pt"),
                 "--checkpoint-dir", str(ck), "--metrics", str(ck / "metrics.jsonl")]) == 0


def test_outputs_through_a_link_to_nothing_are_refused_before_training(capsys, tmp_path):
    """Checkpoints are written only when a signal stops the run (--checkpoint-every 0): a directory that cannot be
    made, behind a loop of links or a link to nothing, must be refused at the start, not when the checkpoint is due."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere" / "x")
    for given, words in [("a/ck", ["a is a link that leads back to itself"]), ("a", ["a loop of symbolic links"]),
                         ("gone/ck", ["gone is a link to", "which does not exist"]), ("gone", ["does not exist"])]:
        _refused([*KARATE, "--checkpoint-dir", str(tmp_path / given)], capsys, "--checkpoint-dir", *words)
    assert main([*KARATE, "--checkpoint-dir", str(tmp_path / "new" / "ck")]) == 0  # made when first needed
    for option in ("--save-model", "--metrics", "--save-predictions"):  # the link on the way named, at any depth
        for out in (tmp_path / "a" / "out.csv", tmp_path / "a" / "sub" / "out.csv"):
            _refused([*KARATE, option, str(out)], capsys, option, f"{tmp_path / 'a'} is a link that leads back")
        _refused([*KARATE, option, str(tmp_path / "gone" / "out.csv")], capsys, "gone is a link to")
    _refused(["prepare", "builtin:karate", str(tmp_path / "a" / "out")], capsys, f"{tmp_path / 'a'} is a link that "
             "leads back")  # prepare's OUT_DIR alike


# -- plan checks its options as train does -----------------------------------------------------------------------------

@pytest.mark.parametrize("options, words", [
    (["--dropout", "nan"], ["--dropout must be finite"]),
    (["--input-dropout", "1.5"], ["--input-dropout must be in [0, 1)"]),
    (["--edges", str(2**63)], ["argument --edges", "int64"]),
    (["--edges", "-1"], ["argument --edges"]),
    (["--tile-bytes", "1K"], ["--tile-bytes is for --device cpu", "the device is cuda"]),  # plan's default device
    (["--nodes", str(10**22)], ["argument --nodes", "int64"]),
    (["--edges", "91"], ["--edges 91", "do not fit", "without self loops (at most 90)"]),
])
def test_plan_refuses_what_train_refuses_and_impossible_graphs(options, words, capsys):
    _refused([*PLAN, *options], capsys, *words)


def test_plan_names_the_option_that_makes_a_presets_sizes_impossible(capsys):
    _refused(["plan", "--dataset", "reddit", "--nodes", "5"], capsys, "--nodes 5", "do not fit")


@pytest.mark.parametrize("args, words", [
    (["--seed", "99999999999999999999999"], "--seed must be an integer from 0 to"),
    (["--seed", "-5"], "--seed must be an integer from 0 to"),
    (["--timeout", "1e16"], "--timeout must be at most"),
    (["--timeout", "nan"], "--timeout must be finite"),
    (["--timeout", "0"], "--timeout must be positive"),
])
def test_the_bench_refuses_what_train_refuses_before_it_measures(args, words):
    """The bench trains as `train` does: a seed whose dropout seeds overflow, or a timeout the launcher cannot wait,
    was a failed configuration per row, a traceback, or a wait of nan seconds."""
    out = run_cli("bench", "--small", "--no-pyg", "--epochs", "1", *args, timeout=60)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and out.stdout == "" and len(lines) == 1, out.stderr
    assert words in lines[0] and "Traceback" not in out.stderr


def test_plan_on_a_cpu_judges_the_ranks_together_against_the_machine(capsys):
    """The CPU's ranks share one machine: --memory is the machine's, and P ranks need P times a rank's share (the
    verdict was per rank, with a CUDA context in its words)."""
    from mggcn.tools.cli import main

    args = ["plan", "--nodes", "100000", "--edges", "2000000", "--features", "64", "--classes", "10", "--device",
            "cpu", "--memory", "700M", "--nprocs", "1,4,4"]
    assert main(args) == 1  # P = 4 does not fit
    out = capsys.readouterr().out
    verdicts = [line for line in out.splitlines() if " of the machine (" in line]
    assert len(verdicts) == 2, out  # each P once
    assert verdicts[0].startswith("fits in 700.00 MiB of the machine (1 rank(s)") and "CUDA" not in out
    assert verdicts[1].startswith("does NOT fit in 700.00 MiB of the machine (4 rank(s) × ")


@pytest.mark.parametrize("value, words", [
    ("-1e-3", "--lr must be positive, got -0.001"),
    ("-2E+1", "--lr must be positive, got -20.0"),
    ("-.5", "--lr must be positive, got -0.5"),
    ("-inf", "--lr must be finite, got -inf"),
    ("-Infinity", "--lr must be finite, got -inf"),
])
def test_every_negative_number_is_a_value_said_by_its_options_check(value, words, capsys):
    """argparse takes only `-5` and `-0.5` for negative numbers: `--lr -1e-3` was "expected one argument"."""
    _refused([*KARATE, "--lr", value], capsys, words)


def test_a_word_after_a_flag_that_is_no_number_is_still_an_option(capsys):
    _refused([*KARATE, "--lr", "-x"], capsys, "argument --lr: expected one argument")


def test_an_unknown_option_is_said_by_its_command(capsys):
    """`mggcn info DIR --bogus` was said by the top parser ("mggcn: error: ... (see mggcn -h)")."""
    from mggcn.tools.cli import main

    with pytest.raises(SystemExit) as done:
        main(["plan", "--nodes", "10", "--bogus"])
    assert done.value.code == 2
    assert capsys.readouterr().err.strip() == "mggcn plan: error: unrecognized arguments: --bogus (see mggcn plan -h)"


def test_an_option_that_asks_for_a_precision_or_a_directory_is_named_as_given(capsys, tmp_path):
    """bench's --compare-precision names itself, not --precision; prepare's directory is the positional OUT_DIR on
    the command line and out_dir in Python."""
    _refused(["bench", "--nodes", "50", "--degree", "3", "--compare-precision", "tf32", "--out",
              str(tmp_path / "b.json")], capsys, "--compare-precision tf32 runs the GEMMs on CUDA tensor cores")
    line = _refused(["prepare", "builtin:karate", ""], capsys, "OUT_DIR is empty")
    assert "--out-dir" not in line
    from mggcn.data.prepared.writer import prepare

    with pytest.raises(ConfigError, match="^out_dir is empty") as err:
        prepare("builtin:karate", "")
    assert err.value.option == "out_dir"


def test_train_refuses_a_cpu_tile_size_for_a_gpu_as_plan_does(capsys):
    _refused([*KARATE, "--device", "cuda", "--tile-bytes", "1K"], capsys, "--tile-bytes is for --device cpu",
             "the device is cuda")
    with pytest.raises(ConfigError, match="^tile_bytes is for device=cpu") as err:
        mggcn.train("builtin:karate", device="cuda", tile_bytes=1024, epochs=1, quiet=True)
    assert err.value.option == "tile_bytes"


@pytest.mark.parametrize("argv, words", [
    (["prepare", "tiny.txt", "big", "--format", "edgelist", "--num-nodes", "100000000000000", "--quiet"],
     "tiny.txt: 100,000,000,000,000 vertices (the count given): their arrays would take about"),
    (["prepare", "builtin:karate", "full", "--overwrite", "--quiet"],
     "is not a prepared dataset (no manifest.json); --overwrite replaces only a prepared dataset or an empty "
     "directory\n"),
])
def test_a_library_message_says_each_setting_by_its_flag_once(argv, words, capsys, tmp_path, monkeypatch):
    """The command line says a setting by its flag, once: not as Python passes it (``num_nodes=``), and not the
    flag again after a message that named it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.txt").write_text("0 1\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("kept\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "=" not in err and err.count(argv[-2]) <= 1, err


@pytest.mark.parametrize("argv, words", [
    (["train", "builtin:karate", "--epochs", "1", "--save-model", "a" * 300 + ".pt"],
     "its name is 303 bytes long, and names in"),
    (["train", "builtin:karate", "--epochs", "1", "--save-model", "b" * 252 + ".pt"],  # its .pt.json: 260
     "the name of its model description is 260 bytes long, and names in"),
    (["train", "builtin:karate", "--epochs", "1", "--save-predictions", "c" * 256 + ".csv"],
     "its name is 260 bytes long, and names in"),
    (["train", "edges.txt", "--format", "edgelist", "--features", "d" * 300 + ".npy"],
     ".npy: a name in the path is longer than the file system takes (File name too long)"),
    (["prepare", "builtin:karate", "e" * 300, "--quiet"],
     ": a name in the path is longer than the file system takes (File name too long)"),
    (["info", "f" * 300], ": a name in the path is longer than the file system takes (File name too long)"),
])
def test_a_name_longer_than_the_file_system_takes_is_one_line_before_any_work(argv, words, capsys, tmp_path,
                                                                             monkeypatch):
    """A name beyond the file system's limit (255 bytes on most) as an input was a traceback (ENAMETOOLONG from
    deep inside a reader); as an output it trained to the end and failed on the rename, leaving a model without
    its description. Each is one line, exit 2, before any training; nothing is written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "edges.txt").write_text("0 1\n1 2\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert sorted(os.listdir(tmp_path)) == ["edges.txt"]


BENCH = ["bench", "--small", "--no-pyg", "--nprocs", "1"]
HUGE = str(2**63)


@pytest.mark.parametrize("argv, words", [
    ([*BENCH, "--nodes", HUGE], ["--nodes 9,223,372,036,854,775,808 with features 32", "GiB, more than this"]),
    ([*BENCH, "--features", HUGE], ["--nodes 3,000 with features 9,223,372,036,854,775,808", "GiB, more than this"]),
    ([*BENCH, "--hidden", HUGE], [f"--hidden {HUGE}: layers of [32, {HUGE}, 4] need", "more than this machine's"]),
    ([*BENCH, "--host-memory", HUGE], ["--host-memory must be less than 8 EiB"]),
])
def test_the_bench_refuses_sizes_no_machine_holds_before_it_starts(argv, words, capsys, tmp_path, monkeypatch):
    """As train refuses them: one line naming the option, exit 2, before any worker starts (the graph's generator
    failed in a worker, a width in torch's allocator with its C++ frames, a cap in setrlimit), nothing written."""
    monkeypatch.chdir(tmp_path)
    _refused(argv, capsys, *words)
    assert not os.listdir(tmp_path)
