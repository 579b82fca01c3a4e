#!/bin/bash
# bench/gemm_cuda.sh: the CUDA quant tests and GEMM sweep.
#   bench/gemm_cuda.sh build   (here: nvcc 13) -> $Q/{test_cuda_quant,gemm_cuda} with the host
#                              libraries linked statically (the GPU machine has none of them)
#   bench/gemm_cuda.sh run     (on the GPU machine, repository root, .gpuq carried) -> $OUT/
#       env.txt, test_cuda_quant.log, gemm_cuda.csv (+ .err: paths taken), gemm_torch.csv,
#       tune.tgz (the autotune cache: every candidate's time per shape)
#   VSR_LT=1 bench/gemm_cuda.sh run -> $OUT/ test_cuda_gemm.log, lt_search.csv (+ .err), lt_tune.tgz:
#       the widened cuBLASLt search's test, then gemm_cuda --lt-search (BF16 GEMM at the 27B shapes,
#       M = 384 and 4096: heuristic first / heuristic 16 timed / widened search / widened from cache); nothing else
#   env: VSR_ROWS=1,8,... VSR_SHAPES=gate_up,down (subsets), VSR_TORCH=0 (skip the torch peers),
#        VSR_TEST_TIMEOUT, VSR_SWEEP_TIMEOUT, VSR_TORCH_TIMEOUT (seconds)
set -u
cd "$(dirname "$0")/.."
Q=${GPU_OUT:-.gpuq}
if [ "${1:-}" = build ]; then
  set -e
  BUILD=${GPU_BUILD:-build-gpuq}   # helpers building at the same time pass their own
  make -j2 BUILD=$BUILD $BUILD/libvsr.a $BUILD/tests/test_cuda_quant.o $BUILD/tests/test_cuda_gemm.o $BUILD/tests/harness.o $BUILD/tests/pkgbuild.o >/dev/null
  mkdir -p $Q
  CUDA=/usr/local/cuda
  LIBS="-Wl,-Bstatic -ljansson -lpcre2-8 -lutf8proc -lyaml -lmicrohttpd -lcrypto -Wl,-Bdynamic \
    -L$CUDA/lib64 -lcudart_static -lcublasLt -lstdc++ -ldl -lrt -lm -pthread -Wl,-rpath,$CUDA/lib64"
  cc -std=c17 -O2 -pthread -o $Q/test_cuda_quant $BUILD/tests/test_cuda_quant.o $BUILD/tests/harness.o \
    $BUILD/tests/pkgbuild.o $BUILD/libvsr.a $LIBS
  cc -std=c17 -O2 -pthread -o $Q/test_cuda_gemm $BUILD/tests/test_cuda_gemm.o $BUILD/tests/harness.o \
    $BUILD/tests/pkgbuild.o $BUILD/libvsr.a $LIBS
  nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc -DVSR_HAVE_CUDA=1 \
    -c -o $BUILD/gemm_cuda.o bench/gemm_cuda.cu
  g++ -O2 -pthread -o $Q/gemm_cuda $BUILD/gemm_cuda.o $BUILD/libvsr.a $LIBS
  ex=$(git rev-parse --git-path info/exclude 2>/dev/null) && { grep -qx "/$Q/" "$ex" 2>/dev/null || echo "/$Q/" >> "$ex"; }
  pwd > $Q/build_root   # see tools/gpu/cuda_env.sh
  ls -la $Q
  exit 0
fi
. tools/gpu/cuda_env.sh   # $OUT, and cuBLASLt 13 on the library path
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
  ldd $Q/test_cuda_quant | grep -E 'cublas|not found'; } 2>&1 | tee "$OUT/env.txt"
rc=0
if [ "${VSR_LT:-0}" = 1 ]; then
  ( cd "${TMPDIR:-/tmp}" && timeout "${VSR_TEST_TIMEOUT:-90}" "$OLDPWD/$Q/test_cuda_gemm" ) > "$OUT/test_cuda_gemm.log" 2>&1; rc=$?
  echo "test_cuda_gemm rc=$rc" >> "$OUT/test_cuda_gemm.log"
  tail -25 "$OUT/test_cuda_gemm.log"
  rm -rf /tmp/vsr-lt-h /tmp/vsr-lt-w
  timeout "${VSR_SWEEP_TIMEOUT:-100}" $Q/gemm_cuda --lt-search > "$OUT/lt_search.csv" 2> "$OUT/lt_search.err"
  echo "gemm_cuda --lt-search rc=$?"
  tar czf "$OUT/lt_tune.tgz" -C /tmp vsr-lt-h vsr-lt-w 2>/dev/null
  grep -E '^\||^#' "$OUT/lt_search.csv"; grep -c 'cuBLASLt search' "$OUT/lt_search.err"; tail -3 "$OUT/lt_search.err"
  exit $rc
fi
( cd "${TMPDIR:-/tmp}" && timeout "${VSR_TEST_TIMEOUT:-150}" "$OLDPWD/$Q/test_cuda_quant" ) > "$OUT/test_cuda_quant.log" 2>&1; rc=$?
echo "test_cuda_quant rc=$rc" >> "$OUT/test_cuda_quant.log"
grep -vE '^  fp8 N' "$OUT/test_cuda_quant.log" | tail -30
if [ "${VSR_SWEEP:-1}" = 1 ]; then
  mkdir -p /tmp/vsr-tune
  VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout "${VSR_SWEEP_TIMEOUT:-180}" $Q/gemm_cuda ${VSR_ROWS:-} \
    ${VSR_SHAPES:+--shapes=$VSR_SHAPES} > "$OUT/gemm_cuda.csv" 2> "$OUT/gemm_cuda.err"; echo "gemm_cuda rc=$?"
  tar czf "$OUT/tune.tgz" -C /tmp vsr-tune 2>/dev/null
  [ "${VSR_TORCH:-1}" = 1 ] && PYTHONUNBUFFERED=1 timeout "${VSR_TORCH_TIMEOUT:-120}" python3 bench/gemm_cuda_torch.py ${VSR_ROWS:-} \
    > "$OUT/gemm_torch.csv" 2> "$OUT/gemm_torch.err"; echo "torch rc=$?"
  head -3 "$OUT/gemm_cuda.csv"; head -4 "$OUT/gemm_torch.csv"
fi
exit $rc
