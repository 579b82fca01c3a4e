#!/bin/bash
# session 12, call 6 (binaries of c6e5053): the int4 sweep at 129-256 rows, tuned (16-row keys) and with no cache
# (the defaults), to set the defaults there
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
for v in new def; do
  rm -rf /tmp/t-$v; mkdir -p /tmp/t-$v
  if [ $v = def ]; then e="X=1"; else e="VSR_AUTOTUNE_DIR=/tmp/t-$v"; fi
  env $e VSR_FP8=0 timeout 150 .gpuq/gemm_cuda 144,176,192,208,224,256 --shapes=gate_up,down,q_proj,o_proj > $OUT/sw6-$v.csv 2> /tmp/sw-$v.err; echo "sweep $v rc=$? ${SECONDS}s"
  grep -E "int4 bf16-in path" /tmp/sw-$v.err | sed 's/ int4 bf16-in path int4:fused//; s/,src=[a-z]*)//' | paste -sd' ' | head -c 1500; echo
done
for v in new def; do echo "-- $v"; grep -E '^(bf16_gemm|int4_bf16in),' $OUT/sw6-$v.csv | cut -d, -f1,2,5,6 | paste -sd' ' | sed 's/bf16_gemm,/\nB,/g; s/int4_bf16in,/I,/g'; done
