#!/bin/bash
# session 8, call 6 (gemm_cuda and the library as call 5): the whole GEMM sweep (every row count and shape,
# cold-tuned, FP8 data as torch's) with the torch peers, for bench/gemm_cuda.csv, .torch.csv and .png
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
SECONDS=0
VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 290 .gpuq/gemm_cuda > $OUT/gemm_cuda.csv 2> $OUT/gemm_cuda.err; echo "gemm_cuda rc=$? ${SECONDS}s"
SECONDS=0
PYTHONUNBUFFERED=1 timeout 120 python3 bench/gemm_cuda_torch.py > $OUT/gemm_torch.csv 2> $OUT/gemm_torch.err; echo "torch rc=$? ${SECONDS}s"
head -4 $OUT/gemm_cuda.csv; head -4 $OUT/gemm_torch.csv; wc -l $OUT/gemm_cuda.csv $OUT/gemm_torch.csv
grep -E ',(1|16|4096|8192),' $OUT/gemm_cuda.csv | grep -E '^(bf16_linear|fp8_linear|fp8_kept_lt|int4_linear),(gate_up|o_proj)' | head -32
