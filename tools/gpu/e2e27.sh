#!/bin/bash
# tools/gpu/e2e27.sh SCHEME...: 27B-shaped fixture packages end to end on the GPU machine, one at a
# time (the 64 GB disk holds one BF16 package), from the repository root with tools/gpu/build.sh's
# binaries carried in $GPU_OUT (default .gpu). Per scheme (bf16, fp8, w4a16-gptq, w4a16-awq):
#   - the package written by mkfixture (timed),
#   - bench_cuda's whole forward at 3 x 128 and 8 x 512 (or VSR_BENCH_E2E_SHAPES=RxL,...): graphs on and off, best and median of 9,
#     weights on the device (vllm_srun_model_memory_bytes), with --autotune-cache /tmp/vsr-tune,
#     then one forward per shape with every op timed (the profile tables),
#   - for bf16 with VSR_TORCH=1: the transformers peer on the same package and ids
#     (bench/e2e_cuda_torch.py), first with its PyTorch fallbacks, then with the
#     flash-linear-attention wheels in .whl (carried) when present.
# Logs in $OUT: fixture27-S.log, e2e27-S.log, torch27.log, torch27-fla.log.
set -u
G=${GPU_OUT:-.gpu}
. tools/gpu/cuda_env.sh   # $OUT, and cuBLASLt 13 on the library path
mkdir -p /tmp/vsr-tune
for scheme in "$@"; do
  rm -rf /tmp/d3-27b
  echo "== $scheme: fixture"
  ( time timeout 400 $G/mkfixture /tmp/d3-27b 27b-shape "$scheme" ) > "$OUT/fixture27-$scheme.log" 2>&1
  tail -4 "$OUT/fixture27-$scheme.log"; du -sh /tmp/d3-27b
  echo "== $scheme: ours"
  VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=${VSR_BENCH_PROFILE-1} VSR_BENCH_E2E_SHAPES=${VSR_BENCH_E2E_SHAPES:-} \
    timeout 300 $G/bench_cuda /tmp/d3-27b > "$OUT/e2e27-$scheme.log" 2>&1
  echo "bench_cuda rc=$?"; grep -E "whole forward|^forward" "$OUT/e2e27-$scheme.log"
  if [ "$scheme" = bf16 ] && [ "${VSR_TORCH:-0}" = 1 ]; then
    echo "== transformers (PyTorch fallbacks)"
    PYTHONUNBUFFERED=1 timeout 240 python3 bench/e2e_cuda_torch.py /tmp/d3-27b > "$OUT/torch27.log" 2>&1
    echo "rc=$?"; grep -vE "^\[transformers\]|Warning|warn" "$OUT/torch27.log" | tail -5
    if ls .whl/*.whl >/dev/null 2>&1; then
      echo "== transformers + flash-linear-attention"
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        > "$OUT/pip.log" 2>&1
      PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 300 python3 bench/e2e_cuda_torch.py /tmp/d3-27b \
        > "$OUT/torch27-fla.log" 2>&1
      echo "rc=$?"; grep -vE "^\[transformers\]|Warning|warn" "$OUT/torch27-fla.log" | tail -5
    fi
  fi
done
tar czf "$OUT/tune27.tgz" -C /tmp vsr-tune 2>/dev/null
true
