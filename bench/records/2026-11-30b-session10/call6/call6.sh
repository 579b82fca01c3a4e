#!/bin/bash
# session 10, call 6 (kind 8 with the RS form): int4 tests, int4 goldens, the int4 sweep at
# 24-256 rows cold-tuned, the tuner's timings at gate_up, ncu (and SASS stall sites) of a forced kind-8 kernel at 128 rows
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
grep -E '^(bf16_gemm|int4_bf16in),' $OUT/int4.csv | cut -d, -f1,2,5,6 | paste -sd' ' | sed 's/bf16_gemm,/\nB,/g; s/int4_bf16in,/I,/g'
grep -E 'M (24|32|64|100|128|256) int4 path' $OUT/int4.err | sed 's/ int4 path int4:fused//' | paste -sd' ' | fold -w 400
for f in /tmp/vsr-tune/int4_fused*n17408*m10*; do [ -f "$f" ] && python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); t=d['timings_us']
print(d['key'], d['choice']); print('  ', ' '.join('%s=%.1f'%(k,v) for k,v in sorted(t.items(), key=lambda x:x[1])[:16]))" $f; done
