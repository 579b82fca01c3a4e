#!/bin/bash
# session 6, call 3: DeltaNet v6's state kernel unrolled (0f-commit in .gpu-me) against its first form
# (.gpu-old, the same tests with the output hashes): test_cuda_ops both (hashes must match), bench_cuda both
# (deltanet rows at 3 x 128 and 8 x 512), ncu SASS stall samples of the new state kernel at 8 x 512
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
mkdir -p /tmp/r
for G in .gpu-old .gpu-me; do
  ( cd /tmp && timeout 200 $OLDPWD/$G/test_cuda_ops ) > /tmp/r/ops$G.txt 2>&1; echo "$G ops rc=$?"
  grep -E "checks|^FAIL" /tmp/r/ops$G.txt | tail -3
  grep -o "v6 output hash [0-9a-f]*" /tmp/r/ops$G.txt > /tmp/r/hash$G.txt
done
wc -l /tmp/r/hash*.txt; cmp /tmp/r/hash.gpu-old.txt /tmp/r/hash.gpu-me.txt && echo "HASHES IDENTICAL"
for G in .gpu-old .gpu-me .gpu-old .gpu-me; do
  timeout 120 $G/bench_cuda > /tmp/r/bench$G.txt 2>&1; echo "$G bench rc=$?"; grep -E "^## |^deltanet" /tmp/r/bench$G.txt
done
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --section InstructionStats"
timeout 150 ncu --clock-control none -k regex:k_dn6_state -s 23 -c 1 $S -o /tmp/s512 .gpu-me/bench_cuda > /tmp/r/run512.txt 2>&1; echo "ncu rc=$?"
ncu --import /tmp/s512.ncu-rep --page details > /tmp/r/s512.txt 2>&1
ncu --import /tmp/s512.ncu-rep --page source --print-source sass --csv > /tmp/r/s512_sass.csv 2>&1
grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  " /tmp/r/s512.txt | head
tar czf $OUT/r.tgz -C /tmp r
