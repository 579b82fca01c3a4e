#!/bin/bash
# session 9, call 2 (eaa3468, int4 kind 7 with ldmatrix before decode, deeper stages): int4 tests, int4 sweep
# 32-256 rows on four shapes (autotuned cold), then ncu of the chosen kind-7 kernel at gate_up 32 and 256 rows
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -12
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 150 .gpuq/gemm_cuda 32,64,128,256 --shapes=gate_up,down,o_proj,kv_proj > $OUT/int4.csv 2> $OUT/int4.err; echo "sweep rc=$? ${SECONDS}s"
tar czf $OUT/tune.tgz -C /tmp vsr-tune
grep -E '^(bf16_gemm|int4_linear|int4_prev|int4_unpack|int4_bf16in),' $OUT/int4.csv | cut -d, -f1,2,5,6 | paste -sd' ' | fold -w 3000
grep -E 'M (32|64|128|256) int4 path' $OUT/int4.err | head -16
for M in 32 256; do
  VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 120 ncu --clock-control none -k regex:k_i4_mma --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section LaunchStats --section ComputeWorkloadAnalysis .gpuq/gemm_cuda $M --shapes=gate_up > $OUT/ncu_$M.txt 2>&1; echo "ncu $M rc=$? ${SECONDS}s"
  grep -E "k_i4_mma|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issue Slots Busy|Issued Warp Per|No Eligible|Warp Cycles Per Issued|Eligible Warps|Block Limit|Dynamic Shared|Grid Size|Executed Ipc A|stall|Stall" $OUT/ncu_$M.txt | head -40
done
