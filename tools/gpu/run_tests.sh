#!/bin/bash
# tools/gpu/run_tests.sh: what runs on the GPU machine, from the repository root, with the
# binaries of tools/gpu/build.sh in .gpu/ (carried). Writes logs to $OUT.
#   tests:  .gpu/test_cuda_ops           (ops vs the CPU backend, tiny fixtures end to end)
#           .gpu/test_cuda_fused         (activation twins, recorded forwards, profile: bit-identical)
#           .gpu/test_cuda_quant         (FP8 / int4 linears against their references; VSR_QUANT=0 skips)
#   bench:  $G/bench_cuda [pkg]        (27B-shaped layer ops at 3x128 and 8x512; a package's forward)
set -u
G=${GPU_OUT:-.gpu}   # the folder tools/gpu/build.sh wrote (GPU_OUT there)
. tools/gpu/cuda_env.sh   # $OUT, and cuBLASLt 13 on the library path
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1;
  ldd $G/test_cuda_ops | grep -E 'cublas|not found'; } 2>&1 | tee "$OUT/env.txt"
rc=0
$G/test_cuda_ops 2>&1 | tee "$OUT/test_cuda_ops.log"; rc=${PIPESTATUS[0]}
echo "test_cuda_ops rc=$rc" | tee -a "$OUT/test_cuda_ops.log"
$G/test_cuda_fused > "$OUT/test_cuda_fused.log" 2>&1; r=$?; echo "test_cuda_fused rc=$r"; [ $r = 0 ] || rc=$r
grep -vE '^ok ' "$OUT/test_cuda_fused.log" | grep -vE '^(linear|rmsnorm|swiglu|embed|deltanet|attention|rope|add|readout|mul_|gather|conv)' | tail -40
if [ "${VSR_QUANT:-1}" = 1 ] && [ -x $G/test_cuda_quant ]; then
  ( cd /tmp && timeout 200 "$OLDPWD/$G/test_cuda_quant" ) > "$OUT/test_cuda_quant.log" 2>&1; r=$?
  echo "test_cuda_quant rc=$r"; [ $r = 0 ] || rc=$r; grep -E "FAIL|failures" "$OUT/test_cuda_quant.log" | tail -5
fi
if [ "${VSR_BENCH:-1}" = 1 ]; then
  pkg=""
  if [ -n "${VSR_BENCH_FIXTURE:-}" ]; then
    pkg=/tmp/fx-$VSR_BENCH_FIXTURE
    ( time $G/mkfixture "$pkg" "$VSR_BENCH_FIXTURE" ${VSR_BENCH_SCHEME:-} ) 2>&1 | tee "$OUT/fixture.log"
  fi
  timeout "${VSR_BENCH_TIMEOUT:-240}" $G/bench_cuda $pkg 2>&1 | tee "$OUT/bench_cuda.log"
fi
exit $rc
