#!/bin/bash
# tools/gpu/s18.sh: the eighteenth session's device call (issue 25, item 4: int4 above 256 rows, the wide list), from
# the repository root on the GPU machine, carrying .gpuk (bench/gemm_cuda.sh's binaries, packed: `bash
# bench/gemm_cuda.sh build`, strip, `tar -cJf .gpuk/q.tar.xz .gpuq`) and .gpuc (`bash tools/gpu/s15.sh build`).
# Steps, each under its own time limit so that the call ends inside the device's 600 s:
#   1. test_cuda_quant's int4 tests (the wide list walked at 300 and 520 rows, every candidate against the CPU
#      reference, bit-identical reruns, adding into y);
#   2. the whole 27B-shape forward, BF16 then int4 (GPTQ g128) with the wide list on, at the bucket shapes
#      (tools/gpu/s15.sh int4shapes, autotuned as a worker with --autotune-cache);
#   3. int4 again with the wide list off (the unpack path, as before this session) at 1 x 512, same run;
#   4. the per-Linear sweep (bench/gemm_cuda.cu) at 512 and 4,096 rows: BF16 cuBLASLt, int4 tuned, int4 unpack.
# Outputs under $OUT: a.log (tests), s15-int4shapes.tgz (wide on), off/s15-int4shapes.tgz (wide off), the sweep's
# gemm_cuda.csv / .err and tune.tgz (every candidate's time per shape).
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
left() { echo $(( ${1} - ($(date +%s) - T0) )); }
tar -xJf .gpuk/q.tar.xz
. tools/gpu/cuda_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,power.limit --format=csv,noheader | tee "$OUT/env.txt"
( cd /tmp && VSR_QUANT_TESTS=int4 timeout 130 "$OLDPWD/.gpuq/test_cuda_quant" ) > "$OUT/a.log" 2>&1
echo "test_cuda_quant (int4) rc=$? $(tail -1 "$OUT/a.log")"; grep -E "FAIL|int4: [0-9]+ fused" "$OUT/a.log" | head -12
export VSR_CUDA_INT4_WIDE=1
INT4_SHAPES=${S18_SHAPES:-"1x256,1x512,1x1024,1x4096,3x128,8x512"} VSR_BENCH_REPS=5 \
  timeout "$(left 420)" bash tools/gpu/s15.sh run int4shapes 2>&1 | tail -30
mkdir -p "$OUT/off"
OUT=$OUT/off VSR_CUDA_INT4_WIDE=0 INT4_SCHEMES=w4a16-gptq INT4_SHAPES=1x512 VSR_BENCH_REPS=5 \
  timeout "$(left 470)" bash tools/gpu/s15.sh run int4shapes 2>&1 | tail -6
mkdir -p /tmp/vsr-tune
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout "$(left 540)" .gpuq/gemm_cuda 512,4096 --shapes=gate_up,down,o_proj \
  > "$OUT/gemm_cuda.csv" 2> "$OUT/gemm_cuda.err"; echo "gemm_cuda rc=$?"
tar czf "$OUT/tune.tgz" -C /tmp vsr-tune 2>/dev/null
grep -E "^(bf16_gemm|int4_linear|int4_unpack)" "$OUT/gemm_cuda.csv" | cut -d, -f1,2,5,6,7
grep "int4 path" "$OUT/gemm_cuda.err" | head -12
echo "total $(( $(date +%s) - T0 )) s"
