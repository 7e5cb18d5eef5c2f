#!/usr/bin/env bash
# The GPU check, under 8 minutes on one H200 (run it whenever a GPU machine is available; put the table in README):
#   1. the CUDA tests (SpMM forward/backward on CUDA = CPU, 3 epochs on CUDA = CPU; 2 ranks over NCCL when there
#      are 2+ GPUs; the benchmark's CUDA memory accounting), then
#   2. `mggcn bench --device cuda` on a graph sized by `mggcn plan` to fill a large part of the GPU, printing the
#      table (and writing it to $OUT_DIR/gpu_bench.json).
#
# Sizes: the graph is generated and sharded on the CPU (single-threaded numpy/scipy, ~3-5 s per million nonzeros),
# which is what bounds the time, so the GPU is filled with wide layers rather than with more edges. The defaults,
# 2M vertices x 20 nonzeros, 1024 features, hidden 4096, 64 classes: `mggcn plan` predicts ~79 GiB per rank for
# mggcn, so PyG's GCNConv (which keeps ~5 activations of 2M x 4096 floats) is expected to run out of memory on a
# 141 GB H200; the bench records that as a failed configuration. Override with GPU_NODES, GPU_DEGREE,
# GPU_FEATURES, GPU_HIDDEN, GPU_CLASSES, GPU_EPOCHS.
#
# It needs no installed mggcn (it puts src/ on PYTHONPATH when `import mggcn` fails) and runs `python3` (the
# Python that holds PyTorch on the GPU machines lent here), else `python`, or $PYTHON. The table and a log
# (gpu_check.log) go to OUT_DIR (default: $OUT where that is set, else the current folder).
# GPU_CHECK_DEVICE=cpu rehearses every step on the CPU at the sizes given (the test suite runs it tiny): the same
# commands, options and output files, with the CUDA tests skipped.
#
#   scripts/gpu_check.sh            # from the repository root
#   GPU_CHECK_DEVICE=cpu GPU_NODES=2000 GPU_FEATURES=16 GPU_HIDDEN=16 GPU_CLASSES=4 scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

OUT_DIR=${OUT_DIR:-${OUT:-.}}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
NODES=${GPU_NODES:-2000000}
DEGREE=${GPU_DEGREE:-20}
FEATURES=${GPU_FEATURES:-1024}
HIDDEN=${GPU_HIDDEN:-4096}
CLASSES=${GPU_CLASSES:-64}
EPOCHS=${GPU_EPOCHS:-5}
PY=${PYTHON:-$(command -v python3 || command -v python)}
if ! "$PY" -c "import mggcn" 2>/dev/null; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
mkdir -p "$OUT_DIR"
exec > >(tee "$OUT_DIR/gpu_check.log") 2>&1

if [ "$DEVICE" = cuda ]; then
    GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
    if [ "$GPUS" -lt 1 ]; then
        echo "gpu_check: no CUDA device visible to PyTorch" >&2
        exit 1
    fi
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
    MEMORY=$("$PY" -c "import torch; print(torch.cuda.get_device_properties(0).total_memory)")
else
    MEMORY=$("$PY" -c "import os; print(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES'))")
fi
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"

echo "== CUDA tests"
timeout 150 "$PY" -m pytest tests/tools/test_bench.py -q -k cuda -rs -p no:cacheprovider

echo "== plan for the benchmark graph"
EDGES=$("$PY" -c "print(int($NODES * $DEGREE))")
"$PY" -m mggcn plan --nodes "$NODES" --edges "$EDGES" --features "$FEATURES" --classes "$CLASSES" \
    --hidden "$HIDDEN" --memory "$MEMORY"

echo "== benchmark (one GPU: mggcn P = 1 and PyG; P = 2 on GPUs is checked by the NCCL test above)"
timeout 330 "$PY" -m mggcn bench --device "$DEVICE" --nodes "$NODES" --degree "$DEGREE" --features "$FEATURES" \
    --hidden "$HIDDEN" --classes "$CLASSES" --epochs "$EPOCHS" --warmup 2 --nprocs 1 \
    --partition random-local --timeout 300 --out "$OUT_DIR/gpu_bench.json"
