#!/bin/bash
# session 6, call 2 (66bc86d): ncu on DeltaNet v6's state kernel (bench_cuda's shapes: 3 x 128, launch 2;
# 8 x 512, launch 24), the details page and the SASS source page with its stall samples, packed in one tarball
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
mkdir -p /tmp/r
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section SourceCounters --section InstructionStats"
timeout 150 ncu --clock-control none -k regex:k_dn6_state -s 1 -c 1 $S --import-source no -o /tmp/s128 $G/bench_cuda > /tmp/r/run128.txt 2>&1; echo "ncu 128 rc=$?"
timeout 150 ncu --clock-control none -k regex:k_dn6_state -s 23 -c 1 $S -o /tmp/s512 $G/bench_cuda > /tmp/r/run512.txt 2>&1; echo "ncu 512 rc=$?"
for r in s128 s512; do
  ncu --import /tmp/$r.ncu-rep --page details --print-details all > /tmp/r/$r.txt 2>&1
  ncu --import /tmp/$r.ncu-rep --page raw --csv > /tmp/r/${r}_raw.csv 2>&1
  ncu --import /tmp/$r.ncu-rep --page source --print-source sass --csv > /tmp/r/${r}_sass.csv 2>&1
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|No Eligible|Stall" /tmp/r/$r.txt | head -30
done
ls -la /tmp/r; head -3 /tmp/r/s512_sass.csv | cut -c1-600
tar czf $OUT/ncu.tgz -C /tmp r
