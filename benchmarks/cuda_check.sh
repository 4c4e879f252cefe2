#!/usr/bin/env bash
# The GPU check of the CUDA bundles (issue 14), for a session that has an NVIDIA GPU:
#   1. the tests marked `gpu` (every zoo model's bundle and the odd-shaped GEMM/conv models
#      of tests/schedules/gpu/test_gemm.py built by nvcc, run on the GPU, compared with the
#      reference executor);
#   2. the fp16 tensor-core GEMM (--precision fp16, nvcuda::wmma) at n = 1024 and 4096
#      against cuBLAS fp16 (PyTorch, float32 accumulation) in the same run: the issue's goal
#      is "kernel ratio" <= 1.43 (>= 70 % of cuBLAS) at 4096; the `kernel` column says
#      whether the tensor-core kernel was chosen (wmma) or the SIMT one;
#   3. the fp16 tensor-core GEMM at 4096 built with each tile variant of benchmarks/cuda.py's
#      SWEEP (warps a block, fragments a warp, step, double buffer, shared-row padding,
#      16-byte fetches) and the default tiles, each one's kernel ratio to cuBLAS fp16: the
#      fastest row is the candidate default for choose_wmma_tiles;
#   4. benchmarks/cuda.py with both GPU schedules in one run (tiled: the strategy table's
#      tiled GEMM; generic: one thread per output) on ResNet-18 (+ PyTorch eager's where
#      torch/torchvision are installed) and the transformer encoder, and the GEMM table
#      against cuBLAS.
# Each step has its own time limit, 570 s in all, so that the whole check ends inside one
# 10-minute device command (steps 1, 2 and 4 took 36, 23 and 83 s on an H200); the log
# is also written to $OUT/cuda_check.log when $OUT is set (the device tool's output folder).
#
#   bash benchmarks/cuda_check.sh            # from the repository root or anywhere
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
log="${OUT:-${TMPDIR:-/tmp}}/cuda_check.log"
: > "$log"
status=0

step() {  # step SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2
    shift 2
    echo "== $what (at most ${limit}s): $*" | tee -a "$log"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    echo "== $what: exit $rc after $((SECONDS - t0))s" | tee -a "$log"
    [ "$rc" -eq 0 ] || status=1
}

nvidia-smi -L 2>&1 | tee -a "$log" || { echo "no NVIDIA GPU here" | tee -a "$log"; exit 1; }
step 90 "gpu tests" python -m pytest -q -p no:cacheprovider -n 8 -m gpu -rs \
    tests/bundle/test_cuda.py tests/codegen/test_cuda_shared.py tests/schedules/gpu/test_gemm.py \
    tests/bundle/test_cuda_fp16.py tests/schedules/gpu/test_tensorcore.py
step 60 "fp16 tensor-core GEMM vs cuBLAS fp16" python benchmarks/cuda.py --target cuda-sm90 \
    --models '' --gemm 1024,4096 --gemm-precision fp16 --repeat 20
step 240 "fp16 GEMM tile sweep vs cuBLAS fp16" python benchmarks/cuda.py --target cuda-sm90 \
    --models '' --gemm '' --gemm-sweep 4096 --repeat 20
step 180 "benchmark" python benchmarks/cuda.py --target cuda-sm90 \
    --models resnet18,transformer_encoder --gemm 1024,2048,4096 --schedules tiled,generic \
    --repeat 20
echo "== cuda_check: $([ $status -eq 0 ] && echo ok || echo FAILED) in ${SECONDS}s" | tee -a "$log"
exit $status
