#!/bin/bash
# tools/gpu/worker_run.sh: the whole worker on the GPU machine.
#   tools/gpu/worker_run.sh build  (here) -> .gpuw/: vllm-srun (host libraries static, libmicrohttpd
#                                  and its GnuTLS closure carried in .gpuw/lib), test_cuda_ops,
#                                  test_cuda_quant
#   tools/gpu/worker_run.sh run    (there, repository root, .gpuw carried) -> $OUT/:
#       devices, CUDA tests, golden answers recorded for the cuda device class, the worker
#       serving the built-in packages on cuda:0 (decisions, /v1/models, /metrics memory
#       bytes), the NVFP4 refusal on the H200, and a 27B-shaped FP8 package end to end.
set -u
cd "$(dirname "$0")/../.."
if [ "${1:-}" = build ]; then
  set -e
  BUILD=build-gpuw
  make -j2 BUILD=$BUILD $BUILD/libvsr.a $BUILD/tests/test_cuda_ops.o $BUILD/tests/test_cuda_quant.o \
    $BUILD/tests/harness.o $BUILD/tests/pkgbuild.o >/dev/null
  make -j2 BUILD=$BUILD $(ls tools/vllm-srun/*.c tools/common/*.c | sed "s|^|$BUILD/|; s|\.c$|.o|") >/dev/null
  mkdir -p .gpuw/lib
  CUDA=/usr/local/cuda
  STATIC="-Wl,-Bstatic -ljansson -lpcre2-8 -lutf8proc -lyaml -lcrypto -Wl,-Bdynamic"
  DYN="-L$CUDA/lib64 -lcudart_static -lcublasLt -lstdc++ -ldl -lrt -lm -pthread -Wl,-rpath,$CUDA/lib64 -Wl,-rpath,\$ORIGIN/lib"
  cc -O2 -pthread -o .gpuw/vllm-srun $BUILD/tools/vllm-srun/*.o $BUILD/tools/common/*.o $BUILD/libvsr.a $STATIC -lmicrohttpd $DYN
  for t in test_cuda_ops test_cuda_quant; do
    cc -O2 -pthread -o .gpuw/$t $BUILD/tests/$t.o $BUILD/tests/harness.o $BUILD/tests/pkgbuild.o $BUILD/libvsr.a $STATIC $DYN
  done
  # libmicrohttpd and the libraries it needs that a CUDA image may lack
  for l in $(ldd .gpuw/vllm-srun | awk '/=>/ {print $3}' | grep -vE 'libc\.so|libm\.so|libpthread|libdl|librt|ld-linux|libstdc|libgcc|libcublas'); do
    case "$l" in "$PWD"/.gpuw/*|.gpuw/*) continue ;; esac   # already carried (a rebuild)
    cp -L "$l" .gpuw/lib/
  done
  ex=$(git rev-parse --git-path info/exclude 2>/dev/null) && { grep -qx '/.gpuw/' "$ex" 2>/dev/null || echo '/.gpuw/' >> "$ex"; }
  strip .gpuw/vllm-srun .gpuw/test_cuda_*
  pwd > .gpuw/build_root   # see cuda_env.sh
  du -sh .gpuw; ls .gpuw .gpuw/lib
  exit 0
fi
. tools/gpu/cuda_env.sh   # $OUT, and cuBLASLt 13 on the library path
export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}" VSR_REPO=$PWD VSR_NO_PROGRESS=1
B=$PWD/.gpuw/vllm-srun
export HF_HUB_CACHE=/tmp/store
log() { echo "== $*" | tee -a "$OUT/worker.log"; }
log devices; $B devices 2>&1 | tee -a "$OUT/worker.log"
# VSR_WORKER_TESTS=0: no tests and no re-recording: the workers self-check against the committed
# cuda golden answers (what a user's worker does)
if [ "${VSR_WORKER_TESTS:-1}" = 1 ]; then
log tests
( cd /tmp && timeout 120 $OLDPWD/.gpuw/test_cuda_ops ) > "$OUT/test_cuda_ops.log" 2>&1; echo "test_cuda_ops rc=$?" | tee -a "$OUT/worker.log"
( cd /tmp && timeout 150 $OLDPWD/.gpuw/test_cuda_quant ) > "$OUT/test_cuda_quant.log" 2>&1; echo "test_cuda_quant rc=$?" | tee -a "$OUT/worker.log"
tail -3 "$OUT/test_cuda_ops.log" "$OUT/test_cuda_quant.log" | tee -a "$OUT/worker.log"
log "golden answers on cuda:0"
cp data/golden_answers.json /tmp/golden_before.json
timeout 120 python3 tools/record_goldens.py --bin "$B" --device cuda:0 2>&1 | tee -a "$OUT/worker.log"
cp data/golden_answers.json "$OUT/golden_answers.json"
fi
log "worker on cuda:0"
$B fixture --install-builtin all >/dev/null
if [ "${VSR_SERVE:-1}" = 1 ]; then
req='{"state":"Write a Python function that merges two sorted lists and explain its running time.","questions":{"domain":{"type":"choice","instructions":"Which domain does this request belong to?","criteria":{"code":"Programming","math":"Mathematics","other":"Anything else"}},"reasoning":{"type":"noul","instructions":"Does answering this request need multi-step reasoning?"},"difficulty":{"type":"score","instructions":"How difficult is this request?","criteria":["Trivial","Moderate","Hard"]}}}'
port=8100
for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
  $B serve vllm-sr-c/$m --device cuda:0 --port $port --log-level warn 2>>"$OUT/worker.log" &
  pid=$!
  for i in $(seq 1 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:$port/health)" = 200 ] && break; kill -0 $pid || break; sleep 0.1; done
  { echo "-- $m"; curl -s localhost:$port/health; echo; curl -s -D - localhost:$port/v1/decisions -d "$req"; echo;
    curl -s localhost:$port/v1/models | python3 -c 'import json,sys; c=json.load(sys.stdin)["data"][0]; print({k: c[k] for k in ("device","quantization","golden","memory_bytes","status")})';
    curl -s localhost:$port/metrics | grep -E '^vllm_srun_model_memory_bytes'; } 2>&1 | tee -a "$OUT/worker.log"
  $B bench --port $port --concurrency 1,8 --requests 200 2>&1 | tee -a "$OUT/worker.log"
  kill -TERM $pid; wait $pid; echo "exit $?" | tee -a "$OUT/worker.log"
  port=$((port+1))
done
fi
log "NVFP4 on the H200"
$B serve vllm-sr-c/d3-tiny-NVFP4 --device cuda:0 --port $port 2>&1 | tee -a "$OUT/worker.log"; echo "exit $?" | tee -a "$OUT/worker.log"
$B serve vllm-sr-c/d3-tiny-FP8 --device cpu --port $port 2>&1 | tee -a "$OUT/worker.log"
# 27B-shaped packages end to end, one at a time (the disk holds one): VSR_27B="fp8 bf16"
for scheme in ${VSR_27B-fp8}; do
  log "27B-shaped $scheme package"
  rm -rf /tmp/d3-27b
  ( time timeout 300 $B fixture /tmp/d3-27b --family decision3 --size 27b-shape --scheme $scheme --seed 1 ) > "$OUT/fixture27-$scheme.log" 2>&1
  tail -12 "$OUT/fixture27-$scheme.log" | tee -a "$OUT/worker.log"
  timeout 200 .gpuw/bench_cuda /tmp/d3-27b 2>&1 | tail -8 | tee -a "$OUT/worker.log"
done
