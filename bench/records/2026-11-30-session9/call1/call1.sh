#!/bin/bash
# session 9, call 1 (8bf5d35, int4 kind 7): int4 tests, the int4 sweep 1-256 rows (autotuned cold), fused tests,
# goldens, then the rest of test_cuda_quant
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 150 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -12
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 150 .gpuq/gemm_cuda 1,16,32,64,100,128,256 > $OUT/int4.csv 2> $OUT/int4.err; echo "sweep rc=$? ${SECONDS}s"
tar czf $OUT/tune.tgz -C /tmp vsr-tune
grep -E '^(bf16_gemm|int4_linear|int4_prev|int4_unpack|int4_bf16in),' $OUT/int4.csv | awk -F, '$5>16' | cut -d, -f1,2,5,6 | paste -sd' ' | fold -w 3000
grep -E 'M (32|256) int4 path' $OUT/int4.err | head -8
( cd /tmp && timeout 60 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" $OUT/fused.txt | head -4
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 4 ${SECONDS}s"; grep -v "^--" $OUT/golden.txt | grep -v "6 of 6" | head -4
unset HF_HUB_CACHE
( cd /tmp && VSR_QUANT_TESTS=noint4 timeout $((560 - SECONDS)) $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_rest.txt 2>&1; echo "quant rest rc=$? ${SECONDS}s"
grep -E "^(PASS|FAIL|ok|RUN)|checks|FAIL" $OUT/quant_rest.txt | tail -14
