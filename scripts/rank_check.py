"""The multi-rank and reproducibility steps of the GPU check (scripts/gpu_check.sh), on one generated graph.

    python scripts/rank_check.py ranks [--device D] [--nprocs 2,3] [--rtol R] [--out FILE]
        Trains at P = 1, then at each P of --nprocs with the broadcast, sparse and auto exchange, each with and
        without overlap: one line per configuration with the largest relative difference of its per-epoch losses
        from P = 1's, and PASS (at most --rtol) or FAIL. Then GIN with batch norms (gin+norms: their statistics are
        all-reduced over the ranks) at P = 1 and at each P with the broadcast and overlap. On CUDA, more ranks than
        GPUs run only with MGGCN_SHARE_DEVICE=1 (rank r on GPU r mod G, over gloo): gpu_check.sh sets it, and a line
        per P says where the ranks went.
    python scripts/rank_check.py repeat [--device D] [--models gcn,sage,gin,gin+norms] [--out FILE]
        Trains each model (default the GCN, GraphSAGE, GIN and GIN with batch norms; GAT's edge sums are atomic on
        CUDA: docs/benchmarks.md) with dropout twice at P = 1 and 2 and compares the losses bit for bit: PASS or
        FAIL per model and P. Then at P = 1 once more under torch.use_deterministic_algorithms(True,
        warn_only=True): torch names there every kernel of the run it knows to be non-deterministic (FAIL when it
        names one).

Both take the graph's and the model's sizes (--nodes, --degree, --features, --classes, --hidden, --epochs) and print
each line as its configuration ends; ``--out`` writes the rows so far as JSON after each. Exit status 0 when every
line says PASS, 1 otherwise; a configuration that fails with an error is a FAIL line naming it, and the others run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings

COMMS = ("broadcast", "sparse", "auto")
# the models whose CUDA kernels are deterministic (docs/benchmarks.md), by the names the check gives them
MODELS = {"gcn": {"model": "gcn"}, "sage": {"model": "sage"}, "gin": {"model": "gin"},
          "gin+norms": {"model": "gin", "batch_norm": True, "gin_mlp_batch_norm": True}}
NORMS = "gin+norms"  # the model of the ranks check's batch-norm lines


def model_options(name: str) -> dict:
    """The training options of a model the check names (one of :data:`MODELS`, or any model mggcn has)."""
    return dict(MODELS.get(name, {"model": name}))


def max_relative_difference(got: list[float], expected: list[float]) -> float:
    """The largest ``|got - expected| / |expected|`` over the epochs; inf when the counts differ or a loss is not
    finite (a NaN must not pass as a small difference)."""
    if len(got) != len(expected) or not all(math.isfinite(v) for v in (*got, *expected)):
        return math.inf
    return max((abs(g - e) / abs(e) if e else abs(g) for g, e in zip(got, expected)), default=0.0)


class Rows:
    """The check's verdicts: printed one line each as they come, kept for ``--out`` (rewritten after each)."""

    def __init__(self, out: str | None) -> None:
        self.out, self.rows, self.start = out, [], time.monotonic()

    def add(self, name: str, ok: bool, detail: str, **fields) -> None:
        self.rows.append({"name": name, "pass": ok, "detail": detail, **fields})
        print(f"{name:32} {detail:44} {'PASS' if ok else 'FAIL'}  ({time.monotonic() - self.start:.0f} s)", flush=True)
        if self.out:
            from mggcn.utils.files import atomic_write

            atomic_write(self.out, self._write)

    def _write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"rows": self.rows}, f, indent=1)

    def failed(self, name: str, err: BaseException) -> None:
        self.add(name, False, f"{type(err).__name__}: {' '.join(str(err).split())}"[:200])

    def status(self) -> int:
        bad = [r["name"] for r in self.rows if not r["pass"]]
        print(f"rank_check: {len(self.rows) - len(bad)} of {len(self.rows)} passed"
              + (f"; failed: {', '.join(bad)}" if bad else ""), flush=True)
        return 1 if bad or not self.rows else 0


def train_losses(args: argparse.Namespace, nprocs: int, **options) -> list[float]:
    """The per-epoch losses of one run on the check's graph (broadcast through the backend: no shared memory, as
    between GPUs)."""
    import mggcn

    spec = f"synthetic:n={args.nodes},degree={args.degree},features={args.features},classes={args.classes}"
    result = mggcn.train(spec, nprocs=nprocs, hidden=(args.hidden,), epochs=args.epochs, device=args.device,
                         quiet=True, shm="off", trace_epoch=0, seed=args.seed, **options)
    return [float(r["loss"]) for r in result.history]


def placement(device: str, nprocs: int) -> str:
    """Where ``nprocs`` local ranks go and over which backend (the context's decision, as each rank makes it)."""
    from mggcn.distributed.context import rank_placement

    places = [rank_placement(device, r, nprocs) for r in range(nprocs)]
    return f"{', '.join(str(d) for d, _ in places)} over {places[0][1]}"


def check_ranks(args: argparse.Namespace, rows: Rows) -> None:
    expected = reference(args, rows, "P=1")
    norms = model_options(NORMS)  # batch norms: their statistics are summed over the ranks
    expected_norms = reference(args, rows, f"{NORMS} P=1", **norms)
    for nprocs in args.nprocs:
        try:
            print(f"P={nprocs}: ranks on {placement(args.device, nprocs)}", flush=True)
        except Exception as err:  # noqa: BLE001 - refused (no switch): every configuration of this P would be too
            rows.failed(f"P={nprocs}", err)
            continue
        if expected is not None:
            for comm in COMMS:
                for overlap in (True, False):
                    compare(args, rows, f"P={nprocs} {comm} overlap={'on' if overlap else 'off'}", nprocs, expected,
                            comm=comm, overlap=overlap)
        if expected_norms is not None:
            compare(args, rows, f"{NORMS} P={nprocs} broadcast", nprocs, expected_norms, comm="broadcast",
                    overlap=True, **norms)


def reference(args: argparse.Namespace, rows: Rows, name: str, **options) -> list[float] | None:
    """P = 1's losses, its line added (None, and a FAIL line, where it failed)."""
    try:
        expected = train_losses(args, 1, **options)
    except Exception as err:  # noqa: BLE001 - the reference failed: its comparisons are not run
        rows.failed(name, err)
        return None
    rows.add(name, all(map(math.isfinite, expected)), f"{len(expected)} losses, last {expected[-1]:.6f}",
             losses=expected)
    return expected


def compare(args: argparse.Namespace, rows: Rows, name: str, nprocs: int, expected: list[float], **options) -> None:
    """One configuration at ``nprocs`` ranks against P = 1's ``expected`` losses: its line."""
    try:
        losses = train_losses(args, nprocs, **options)
    except Exception as err:  # noqa: BLE001 - one configuration's error is its FAIL line
        rows.failed(name, err)
        return
    diff = max_relative_difference(losses, expected)
    rows.add(name, diff <= args.rtol, f"max relative difference {diff:.2e}", losses=losses,
             max_relative_difference=diff)


def check_repeat(args: argparse.Namespace, rows: Rows) -> None:
    stochastic = {"dropout": 0.5, "input_dropout": 0.2}  # the masks come from the seed too
    for model in args.models:
        for nprocs in (1, 2):
            name = f"{model} P={nprocs} twice"
            try:
                first, second = (train_losses(args, nprocs, **model_options(model), **stochastic)
                                 for _ in range(2))
            except Exception as err:  # noqa: BLE001 - one configuration's error is its FAIL line
                rows.failed(name, err)
                continue
            same = first == second  # float for float: bitwise for finite losses
            differ = next((e for e, (a, b) in enumerate(zip(first, second), 1) if a != b), None)
            rows.add(name, same, "bitwise equal" if same else f"differ from epoch {differ}", losses=[first, second])
    audit(args, rows, stochastic)


def audit(args: argparse.Namespace, rows: Rows, options: dict) -> None:
    """torch's own list of non-deterministic kernels, asked about every kernel of a P = 1 run of each model."""
    import torch

    # cuBLAS's workspace setting that torch asks for in this mode (else it warns about cuBLAS whatever the kernels)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        for model in args.models:
            name = f"{model} P=1 torch audit"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    train_losses(args, 1, **model_options(model), **options)
                except Exception as err:  # noqa: BLE001 - one configuration's error is its FAIL line
                    rows.failed(name, err)
                    continue
            named = sorted({str(w.message).split(",")[0] for w in caught if "deterministic" in str(w.message)})
            rows.add(name, not named, "; ".join(named) or "no non-deterministic kernel named", kernels=named)
    finally:
        torch.use_deterministic_algorithms(False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rank_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("check", choices=("ranks", "repeat"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--nprocs", default="2,3", type=lambda s: [int(p) for p in s.split(",")])
    parser.add_argument("--models", default=",".join(MODELS), type=lambda s: s.split(","))
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--degree", type=int, default=10)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    # float32 SpMM sums and the all-reduce in another order at each P: a few ulps per epoch, compounding over Adam's
    # steps (1e-6 relative on the CPU over 10 epochs); cuSPARSE and cuBLAS keep to the same order of rounding
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rows = Rows(args.out)
    try:
        (check_ranks if args.check == "ranks" else check_repeat)(args, rows)
    except Exception as err:  # noqa: BLE001 - the reference run itself failed: said as a FAIL line
        rows.failed(args.check, err)
    return rows.status()


if __name__ == "__main__":
    sys.exit(main())
