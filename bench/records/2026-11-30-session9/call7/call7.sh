#!/bin/bash
# session 9, call 7 (the binaries of call 6): the 27B-shaped FP8 and BF16 packages end to end at 1 x 100, 3 x 128,
# 8 x 512 in one run (the FP8 kept products at <= 128 rows now take (c) + one scaling pass)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
ln -sfn $PWD /work/wt-me 2>/dev/null
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
GPU_OUT=.gpu-me VSR_BENCH_E2E_SHAPES=1x100,3x128,8x512 timeout 560 bash tools/gpu/e2e27.sh fp8 bf16; echo "e2e ${SECONDS}s"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
for s in fp8 bf16; do echo "== $s"; grep -E "weights|best of" $OUT/e2e27-$s.log | grep -v "graphs off"; done
grep -A40 "1 x 100" $OUT/e2e27-fp8.log | grep -E "^(linear|swiglu|fp8)" | head -10
