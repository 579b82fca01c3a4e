#!/bin/bash
# session 12, call 8 (4b07051, the final kernels): test_cuda_fused, test_cuda_ops, the four built-ins' goldens on cuda:0
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && timeout 100 $OLDPWD/.gpu-me/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" $OUT/fused.txt | head -4
( cd /tmp && timeout 120 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL|e2e tiny" $OUT/ops.txt | head -8
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 4 ${SECONDS}s"
