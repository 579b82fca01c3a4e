#!/bin/bash
# session 6, call 9 (HEAD: mul_sigmoid's FP8 twin kernel reshaped): test_cuda_fused, bench_cuda's per-op rows
# (the FP8 twins), the built-ins' golden self-check on cuda:0, then the 27B-shaped BF16 and FP8 packages end to
# end in one call
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"
grep -hE "checks|^FAIL|failed|mul_sigmoid T=" $OUT/fused.txt | head -8
timeout 120 $G/bench_cuda > $OUT/bench.txt 2>&1; echo "bench rc=$?"; grep -E "^## |^mul_sig|twin" $OUT/bench.txt
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 60 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) 2>&1 | tee $OUT/golden.txt
mkdir -p /tmp/vsr-tune
for scheme in bf16 fp8; do
  rm -rf /tmp/d3-27b
  ( time timeout 300 $G/mkfixture /tmp/d3-27b 27b-shape $scheme ) > /tmp/fixture27-$scheme.log 2>&1; tail -n 3 /tmp/fixture27-$scheme.log | head -1
  VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 timeout 200 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-$scheme.log 2>&1
  echo "== $scheme rc=$?"; grep -E "whole forward|^forward.*(best|median)" $OUT/e2e27-$scheme.log
done
ls $OUT
