#!/bin/bash
# session 7, call 7 (5a04498, the binaries of call 6): the 27B-shaped packages end to end again, BF16 first this time
# (every earlier same-call pair ran FP8 first, on a cooler GPU), no profile forwards
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
mkdir -p /tmp/vsr-tune
for scheme in bf16 fp8; do
  rm -rf /tmp/d3-27b
  ( time timeout 200 $G/mkfixture /tmp/d3-27b 27b-shape $scheme ) > /tmp/fixture27-$scheme.log 2>&1; tail -n 3 /tmp/fixture27-$scheme.log | head -1
  VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 timeout 90 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-$scheme.log 2>&1
  echo "== $scheme rc=$?"; grep -E "whole forward|each run|best of" $OUT/e2e27-$scheme.log
done
rm -rf /tmp/d3-27b
