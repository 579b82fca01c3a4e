#!/bin/bash
# session 5, call 1 (41a90f8, the fourth session's HEAD): the built-ins' golden self-check on cuda:0,
# the three CUDA tests, the int4 seventh pass (bulk -p configurations: tests + sweep + ncu), and an
# FP8 baseline sweep (own kernel promote / fast, cuBLASLt) at 384 and 4096 rows
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/env.txt 2>&1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}" HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1; echo "install rc=$?"
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ d3-tiny-NVFP4; do
    echo "-- $m"; timeout 60 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -2
  done
) > $OUT/golden.txt 2>&1 &
gp=$!
( cd /tmp && timeout 150 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"
( cd /tmp && timeout 150 $OLDPWD/.gpu-me/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"
wait $gp; cat $OUT/golden.txt
( cd /tmp && timeout 220 $OLDPWD/.gpu-me/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"
grep -hE "checks|^FAIL|failed" $OUT/ops.txt $OUT/fused.txt $OUT/quant.txt | head -20
mkdir -p $OUT/i4; OUT=$OUT/i4 GPU_OUT=.gpuq VSR_QUANT_TESTS=int4 VSR_ROWS=1,8,16 VSR_TORCH=0 VSR_FP8=0 VSR_SHAPES=gate_up,down,q_proj \
  VSR_TEST_TIMEOUT=120 VSR_SWEEP_TIMEOUT=90 bash bench/gemm_cuda.sh run 2>&1 | tail -5
grep -E "^int4_(linear|bulk)," $OUT/i4/gemm_cuda.csv
VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_CUDA_INT4_BULK=1 timeout 60 ncu --clock-control none -k regex:k_i4_bulk -c 1 \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy \
  --section MemoryWorkloadAnalysis .gpuq/gemm_cuda 1 --shapes=gate_up > $OUT/i4/ncu_bulk.txt 2>&1; echo "ncu rc=$?"
mkdir -p /tmp/vsr-tune8; VSR_AUTOTUNE_DIR=/tmp/vsr-tune8 timeout 150 .gpuq/gemm_cuda 384,4096 --shapes=gate_up,down,q_proj,o_proj \
  > $OUT/fp8_base.csv 2> $OUT/fp8_base.err; echo "fp8 sweep rc=$?"
grep -E "^(fp8|bf16_linear)" $OUT/fp8_base.csv | head -60
cd $OUT && tar czf logs.tgz i4 && rm -rf i4
