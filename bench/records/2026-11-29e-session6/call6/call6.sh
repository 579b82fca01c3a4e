#!/bin/bash
# session 6, call 6 (same binaries as call 5): ncu on the FP8-twin producers at 8 x 512 in bench_cuda
# (k_swiglu_fp8_1p, k_rmsnorm_gated_tok with the FP8 twin, k_rmsnorm_row with the FP8 twin): where their time goes
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
mkdir -p /tmp/r
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section SourceCounters --section InstructionStats --section LaunchStats"
# launches per shape: 21 (warm-up + 20); skip the 3 x 128 ones
for k in k_swiglu_fp8_1p k_rmsnorm_gated_tok k_rmsnorm_row; do
  case $k in k_rmsnorm_gated_tok) sk=84;; k_rmsnorm_row) sk=231;; *) sk=21;; esac
  timeout 150 ncu --clock-control none -k regex:$k -s $sk -c 1 $S -o /tmp/$k $G/bench_cuda > /tmp/r/run_$k.txt 2>&1; echo "$k rc=$?"
  ncu --import /tmp/$k.ncu-rep --page details > /tmp/r/$k.txt 2>&1
  ncu --import /tmp/$k.ncu-rep --page source --print-source sass --csv > /tmp/r/${k}_sass.csv 2>&1
  grep -E "  k_|Duration|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |Achieved Occupancy|Registers Per|Grid Size|Block Size" /tmp/r/$k.txt | head -14
done
tar czf $OUT/r.tgz -C /tmp r
