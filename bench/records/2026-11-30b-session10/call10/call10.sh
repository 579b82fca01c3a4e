#!/bin/bash
# session 10, call 10 (the review's decode refactor: the SS kernels' SASS rescheduled): the int4 tests
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 120 $OLDPWD/.gpuq/test_cuda_quant ) > $OUT/quant_int4.txt 2>&1; echo "quant int4 rc=$? ${SECONDS}s"
grep -E "checks|FAIL|int4:" $OUT/quant_int4.txt | head -8
