#!/bin/bash
# session 6, call 5: test_cuda_fused (rmsnorm_gated by token, 16 warps), bench_cuda per-op rows with the FP8 twins
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 150 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"
grep -hE "checks|^FAIL|failed|rmsnorm_gated T=" $OUT/fused.txt | head -12
timeout 120 $G/bench_cuda > $OUT/bench.txt 2>&1; echo "bench rc=$?"; grep -E "^## |^deltanet |^rmsnorm|^swiglu|^conv1d" $OUT/bench.txt
