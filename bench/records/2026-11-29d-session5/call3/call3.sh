#!/bin/bash
# session 5, call 3 (ade01e6: int4 L2 prefetch, the seventh-pass removal, the FP8 changes of ed0ad4b):
# test_cuda_quant (all tests), then the whole GEMM sweep (every row count and shape) with the torch peers
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
VSR_TEST_TIMEOUT=200 VSR_SWEEP_TIMEOUT=330 VSR_TORCH_TIMEOUT=150 GPU_OUT=.gpuq bash bench/gemm_cuda.sh run 2>&1 | tail -8
grep -hE "checks|^FAIL|failed|prefetch" $OUT/test_cuda_quant.log | head -20
grep -E "^(int4_linear|int4_nopf|bf16_linear)," $OUT/gemm_cuda.csv | awk -F, '$5<=16'
