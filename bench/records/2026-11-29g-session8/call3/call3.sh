#!/bin/bash
# session 8, call 3 (0f7cf9e): test_cuda_quant (lean modes removed; cold autotune with the read flush),
# test_cuda_gemm; the int4 rows at 1, 8, 16 cold-tuned; the FP8 GEMM alone from an idle GPU (--fp8-gemm) at
# 4096 and 8192 rows beside torch._scaled_mm timed the same way; the 27B-shaped FP8 package end to end
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
( cd /tmp && timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"; grep -E "checks|FAIL" $OUT/quant.txt | head -6
( cd /tmp && timeout 90 $OLDPWD/.gpuq/test_cuda_gemm ) > $OUT/gemm_test.txt 2>&1; echo "gemm test rc=$?"; grep -E "checks|FAIL" $OUT/gemm_test.txt | head -4
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 100 .gpuq/gemm_cuda 1,8,16 --shapes=gate_up,down,q_proj,o_proj > $OUT/sweep_i4.csv 2> $OUT/sweep_i4.err; echo "sweep i4 rc=$?"
grep -E '^(bf16_gemm|int4_bf16in|int4_bulk_bf16in)' $OUT/sweep_i4.csv
python3 - <<'PY' > $OUT/i4_tune.txt
import glob, json
for f in sorted(glob.glob('/tmp/vsr-tune/int4_fused-*')):
    d = json.load(open(f)); t = sorted(d['timings_us'].items(), key=lambda a: a[1])
    print(d['key'], d.get('l2'), 'choice', d['choice'], ' '.join(f"{k}:{v:.1f}" for k, v in t[:4]))
PY
grep -E 't1-(v3s|b6)' $OUT/i4_tune.txt
VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 120 .gpuq/gemm_cuda 4096,8192 --fp8-gemm > $OUT/fp8_cool.csv 2> $OUT/fp8_cool.err; echo "fp8 cool rc=$?"
grep -E '^fp8' $OUT/fp8_cool.csv
VSR_TORCH_FP8_COOL=1 PYTHONUNBUFFERED=1 timeout 120 python3 bench/gemm_cuda_torch.py 4096,8192 > $OUT/torch_cool.csv 2> $OUT/torch_cool.err; echo "torch cool rc=$?"
grep -E '^#|^torch' $OUT/torch_cool.csv
rm -rf /tmp/d3-27b
( time timeout 220 $G/mkfixture /tmp/d3-27b 27b-shape fp8 ) > $OUT/fixture27-fp8.log 2>&1; tail -n 3 $OUT/fixture27-fp8.log | head -1
VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 timeout 120 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-fp8.log 2>&1
echo "== fp8 rc=$?"; grep -E "whole forward|best of" $OUT/e2e27-fp8.log
rm -rf /tmp/d3-27b
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
