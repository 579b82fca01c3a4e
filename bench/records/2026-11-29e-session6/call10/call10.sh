#!/bin/bash
# session 6, call 10 (HEAD: fp8_scaled, the FP8 quantizers' division as a multiply and two FMAs): test_cuda_quant's
# FP8 tests (fp8_scale_division: 2^26 draws against x / s), test_cuda_fused (every FP8 twin against k_fp8_quant
# bit for bit), test_cuda_ops, the built-ins' golden self-check on cuda:0, bench_cuda's per-op rows
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && VSR_QUANT_TESTS=fp8 timeout 150 $OLDPWD/$G/test_cuda_quant ) > $OUT/quant_fp8.txt 2>&1; echo "quant fp8 rc=$?"
grep -hE "checks|^FAIL|failed|fp8_scaled against" $OUT/quant_fp8.txt | head -8
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"; grep -hE "checks|^FAIL" $OUT/fused.txt | head -4
( cd /tmp && timeout 150 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"; grep -E "checks|^FAIL" $OUT/ops.txt | tail -2
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 60 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) 2>&1 | tee $OUT/golden.txt
timeout 120 $G/bench_cuda > $OUT/bench.txt 2>&1; echo "bench rc=$?"; grep -E "^## |twin" $OUT/bench.txt
