#!/bin/bash
# session 12, call 4 (kind 8 RS at BT 96 and 112): int4 tests; test_cuda_ops; the int4 sweep at 64-128 rows, new
# against old (9f99b51's list) in fresh caches; the 27B int4 GPTQ package at 1 x 100, new against old (2321f35)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 200 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|int4:" $OUT/quant_int4.txt | head -4; grep -B3 "^FAIL" $OUT/quant_int4.txt | head -12
( cd /tmp && timeout 120 $OLDPWD/.gpu-me/test_cuda_ops ) > /tmp/ops.txt 2>&1; echo "ops rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" /tmp/ops.txt | head -4
for v in new old; do
  g=.gpuq; [ $v = old ] && g=.gpuq-old
  rm -rf /tmp/t-$v; mkdir -p /tmp/t-$v
  VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/t-$v timeout 150 $g/gemm_cuda 64,96,100,112,128 --shapes=gate_up,down,q_proj,in_proj_qkv,o_proj > $OUT/sw-$v.csv 2> /tmp/sw-$v.err; echo "sweep $v rc=$? ${SECONDS}s"
  grep -E "int4 bf16-in path" /tmp/sw-$v.err | sed 's/ int4 bf16-in path//' | paste -sd' ' | head -c 1500; echo
done
for v in new old; do echo "-- $v"; grep -E '^(bf16_gemm|int4_bf16in),' $OUT/sw-$v.csv | cut -d, -f1,2,5,6 | paste -sd' ' | sed 's/bf16_gemm,/\nB,/g; s/int4_bf16in,/I,/g'; done
rm -rf /tmp/d3-27b
( time timeout 300 .gpu-me/mkfixture /tmp/d3-27b 27b-shape w4a16-gptq ) > /tmp/fx.log 2>&1; echo "fixture ${SECONDS}s"
for v in new old me2; do
  b=.gpu-me/bench_cuda; [ $v = old ] && b=.gpu-old/bench_cuda
  rm -rf /tmp/e-$v; mkdir -p /tmp/e-$v
  VSR_AUTOTUNE_DIR=/tmp/e-$v VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 VSR_BENCH_E2E_SHAPES=1x100 timeout 150 $b /tmp/d3-27b > $OUT/e2e-$v.log 2>&1
  echo "== $v rc=$? ${SECONDS}s"; grep -E "graphs on: each|graphs on: best" $OUT/e2e-$v.log; grep -E "^linear int4 5120->34816 M=100|^linear int4 17408" $OUT/e2e-$v.log
done
