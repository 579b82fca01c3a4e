#!/bin/bash
# session 4, call 2: FP8 fast accumulation verified and measured; 27B e2e FP8 then BF16
set -u
tar xzf .gpu-pk/bins.tgz
ln -sfn $PWD /work/wt-me 2>/dev/null || { mkdir -p /work; ln -sfn $PWD /work/wt-me; }
FINAL_OUT=${OUT:-/tmp/out}
export OUT=/tmp/c2; mkdir -p $OUT
. tools/gpu/cuda_env.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
( cd /tmp && timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"
grep -E "checks|FAIL" $OUT/quant.txt | head; grep -E "K (5120|17408)" $OUT/quant.txt | awk '{print}' | sort | uniq | head -40
VSR_TORCH=0 timeout 120 .gpuq/gemm_cuda 384,4096 --shapes=gate_up,down,o_proj,in_proj_qkv,q_proj > $OUT/gemm_fp8.csv 2> $OUT/gemm_fp8.err; echo "gemm rc=$?"
grep -E "^(bf16_gemm|fp8_linear|fp8_linear_promoted|fp8_old|fp8_pq_fast256|fp8_pq_fast128|fp8_pq_bn256)," $OUT/gemm_fp8.csv
GPU_OUT=.gpu-me bash tools/gpu/e2e27.sh fp8 bf16
kill $SMI
tar czf $FINAL_OUT/call2.tgz -C /tmp c2
