#!/bin/bash
# session 5, call 4: ncu on the FP8 GEMMs at the gate_up shape (M 4096, K 5120, N 17408): our sm_90a kernel
# (promoted, width 128 and 256), cuBLASLt's unscaled BF16 product, and torch._scaled_mm's CUTLASS kernel
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy"
D=bench/gpu_logs/s5_2026-11-29d/call4
for bn in 128 256; do
  VSR_FP8_GEMM=1 VSR_FP8_GEMM_BN=$bn timeout 90 ncu --clock-control none -k regex:k_fp8_gemm -s 2 -c 1 $S \
    .gpuq/gemm_cuda 4096 --shapes=gate_up > $OUT/ncu_own$bn.txt 2>&1; echo "own $bn rc=$?"
done
VSR_FP8_GEMM=0 timeout 90 ncu --clock-control none -k regex:e4m3 -s 2 -c 1 $S \
  .gpuq/gemm_cuda 4096 --shapes=gate_up > $OUT/ncu_lt.txt 2>&1; echo "lt rc=$?"
timeout 90 ncu --clock-control none -k regex:"device_kernel|cutlass|sm90_xmma" -s 2 -c 1 $S python3 $D/ncu_torch.py > $OUT/ncu_torch.txt 2>&1; echo "torch rc=$?"
for f in $OUT/ncu_*.txt; do echo "== $f"; grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Memory Throughput|Grid Size|Block Size|Cluster|Registers Per|Shared Memory Config|Dynamic Shared|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|No Eligible" $f | head -40; done
