#!/bin/bash
# session 10, call 3 (binaries of call 2, 4c5ab18): ncu of chosen kernels at gate_up 128 rows, each forced through the
# autotune cache of call 2: kind 7's best, kind 8 BN 64 and BN 128 (producer warp); L2 traffic, stalls, SASS stall sites
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
rm -rf /tmp/vsr-tune; tar xzf .gpu-pk/tune2.tgz -C /tmp
K=/tmp/vsr-tune/int4_fused-NVIDIA_H200-n17408-k5120-g128-t16-m10.json
for cfg in m-wm8-wn1-nn4-kw1-s6-ks1 g-bt128-wg1-s4-ks1 g-bt128-wg2-s4-ks1; do
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['choice']=sys.argv[2]; json.dump(d,open(sys.argv[1],'w'))" $K $cfg
  VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 120 ncu --clock-control none -k regex:'k_i4_(wg|mma)' --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
    --metrics lts__t_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
    .gpuq/gemm_cuda 128 --shapes=gate_up > $OUT/ncu_$cfg.txt 2>&1; echo "ncu $cfg rc=$? ${SECONDS}s"
  grep -E "k_i4_|Duration|DRAM Throughput|L2 Cache Throughput|Max Bandwidth|Mem Busy|lts__t_bytes|xbar2l1tex|srcunit_tex|inst_executed|tensor_op|Achieved Occupancy|Issue Slots Busy|Eligible Warps|stalled_(wait|long|short|math|barrier|not_sel|dispatch|mio|membar|lg_throttle|drain|sleeping|branch|no_inst)" $OUT/ncu_$cfg.txt | head -30
done
# the SASS stall sites of the BN-128 kernel
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 150 ncu --clock-control none -k regex:k_i4_wg --launch-skip 3 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --page source --print-source sass --csv .gpuq/gemm_cuda 128 --shapes=gate_up > $OUT/src_wg2.csv 2>&1; echo "src rc=$? ${SECONDS}s"
wc -l $OUT/src_wg2.csv; head -3 $OUT/src_wg2.csv | cut -c1-600
