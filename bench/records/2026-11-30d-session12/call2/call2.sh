#!/bin/bash
# session 12, call 2 (26ab9bc: the DeltaNet intra kernel's q^/k^ writing shared by a key head's blocks):
# test_cuda_ops; deltanet per op at 3 x 128 and 8 x 512, old (2321f35) and new alternated; nsys present?;
# the 27B-shaped BF16 package at 1 x 100 and 3 x 128 (graphs on, best and median of 9, profile)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && timeout 150 $OLDPWD/.gpu-me/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$? ${SECONDS}s"; grep -hE "checks|^FAIL" $OUT/ops.txt | head -5
for rep in 1 2; do for v in old me; do
  for st in all intra; do
    if [ $st = intra ]; then e="VSR_CUDA_DN_STAGE=intra"; else e="X=1"; fi
    env $e VSR_BENCH_ONLY=deltanet timeout 60 .gpu-$v/bench_cuda > /tmp/dn.txt 2>&1
    echo "rep $rep $v $st: $(grep -E '^deltanet +[0-9]' /tmp/dn.txt | tr -s ' ' | paste -sd'|')"
  done
done; done | tee $OUT/dn.txt
echo "nsys: $(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)"
GPU_OUT=.gpu-me VSR_BENCH_E2E_SHAPES=1x100,3x128 timeout 420 bash tools/gpu/e2e27.sh bf16; echo "e2e ${SECONDS}s"
grep -E "weights|whole forward|graphs on" $OUT/e2e27-bf16.log | head -8
grep -E "^deltanet" $OUT/e2e27-bf16.log
