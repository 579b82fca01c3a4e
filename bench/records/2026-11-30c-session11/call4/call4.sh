#!/bin/bash
# session 11, call 4 (the final kernels: RS2 and the persistent form removed, epilogues loading before storing):
# every CUDA test (test_cuda_quant whole, test_cuda_fused, test_cuda_ops), the four built-ins' goldens on cuda:0,
# int4 at 100 / 128 rows storing against accumulating (down, o_proj, gate_up), ncu of kind 8 RS at gate_up 128 rows
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && timeout 240 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant.txt | head -12
( cd /tmp && timeout 100 $OLDPWD/.gpu-me/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" $OUT/fused.txt | head -4
( cd /tmp && timeout 120 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL|e2e tiny" $OUT/ops.txt | head -8
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 4 ${SECONDS}s"
unset HF_HUB_CACHE
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 100 .gpuq/gemm_cuda 100,128 --shapes=gate_up,down,o_proj > $OUT/store.csv 2>/dev/null; echo "store rc=$? ${SECONDS}s"
VSR_SWEEP_ACC=1 VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 100 .gpuq/gemm_cuda 100,128 --shapes=gate_up,down,o_proj > $OUT/acc.csv 2>/dev/null; echo "acc rc=$? ${SECONDS}s"
cat $OUT/store.csv $OUT/acc.csv | grep -E '^(bf16_gemm|int4_bf16in|int4_bf16in_acc),' | cut -d, -f1,2,5,6 | paste -sd' ' | fold -w 240
for f in /tmp/vsr-tune/int4_fused*m10*; do python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); print(d['key'], d['choice'], '%.1f'%d['timings_us'][d['choice']])" $f; done
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 100 ncu --clock-control none -k regex:k_i4_wg --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats \
  --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_bytes.sum \
  .gpuq/gemm_cuda 128 --shapes=gate_up > $OUT/ncu_128.txt 2>&1; echo "ncu rc=$? ${SECONDS}s"
grep -E "k_i4_|Duration|DRAM Throughput|L2 Cache Throughput|lts__t_bytes|inst_executed|tensor_op|Achieved Occupancy|Issue Slots Busy|Eligible Warps|Active Warps Per|Stall|Registers Per" $OUT/ncu_128.txt | head -30
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 120 ncu --clock-control none -k regex:k_i4_wg --launch-skip 3 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --page source --print-source sass --csv .gpuq/gemm_cuda 128 --shapes=gate_up > $OUT/src_128.csv 2>&1; echo "src rc=$? ${SECONDS}s"
python3 .gpu-pk/ncu_stall_sites.py $OUT/src_128.csv --top 16
gzip -f $OUT/src_128.csv
