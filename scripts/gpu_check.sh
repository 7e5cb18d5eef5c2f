#!/usr/bin/env bash
# The GPU check, under 8 minutes on one H200 (run it whenever a GPU machine is available; its tables go in
# docs/benchmarks.md).
# Seven steps, each under its own `timeout -k`, each run whatever the previous ones did:
#   1. imports: everything the other steps need, with versions, and the GPUs PyTorch sees (printed first);
#   2. CUDA tests: the SpMM on CUDA = CPU (outputs filled with NaN first), 3 epochs on CUDA = CPU (fp32, bf16, and
#      a GAT), 2 ranks over NCCL when there are 2+ GPUs, the benchmark's CUDA memory accounting;
#   3. plan: `mggcn plan` for the benchmark graph against the GPU's memory;
#   4. bench: `mggcn bench --device cuda` (one GPU: mggcn P = 1 in fp32 and bf16, tf32 too with
#      GPU_PRECISIONS=bf16,tf32, and PyG's GCNConv) on that graph; below its table, each precision's epoch time
#      against fp32's and its change of test accuracy;
#   5. shared GPU: P = 2 and 3 ranks on the GPUs there, more ranks than GPUs sharing them (MGGCN_SHARE_DEVICE=1,
#      gloo), with the broadcast, sparse and auto exchange, overlap on and off, and GIN with batch norms (their
#      statistics all-reduced over the ranks) with the broadcast: each one's losses against P = 1's
#      (scripts/rank_check.py ranks: the largest relative difference, PASS within 1e-4);
#   6. models: `mggcn bench --model sage`, `gin` and `gat` (P = 1 against PyG's GraphSAGE, GIN and GAT with 8 heads:
#      epoch, floor and GPU peak) on the models' graph, generated once for the three;
#   7. reproducible: GCN, GraphSAGE, GIN and GIN with batch norms, with dropout, trained twice at P = 1 and 2, the
#      losses compared bit for bit, and torch.use_deterministic_algorithms's list of non-deterministic kernels asked
#      about each model (scripts/rank_check.py repeat).
#
# Time: the steps together get GPU_CHECK_BUDGET seconds (default 465, their kill grace included): a step runs under
# its own limit or what is left of the budget, whichever is less, so the check ends within 8 minutes whatever
# hangs. Expected on an H200: imports ~10 s, CUDA tests ~1-1.5 min, plan ~5 s, bench ~2.5 min (its graph, then
# fp32, bf16 and PyG), shared GPU ~1.5-2 min (16 runs on 100k vertices, each P > 1 starting P CUDA contexts),
# models ~2 min (its graph, then three models and PyG's three), reproducible ~1.5 min (16 runs and 4 audited ones):
# more than the budget leaves when every step takes its expected time. The steps run in the order of what they
# show (the headline bench first), so a slow run cuts the last ones short (a bench's rows up to then are in its
# JSON).
#
# Sizes: the bench's graph is generated and sharded on the CPU (single-threaded numpy/scipy), which is what bounds
# the time, so the GPU is filled with a wide hidden layer rather than with more edges. The defaults, 1M vertices x
# 20 nonzeros, 512 features, hidden 4096, 64 classes: `mggcn plan` predicts 35.3 GiB for mggcn; PyG's GCNConv keeps
# about five 1M x 4096 float activations (~76 GiB), so on a 141 GB H200 both run and the comparison is real (a GPU
# of under 120 GiB, an H100, gets hidden 2048: ~38 GiB for PyG). The
# bench step takes about half the 300-340 s measured for 2M vertices x 20, 1024 features. Override with GPU_NODES,
# GPU_DEGREE, GPU_FEATURES, GPU_HIDDEN, GPU_CLASSES, GPU_EPOCHS; GPU_CHECK_TESTS names the test files of step 2;
# GPU_RANK_NODES (default 100000) and GPU_RANK_EPOCHS (5) size steps 5 and 7 (64 features, hidden 64, 8 classes);
# GPU_MODEL_NODES, GPU_MODEL_DEGREE, GPU_MODEL_FEATURES, GPU_MODEL_HIDDEN, GPU_MODEL_CLASSES step 6 (default 1M
# vertices x 20 nonzeros, 128 features, hidden 256,256, 40 classes: the graph issue 29 measured them on).
#
# Outputs in OUT_DIR (default: $OUT where that is set, else the current folder), all there after every step:
#   gpu_check.log         everything printed
#   gpu_check_steps.txt   one line per step so far: name, exit status, seconds (gpu_check.json: the same as JSON)
#   gpu_ranks.json        step 5's rows (configuration, losses, difference, pass), written after each
#   gpu_repeat.json       step 7's rows, written after each
#   gpu_bench.json        the bench's report, written as it grows (after every configuration, failed ones too)
#   gpu_bench.txt         the bench's table, made from gpu_bench.json (also when the bench was stopped midway)
#   gpu_sage.json, gpu_gin.json, gpu_gat.json (and .txt)   step 6's reports and tables, the same way
# Exit status: 0 when every step passed, else the sum of the failed steps' bits (imports 1, CUDA tests 2, plan 4,
# bench 8, shared GPU 16, models 32, reproducible 64), and the last line names them.
#
# It checks this checkout's mggcn (src/ goes first on PYTHONPATH; no install needed) and runs `python3` (the
# Python that holds PyTorch on the GPU machines lent here), else `python`, or $PYTHON.
# GPU_CHECK_DEVICE=cpu rehearses every step on the CPU at the sizes given (the test suite runs it tiny): the same
# commands, options and output files, with the CUDA tests skipped.
#
#   scripts/gpu_check.sh            # from the repository root
#   GPU_CHECK_DEVICE=cpu GPU_NODES=2000 GPU_FEATURES=16 GPU_HIDDEN=16 GPU_CLASSES=4 GPU_RANK_NODES=2000 \
#       scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT_DIR=${OUT_DIR:-${OUT:-.}}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
NODES=${GPU_NODES:-1000000}
DEGREE=${GPU_DEGREE:-20}
FEATURES=${GPU_FEATURES:-512}
HIDDEN=${GPU_HIDDEN:-}  # unset: 4096, or 2048 on a GPU of under 120 GiB (after the imports step)
CLASSES=${GPU_CLASSES:-64}
EPOCHS=${GPU_EPOCHS:-5}
RANK_NODES=${GPU_RANK_NODES:-100000}
RANK_EPOCHS=${GPU_RANK_EPOCHS:-5}
BUDGET=${GPU_CHECK_BUDGET:-465}
TESTS=${GPU_CHECK_TESTS:-tests/tools/test_bench.py tests/distributed/test_spmm.py}
PY=${PYTHON:-$(command -v python3 || command -v python)}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's mggcn, whatever else is installed
mkdir -p "$OUT_DIR" || exit 1
exec > >(tee "$OUT_DIR/gpu_check.log") 2>&1
MODELS="sage gin gat"
for name in bench $MODELS; do rm -f "$OUT_DIR/gpu_$name.json" "$OUT_DIR/gpu_$name.txt"; done
rm -f "$OUT_DIR/gpu_check_steps.txt" "$OUT_DIR/gpu_check.json" "$OUT_DIR/gpu_ranks.json" "$OUT_DIR/gpu_repeat.json"
MODEL_CACHE=$(mktemp -d) || exit 1  # the models' graph, shared by their benches; not one of the outputs
trap 'rm -rf "$MODEL_CACHE"' EXIT

STEP_TAG=gpu_check
STEPS_FILE="$OUT_DIR/gpu_check_steps.txt"
# shellcheck source=steps.sh
. scripts/steps.sh
STEPS_JSON=""

# step NAME SECONDS COMMAND...: run_step under SECONDS or what is left of the budget (less the kill grace), then
# bring the step JSON (and the tables of the bench reports written since they were made) up to date.
step() {
    local name=$1 limit
    limit=$(limited "$2")
    shift 2
    run_step "$name" "$limit" "$@"
    STEPS_JSON="${STEPS_JSON:+$STEPS_JSON, }{\"step\": \"$name\", \"exit\": $STEP_RC, \"seconds\": $STEP_S}"
    echo "{\"device\": \"$DEVICE\", \"steps\": [$STEPS_JSON]}" > "$OUT_DIR/gpu_check.json"
    local report stale=()
    for report in bench $MODELS; do  # the reports written since their tables were made, in one interpreter
        [ "$OUT_DIR/gpu_$report.json" -nt "$OUT_DIR/gpu_$report.txt" ] && stale+=("$OUT_DIR/gpu_$report.json")
    done
    [ ${#stale[@]} -eq 0 ] && return 0
    timeout -k 5 "$(limited 60)" "$PY" -c "import json, sys; from mggcn.tools.bench import format_table
for path in sys.argv[1:]:
    with open(path.removesuffix('.json') + '.txt', 'w') as f:
        print(format_table(json.load(open(path))), file=f)" "${stale[@]}" \
        || echo "gpu_check: could not make the tables of ${stale[*]}"
    return 0
}

# the modules the steps import, with versions, and the devices; exit 1 when one is missing or (cuda) no GPU
imports() {
    "$PY" - "$DEVICE" <<'EOF'
import importlib
import os
import sys

missing = []
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "numpy", "scipy", "torch_geometric", "pytest", "mggcn", "mggcn.tools.cli", "mggcn.tools.bench",
             "mggcn.tools.plan", "mggcn.training.trainer", "mggcn.distributed.exchange"):
    try:
        module = importlib.import_module(name)
    except Exception as err:  # any failure to import is what this step reports
        missing.append(name)
        print(f"{name:28} MISSING: {type(err).__name__}: {err}")
    else:
        where = getattr(module, "__file__", "") or ""
        print(f"{name:28} {getattr(module, '__version__', '')} {where if name == 'mggcn' else ''}".rstrip())
try:
    import torch

    gpus = torch.cuda.device_count()
    names = ", ".join(f"{p.name} {p.total_memory / 2**30:.1f} GiB" for p in
                      (torch.cuda.get_device_properties(i) for i in range(gpus)))
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if gpus else "-"
    print(f"CUDA {torch.version.cuda}: {gpus} GPU(s) ({names or 'none'}); NCCL {nccl}; {os.cpu_count()} cores")
except Exception as err:
    gpus = 0
    print("CUDA: not usable:", err)
if sys.argv[1] == "cuda" and gpus < 1:
    missing.append("a CUDA device")
if missing:
    print("gpu_check: missing:", ", ".join(missing))
    sys.exit(1)
EOF
}

memory() {  # the bytes the plan checks against: the GPU's, or the host's on the CPU rehearsal
    if [ "$DEVICE" = cuda ]; then
        "$PY" -c "import torch; print(torch.cuda.get_device_properties(0).total_memory)" 2>/dev/null
    else
        "$PY" -c "import os; print(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES'))"
    fi
}

plan() {
    local edges bytes
    edges=$("$PY" -c "print(int($NODES * $DEGREE))") || return 1
    bytes=$(memory)
    "$PY" -m mggcn plan --nodes "$NODES" --edges "$edges" --features "$FEATURES" --classes "$CLASSES" \
        --hidden "$HIDDEN" --device "$DEVICE" ${bytes:+--memory "$bytes"}
}

bench() {
    "$PY" -m mggcn bench --device "$DEVICE" --nodes "$NODES" --degree "$DEGREE" --features "$FEATURES" \
        --hidden "$HIDDEN" --classes "$CLASSES" --epochs "$EPOCHS" --warmup 2 --nprocs 1 \
        --partition random-local ${PRECISIONS:+--compare-precision "$PRECISIONS"} --timeout 270 \
        --out "$OUT_DIR/gpu_bench.json"
}

# GraphSAGE, GIN and GAT against PyG's, one after the other on one graph (generated by the first, read by the others)
models() {
    local model rc=0
    for model in $MODELS; do
        "$PY" -m mggcn bench --model "$model" --device "$DEVICE" --nodes "$MODEL_NODES" --degree "$MODEL_DEGREE" \
            --features "$MODEL_FEATURES" --hidden "$MODEL_HIDDEN" --classes "$MODEL_CLASSES" --epochs "$EPOCHS" \
            --warmup 2 --nprocs 1 --partition random-local --graph-cache "$MODEL_CACHE/graph" --timeout 120 \
            --out "$OUT_DIR/gpu_$model.json" || rc=1
    done
    return $rc
}

# rank_check.py's graph and model (steps 5 and 7): small, so that each run's cost is its ranks' start
rank_check() {
    MGGCN_SHARE_DEVICE=1 "$PY" scripts/rank_check.py "$1" --device "$DEVICE" --nodes "$RANK_NODES" --degree 10 \
        --features 64 --hidden 64 --classes 8 --epochs "$RANK_EPOCHS" --out "$OUT_DIR/gpu_$1.json"
}

# the steps run as child shells (timeout runs programs, not shell functions)
export -f imports memory plan bench models rank_check
# the bench's precision rows beside fp32 on a GPU (a CPU rehearsal runs none unless asked: a CPU has no TF32 mode,
# and tests/tools/test_bench.py checks the comparison itself)
if [ "$DEVICE" = cuda ]; then PRECISIONS=${GPU_PRECISIONS-bf16}; else PRECISIONS=${GPU_PRECISIONS-}; fi
MODEL_NODES=${GPU_MODEL_NODES:-1000000}
MODEL_DEGREE=${GPU_MODEL_DEGREE:-20}
MODEL_FEATURES=${GPU_MODEL_FEATURES:-128}
MODEL_HIDDEN=${GPU_MODEL_HIDDEN:-256,256}
MODEL_CLASSES=${GPU_MODEL_CLASSES:-40}
export PY DEVICE NODES DEGREE FEATURES HIDDEN CLASSES EPOCHS OUT_DIR RANK_NODES RANK_EPOCHS PRECISIONS MODELS \
    MODEL_NODES MODEL_DEGREE MODEL_FEATURES MODEL_HIDDEN MODEL_CLASSES MODEL_CACHE
[ "$DEVICE" = cuda ] && { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true; }
step imports 60 bash -c imports
# PyG's ~76 GiB at hidden 4096 fit an H200 (141 GB), not an H100 (80 GB): there the bench's comparison would be an
# out-of-memory row, so a smaller GPU gets half the width and both sides still run
if [ -z "$HIDDEN" ]; then
    HIDDEN=4096
    bytes=$(timeout -k 5 60 bash -c memory)  # a query that hangs must not hold the check past its budget
    if [ "$DEVICE" = cuda ] && [[ "$bytes" =~ ^[0-9]+$ ]] && [ "$bytes" -lt $((120 << 30)) ]; then
        HIDDEN=2048
        echo "gpu_check: the GPU has $((bytes >> 30)) GiB: the bench runs hidden $HIDDEN (GPU_HIDDEN sets it)"
    fi
    export HIDDEN
fi
# shellcheck disable=SC2086  # TESTS is a list of paths
step "CUDA tests" 180 "$PY" -m pytest $TESTS -q -k cuda -rs -p no:cacheprovider
step plan 30 bash -c plan
step bench 300 bash -c bench
step "shared GPU" 150 bash -c "rank_check ranks"
step models 300 bash -c models
step reproducible 120 bash -c "rank_check repeat"

finish_steps
