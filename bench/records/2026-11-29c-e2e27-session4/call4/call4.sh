#!/bin/bash
# session 4, call 4 (final, 703cdca): the CUDA tests, the built-ins' golden self-check on cuda:0,
# the 27B e2e FP8 and BF16 (profile off; every run printed)
set -u
tar xzf .gpu-pk/bins.tgz
ln -sfn $PWD /work/wt-me 2>/dev/null || { mkdir -p /work; ln -sfn $PWD /work/wt-me; }
FINAL_OUT=${OUT:-/tmp/out}
export OUT=/tmp/c4; mkdir -p $OUT
. tools/gpu/cuda_env.sh
( cd /tmp && timeout 90 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"
( cd /tmp && timeout 60 $OLDPWD/.gpu-me/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"
grep -hE "checks|^FAIL|failed" $OUT/ops.txt $OUT/fused.txt | head -10
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}" HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ d3-tiny-NVFP4; do
    echo "-- $m"; timeout 60 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -2
  done ) | tee $OUT/golden.txt
VSR_BENCH_PROFILE=0 GPU_OUT=.gpu-me bash tools/gpu/e2e27.sh fp8
( cd /tmp && timeout 200 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"
grep -hE "checks|^FAIL|failed|fp8 route" $OUT/quant.txt | head -20
VSR_BENCH_PROFILE=0 GPU_OUT=.gpu-me bash tools/gpu/e2e27.sh bf16
tar czf $FINAL_OUT/call4.tgz -C /tmp c4
