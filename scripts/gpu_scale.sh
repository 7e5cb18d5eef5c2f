#!/usr/bin/env bash
# The scale check on one GPU, within 8 minutes on one H200 (run it whenever a GPU machine is available; put the
# table in docs/benchmarks.md). The seed's two shapes, each a 3-layer GCN (hidden 128,128), mggcn at P = 1 beside
# PyG's GCNConv, both capped at SCALE_GPU_MEMORY (default 64G) of the GPU:
#   Reddit shape    233,000 vertices x 492 = 114.6M nonzeros, 602 features, 41 classes
#   Proteins shape  8,750,000 vertices x 137 = 1.20B nonzeros, 128 features, 256 classes
# Five steps, each under its own `timeout -k`, each run whatever the previous ones did:
#   1. imports: the modules, with versions, and the GPUs PyTorch sees;
#   2. plan: `mggcn plan` for the Reddit and Proteins datasets against the cap;
#   3. reddit: `mggcn bench` on the Reddit shape (the graph generated on every core, written, trained from);
#   4. proteins: the same on the Proteins shape;
#   5. table: one table of both (scripts/scale_check.py table): generation s and nonzeros/s, time to the first
#      epoch, s/epoch, GPU peak, plan and net/plan, and PyG's numbers or "out of memory".
#
# Time: the steps before the table get SCALE_BUDGET seconds (default 440, their kill grace and the table's remakes
# included): each, and each remake after it, runs under its own limit or what is left of the budget, whichever is
# less; the table step has its own 20 s after them, so the check ends within 8 minutes whatever hangs.
#
# Outputs in OUT_DIR (default: $OUT where that is set, else the current folder), all there after every step:
#   gpu_scale.log                 everything printed
#   gpu_scale_steps.txt           one line per step so far: name, exit status, seconds
#   scale_reddit.json, scale_proteins.json   each bench's report, written as it grows
#   gpu_scale.md                  the table, remade after every step from the reports there are
# The graphs are written under SCALE_CACHE (default /tmp/mggcn_scale, emptied first and last, so that generation
# is measured). Exit status: 0 when every step passed, else the sum of the failed steps' bits (imports 1, plan 2,
# reddit 4, proteins 8, table 16), and the last line names them.
#
# It checks this checkout's mggcn (src/ first on PYTHONPATH) with `python3`, else `python`, or $PYTHON.
# SCALE_DEVICE=cpu rehearses every step on the CPU (the test suite runs it tiny): the same commands and outputs, at
# the sizes SCALE_REDDIT and SCALE_PROTEINS give ("nodes degree features classes"), SCALE_EPOCHS timed epochs.
#
#   scripts/gpu_scale.sh            # from the repository root
#   SCALE_DEVICE=cpu SCALE_REDDIT="2000 20 16 4" SCALE_PROTEINS="4000 10 8 6" SCALE_HIDDEN=8,8 scripts/gpu_scale.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT_DIR=${OUT_DIR:-${OUT:-.}}
DEVICE=${SCALE_DEVICE:-cuda}
REDDIT=${SCALE_REDDIT:-233000 492 602 41}
PROTEINS=${SCALE_PROTEINS:-8750000 137 128 256}
HIDDEN=${SCALE_HIDDEN:-128,128}
EPOCHS=${SCALE_EPOCHS:-5}
CAP=${SCALE_GPU_MEMORY:-64G}
CACHE=${SCALE_CACHE:-/tmp/mggcn_scale}
BUDGET=${SCALE_BUDGET:-440}
PY=${PYTHON:-$(command -v python3 || command -v python)}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's mggcn, whatever else is installed
mkdir -p "$OUT_DIR" || exit 1
exec > >(tee "$OUT_DIR/gpu_scale.log") 2>&1
rm -rf "$CACHE"
rm -f "$OUT_DIR"/gpu_scale_steps.txt "$OUT_DIR"/scale_*.json "$OUT_DIR"/gpu_scale.md

STEP_TAG=gpu_scale
STEPS_FILE="$OUT_DIR/gpu_scale_steps.txt"
# shellcheck source=steps.sh
. scripts/steps.sh

# remake the table from the reports written so far (a bench stopped midway has written the rows it finished; a
# shape without a report is a line that says so)
table() {
    ls "$OUT_DIR"/scale_*.json > /dev/null 2>&1 || return 0
    "$PY" scripts/scale_check.py table "reddit=$OUT_DIR/scale_reddit.json" "proteins=$OUT_DIR/scale_proteins.json" \
        --out "$OUT_DIR/gpu_scale.md"
}

# step NAME SECONDS COMMAND...: run_step under SECONDS or what is left of the budget (the table: its SECONDS), then
# remake the table
step() {
    local name=$1 limit=$2
    [ "$name" = table ] || limit=$(limited "$2")
    shift 2
    run_step "$name" "$limit" "$@"
    [ "$name" = table ] || timeout -k 5 "$(limited 60)" bash -c table > /dev/null ||
        echo "gpu_scale: the table could not be made"
}

imports() {
    "$PY" - "$DEVICE" <<'EOF'
import importlib
import os
import sys

missing = []
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "numpy", "scipy", "torch_geometric", "mggcn", "mggcn.tools.bench", "mggcn.tools.plan"):
    try:
        module = importlib.import_module(name)
    except Exception as err:  # any failure to import is what this step reports
        missing.append(name)
        print(f"{name:20} MISSING: {type(err).__name__}: {err}")
    else:
        print(f"{name:20} {getattr(module, '__version__', '')} {module.__file__ if name == 'mggcn' else ''}".rstrip())
import torch

gpus = torch.cuda.device_count()
names = ", ".join(f"{torch.cuda.get_device_properties(i).name} "
                  f"{torch.cuda.get_device_properties(i).total_memory / 2**30:.1f} GiB" for i in range(gpus))
print(f"CUDA {torch.version.cuda}: {gpus} GPU(s) ({names or 'none'}); {os.cpu_count()} cores")
if sys.argv[1] == "cuda" and gpus < 1:
    missing.append("a CUDA device")
if missing:
    print("gpu_scale: missing:", ", ".join(missing))
    sys.exit(1)
EOF
}

plan() {
    "$PY" -m mggcn plan --dataset reddit --hidden "$HIDDEN" --device "$DEVICE" --memory "$CAP" &&
        "$PY" -m mggcn plan --dataset proteins --hidden "$HIDDEN" --device "$DEVICE" --memory "$CAP"
}

# bench SHAPE SECONDS: mggcn P = 1 and PyG's GCNConv on the shape's graph, each configuration under SECONDS
bench() {
    local shape=$1 limit=$2 sizes nodes degree features classes cap=()
    [ "$shape" = reddit ] && sizes=$REDDIT || sizes=$PROTEINS
    read -r nodes degree features classes <<< "$sizes"
    [ "$DEVICE" = cuda ] && cap=(--gpu-memory "$CAP")
    "$PY" -m mggcn bench --device "$DEVICE" --nprocs 1 --partition random-local --nodes "$nodes" \
        --degree "$degree" --features "$features" --classes "$classes" --hidden "$HIDDEN" --epochs "$EPOCHS" \
        --warmup 2 --graph-cache "$CACHE/$shape" --timeout "$limit" "${cap[@]}" --out "$OUT_DIR/scale_$shape.json"
    local rc=$?
    rm -rf "${CACHE:?}/$shape"  # the next shape needs the disk
    return $rc
}

export -f imports plan bench table
export PY DEVICE REDDIT PROTEINS HIDDEN EPOCHS CAP CACHE OUT_DIR
[ "$DEVICE" = cuda ] && { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true; }
step imports 45 bash -c imports
step plan 40 bash -c plan
step reddit 130 bash -c "bench reddit 100"
step proteins 260 bash -c "bench proteins 190"
step table 20 bash -c table
rm -rf "$CACHE"

echo
cat "$OUT_DIR/gpu_scale.md" 2>/dev/null
finish_steps
