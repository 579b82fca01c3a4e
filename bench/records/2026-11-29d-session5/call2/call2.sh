#!/bin/bash
# session 5, call 2 (ed0ad4b: pipelined promotion, column scales in shared memory, BF16 outputs and the
# kept-product route): test_cuda_quant's FP8 tests, then (if they pass) the FP8 GEMM sweep at 384 and
# 4096 rows and the 27B-shaped FP8 package end to end with the profile
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
( cd /tmp && VSR_QUANT_TESTS=fp8 timeout 150 $OLDPWD/.gpu-me/test_cuda_quant ) > $OUT/quant_fp8.txt 2>&1; echo "quant rc=$?"
grep -hE "checks|^FAIL|failed|kept|serial|differ" $OUT/quant_fp8.txt | head -40
if grep -q " 0 failures" $OUT/quant_fp8.txt; then
  mkdir -p /tmp/vsr-tune8; VSR_AUTOTUNE_DIR=/tmp/vsr-tune8 timeout 150 .gpuq/gemm_cuda 384,4096 --shapes=gate_up,down,q_proj,o_proj \
    > $OUT/fp8_sweep.csv 2> $OUT/fp8_sweep.err; echo "fp8 sweep rc=$?"
  grep -E "^(fp8_pq|fp8_kept|fp8_linear,|fp8_old|bf16_linear)" $OUT/fp8_sweep.csv
  GPU_OUT=.gpu-me bash tools/gpu/e2e27.sh fp8
  grep -A24 "forward 8 x 512, graphs on" $OUT/e2e27-fp8.log | head -26
fi
