#!/bin/bash
# session 4, call 5 (9215ea3: fast accumulation opt-in again): the built-ins' golden self-check on
# cuda:0 (default, and with VSR_CUDA_FP8_FAST_ACCUM=1 for the record), then test_cuda_quant
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}" HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 60 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done
  echo "-- d3-tiny-FP8 with VSR_CUDA_FP8_FAST_ACCUM=1"
  VSR_CUDA_FP8_FAST_ACCUM=1 timeout 60 .gpuw/vllm-srun golden vllm-sr-c/d3-tiny-FP8 --device cuda:0 2>&1 | tail -1
) | tee $OUT/golden.txt
( cd /tmp && timeout 200 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"
grep -hE "checks|^FAIL|failed|fp8 route" $OUT/quant.txt | head -20
