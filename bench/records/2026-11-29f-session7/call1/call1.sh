#!/bin/bash
# session 7, call 1 (f11597c: profile rows by producer variant, linear_swiglu's GEMM and SwiGLU apart; warp-per-row
# RMSNorm for narrow rows): test_cuda_ops, test_cuda_fused, goldens on cuda:0, bench_cuda per op, then the 27B-shaped
# FP8 and BF16 packages end to end with the per-op profile
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 150 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"; grep -E "checks|^FAIL|rmsnorm" $OUT/ops.txt | tail -12
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"; grep -hE "checks|^FAIL" $OUT/fused.txt | head -4
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 60 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; grep -c "6 of 6" $OUT/golden.txt; grep -v "^--" $OUT/golden.txt | grep -v "6 of 6" | head
timeout 120 $G/bench_cuda > $OUT/bench.txt 2>&1; echo "bench rc=$?"; grep -E "^## |rmsnorm|swiglu|gated" $OUT/bench.txt
mkdir -p /tmp/vsr-tune
for scheme in fp8 bf16; do
  rm -rf /tmp/d3-27b
  ( time timeout 200 $G/mkfixture /tmp/d3-27b 27b-shape $scheme ) > /tmp/fixture27-$scheme.log 2>&1; tail -n 3 /tmp/fixture27-$scheme.log | head -1
  VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 timeout 120 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-$scheme.log 2>&1
  echo "== $scheme rc=$?"; grep -E "whole forward|best of" $OUT/e2e27-$scheme.log
  grep -E "swiglu|rmsnorm" $OUT/e2e27-$scheme.log
done
