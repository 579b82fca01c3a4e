#!/bin/bash
# session 8, call 2 (HEAD of main after "autotune: ... timed cold"): test_cuda_quant (lean modes, cold autotune),
# test_cuda_gemm (the widened cuBLASLt search, now cold); the int4 rows at 1, 8, 16 with cold tuning; the FP8 GEMM
# alone at 4096 rows on the torch peer's data, the torch peer in the same call, and which kernels both run
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
( cd /tmp && timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"; grep -E "checks|FAIL|int4 lean|int4:" $OUT/quant.txt | head -12
( cd /tmp && timeout 90 $OLDPWD/.gpuq/test_cuda_gemm ) > $OUT/gemm_test.txt 2>&1; echo "gemm test rc=$?"; grep -E "checks|FAIL" $OUT/gemm_test.txt | head -5
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 150 .gpuq/gemm_cuda 1,8,16 > $OUT/sweep_i4.csv 2> $OUT/sweep_i4.err; echo "sweep i4 rc=$?"
grep -E '^(bf16_gemm|int4_bf16in|int4_lean)' $OUT/sweep_i4.csv
grep -E 'M 1 int4 (bf16-in|lean)' $OUT/sweep_i4.err | head -6
python3 - <<'PY' > $OUT/i4_tune.txt
import glob, json
for f in sorted(glob.glob('/tmp/vsr-tune/int4_fused-*')):
    d = json.load(open(f)); t = sorted(d['timings_us'].items(), key=lambda a: a[1])
    print(d['key'], d.get('l2'), 'choice', d['choice'], ' '.join(f"{k}:{v:.1f}" for k, v in t[:4]))
PY
grep -E 'n17408-k5120-g128-t1|n5120-k17408-g128-t1' $OUT/i4_tune.txt
VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 120 .gpuq/gemm_cuda 4096 --shapes=gate_up,down,o_proj,q_proj > $OUT/sweep_f8.csv 2> $OUT/sweep_f8.err; echo "sweep f8 rc=$?"
grep -E '^(bf16_gemm|fp8_linear,|fp8_pq_route|fp8_kept_lt|fp8_pq_fast128)' $OUT/sweep_f8.csv
VSR_FP8_DATA=bytes VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 60 .gpuq/gemm_cuda 4096 --shapes=gate_up > $OUT/sweep_f8_bytes.csv 2>/dev/null; echo "bytes:"; grep -E '^(fp8_pq_route|fp8_kept_lt)' $OUT/sweep_f8_bytes.csv
PYTHONUNBUFFERED=1 timeout 120 python3 bench/gemm_cuda_torch.py 4096 > $OUT/torch.csv 2> $OUT/torch.err; echo "torch rc=$?"
grep -E '^#|gate_up|down|o_proj|q_proj' $OUT/torch.csv | grep -v kv
timeout 60 python3 bench/gpu_logs/s8_2026-11-29g/call2/torch_kernels.py 4096 5120 17408 2>&1 | grep -v Warning | head -5
timeout 120 ncu --clock-control none -k regex:nvjet --metrics gpu__time_duration.sum --launch-count 400 .gpuq/gemm_cuda 4096 --shapes=gate_up > $OUT/ncu_names.txt 2>&1
grep -oE 'nvjet[A-Za-z0-9_]+' $OUT/ncu_names.txt | sort | uniq -c
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
