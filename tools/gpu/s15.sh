#!/bin/bash
# tools/gpu/s15.sh: one device call for issue 25's shape buckets (and the CUDA regressions of the
# session's changes), from the repository root.
#   here:   bash tools/gpu/s15.sh build   -> .gpuc/s15.tar.xz (carry ".gpuc"): vllm-srun, vllm-sr,
#           openai_upstream, test_cuda_ops, test_cuda_fused, test_cuda_quant, test_buckets,
#           test_vela2_model, host libraries they need (libmicrohttpd, libcurl closures)
#   there:  bash tools/gpu/s15.sh run [steps]  (steps: tests buckets vela2 traffic fair fp8switch; default
#           tests traffic fair; tests includes buckets and vela2) -> $OUT/s15-<steps>.tgz:
#     tests:   the CUDA op/fused/quant tests, test_buckets on cuda:0 (bucketed vs VSR_BUCKETS=0 at
#              0.02, warm-up), the vela2 references on cuda:0 at 0.02;
#     traffic: bench/traffic_bench.sh on the lite fixture, buckets on (warm-up 8192) and off, each
#              exact and batching at c=1,4,16,64 (CSV + latencies to $OUT), warm-up time and the
#              GPU memory before/after warm-up;
#     fair:    a one-question request sent while a 64 x 256-question request runs (lite, exact):
#              its latency against the large request's forward time (Server-Timing);
#     traffic27: the traffic bench on 27B-shaped BF16 and FP8 fixtures (TRAFFIC27_SCHEMES, TRAFFIC_N=64);
#     int4shapes: bench_cuda's whole forward, int4 (GPTQ) against BF16, at the bucket shapes (INT4_SHAPES);
#     fp8switch: tools/gpu/router_fp8_switch.sh (issue 21);
#     routerbench: bench/router/router_bench.sh on this host's cores (issue 21), needs .gpuc/loadgen (build step).
set -u
cd "$(dirname "$0")/../.."
if [ "${1:-}" = build ]; then
  set -e
  BUILD=${GPU_BUILD:-build-gpu}
  make -j2 BUILD=$BUILD $BUILD/libvsr.a $BUILD/tests/test_cuda_ops.o $BUILD/tests/test_cuda_fused.o \
    $BUILD/tests/test_cuda_quant.o $BUILD/tests/test_buckets.o $BUILD/tests/test_vela2_model.o \
    $BUILD/tests/harness.o $BUILD/tests/pkgbuild.o $BUILD/tests/openai_upstream >/dev/null
  make -j2 BUILD=$BUILD $(ls tools/vllm-srun/*.c tools/vllm-sr/*.c tools/common/*.c | sed "s|^|$BUILD/|; s|\.c$|.o|") >/dev/null
  S=.gpus; rm -rf $S; mkdir -p $S/lib
  CUDA=/usr/local/cuda
  STATIC="-Wl,-Bstatic -ljansson -lpcre2-8 -lutf8proc -lyaml -lcrypto -lpng16 -lz -Wl,-Bdynamic"
  DYN="-L$CUDA/lib64 -lcudart_static -lcublasLt -lstdc++ -ldl -lrt -lm -pthread -Wl,-rpath,$CUDA/lib64 -Wl,-rpath,\$ORIGIN/lib"
  cc -O2 -pthread -o $S/vllm-srun $BUILD/tools/vllm-srun/*.o $BUILD/tools/common/*.o $BUILD/libvsr.a $STATIC -lmicrohttpd $DYN
  cc -O2 -pthread -o $S/vllm-sr $BUILD/tools/vllm-sr/*.o $BUILD/tools/common/*.o $BUILD/libvsr.a $STATIC -lmicrohttpd -lcurl $DYN
  cp $BUILD/tests/openai_upstream $S/
  for t in test_cuda_ops test_cuda_fused test_cuda_quant test_buckets test_vela2_model; do
    cc -O2 -pthread -o $S/$t $BUILD/tests/$t.o $BUILD/tests/harness.o $BUILD/tests/pkgbuild.o $BUILD/libvsr.a $STATIC $DYN
  done
  cc -std=c17 -O2 -Iinclude -Isrc -D_GNU_SOURCE -DVSR_HAVE_CUDA=1 -pthread -o $S/bench_cuda tools/gpu/bench_cuda.c \
    $BUILD/libvsr.a $STATIC $DYN
  for b in $S/vllm-srun $S/vllm-sr $S/openai_upstream; do
    for l in $(ldd $b | awk '/=>/ {print $3}' | grep -vE 'libc\.so|libm\.so|libpthread|libdl|librt|ld-linux|libstdc|libgcc|libcublas'); do
      cp -Ln "$l" $S/lib/ 2>/dev/null || true
    done
  done
  strip $S/vllm-srun $S/vllm-sr $S/test_* $S/openai_upstream $S/bench_cuda
  pwd > $S/build_root
  mkdir -p .gpuc && tar -C . -cJf .gpuc/s15.tar.xz $S
  cc -O2 -o .gpuc/loadgen bench/router/loadgen.c -lcurl -lm
  ex=$(git rev-parse --git-path info/exclude) && for d in /.gpus/ /.gpuc/; do grep -qx "$d" "$ex" || echo "$d" >> "$ex"; done
  du -sh $S .gpuc/s15.tar.xz
  exit 0
fi
[ "${1:-}" = run ] || { echo "usage: $0 build|run [tests] [traffic] [fair]" >&2; exit 2; }
shift
STEPS=${*:-tests traffic fair}
tar -xJf "${S15_TARBALL:-.gpuc/s15.tar.xz}"
S=$PWD/.gpus
. tools/gpu/cuda_env.sh
# everything under $OUT/s15, packed into $OUT/s15-<steps>.tgz at the end (the tool returns at most 8 files)
FINAL_OUT=$OUT; OUT=$OUT/s15; mkdir -p "$OUT"
trap 'tar -czf "$FINAL_OUT/s15-$(echo $STEPS | tr " " _).tgz" -C "$FINAL_OUT" s15 && rm -rf "$FINAL_OUT/s15"' EXIT
# carried host libraries only where the image lacks them: one that shadows the image's own breaks its tools
# (the image's curl with this machine's older libcurl: "undefined symbol: curl_global_trace")
for f in "$S"/lib/*; do ldconfig -p | grep -qE "^[[:space:]]*$(basename "$f") " && rm -f "$f"; done
echo "carried libraries kept: $(ls "$S"/lib | tr '\n' ' ')"
export LD_LIBRARY_PATH="$S/lib:${LD_LIBRARY_PATH:-}" VSR_REPO=$PWD VSR_NO_PROGRESS=1 HF_HUB_CACHE=/tmp/store
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,power.limit --format=csv,noheader | tee "$OUT/env.txt"
gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
rc=0
step() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

if step tests; then
  for t in test_cuda_ops test_cuda_fused; do
    ( cd /tmp && timeout 200 $S/$t ) > "$OUT/$t.log" 2>&1; r=$?
    echo "$t rc=$r $(tail -1 "$OUT/$t.log")"; [ $r = 0 ] || { rc=1; grep -E "FAIL|failed" "$OUT/$t.log" | head -8; }
  done
  ( cd /tmp && timeout 200 $S/test_cuda_quant ) > "$OUT/test_cuda_quant.log" 2>&1; r=$?
  echo "test_cuda_quant rc=$r $(tail -1 "$OUT/test_cuda_quant.log")"; [ $r = 0 ] || { rc=1; grep -E "FAIL|failed" "$OUT/test_cuda_quant.log" | head -8; }
fi
if step buckets || step tests; then
  VSR_BK_DEVICE=cuda:0 VSR_BK_TOL=0.02 timeout 200 $S/test_buckets > "$OUT/test_buckets.log" 2>&1; r=$?
  echo "test_buckets (cuda:0) rc=$r"; tail -9 "$OUT/test_buckets.log"; [ $r = 0 ] || rc=1
fi
if step vela2 || step tests; then
  # against the committed FP32 CPU references (informative on a GPU: BF16 activations against FP32), then
  # against transformers' BF16 model on this GPU (what the reference runtime computes), bound 0.02
  VSR_V2_DEVICE=cuda:0 VSR_V2_TOL=0.02 VSR_V2_REFS=vela2-tiny-seed7.json,vela2-small-seed7.json \
    timeout 200 $S/test_vela2_model > "$OUT/test_vela2_model_fp32refs.log" 2>&1; r=$?
  echo "test_vela2_model vs FP32 CPU references (cuda:0) rc=$r: $(grep -h 'worst normalised' "$OUT/test_vela2_model_fp32refs.log" | tr '\n' ' ')"
  refs=""
  for size in tiny small; do
    python3 tools/vela2_reference.py --vsr-bin $S/vllm-srun --size $size --seed 7 --device cuda --dtype bfloat16 \
      --out "$OUT/vela2-$size-seed7-bf16-cuda.json" > "$OUT/vela2_ref_$size.log" 2>&1 \
      && refs="$refs${refs:+,}$OUT/vela2-$size-seed7-bf16-cuda.json" || { echo "vela2 reference $size failed"; tail -3 "$OUT/vela2_ref_$size.log"; }
  done
  if [ -n "$refs" ]; then
    VSR_V2_DEVICE=cuda:0 VSR_V2_TOL=0.02 VSR_V2_REFS=$refs timeout 200 $S/test_vela2_model > "$OUT/test_vela2_model.log" 2>&1; r=$?
    echo "test_vela2_model vs transformers BF16 on cuda (cuda:0) rc=$r: $(grep -h 'worst normalised' "$OUT/test_vela2_model.log" | tr '\n' ' ')"
    [ $r = 0 ] || rc=1
  else rc=1; fi
fi

if step routerbench; then
  # issue 21: the router's added latency at 1 and 64 clients on this host's 16 cores (the CPU worker d3-tiny, the
  # test upstream); the load generator is built on the build machine (.gpuc/loadgen: no libcurl headers here)
  RB=/tmp/rb; mkdir -p $RB/tests; ln -sf $S/vllm-srun $S/vllm-sr $RB/; ln -sf $S/openai_upstream $RB/tests/
  LOADGEN=$PWD/.gpuc/loadgen ROUTER_BENCH_NAME=router_gpuhost timeout 240 bash bench/router/router_bench.sh $RB 400 1500 \
    > "$OUT/routerbench.log" 2>&1 || { rc=1; echo "routerbench failed"; }
  cp bench/router/router_gpuhost.csv "$OUT/" 2>/dev/null; tail -8 "$OUT/routerbench.log"
fi
LITE=/tmp/lite
if step traffic || step fair; then
  [ -d $LITE ] || $S/vllm-srun fixture $LITE --family decision3 --size lite --scheme bf16 --seed 0 >/dev/null
fi

if step traffic; then
  for mode in ${TRAFFIC_MODES:-buckets plain}; do
    m0=$(gpu_mem)
    if [ $mode = buckets ]; then env=(); else env=(VSR_BUCKETS=0); fi
    t0=$(date +%s.%N)
    env "${env[@]}" VSR_BIN=$S/vllm-srun TRAFFIC_OUT=$OUT bash bench/traffic_bench.sh lite-h200-$mode${TRAFFIC_TAG:+-$TRAFFIC_TAG} $LITE cuda:0 ${TRAFFIC_N:-256} ${TRAFFIC_ARGS:-} \
      > "$OUT/traffic-$mode.log" 2>&1 || { rc=1; echo "traffic $mode failed"; tail -5 "$OUT/traffic-$mode.log"; }
    echo "traffic $mode: $(grep -m1 'ready after' "$OUT/traffic-$mode.log") (GPU memory used before start ${m0} MiB) total $(python3 -c "print(round($(date +%s.%N)-$t0))") s"
    rm -f $OUT/lite-h200-$mode${TRAFFIC_TAG:+-$TRAFFIC_TAG}.png
  done
  # warm-up alone: time and memory, buckets on vs off (the log line and nvidia-smi while ready)
  for wt in $([ "${TRAFFIC_WARM:-1}" = 1 ] && echo 8192 0); do
    $S/vllm-srun serve $LITE --device cuda:0 --port 18777 --warmup-tokens $wt > "$OUT/warm-$wt.log" 2>&1 &
    pid=$!
    for _ in $(seq 1200); do [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18777/health)" = 200 ] && break; sleep 0.1; done
    echo "warmup-tokens $wt: GPU memory used while ready $(gpu_mem) MiB; $(grep -h 'warm-up' "$OUT/warm-$wt.log" | tail -1)"
    kill -TERM $pid; wait $pid
  done
fi

if step fair; then
  # 64 states x 256 questions: the main state and 63 `states` entries (the reference's limit)
  python3 - > /tmp/bigs.json <<'EOF'
import json
qs = lambda n: {f"q{i}": {"type": "noul", "instructions": f"Is statement {i} about the text true?"} for i in range(n)}
print(json.dumps({"state": "Shared context: the deployment has 64 replicas across three regions. " * 4, "questions": qs(256),
                  "states": {f"s{k}": {"state": f"State {k}: the service answered {k} requests today. " * 4,
                                       "questions": qs(256)} for k in range(63)}}))
EOF
  $S/vllm-srun serve $LITE --device cuda:0 --port 18778 > "$OUT/fair.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18778/health)" = 200 ] && break; sleep 0.1; done
  small='{"state":"hello there","questions":{"greet":{"type":"noul","instructions":"Is this a greeting?"}}}'
  for body in /tmp/bigs.json; do
    curl -s -o /dev/null -w 'small alone: %{time_total} s\n' -H 'content-type: application/json' -d "$small" http://127.0.0.1:18778/v1/decisions
    for k in 1 2; do
      curl -s -D /tmp/bh -o /tmp/bo -w "%{time_total}" -H 'content-type: application/json' --data-binary @$body http://127.0.0.1:18778/v1/decisions > /tmp/bt &
      bp=$!
      sleep 0.3
      st=$(curl -s -D /tmp/sh -o /tmp/so -w "%{time_total}" -H 'content-type: application/json' -d "$small" http://127.0.0.1:18778/v1/decisions)
      wait $bp
      echo "large 64x256-question request: $(cat /tmp/bt) s ($(grep -i server-timing /tmp/bh | tr -d '\r')); small sent 0.3 s in: $st s ($(grep -i server-timing /tmp/sh | tr -d '\r'))"
    done
  done | tee "$OUT/fair.txt"
  curl -s http://127.0.0.1:18778/metrics | grep -E '^vsr_forward|^vsr_rows_per_forward' | head -12 >> "$OUT/fair.txt"
  kill -TERM $pid; wait $pid
fi
# fixture27 SCHEME: the 27B-shaped fixture of SCHEME, written once and kept between steps (and calls on a
# warm machine); sets F27 to its folder. BF16 (48 GB) lives in /dev/shm (128 GB there), the others in /tmp
# (64 GB free: an FP8 and an int4 package fit together beside nothing else)
fixture27() {
  if [ "$1" = bf16 ]; then F27=/dev/shm/d3-27b-bf16; else F27=/tmp/d3-27b-$1; fi
  [ -f "$F27/.complete" ] && return 0
  rm -rf "$F27"
  local t0; t0=$(date +%s)
  $S/vllm-srun fixture "$F27" --family decision3 --size 27b-shape --scheme "$1" --seed 0 \
    > "$OUT/fixture27-$1.log" 2>&1 || { tail -3 "$OUT/fixture27-$1.log"; return 1; }
  touch "$F27/.complete"
  echo "fixture 27b-shape $1 written in $(( $(date +%s) - t0 )) s ($(du -sh "$F27" | cut -f1))"
}
echo "host: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2" GiB memory, "$7" available"}'); $(df -h /tmp | tail -1 | awk '{print "/tmp "$2" size, "$4" free"}'); $(df -h /dev/shm | tail -1 | awk '{print "/dev/shm "$2" size, "$4" free"}')"
if step traffic27; then
  # issue 25 on the 27B shape: varied traffic with buckets (warm-up 8,192 tokens), exact and batching,
  # BF16 then FP8 (fixture packages, random weights)
  for scheme in ${TRAFFIC27_SCHEMES:-bf16 fp8}; do
    # FP8: the package `quantize --scheme fp8-dynamic` made of the BF16 fixture (step q27) where it exists
    if [ $scheme = fp8 ] && [ -f /tmp/d3-27b-q-fp8/.complete ]; then F27=/tmp/d3-27b-q-fp8; else fixture27 $scheme || { rc=1; continue; }; fi
    VSR_BIN=$S/vllm-srun TRAFFIC_OUT=$OUT bash bench/traffic_bench.sh 27b-h200-$scheme "$F27" cuda:0 ${TRAFFIC_N:-64} \
      > "$OUT/traffic27-$scheme.log" 2>&1 || { rc=1; echo "traffic27 $scheme failed"; }
    echo "27B $scheme: $(grep -m1 'ready after' "$OUT/traffic27-$scheme.log")"; rm -f $OUT/27b-h200-$scheme.png
    grep -E '^ +[0-9]+ ' "$OUT/traffic27-$scheme.log"
  done
fi
if step int4shapes; then
  # issue 25 item 4: int4 (GPTQ g128) against BF16 at the bucket shapes, 27B-shaped, one package at a time
  for scheme in ${INT4_SCHEMES:-bf16 w4a16-gptq}; do
    fixture27 $scheme || { rc=1; continue; }
    mkdir -p /tmp/tune-$scheme   # autotuned (cuBLASLt and the int4 kernels), as a worker with --autotune-cache
    # bench_cuda takes at most 8 shapes a run
    for shapes in ${INT4_SHAPES:-1x112,1x256,1x512,1x1024,1x2048,1x4096,3x128,8x512}; do
      VSR_AUTOTUNE_DIR=/tmp/tune-$scheme VSR_BENCH_E2E_ONLY=1 VSR_BENCH_E2E_SHAPES=$shapes \
        timeout 400 $S/bench_cuda "$F27" >> "$OUT/int4shapes-$scheme.log" 2>&1 || rc=1
    done
    echo "== $scheme"; grep -E "whole forward|^forward" "$OUT/int4shapes-$scheme.log"
  done
fi
if step q27; then
  # issue 22 on the 27B shape: quantize --scheme fp8-dynamic of the BF16 fixture (time, peak RSS), then
  # compare BF16 against it on cuda:0 (one package at a time), the eval column of the load-test table
  fixture27 bf16 || rc=1
  Q27=/tmp/d3-27b-q-fp8
  if [ ! -f $Q27/.complete ]; then
    rm -rf $Q27
    /usr/bin/time -f "%e s, peak RSS %M KB" -o "$OUT/quantize27.time" $S/vllm-srun quantize "$F27" $Q27 --scheme fp8-dynamic \
      > "$OUT/quantize27.log" 2>&1 && touch $Q27/.complete || { rc=1; tail -3 "$OUT/quantize27.log"; }
    echo "quantize 27b-shape bf16 -> fp8-dynamic: $(cat "$OUT/quantize27.time") ($(du -sh "$F27" | cut -f1) -> $(du -sh $Q27 | cut -f1))"
    cp $Q27/quantization_record.json "$OUT/" 2>/dev/null
  fi
  t0=$(date +%s)
  $S/vllm-srun compare "$F27" $Q27 --requests tests/data/compare/requests.jsonl --device cuda:0 \
    --json "$OUT/eval-fp8.json" > "$OUT/compare27-fp8.txt" 2> "$OUT/compare27-fp8.err" || rc=1
  echo "compare bf16 vs fp8-dynamic (27b-shape, cuda:0) in $(( $(date +%s) - t0 )) s:"; head -12 "$OUT/compare27-fp8.txt"
fi
if step loadtest; then
  # issue 22: the seed's load-test table, BF16, FP8 (quantize fp8-dynamic of it) and W4A16 (a GPTQ fixture: random
  # weights of their own, so no eval column) 27B-shaped packages served on cuda:0 one at a time
  SLA_MS=${SLA_MS:-500}
  [ -f "$OUT/loadtest.md" ] || { echo "| Variant | Device | Max concurrency at SLA (p95 <= $SLA_MS ms) | p95 ms | Requests/s | Eval |"
    echo "|---|---|---|---|---|---|"; } > "$OUT/loadtest.md"
  for v in ${LT_VARIANTS:-bf16 fp8 w4a16}; do
    case $v in bf16) fixture27 bf16; pkg=$F27 ;; fp8) pkg=/tmp/d3-27b-q-fp8 ;; w4a16) fixture27 w4a16-gptq; pkg=$F27 ;; esac
    [ -d "$pkg" ] || { rc=1; echo "loadtest $v: no package"; continue; }
    t0=$(date +%s)
    $S/vllm-srun serve "$pkg" --device cuda:0 --port 18790 --served-model-name "27b-$v" --warmup-tokens ${LT_WARMUP:-4096} \
      --max-queue 4096 > "$OUT/loadtest-serve-$v.log" 2>&1 &
    pid=$!
    for _ in $(seq 3000); do [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18790/health)" = 200 ] && break; kill -0 $pid || break; sleep 0.1; done
    ev=(); [ -f "$OUT/eval-$v.json" ] && ev=(--eval "$OUT/eval-$v.json")
    $S/vllm-srun bench --port 18790 --sla-ms $SLA_MS --max-concurrency ${LT_MAXC:-64} --requests ${LT_REQUESTS:-64} \
      --requests-file tests/data/compare/requests.jsonl --variant "27b-$v" "${ev[@]}" > "$OUT/loadtest-bench-$v.txt" 2>&1 || rc=1
    grep '^| ' "$OUT/loadtest-bench-$v.txt" | tail -1 >> "$OUT/loadtest.md"
    echo "loadtest $v: ready in $(grep -h 'ready after\|warm-up' "$OUT/loadtest-serve-$v.log" | tail -1 | cut -c1-160); total $(( $(date +%s) - t0 )) s"
    kill -TERM $pid; wait $pid
  done
  cat "$OUT/loadtest.md"
  python3 bench/plot_loadtest.py "$OUT/loadtest.md" "$OUT/loadtest.png" "27B-shaped fixtures, $(cut -d, -f1 "$OUT/env.txt")" \
    >/dev/null 2>&1 || echo "loadtest: no plot (matplotlib missing here; bench/plot_loadtest.py on the table later)"
fi
if step fp8switch; then
  # issue 21: a managed deployment switched from BF16 to FP8 by SIGHUP keeps serving (tools/gpu/router_fp8_switch.sh)
  OUT=$OUT/fp8sw FP8SW_READY_TIMEOUT_S=${FP8SW_READY_TIMEOUT_S:-150} FP8SW_SWITCH_TIMEOUT_S=${FP8SW_SWITCH_TIMEOUT_S:-150} \
    bash tools/gpu/router_fp8_switch.sh "$S" > "$OUT/fp8sw.log" 2>&1; r=$?
  echo "router_fp8_switch rc=$r"; tail -15 "$OUT/fp8sw.log"; [ $r = 0 ] || rc=1
fi
echo "s15 rc=$rc"
exit $rc
