#!/bin/bash
# session 10, call 5 (kind 8 with deeper-staged entries): the int4 sweep at 64-256 rows, cold-tuned, and the tuner's
# timings per kind-8 entry at gate_up
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 200 .gpuq/gemm_cuda 64,100,128,256 > $OUT/int4.csv 2> $OUT/int4.err; echo "sweep rc=$? ${SECONDS}s"
tar czf $OUT/tune.tgz -C /tmp vsr-tune
grep -E '^(bf16_gemm|int4_bf16in),' $OUT/int4.csv | cut -d, -f1,2,5,6 | paste -sd' ' | sed 's/bf16_gemm,/\nB,/g; s/int4_bf16in,/I,/g'
grep -E 'M (64|100|128|256) int4 path' $OUT/int4.err | sed 's/ int4 path int4:fused//' | paste -sd' ' | fold -w 400
for f in /tmp/vsr-tune/int4_fused*n17408*m10* /tmp/vsr-tune/int4_fused*n5120-k17408*m10*; do [ -f "$f" ] && python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); t=d['timings_us']
print(d['key'], d['choice']); print('  ', ' '.join('%s=%.1f'%(k,v) for k,v in sorted(t.items(), key=lambda x:x[1]) if k.startswith('g-'))[:900])" $f; done
