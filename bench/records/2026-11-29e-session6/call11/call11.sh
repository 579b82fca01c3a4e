#!/bin/bash
# session 6, call 11 (same binaries as call 10): the 27B-shaped FP8 and BF16 packages end to end in one call
# (no profile forwards: the device time left was ~320 s)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
mkdir -p /tmp/vsr-tune
for scheme in fp8 bf16; do
  rm -rf /tmp/d3-27b
  ( time timeout 200 $G/mkfixture /tmp/d3-27b 27b-shape $scheme ) > /tmp/fixture27-$scheme.log 2>&1; tail -n 3 /tmp/fixture27-$scheme.log | head -1
  VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=0 timeout 100 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-$scheme.log 2>&1
  echo "== $scheme rc=$?"; grep -E "whole forward|^forward" $OUT/e2e27-$scheme.log
done
