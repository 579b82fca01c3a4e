#!/bin/bash
# session 12, call 5 (c6e5053, the final kernels): every CUDA test, the four built-ins' goldens on cuda:0; the int4
# sweep at 80-128 rows: new with no cache (the defaults), new tuned (16-row keys), old tuned (2321f35's list)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && timeout 240 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$? ${SECONDS}s"
grep -E "checks|int4:" $OUT/quant.txt | head -4; grep -B3 "^FAIL" $OUT/quant.txt | head -12
( cd /tmp && timeout 100 $OLDPWD/.gpu-me/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" $OUT/fused.txt | head -4
( cd /tmp && timeout 120 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL|e2e tiny" $OUT/ops.txt | head -8
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  .gpuw/vllm-srun fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 40 .gpuw/vllm-srun golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done ) > $OUT/golden.txt 2>&1; echo "goldens 6 of 6: $(grep -c '6 of 6' $OUT/golden.txt) of 4 ${SECONDS}s"
unset HF_HUB_CACHE
for v in def new old; do
  g=.gpuq; [ $v = old ] && g=.gpuq-old
  rm -rf /tmp/t-$v; mkdir -p /tmp/t-$v
  if [ $v = def ]; then e="X=1"; else e="VSR_AUTOTUNE_DIR=/tmp/t-$v"; fi
  env $e VSR_FP8=0 timeout 100 $g/gemm_cuda 80,96,100,112,128 --shapes=gate_up,down,q_proj,o_proj > $OUT/sw-$v.csv 2> /tmp/sw-$v.err; echo "sweep $v rc=$? ${SECONDS}s"
  grep -E "int4 bf16-in path" /tmp/sw-$v.err | sed 's/ int4 bf16-in path int4:fused//; s/,src=[a-z]*)//' | paste -sd' ' | head -c 1200; echo
done
for v in def new old; do echo "-- $v"; grep -E '^(bf16_gemm|int4_bf16in),' $OUT/sw-$v.csv | cut -d, -f1,2,5,6 | paste -sd' ' | sed 's/bf16_gemm,/\nB,/g; s/int4_bf16in,/I,/g'; done
