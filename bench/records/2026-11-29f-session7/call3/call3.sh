#!/bin/bash
# session 7, call 3 (60c581e: silu/sigmoid from __expf/__fdividef; the gated norm's FP8 twin in whole-token CTAs):
# test_cuda_ops, test_cuda_fused, goldens on cuda:0, bench_cuda per op, the 27B-shaped FP8 and BF16 packages end to
# end with the per-op profile (one call: the FP8/BF16 ratio), then ncu of the v7 DeltaNet state kernel at 8 x 512
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"; grep -E "checks|^FAIL|silu|swiglu|sigmoid" $OUT/ops.txt | tail -8
( cd /tmp && timeout 100 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"; grep -hE "checks|^FAIL|DIFFERS|WRONG" $OUT/fused.txt | head -8
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 60 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 4"; grep -v "^--" $OUT/golden.txt | grep -v "6 of 6" | head -4
unset HF_HUB_CACHE
timeout 100 $G/bench_cuda > $OUT/bench.txt 2>&1; echo "bench rc=$?"; grep -E "^## |swiglu|gated|mul_sig|conv1d|deltanet" $OUT/bench.txt
mkdir -p /tmp/vsr-tune
for scheme in fp8 bf16; do
  rm -rf /tmp/d3-27b
  ( time timeout 200 $G/mkfixture /tmp/d3-27b 27b-shape $scheme ) > /tmp/fixture27-$scheme.log 2>&1; tail -n 3 /tmp/fixture27-$scheme.log | head -1
  VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 timeout 100 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-$scheme.log 2>&1
  echo "== $scheme rc=$?"; grep -E "whole forward|best of" $OUT/e2e27-$scheme.log
  grep -E "swiglu|rmsnorm_gated|mul_sigmoid|conv1d|deltanet" $OUT/e2e27-$scheme.log | grep -v "M=[38] \|M=[38]$"
done
rm -rf /tmp/d3-27b
N=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || command -v ncu)
timeout 90 $N --clock-control none -k regex:k_dn7_state --launch-skip 21 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis $G/bench_cuda > $OUT/ncu_v7.txt 2>&1; echo "ncu rc=$?"
grep -E "Duration|Throughput|Stall|Warp Cycles|Achieved Occ|Issued|L2 Hit|Mem Busy|Max Bandwidth" $OUT/ncu_v7.txt | head -30
