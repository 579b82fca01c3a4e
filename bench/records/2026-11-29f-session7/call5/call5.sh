#!/bin/bash
# session 7, call 5 (e5f66df: narrow RMSNorm in the row kernel's order, SwiGLU pair with four BF16 loads a thread):
# test_cuda_fused, test_cuda_ops, bench_cuda per op (with linear_swiglu on FP8 weights and its SwiGLU variants),
# ncu of the pair kernel reading linear_swiglu's BF16 product (four and two loads a thread) at 8 x 512
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 100 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"; grep -hE "checks|^FAIL|DIFFERS|WRONG|rmsnorm D=" $OUT/fused.txt | head -12
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"; grep -E "checks|^FAIL" $OUT/ops.txt | tail -3
timeout 120 $G/bench_cuda > $OUT/bench.txt 2>&1; echo "bench rc=$?"; grep -E "^## |swiglu|gated|rmsnorm \(|mul_sig" $OUT/bench.txt
N=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || command -v ncu)
prof() { # tag, row filter, kernel regex
  VSR_BENCH_OP_SHAPE=8x512 VSR_BENCH_ONLY="$2" timeout 80 $N --clock-control none -k regex:"$3" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__inst_executed.sum,dram__bytes.sum \
    $G/bench_cuda > $OUT/ncu_$1.txt 2>&1; echo "ncu $1 rc=$?"
  grep -E "Duration|DRAM Throughput|Compute \(SM\) Th|Registers Per|Achieved Occ|Theoretical Occ|Warp Cycles Per Issued|No Eligible|inst_executed.sum|dram__bytes.sum" $OUT/ncu_$1.txt | head -12
  grep -E "stalled_.*ratio" $OUT/ncu_$1.txt | sort -k3 -n -r | head -5
}
prof sw_u4 "linear_swiglu (fp8 weights)" k_swiglu_fp8_cl
prof sw_u2 "linear_swiglu (fp8 weights, other U)" k_swiglu_fp8_cl
