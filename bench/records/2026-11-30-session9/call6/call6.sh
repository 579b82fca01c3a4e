#!/bin/bash
# session 9, call 6 (final HEAD of the kernels): every CUDA test (test_cuda_quant whole, with fp8_kept_small_rows;
# test_cuda_fused; test_cuda_ops), the four built-ins' goldens on cuda:0, then the whole GEMM sweep and its torch peers
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
SECONDS=0
left() { local t=$(( $1 - SECONDS )); [ $t -gt 5 ] && echo $t || echo 5; }
( cd /tmp && timeout 260 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$? ${SECONDS}s"
grep -E "^(ok|FAIL)|checks|FAIL|int4:|fp8 kept [12] M" $OUT/quant.txt | head -40
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 4 ${SECONDS}s"; grep -v "^--" $OUT/golden.txt | grep -v "6 of 6" | head -4
unset HF_HUB_CACHE
( cd /tmp && timeout 80 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" $OUT/fused.txt | head -4
( cd /tmp && timeout $(left 330) $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" $OUT/ops.txt | head -4
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout $(left 540) .gpuq/gemm_cuda > $OUT/gemm_cuda.csv 2> $OUT/gemm_cuda.err; echo "gemm_cuda rc=$? ${SECONDS}s"
PYTHONUNBUFFERED=1 timeout $(left 585) python3 bench/gemm_cuda_torch.py > $OUT/gemm_torch.csv 2> $OUT/gemm_torch.err; echo "torch rc=$? ${SECONDS}s"
grep -E '^(fp8_kept_lt|fp8_linear),(gate_up|down),[0-9]+,[0-9]+,(1|16|64|128|256),' $OUT/gemm_cuda.csv
grep -E '^(gate_up|down) M (1|128) fp8_kept_lt path' $OUT/gemm_cuda.err
