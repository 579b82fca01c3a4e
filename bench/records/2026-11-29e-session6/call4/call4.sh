#!/bin/bash
# session 6, call 4 (d5dc5fc): test_cuda_fused (rmsnorm_gated by token, its FP8 twin), test_cuda_ops (DeltaNet
# hashes as in call 3), bench_cuda per-op rows (rmsnorm_gated by token and, with VSR_CUDA_GATED_TOK=0, by row)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 150 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"
grep -hE "checks|^FAIL|failed|rmsnorm_gated T=|one pass against" $OUT/fused.txt | head -12
( cd /tmp && timeout 200 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"; grep -E "checks|^FAIL" $OUT/ops.txt | tail -3
grep -o "v6 output hash [0-9a-f]*" $OUT/ops.txt | md5sum
timeout 120 $G/bench_cuda > $OUT/bench.txt 2>&1; echo "bench rc=$?"; grep -E "^## |^deltanet|^rmsnorm_gated|^conv1d|^rmsnorm" $OUT/bench.txt
VSR_CUDA_GATED_TOK=0 timeout 120 $G/bench_cuda > $OUT/bench_row.txt 2>&1; echo "bench (row) rc=$?"; grep -E "^## |^rmsnorm_gated" $OUT/bench_row.txt
