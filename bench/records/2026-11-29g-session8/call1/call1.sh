#!/bin/bash
# session 8, call 1 (a803214): the seventh session's unrun commits (a5c2410 sq4 roundings, b17ac76 wgmma macros,
# b74a3ac sw_stage/sw_comb4) through test_cuda_ops/fused/quant and the goldens; the int4 lean modes (test
# int4_lean_modes; sweep rows at 1, 8, 16); the FP8 GEMM alone by the forward's route at 4096 and 8192 rows
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"; grep -E "checks|^FAIL" $OUT/ops.txt | tail -4
( cd /tmp && timeout 100 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"; grep -hE "checks|^FAIL|DIFFERS|WRONG|narrow" $OUT/fused.txt | head -8
( cd /tmp && timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"; grep -E "checks|FAIL|int4 lean|int4:" $OUT/quant.txt | head -12
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 60 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 4"; grep -v "^--" $OUT/golden.txt | grep -v "6 of 6" | head -4
unset HF_HUB_CACHE
mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 120 .gpuq/gemm_cuda 1,8,16 > $OUT/sweep_i4.csv 2> $OUT/sweep_i4.err; echo "sweep i4 rc=$?"
grep -E '^(bf16_gemm|int4_bf16in|int4_lean)' $OUT/sweep_i4.csv
VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 170 .gpuq/gemm_cuda 4096,8192 > $OUT/sweep_f8.csv 2> $OUT/sweep_f8.err; echo "sweep f8 rc=$?"
grep -E '^(bf16_gemm|fp8_linear|fp8_pq_route|fp8_kept_lt|fp8_pq_fast128)' $OUT/sweep_f8.csv
tar czf $OUT/tune.tgz -C /tmp vsr-tune 2>/dev/null
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
