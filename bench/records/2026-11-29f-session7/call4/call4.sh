#!/bin/bash
# session 7, call 4 (6fe3cd7: k_swiglu4 by row and column block, e4m3 pairs, gated norm HPW 3): test_cuda_fused,
# test_cuda_ops, bench_cuda per op, then ncu of the three FP8-twin producers at 8 x 512 (one row each)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 100 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"; grep -hE "checks|^FAIL|DIFFERS|WRONG|swiglu stride|rmsnorm_gated T" $OUT/fused.txt | head -12
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"; grep -E "checks|^FAIL" $OUT/ops.txt | tail -3
timeout 100 $G/bench_cuda > $OUT/bench.txt 2>&1; echo "bench rc=$?"; grep -E "^## |swiglu|gated|rmsnorm|mul_sig" $OUT/bench.txt
N=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || command -v ncu)
prof() { # tag, row filter, kernel regex
  VSR_BENCH_OP_SHAPE=8x512 VSR_BENCH_ONLY="$2" timeout 80 $N --clock-control none -k regex:"$3" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__inst_executed.sum,dram__bytes.sum \
    $G/bench_cuda > $OUT/ncu_$1.txt 2>&1; echo "ncu $1 rc=$?"
  grep -E "Duration|DRAM Throughput|Compute \(SM\) Th|Registers Per|Achieved Occ|Theoretical Occ|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|inst_executed.sum|dram__bytes.sum" $OUT/ncu_$1.txt | head -16
  grep -E "stalled_.*ratio" $OUT/ncu_$1.txt | sort -k3 -n -r | head -6
}
prof rmsnorm "rmsnorm (fp8 twin, sole)" k_rmsnorm_row
prof gated "rmsnorm_gated (fp8 twin)" k_rmsnorm_gated_tok
prof swiglu "swiglu (fp8 twin, sole)" k_swiglu_fp8_cl
