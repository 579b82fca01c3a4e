#!/bin/sh
# tools/gpu/build.sh: build here (nvcc 13, x86-64) what runs on the GPU machine, which has no
# jansson/pcre2/utf8proc/libyaml/OpenSSL development files: those are linked statically; the
# CUDA runtime statically (cudart_static); cuBLASLt dynamically from the machine's CUDA 13
# (rpath /usr/local/cuda/lib64; run_tests.sh also searches torch's nvidia wheels).
# Output: $GPU_OUT (default .gpu/) (ignored by git; pass it in `carry`) with test_cuda_ops,
# test_cuda_fused, test_cuda_quant, bench_cuda, mkfixture, run_tests.sh.  Usage: tools/gpu/build.sh [extra .o files to leave out of the archive]
set -eu
cd "$(dirname "$0")/../.."
BUILD=${GPU_BUILD:-build-gpu}   # helpers building at the same time pass their own
G=${GPU_OUT:-.gpu}
make -j2 BUILD=$BUILD $BUILD/libvsr.a $BUILD/tests/test_cuda_ops.o $BUILD/tests/test_cuda_fused.o \
  $BUILD/tests/test_cuda_quant.o $BUILD/tests/harness.o $BUILD/tests/pkgbuild.o >/dev/null
mkdir -p $G
cp $BUILD/libvsr.a $G/libvsr.a
for o in "$@"; do ar d $G/libvsr.a "$o"; done   # e.g. a peer's unfinished object
CUDA=/usr/local/cuda
LIBS="-Wl,-Bstatic -ljansson -lpcre2-8 -lutf8proc -lyaml -lcrypto -Wl,-Bdynamic \
  -L$CUDA/lib64 -lcudart_static -lcublasLt -lstdc++ -ldl -lrt -lm -pthread -Wl,-rpath,$CUDA/lib64"
CFLAGS="-std=c17 -O2 -Iinclude -Isrc -D_GNU_SOURCE -DVSR_HAVE_CUDA=1 -pthread"
for t in test_cuda_ops test_cuda_fused test_cuda_quant; do
  cc $CFLAGS -o $G/$t $BUILD/tests/$t.o $BUILD/tests/harness.o $BUILD/tests/pkgbuild.o $G/libvsr.a $LIBS
done
cc $CFLAGS -o $G/bench_cuda tools/gpu/bench_cuda.c $G/libvsr.a $LIBS
cc $CFLAGS -o $G/mkfixture tools/gpu/mkfixture.c $G/libvsr.a $LIBS
rm $G/libvsr.a
cp tools/gpu/run_tests.sh $G/
ex=$(git rev-parse --git-path info/exclude 2>/dev/null) && { grep -qx "/$G/" "$ex" 2>/dev/null || echo "/$G/" >> "$ex"; }
strip $G/test_cuda_* $G/bench_cuda $G/mkfixture
pwd > $G/build_root   # the data directory compiled in is $(pwd)/data: cuda_env.sh links it there
ls -la $G
