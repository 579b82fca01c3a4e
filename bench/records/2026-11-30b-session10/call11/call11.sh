#!/bin/bash
# session 10, call 11 (i4_memo: each key's configuration kept per ctx): int4 tests, the two-process autotune test, int4
# goldens, and kv_proj / gate_up at 64 and 128 rows (the sweep's host-paced kv_proj figures)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 80 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -6
( cd /tmp && VSR_QUANT_TESTS=autotune timeout 40 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_autotune.txt 2>&1; echo "quant autotune rc=$? ${SECONDS}s"
grep -E "checks|FAIL|child" $OUT/quant_autotune.txt | head -10
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "int4 goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 2 ${SECONDS}s"
unset HF_HUB_CACHE
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 60 .gpuq/gemm_cuda 64,128 --shapes=kv_proj,gate_up > $OUT/int4.csv 2> $OUT/int4.err; echo "sweep rc=$? ${SECONDS}s"
grep -E '^(bf16_gemm|int4_bf16in|int4_linear|int4_prev),' $OUT/int4.csv | cut -d, -f1,2,5,6 | paste -sd' ' | fold -w 300
