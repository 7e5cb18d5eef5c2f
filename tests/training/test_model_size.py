"""Layer sizes no machine of this one's memory can train are refused before anything that large is allocated (the
process would otherwise die in the allocator, or be killed by the system's out-of-memory killer with no word);
sizes within memory are left to the run."""

import pytest

from cli_util import run_cli
from mggcn.config import TrainConfig
from mggcn.nn.models import num_parameters
from mggcn.training import settings as settings_module
from mggcn.utils.errors import ConfigError


def _one_line(out, *words: str) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr and all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.mark.parametrize("args, words", [
    (["--hidden", "99999999999"], ["--hidden 99999999999", "GiB", "more than this machine's"]),
    (["--hidden", "100000000", "--nprocs", "2"], ["--hidden 100000000", "more than this machine's"]),
    (["--model", "gat", "--heads", "99999999999", "--hidden", ""], ["--heads 99999999999", "more than"]),
])
def test_the_command_refuses_layers_beyond_memory_in_one_line(tmp_path, args, words):
    metrics = tmp_path / "m.jsonl"
    _one_line(run_cli("train", "builtin:karate", "--epochs", "1", "--metrics", str(metrics), *args, timeout=60),
              *words)
    assert not metrics.exists()


def test_the_bound_is_memory_for_weights_adam_and_one_activation_per_rank(monkeypatch):
    dims = [34, 64, 2]
    need = 2 * (16 * num_parameters(dims, "gcn") + 4 * 17 * 64)  # 2 ranks, 17 rows each, the widest layer 64
    cfg = TrainConfig(hidden=(64,))
    monkeypatch.setattr(settings_module, "physical_memory", lambda: need)
    settings_module.check_model_size(cfg, 34, 2, 34, 2)  # exactly enough: left to the run
    monkeypatch.setattr(settings_module, "physical_memory", lambda: need - 1)
    with pytest.raises(ConfigError, match=r"hidden 64: layers of \[34, 64, 2\] need") as info:
        settings_module.check_model_size(cfg, 34, 2, 34, 2)
    assert info.value.option == "hidden"
    monkeypatch.setattr(settings_module, "physical_memory", lambda: None)  # the system does not say: nothing refused
    settings_module.check_model_size(TrainConfig(hidden=(10**12,)), 34, 2, 34, 2)


def test_a_gats_output_heads_beyond_memory_are_named_as_such():
    """The last layer's heads alone out of reach were said as --heads, which was within reach."""
    out = run_cli("train", "builtin:karate", "--epochs", "1", "--model", "gat", "--output-heads", str(10**15),
                  timeout=60)
    assert _one_line(out, "more than this machine's").startswith(f"mggcn train: error: --output-heads {10**15}: ")
    both = run_cli("train", "builtin:karate", "--epochs", "1", "--model", "gat", "--heads", "99999999999",
                   "--hidden", "", "--output-heads", "99999999999", timeout=60)
    assert _one_line(both, "more than this machine's").startswith("mggcn train: error: --heads 99999999999")


def test_the_python_api_refuses_the_same_way():
    import mggcn

    with pytest.raises(ConfigError, match="hidden 99999999999: layers of"):
        mggcn.train("builtin:karate", hidden=(99999999999,), epochs=1, quiet=True)
