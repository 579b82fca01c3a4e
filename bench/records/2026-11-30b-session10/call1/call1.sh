#!/bin/bash
# session 10, call 1 (45d4e71: int4 kind 8, the wgmma kernel): int4 tests (every kind-8 configuration against the
# reference), int4 goldens, the int4 sweep at 24-256 rows cold-tuned, the tuner's timings, ncu of the chosen kernel
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 170 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -16
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "int4 goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 2 ${SECONDS}s"
unset HF_HUB_CACHE
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 220 .gpuq/gemm_cuda 24,32,64,100,128,256 > $OUT/int4.csv 2> $OUT/int4.err; echo "sweep rc=$? ${SECONDS}s"
tar czf $OUT/tune.tgz -C /tmp vsr-tune
grep -E '^(bf16_gemm|int4_linear|int4_prev|int4_unpack|int4_bf16in),' $OUT/int4.csv | cut -d, -f1,2,5,6 | paste -sd' ' | fold -w 3000
grep -E 'M (24|32|64|100|128|256) int4 path' $OUT/int4.err | head -42
for f in /tmp/vsr-tune/int4_fused*gate_up* /tmp/vsr-tune/int4_fused*n17408*; do [ -f "$f" ] && python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); t=d['timings_us']
best7=min((v,k) for k,v in t.items() if k.startswith('m-')); best8=min(((v,k) for k,v in t.items() if k.startswith('g-')), default=None)
print(d['key'], 'choice', d['choice'], 'best7', best7, 'best8', best8)" $f; done
for M in 128; do
  VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 100 ncu --clock-control none -k regex:k_i4_wg --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --section ComputeWorkloadAnalysis --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio .gpuq/gemm_cuda $M --shapes=gate_up > $OUT/ncu_$M.txt 2>&1; echo "ncu $M rc=$? ${SECONDS}s"
  grep -E "k_i4_wg|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|Eligible Warps|Executed Ipc A|stalled_(wait|long|short|math|barrier|not_sel|dispatch|mio)" $OUT/ncu_$M.txt | head -24
done
