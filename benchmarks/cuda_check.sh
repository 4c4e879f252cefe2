#!/usr/bin/env bash
# The GPU check of the CUDA bundles (issue 14), for a session that has an NVIDIA GPU:
#   1. the tests marked `gpu` (every zoo model's bundle and the odd-shaped GEMM/conv models
#      of tests/schedules/gpu/test_gemm.py, the block reductions of test_block_reduce.py,
#      the mma.sync/ldmatrix GEMMs of test_mma.py, the wgmma GEMMs of test_wgmma.py and
#      test_wgmma_sw128.py (the 128-byte swizzled tiles), and the fp16 tensor-core
#      convolutions and fp16 ResNet-18 of test_conv_tensorcore.py
#      -- the PTX fragment layouts and wgmma's descriptors on the hardware for the first
#      time -- built by nvcc, run on the GPU, compared with the
#      reference executor);
#   2. the fp16 tensor-core GEMM (--precision fp16, nvcuda::wmma) at n = 1024 and 4096
#      against cuBLAS fp16 (PyTorch, float32 accumulation) in the same run: the issue's goal
#      is "kernel ratio" <= 1.43 (>= 70 % of cuBLAS) at 4096; the `kernel` column says
#      whether the tensor-core kernel was chosen (wmma) or the SIMT one;
#   3. the fp16 tensor-core GEMM at 4096 built with each tile variant of benchmarks/cuda.py's
#      SWEEP (warps a block, fragments a warp, step, double buffer, shared-row padding,
#      16-byte fetches, dynamic shared memory, cp.async, 3-4 pipeline stages `.s3`/`.s4`,
#      mma.sync + ldmatrix with register accumulators `.mma`, Hopper's warpgroup MMA on
#      core-matrix tiles `.wgmma` (sm_90a; first run on an H200 on 2026-11-29, docs/cuda.md;
#      the `.wgmma` rows first -- the waiting ones on 128-byte swizzled operand tiles
#      `.sw128` (layout type 1, warpgroups of 64 x 64, steps of 64; 55 % of cuBLAS there)
#      leading, then each operand its own pad `p16b8`, then the overlapped ones `.ov1`
#      (a step's products in flight: computed wrong on the H200, their error column
#      shows it), before those waiting for their own products -- then the `.mma` ones) and
#      the default tiles, each one's kernel ratio to cuBLAS fp16: the fastest row is the
#      candidate default for choose_wmma_tiles (benchmarks/ptxas_tiles.py prints each
#      variant's registers, spills and shared memory, no GPU needed);
#   4. per-kernel GPU milliseconds (the bundles' profiling build: CUDA events around every
#      launch) of ResNet-18 and the transformer encoder under three GPU schedules, side by
#      side: tiled (the default: occupancy rule, split-K), tiled-no-occupancy (the tiles
#      chosen without the rule) and generic (one thread per output), then cuDNN's time for
#      each of PyTorch eager's ResNet-18 convolutions;
#   5. benchmarks/cuda.py on every zoo model (tiled; error against the reference executor
#      and against onnxruntime, latency), ResNet-18 next to PyTorch eager's, and the fp32
#      GEMM table (tiled, generic) against cuBLAS;
#   6. --cuda-graph: three zoo models (few, mid and many launches) each as the plain bundle
#      and as the graph bundle (one cudaGraphLaunch a run), error and milliseconds side by
#      side in one run.
#   7. per-kernel GPU milliseconds of the block reductions, warp shuffles (tiled, the
#      default) against the shared-memory tree (tiled-shared-tree) in one run: ResNet-18's
#      and MobileNet v2's classifiers (Gemm 1x1000), the FCN's long-row softmax (one row of
#      5,120), the autoencoder's ReduceMean and LeNet-5's first dense layer; the
#      transformer encoder's softmax/layer norm rows (row kernels, unchanged by either)
#      for reference.
#   8. auto-tuning on the GPU (issue 16; benchmarks/cuda.py --tune): the fp16 4096^3 GEMM's
#      tensor-core space (warps, fragments, step, stages, padding, fetch width, cp.async,
#      wmma or mma.sync) tuned with 32 trials (nvcc builds in parallel, each kernel timed
#      with CUDA events, the L2 flushed between repeats), then its bundle with the records
#      and without, against cuBLAS fp16's kernel in the same run;
#   9. the same for ResNet-18's convolutions (the SIMT implicit-GEMM space: threads,
#      register tiles, step, double buffer, split-K, or the generic kernel), 44 trials over
#      its 11 kernels (each its default, seeds, random points), then the whole model tuned and
#      default against PyTorch eager (cuDNN). Random search where xgboost is missing (the
#      GPU machines' image has none): the seeds are measured either way.
#  10. fp16 convolutions on tensor cores (session 24, never run on a GPU before): per-kernel
#      GPU milliseconds of ResNet-18 and MobileNet v2 compiled with --precision fp16, the
#      convolutions as the wmma implicit GEMM (tiled, the default: ResNet-18's C2-C12, 19
#      of its 20 convolutions; the stem C1, K = 147, and the depthwise ones keep their
#      kernels) against the same bundles with them on the SIMT implicit GEMM
#      (tiled-simt-conv), then cuDNN's time for each of PyTorch eager's ResNet-18
#      convolutions in float16 (tensor cores), match the Conv rows by output shape and order.
# Each step has its own time limit (90 + 60 + 240 + 180 + 240 + 120 + 240 + 180 + 300 + 240 s); the whole check is
# longer than one 10-minute device command, so give the steps to run as arguments:
#
#   bash benchmarks/cuda_check.sh            # every step (from anywhere)
#   bash benchmarks/cuda_check.sh 1 2 3      # steps 1-3 (about 4 minutes on an H200)
#   bash benchmarks/cuda_check.sh 4 5 6      # steps 4-6
#   bash benchmarks/cuda_check.sh 7          # shuffles vs the shared tree
#   bash benchmarks/cuda_check.sh 8 9        # tuned vs default vs cuBLAS / cuDNN (~6 min)
#   bash benchmarks/cuda_check.sh 10         # fp16 convolutions: wmma vs SIMT vs cuDNN fp16
#
# The log is also written to $OUT/cuda_check.log when $OUT is set (the device tool's output
# folder).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="${OUT:-${TMPDIR:-/tmp}}/cuda_check.log"
: > "$log"
status=0
steps=" ${*:-1 2 3 4 5 6 7 8 9 10} "

step() {  # step NUMBER SECONDS DESCRIPTION COMMAND...
    local n=$1 limit=$2 what=$3
    shift 3
    [[ "$steps" == *" $n "* ]] || return 0
    echo "== $n. $what (at most ${limit}s): $*" | tee -a "$log"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    echo "== $n. $what: exit $rc after $((SECONDS - t0))s" | tee -a "$log"
    [ "$rc" -eq 0 ] || status=1
}

nvidia-smi -L 2>&1 | tee -a "$log" || { echo "no NVIDIA GPU here" | tee -a "$log"; exit 1; }
step 1 90 "gpu tests" python -m pytest -q -p no:cacheprovider -n 8 -m gpu -rs \
    tests/bundle/test_cuda.py tests/codegen/test_cuda_shared.py tests/schedules/gpu/test_gemm.py \
    tests/bundle/test_cuda_fp16.py tests/schedules/gpu/test_tensorcore.py \
    tests/schedules/gpu/test_block_reduce.py tests/schedules/gpu/test_mma.py \
    tests/schedules/gpu/test_wgmma.py tests/schedules/gpu/test_wgmma_sw128.py \
    tests/schedules/gpu/test_conv_tensorcore.py \
    tests/schedules/gpu/test_warp_shuffle.py tests/autotune/test_cuda_tune.py
step 2 60 "fp16 tensor-core GEMM vs cuBLAS fp16" python benchmarks/cuda.py --target cuda-sm90 \
    --models '' --gemm 1024,4096 --gemm-precision fp16 --repeat 20
step 3 240 "fp16 GEMM tile sweep vs cuBLAS fp16" python benchmarks/cuda.py --target cuda-sm90 \
    --models '' --gemm '' --gemm-sweep 4096 --repeat 20
step 4 180 "per-kernel GPU ms" python benchmarks/cuda.py --target cuda-sm90 \
    --models resnet18,transformer_encoder --gemm '' --per-kernel \
    --schedules tiled,tiled-no-occupancy,generic --repeat 20
step 5 240 "benchmark" python benchmarks/cuda.py --target cuda-sm90 \
    --models lenet5,mlp,ds_cnn,resnet8,mobilenet_v1,autoencoder,resnet18,mobilenet_v2,transformer_encoder,transformer_encoder_gelu,lstm_classifier,vit_tiny,fcn_opset11 \
    --gemm 1024,2048,4096 --schedules tiled --repeat 20
step 6 120 "CUDA graph vs plain launches" python benchmarks/cuda.py --target cuda-sm90 \
    --models lenet5,transformer_encoder,mobilenet_v2 --gemm '' --cuda-graph --repeat 20
step 7 240 "block reductions: warp shuffles vs shared tree" python benchmarks/cuda.py \
    --target cuda-sm90 \
    --models resnet18,mobilenet_v2,fcn_opset11,autoencoder,lenet5,transformer_encoder \
    --gemm '' --per-kernel --schedules tiled,tiled-shared-tree --repeat 20
step 8 180 "fp16 GEMM 4096 tuned vs default vs cuBLAS" python benchmarks/cuda.py \
    --target cuda-sm90 --models '' --gemm 4096 --tune 32 --tune-jobs 12 --repeat 20
step 9 300 "ResNet-18 tuned vs default vs PyTorch eager" python benchmarks/cuda.py \
    --target cuda-sm90 --models resnet18 --gemm '' --tune 44 --tune-jobs 12 --repeat 20
step 10 240 "fp16 convolutions: tensor cores vs SIMT vs cuDNN fp16" python benchmarks/cuda.py \
    --target cuda-sm90 --models resnet18,mobilenet_v2 --gemm '' --per-kernel --precision fp16 \
    --schedules tiled,tiled-simt-conv --repeat 20
echo "== cuda_check: $([ $status -eq 0 ] && echo ok || echo FAILED) in ${SECONDS}s" | tee -a "$log"
exit $status
