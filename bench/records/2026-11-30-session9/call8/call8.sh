#!/bin/bash
# session 9, call 8 (the candidate list holds 96): int4 tests, then kv_proj and o_proj at 64 and 128 rows (their
# kind-7 lists were cut at 64 before)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 120 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -8
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 90 .gpuq/gemm_cuda 64,128 --shapes=kv_proj,down > $OUT/int4.csv 2> $OUT/int4.err; echo "sweep rc=$? ${SECONDS}s"
grep -E '^(bf16_gemm|int4_linear|int4_prev|int4_bf16in),' $OUT/int4.csv | cut -d, -f1,2,5,6 | paste -sd' '
grep -E 'int4 path' $OUT/int4.err
for f in /tmp/vsr-tune/int4_fused*m9*; do python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['key'], len(d['timings_us']), d['choice'])" $f; done
