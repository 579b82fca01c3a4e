#!/bin/sh
# tools/gpu/vela2_check.sh: the Vela 2.0 decoder model (src/vela2/model.c) on an NVIDIA GPU against
# transformers, at 0.02 (normalised error per block, as tests/test_vela2_model.c measures it).
#
# Both from the repository root:
#   here (nvcc 13):      tools/gpu/vela2_check.sh build
#       builds $GPU_OUT (default .gpu-vela2/, ignored by git: pass it in `carry`) with
#       test_vela2_model and vela2_mkfixture (CUDA, linked like tools/gpu/build.sh).
#   on the GPU machine:  sh tools/gpu/vela2_check.sh run
#       1. the committed CPU references (tests/data/reference/vela2-{tiny,small}-seed7.json, made by
#          transformers in FP32 on the CPU) against our forward on cuda:0, at 0.02;
#       2. when python3 has torch with CUDA and transformers with Qwen3_5TextModel: a reference for
#          the 0.8B-shaped lite fixture made there by tools/vela2_reference.py --size lite --device
#          cuda (transformers FP32 on the GPU), and our forward on cuda:0 against it, at 0.02;
#          otherwise step 2 is reported as skipped, with why.
#       Logs go to $OUT (tools/gpu/cuda_env.sh). Exit status: 0 when every run passed.
set -u
G=${GPU_OUT:-.gpu-vela2}

build() {
    set -e
    BUILD=${GPU_BUILD:-build-gpu-vela2}
    make -j2 BUILD=$BUILD $BUILD/libvsr.a $BUILD/tests/test_vela2_model.o $BUILD/tests/harness.o >/dev/null
    mkdir -p $G
    CUDA=/usr/local/cuda
    LIBS="-Wl,-Bstatic -ljansson -lpcre2-8 -lutf8proc -lyaml -lcrypto -Wl,-Bdynamic \
      -L$CUDA/lib64 -lcudart_static -lcublasLt -lstdc++ -ldl -lrt -lm -pthread -Wl,-rpath,$CUDA/lib64"
    cc -std=c17 -O2 -pthread -o $G/test_vela2_model $BUILD/tests/test_vela2_model.o $BUILD/tests/harness.o \
        $BUILD/libvsr.a $LIBS
    cc -std=c17 -O2 -Iinclude -Isrc -D_GNU_SOURCE -DVSR_HAVE_CUDA=1 -DVSR_DATA_DIR=\"$(pwd)/data\" -pthread \
        -o $G/vela2_mkfixture tools/gpu/vela2_mkfixture.c $BUILD/libvsr.a $LIBS
    strip $G/test_vela2_model $G/vela2_mkfixture
    pwd > $G/build_root
    ex=$(git rev-parse --git-path info/exclude 2>/dev/null) && { grep -qx "/$G/" "$ex" 2>/dev/null || echo "/$G/" >> "$ex"; }
    ls -la $G
}

run() {
    . tools/gpu/cuda_env.sh
    rc=0
    { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } 2>&1 | tee "$OUT/vela2_env.txt"
    echo "== committed references (transformers FP32 on the CPU) vs cuda:0, bound 0.02"
    VSR_REPO=$PWD VSR_V2_DEVICE=cuda:0 VSR_V2_TOL=0.02 VSR_V2_REFS=vela2-tiny-seed7.json,vela2-small-seed7.json \
        $G/test_vela2_model > "$OUT/vela2_check_cpu_refs.log" 2>&1 || rc=1
    tail -20 "$OUT/vela2_check_cpu_refs.log"
    echo "== lite fixture: a reference made here by transformers on the GPU"
    if python3 -c "import torch, transformers; from transformers import Qwen3_5TextModel; assert torch.cuda.is_available()" \
        > "$OUT/vela2_python.txt" 2>&1; then
        ref=$OUT/vela2-lite-seed7.json pkg=/tmp/vela2-lite-seed7
        rm -rf "$pkg"
        if $G/vela2_mkfixture "$pkg" lite 7 > "$OUT/vela2_reference_lite.log" 2>&1 &&
            python3 tools/vela2_reference.py --package "$pkg" --size lite --seed 7 --device cuda --out "$ref" \
                >> "$OUT/vela2_reference_lite.log" 2>&1; then
            VSR_REPO=$PWD VSR_V2_DEVICE=cuda:0 VSR_V2_TOL=0.02 VSR_V2_REFS=$ref \
                $G/test_vela2_model > "$OUT/vela2_check_lite.log" 2>&1 || rc=1
            tail -20 "$OUT/vela2_check_lite.log"
        else
            echo "FAIL: tools/vela2_reference.py --size lite did not run (see vela2_reference_lite.log)"
            tail -5 "$OUT/vela2_reference_lite.log"
            rc=1
        fi
    else
        echo "SKIP: no python3 with torch (CUDA) and transformers' Qwen3_5TextModel here:"
        tail -2 "$OUT/vela2_python.txt"
    fi
    echo "vela2_check rc=$rc"
    return $rc
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: tools/gpu/vela2_check.sh build|run" >&2; exit 2 ;;
esac
