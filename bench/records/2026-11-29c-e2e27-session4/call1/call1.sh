#!/bin/bash
# session 4, call 1: tests on HEAD, ncu on int4 1-row and FP8 4096-row GEMMs, sustained clocks
set -u
tar xzf .gpu-pk/bins.tgz
ln -sfn $PWD /work/wt-me 2>/dev/null || { mkdir -p /work; ln -sfn $PWD /work/wt-me; }
. tools/gpu/cuda_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/env.txt
( cd /tmp && timeout 120 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"
( cd /tmp && VSR_CUDA_DN_V5=1 timeout 120 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops_v5.txt 2>&1; echo "ops v5 rc=$?"
( cd /tmp && timeout 120 $OLDPWD/.gpu-me/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"
( cd /tmp && timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"
grep -hE "checks|^FAIL" $OUT/ops.txt $OUT/ops_v5.txt $OUT/fused.txt $OUT/quant.txt | head -20
# ncu: int4 at 1 row on gate_up (default configs, no autotune), both kernels, and the BF16 GEMM
NCU="ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
VSR_FP8=0 timeout 100 $NCU -k regex:'k_i4_(stream|v4)' -s 6 -c 4 .gpuq/gemm_cuda 1 --shapes=gate_up > $OUT/ncu_int4.txt 2>&1; echo "ncu int4 rc=$?"
VSR_FP8=0 timeout 60 $NCU -k regex:'^(?!k_)' -s 8 -c 2 .gpuq/gemm_cuda 1 --shapes=gate_up > $OUT/ncu_bf16.txt 2>&1; echo "ncu bf16 rc=$?"
# FP8 at 4096 rows, gate_up: cuBLASLt's kernel and ours
timeout 100 $NCU -k regex:'gemm|xmma|cutlass|k_fp8_gemm' -s 10 -c 6 .gpuq/gemm_cuda 4096 --shapes=gate_up > $OUT/ncu_fp8.txt 2>&1; echo "ncu fp8 rc=$?"
# sustained clocks: torch FP8 row-wise and BF16 at the stacked gate|up shape, 4 s each
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 200 > $OUT/smi.csv 2>&1 &
SMI=$!
timeout 60 python3 - > $OUT/sustain.txt 2>&1 <<'PY'
import torch, time
M,K,N = 4096, 5120, 34816
x = torch.randn(M,K,device='cuda').to(torch.float8_e4m3fn); w = torch.randn(N,K,device='cuda').to(torch.float8_e4m3fn)
sx = torch.rand(M,1,device='cuda'); sw = torch.rand(1,N,device='cuda')
xb = torch.randn(M,K,device='cuda',dtype=torch.bfloat16); wb = torch.randn(N,K,device='cuda',dtype=torch.bfloat16)
def run(name, f, secs=4.0):
    for _ in range(3): f()
    torch.cuda.synchronize(); t0=time.time(); n=0
    ev=[]
    while time.time()-t0 < secs:
        a=torch.cuda.Event(enable_timing=True); b=torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); ev.append((a,b)); n+=1
        if n%50==0: torch.cuda.synchronize()
    torch.cuda.synchronize()
    ts=[a.elapsed_time(b) for a,b in ev]; k=len(ts)
    fl=2*M*K*N
    print(f"{name} {time.strftime('%H:%M:%S')} n={k} first10 med {sorted(ts[:10])[5]*1e3:.0f} us ({fl/sorted(ts[:10])[5]/1e9:.0f} TF/s) last-half med {sorted(ts[k//2:])[(k-k//2)//2]*1e3:.0f} us ({fl/sorted(ts[k//2:])[(k-k//2)//2]/1e9:.0f} TF/s)", flush=True)
run("fp8_rowwise_fastacc", lambda: torch._scaled_mm(x, w.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True))
run("fp8_rowwise", lambda: torch._scaled_mm(x, w.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16))
run("bf16", lambda: xb @ wb.t())
PY
kill $SMI
cat $OUT/sustain.txt
grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|SM Frequency|Achieved Occupancy|Registers Per|Grid Size|Block Size|Theoretical Occ|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|^  [a-z_0-9]+.*\(|k_i4|gemm" $OUT/ncu_int4.txt | head -80
