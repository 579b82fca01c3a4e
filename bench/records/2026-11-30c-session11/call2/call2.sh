#!/bin/bash
# session 11, call 2 (c82848b: the persistent stream-K kind 8):
# int4 tests, test_cuda_ops (e2e tiny int4 on the stacked projections), int4 goldens, the int4 sweep at 64-256 rows
# (cold) with the tuner's timings, the small shapes at 1-16 rows in graphs and plain, the 27B int4 package at 1 x 100
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -12
( cd /tmp && timeout 120 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL|e2e tiny" $OUT/ops.txt | head -8
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "int4 goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 2 ${SECONDS}s"
unset HF_HUB_CACHE
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 150 .gpuq/gemm_cuda 64,100,128,256 --shapes=gate_up,down,o_proj > $OUT/int4.csv 2> $OUT/int4.err; echo "sweep rc=$? ${SECONDS}s"
grep -E '^(bf16_gemm|int4_bf16in),' $OUT/int4.csv | cut -d, -f1,2,5,6 | paste -sd' ' | sed 's/bf16_gemm,/\nB,/g; s/int4_bf16in,/I,/g'
for f in /tmp/vsr-tune/int4_fused*n17408*m10*; do [ -f "$f" ] && python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); t=d['timings_us']
print(d['key'], d['choice']); print('  ', ' '.join('%s=%.1f'%(k,v) for k,v in sorted(t.items(), key=lambda x:x[1])[:8])); print('   sk:', ' '.join('%s=%.1f'%(k,v) for k,v in sorted(t.items(), key=lambda x:x[1]) if 'sk' in k))" $f; done
for f in /tmp/vsr-tune/int4_fused*m10*; do python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); print(d['key'], d['choice'], '%.1f'%d['timings_us'][d['choice']])" $f; done
tar czf $OUT/tune.tgz -C /tmp vsr-tune
GPU_OUT=.gpu-me VSR_BENCH_E2E_SHAPES=1x100,3x128 timeout 330 bash tools/gpu/e2e27.sh w4a16-gptq; echo "e2e ${SECONDS}s"
grep -E "weights|whole forward" $OUT/e2e27-w4a16-gptq.log | head -6
grep -E "^linear" $OUT/e2e27-w4a16-gptq.log | head -24
gzip -f $OUT/e2e27-w4a16-gptq.log; rm -f $OUT/fixture27-w4a16-gptq.log $OUT/int4.err; tar czf $OUT/tune27.tgz -C /tmp vsr-tune
