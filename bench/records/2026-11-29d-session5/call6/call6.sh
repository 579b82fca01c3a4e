#!/bin/bash
# session 5, call 6 (placeholder scale pointers before the cuBLASLt heuristic): does cuBLASLt 13.1 now offer
# the outer-vector-scaled FP8 algorithms? The sweep's FP8 rows at gate_up and down, 384 and 4096 rows
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
VSR_FP8_GEMM=0 timeout 120 .gpuq/gemm_cuda 384,4096 --shapes=gate_up,down > $OUT/ov.csv 2> $OUT/ov.err
grep -E "^fp8_(linear|scaled|unscaled|old)," $OUT/ov.csv; grep -E "fp8 (forced-scaled|old) path|fp8 path" $OUT/ov.err | head -8
