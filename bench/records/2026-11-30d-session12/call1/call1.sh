#!/bin/bash
# session 12, call 1 (9f99b51: int4 kind 9, the streaming kernel with the scales factored out, opt-in):
# int4 tests (kind 9 forced in a pass of each), the 1-16 row sweep of all seven shapes with kind 9 off and on
# (plain and in graphs), ncu of both at gate_up 1 row
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 170 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -12
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
for fs in 0 1; do
  VSR_CUDA_INT4_FS=$fs VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 120 .gpuq/gemm_cuda 1,8,16 > $OUT/fs$fs.csv 2> $OUT/fs$fs.err; echo "sweep fs=$fs rc=$? ${SECONDS}s"
  VSR_SWEEP_GRAPH=1 VSR_CUDA_INT4_FS=$fs VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 120 .gpuq/gemm_cuda 1,8,16 > $OUT/fsg$fs.csv 2> $OUT/fsg$fs.err; echo "graph fs=$fs rc=$? ${SECONDS}s"
done
for f in fs0 fs1 fsg0 fsg1; do echo "-- $f"; grep -E '^(bf16_gemm|int4_bf16in),' $OUT/$f.csv | cut -d, -f1,2,3,5,6 | paste -sd' ' | sed 's/bf16_gemm,/\nB,/g; s/int4_bf16in,/I,/g'; done
tar czf $OUT/tune.tgz -C /tmp vsr-tune
for fs in 0 1; do
  VSR_CUDA_INT4_FS=$fs VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 90 ncu --clock-control none -k regex:k_i4_stream -c 1 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy \
    .gpuq/gemm_cuda 1 --shapes=gate_up > $OUT/ncu_fs$fs.txt 2>&1; echo "ncu fs=$fs rc=$? ${SECONDS}s"
  grep -E "Duration|DRAM Throughput|Issued Warp Per|Eligible Warps|Warp Cycles Per Issued|Registers Per|Achieved Active Warps|Grid Size|Block Size" $OUT/ncu_fs$fs.txt | head -12
done
