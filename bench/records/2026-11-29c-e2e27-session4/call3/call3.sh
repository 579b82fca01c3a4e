#!/bin/bash
# session 4, call 3: test_cuda_quant (fast accumulation, FP8 route, int4 fifth pass) and the 27B e2e FP8 then BF16
set -u
tar xzf .gpu-pk/bins.tgz
ln -sfn $PWD /work/wt-me 2>/dev/null || { mkdir -p /work; ln -sfn $PWD /work/wt-me; }
FINAL_OUT=${OUT:-/tmp/out}
export OUT=/tmp/c3; mkdir -p $OUT
. tools/gpu/cuda_env.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
( cd /tmp && timeout 200 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"
grep -E "checks|FAIL|fp8 route|autotune:" $OUT/quant.txt | head -30
GPU_OUT=.gpu-me bash tools/gpu/e2e27.sh fp8 bf16
kill $SMI
grep -h "fp8_route" -r /tmp/vsr-tune 2>/dev/null | head -0
ls /tmp/vsr-tune | grep fp8_route | head -20; for f in /tmp/vsr-tune/fp8_route*; do echo "$f: $(tr -d '\n' < $f | head -c 400)"; done 2>/dev/null | head -20
tar czf $FINAL_OUT/call3.tgz -C /tmp c3
