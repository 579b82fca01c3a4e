#!/bin/bash
# session 12, call 9 (6ffdb0e, the final code): the 27B-shaped int4 GPTQ package at 1 x 100, autotuned (fresh cache)
# and with no cache (the defaults)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
rm -rf /tmp/d3-27b
( time timeout 210 .gpu-me/mkfixture /tmp/d3-27b 27b-shape w4a16-gptq ) > /tmp/fx.log 2>&1; echo "fixture ${SECONDS}s"
for v in tuned def; do
  if [ $v = def ]; then e="X=1"; else rm -rf /tmp/e-t; mkdir -p /tmp/e-t; e="VSR_AUTOTUNE_DIR=/tmp/e-t"; fi
  env $e VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 VSR_BENCH_E2E_SHAPES=1x100 timeout 60 .gpu-me/bench_cuda /tmp/d3-27b > $OUT/e2e-$v.log 2>&1
  echo "== $v rc=$? ${SECONDS}s"; grep -E "graphs on: each|graphs on: best" $OUT/e2e-$v.log; grep -E "^linear int4 .*M=100" $OUT/e2e-$v.log
done
