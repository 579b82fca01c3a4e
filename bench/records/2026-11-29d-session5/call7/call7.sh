#!/bin/bash
# session 5, call 7 (c82e2e1: outer-vector-scaled FP8 paths (a)/(b) by default): the three CUDA tests,
# the built-ins' golden self-check on cuda:0 against the old recording, a new cuda recording
# (tools/record_goldens.py), then the 27B-shaped FP8 package end to end with the profile
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
( cd /tmp && timeout 150 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops.txt 2>&1 &
p1=$!
( cd /tmp && timeout 150 $OLDPWD/.gpu-me/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"
( cd /tmp && timeout 200 $OLDPWD/.gpu-me/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"
wait $p1; echo "ops rc=$?"
grep -hE "checks|^FAIL|failed|ovscale|e2e tiny fp8|linear_swiglu fp8" $OUT/ops.txt $OUT/fused.txt $OUT/quant.txt | head -30
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}" HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 60 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -3
  done
  timeout 200 python3 tools/record_goldens.py --bin .gpuw/vllm-srun --device cuda:0 2>&1 | tail -6
  cp data/golden_answers.json src/fixture/golden_answers.c $OUT/ ) 2>&1 | tee $OUT/golden.txt
GPU_OUT=.gpu-me bash tools/gpu/e2e27.sh fp8
grep -A16 "forward 8 x 512, graphs on: best" $OUT/e2e27-fp8.log | head -18
