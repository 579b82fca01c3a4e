#!/bin/bash
# session 5, call 5: which cuBLASLt offers the outer-vector-scaled FP8 algorithm torch._scaled_mm runs
# ("nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT" in call 4's ncu): the libraries on
# the machine, then the GEMM sweep's FP8 rows at the gate_up shape with each
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
( ls -la /usr/local/cuda/lib64/libcublasLt.so* ; find / -name 'libcublasLt.so*' -not -path '/proc/*' 2>/dev/null;
  pip show nvidia-cublas nvidia-cublas-cu13 2>/dev/null | grep -E "Name|Version"; python3 -c "import torch; print(torch.__version__, torch.version.cuda)" ) 2>&1 | tee $OUT/libs.txt
echo "== default (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})"
VSR_FP8_GEMM=0 timeout 90 .gpuq/gemm_cuda 4096 --shapes=gate_up > $OUT/default.csv 2> $OUT/default.err
grep -E "^fp8_(linear|scaled|unscaled|old)," $OUT/default.csv; grep -E "fp8 (forced-scaled|old) path|fp8 path" $OUT/default.err | head -5
for f in $(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' -not -path '/usr/local/cuda*' 2>/dev/null | head -3); do
  d=$(dirname $f); echo "== $d"
  LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-} VSR_FP8_GEMM=0 timeout 90 .gpuq/gemm_cuda 384,4096 --shapes=gate_up,down > $OUT/wheel.csv 2> $OUT/wheel.err
  grep -E "^fp8_(linear|scaled|unscaled|old)," $OUT/wheel.csv; grep -E "fp8 (forced-scaled|old) path|fp8 path" $OUT/wheel.err | head -8
  break
done
