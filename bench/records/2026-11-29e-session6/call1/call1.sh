#!/bin/bash
# session 6, call 1 (66bc86d): test_cuda_fused (the one-pass SwiGLU FP8 twin against the two-pass one),
# ncu on the DeltaNet kernels at 8 x 512 (bench_cuda's per-op shapes), then the 27B-shaped FP8 package end
# to end three times on one fixture: the default (one pass), VSR_CUDA_SWIGLU_1P=0 (two passes),
# VSR_CUDA_FP8_FAST_ACCUM=1 (with the outer-vector paths, never measured)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 150 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"
grep -hE "checks|^FAIL|failed|one pass against" $OUT/fused.txt | head -12
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section SourceCounters --section InstructionStats"
timeout 100 ncu --clock-control none -k regex:k_dn6_state -s 23 -c 1 $S -o /tmp/dnstate $G/bench_cuda > $OUT/ncu_dn_run.txt 2>&1; echo "ncu state rc=$?"
timeout 100 ncu --clock-control none -k regex:k_dn6_intra -s 23 -c 1 $S -o /tmp/dnintra $G/bench_cuda > $OUT/ncu_dni_run.txt 2>&1; echo "ncu intra rc=$?"
for r in dnstate dnintra; do
  ncu --import /tmp/$r.ncu-rep --page details > $OUT/ncu_$r.txt 2>&1
  ncu --import /tmp/$r.ncu-rep --page source --print-source sass --csv > $OUT/ncu_${r}_sass.csv 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|L1/TEX Cache Throughput|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|No Eligible|Registers Per|Achieved Occupancy|Stall" $OUT/ncu_$r.txt | head -30
done
grep -E "deltanet|swiglu" $OUT/ncu_dn_run.txt | head -6
export VSR_NO_PROGRESS=1
rm -rf /tmp/d3-27b; mkdir -p /tmp/vsr-tune
( time timeout 400 $G/mkfixture /tmp/d3-27b 27b-shape fp8 ) > $OUT/fixture27-fp8.log 2>&1; tail -n 3 $OUT/fixture27-fp8.log
for v in default sw2p fast; do
  case $v in default) E="";; sw2p) E="VSR_CUDA_SWIGLU_1P=0";; fast) E="VSR_CUDA_FP8_FAST_ACCUM=1";; esac
  env $E VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 timeout 200 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-fp8-$v.log 2>&1
  echo "== $v rc=$?"; grep -E "^forward|linear_swiglu fp8 5120->34816 M=(384|4096)" $OUT/e2e27-fp8-$v.log
done
tar czf "$OUT/tune27.tgz" -C /tmp vsr-tune 2>/dev/null
true
