#!/bin/bash
# session 10, call 8 (the final kernels, 1f6939a: kind 8 RS the default at 33-256 rows): every CUDA test (test_cuda_quant
# whole, test_cuda_fused, test_cuda_ops), the four built-ins' goldens on cuda:0, then the 27B-shaped int4 (GPTQ) package
# end to end at 1 x 100 and 3 x 128 (cold autotune cache)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
SECONDS=0
( cd /tmp && timeout 240 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$? ${SECONDS}s"
grep -E "^(ok|FAIL)|checks|FAIL|int4:" $OUT/quant.txt | grep -v "^ok" | head -20
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 4 ${SECONDS}s"
unset HF_HUB_CACHE
( cd /tmp && timeout 80 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" $OUT/fused.txt | head -4
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" $OUT/ops.txt | head -4
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
GPU_OUT=$G VSR_BENCH_E2E_SHAPES=1x100,3x128 bash tools/gpu/e2e27.sh w4a16-gptq; echo "e2e ${SECONDS}s"
grep -E "weights|whole forward" $OUT/e2e27-w4a16-gptq.log | head -6
grep -iE "int4" $OUT/e2e27-w4a16-gptq.log | grep -iE "us|path" | head -12
