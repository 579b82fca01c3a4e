#!/bin/bash
# session 10, call 9 (binaries of call 8): the BF16 and int4 rows of the GEMM sweep at 1-256 rows (cold autotune), to
# replace those rows of bench/gemm_cuda.csv
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 250 .gpuq/gemm_cuda 1,8,16,32,64,128,256 > $OUT/int4.csv 2> $OUT/int4.err; echo "sweep rc=$? ${SECONDS}s"
grep -E '^(bf16_gemm|int4_bf16in),(gate_up|o_proj),' $OUT/int4.csv | cut -d, -f1,2,5,6 | paste -sd' ' | fold -w 300
