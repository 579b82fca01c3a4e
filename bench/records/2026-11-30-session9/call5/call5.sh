#!/bin/bash
# session 9, call 5 (cfd4488+: kind 7 with running addresses, its default from call 4's tuner): int4 tests, then the
# 27B-shaped int4 (GPTQ) and BF16 packages end to end at 1 x 100 (one router prompt: kind 7), 3 x 128, 8 x 512
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -8
ln -sfn $PWD /work/wt-me 2>/dev/null
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
GPU_OUT=.gpu-me VSR_BENCH_E2E_SHAPES=1x100,3x128,8x512 bash tools/gpu/e2e27.sh w4a16-gptq bf16; echo "e2e ${SECONDS}s"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
for s in w4a16-gptq bf16; do echo "== $s"; grep -E "weights|whole forward" $OUT/e2e27-$s.log | head -2; grep -E "^(int4|gemm|linear|fused|deltanet)" $OUT/e2e27-$s.log | head -0; done
grep -A30 "profile" $OUT/e2e27-w4a16-gptq.log | grep -iE "int4|linear|gemm|total" | head -16
