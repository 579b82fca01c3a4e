#!/bin/bash
# session 11, call 5 (VSR_CUDA_INT4_ACC_SEP): int4 tests, storing / adding (epilogue) / adding (scratch + add) at
# 100 and 128 rows, the 27B int4 package at 1 x 100 with and without the switch
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -8
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 100 .gpuq/gemm_cuda 100,128 --shapes=gate_up,down,o_proj > $OUT/store.csv 2>/dev/null; echo "store rc=$? ${SECONDS}s"
VSR_SWEEP_ACC=1 VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 100 .gpuq/gemm_cuda 100,128 --shapes=gate_up,down,o_proj > $OUT/acc.csv 2>/dev/null; echo "acc rc=$? ${SECONDS}s"
VSR_CUDA_INT4_ACC_SEP=1 VSR_SWEEP_ACC=1 VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 100 .gpuq/gemm_cuda 100,128 --shapes=gate_up,down,o_proj > $OUT/accsep.csv 2>/dev/null; echo "accsep rc=$? ${SECONDS}s"
for f in store acc accsep; do echo "-- $f"; grep -E '^(int4_bf16in|int4_bf16in_acc),' $OUT/$f.csv | cut -d, -f2,5,6 | paste -sd' '; done
rm -rf /tmp/d3-27b
( time timeout 300 .gpu-me/mkfixture /tmp/d3-27b 27b-shape w4a16-gptq ) > /tmp/fx.log 2>&1; tail -3 /tmp/fx.log | head -1
for sep in 0 1; do
  VSR_CUDA_INT4_ACC_SEP=$sep VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 VSR_BENCH_E2E_SHAPES=1x100 \
    timeout 120 .gpu-me/bench_cuda /tmp/d3-27b > $OUT/e2e-sep$sep.log 2>&1
  echo "== ACC_SEP=$sep rc=$? ${SECONDS}s"; grep -E "graphs on: best" $OUT/e2e-sep$sep.log; grep -E "^linear int4 (17408|6144)->5120 M=100" $OUT/e2e-sep$sep.log
done
