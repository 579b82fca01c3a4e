#!/bin/bash
# session 7, call 2 (81d9b1b: SwiGLU FP8 twin by CTA pairs, gated norm in quarter-token CTAs, RMSNorm row kernel
# sized to the row, k_swiglu4 two strides; bd84a86: DeltaNet v7 on wgmma, opt-in): test_cuda_ops (v7 cases),
# test_cuda_fused, bench_cuda per op, the 27B-shaped FP8 package end to end by default, with four SwiGLU loads in
# flight (VSR_CUDA_SWIGLU_1P=3), and with v7 (VSR_CUDA_DN_V7=1) when its tests passed
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 150 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"; grep -E "checks|^FAIL|v7" $OUT/ops.txt | tail -28
v7ok=0; grep -q "0 failures" $OUT/ops.txt && v7ok=1
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"; grep -hE "checks|^FAIL|DIFFERS|WRONG" $OUT/fused.txt | head -8
timeout 120 $G/bench_cuda > $OUT/bench.txt 2>&1; echo "bench rc=$?"; grep -E "^## |rmsnorm|swiglu|gated|deltanet" $OUT/bench.txt
mkdir -p /tmp/vsr-tune
rm -rf /tmp/d3-27b
( time timeout 200 $G/mkfixture /tmp/d3-27b 27b-shape fp8 ) > /tmp/fixture27.log 2>&1; tail -n 3 /tmp/fixture27.log | head -1
run() { # name, env...
  local n=$1; shift
  env "$@" VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 timeout 100 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-fp8-$n.log 2>&1
  echo "== fp8 $n rc=$?"; grep -E "best of" $OUT/e2e27-fp8-$n.log
  grep -E "swiglu|rmsnorm|deltanet" $OUT/e2e27-fp8-$n.log | grep -v "M=[38] \|M=[38]$"
}
run default VSR_X=0
run u4 VSR_CUDA_SWIGLU_1P=3
[ $v7ok = 1 ] && run v7 VSR_CUDA_DN_V7=1
