#!/bin/bash
# session 8, call 7 (HEAD "FP8 linear: up to 128 rows ... (c)"): test_cuda_quant, test_cuda_fused, the goldens on
# cuda:0, then the whole GEMM sweep with the torch peers again (for bench/gemm_cuda.csv, .torch.csv, .png)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 110 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"; grep -E "checks|FAIL" $OUT/quant.txt | head -6
( cd /tmp && timeout 60 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"; grep -hE "checks|^FAIL" $OUT/fused.txt | head -4
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 4"; grep -v "^--" $OUT/golden.txt | grep -v "6 of 6" | head -4
unset HF_HUB_CACHE
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
SECONDS=0
VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 120 .gpuq/gemm_cuda > $OUT/gemm_cuda.csv 2> $OUT/gemm_cuda.err; echo "gemm_cuda rc=$? ${SECONDS}s"
PYTHONUNBUFFERED=1 timeout 40 python3 bench/gemm_cuda_torch.py > $OUT/gemm_torch.csv 2> $OUT/gemm_torch.err; echo "torch rc=$?"
grep -E '^fp8_linear,(gate_up|down|o_proj),[0-9]+,[0-9]+,(1|16|64|128|256),' $OUT/gemm_cuda.csv
grep -E '^(gate_up|down) M (1|128|256) fp8 path' $OUT/gemm_cuda.err
