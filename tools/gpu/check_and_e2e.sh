#!/bin/bash
# tools/gpu/check_and_e2e.sh: one device call that validates a build and measures it, in order of
# priority (a call cut short by its time limit keeps what it finished; logs in $OUT):
#   1. test_cuda_ops with the default kernels and with $VSR_ALT_ENV (e.g. VSR_CUDA_DN_V5=1: the
#      previous default, kept selectable), then test_cuda_fused;
#   2. if the default failed test_cuda_ops but the alternative passed, everything below runs with
#      $VSR_ALT_ENV exported (the alternative becomes the measured path; say so in the notes);
#   3. the 27B-shaped packages of $VSR_SCHEMES (default "bf16 fp8") end to end (tools/gpu/e2e27.sh);
#   4. with time left, the per-op table (bench_cuda without a package; VSR_PEROP=0 skips it).
# Usage (repository root, binaries of tools/gpu/build.sh in $GPU_OUT):
#   VSR_ALT_ENV=VSR_CUDA_DN_V5=1 GPU_OUT=.gpu-me bash tools/gpu/check_and_e2e.sh
set -u
G=${GPU_OUT:-.gpu}
. tools/gpu/cuda_env.sh   # $OUT, and cuBLASLt 13 on the library path
ALT=${VSR_ALT_ENV:-}
( cd /tmp && timeout 120 "$OLDPWD/$G/test_cuda_ops" ) > "$OUT/ops.txt" 2>&1; rc_new=$?
rc_alt=0
if [ -n "$ALT" ]; then
  ( cd /tmp && env "$ALT" timeout 120 "$OLDPWD/$G/test_cuda_ops" ) > "$OUT/ops_alt.txt" 2>&1; rc_alt=$?
fi
( cd /tmp && timeout 120 "$OLDPWD/$G/test_cuda_fused" ) > "$OUT/fused.txt" 2>&1; rc_fused=$?
echo "test_cuda_ops default rc=$rc_new; with $ALT rc=$rc_alt; test_cuda_fused rc=$rc_fused"
grep -hE "checks|^FAIL" "$OUT"/ops.txt "$OUT"/ops_alt.txt "$OUT"/fused.txt 2>/dev/null
grep -hE "failed|FAIL" "$OUT"/ops.txt | head -8
if [ $rc_new != 0 ] && [ -n "$ALT" ] && [ $rc_alt = 0 ]; then
  echo "the default failed; measuring with $ALT"
  export "$ALT"
fi
bash tools/gpu/e2e27.sh ${VSR_SCHEMES:-bf16 fp8}
if [ "${VSR_PEROP:-1}" = 1 ]; then
  echo "== per-op (27B layer shapes)"
  timeout 60 $G/bench_cuda > "$OUT/perop.txt" 2>&1
  grep -E "^(deltanet|conv1d|swiglu|rmsnorm_gated|mul_sigmoid|DeltaNet layer)" "$OUT/perop.txt"
fi
true
