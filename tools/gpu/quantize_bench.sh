#!/bin/bash
# tools/gpu/quantize_bench.sh: issue 22's benchmarks of the quantize workflow.
#   tools/gpu/quantize_bench.sh cpu      (here, any host) -> quantize time and peak RSS of the small
#                                        and lite fixtures to fp8-dynamic and nvfp4 (bench/NOTES.md)
#   tools/gpu/quantize_bench.sh h200     (the H200 machine, repository root, .gpuw carried: build it
#                                        with `bash tools/gpu/worker_run.sh build`) -> $OUT/:
#     1. quantize time and peak RSS per size (lite, 27b-shape) for fp8-dynamic and w4a16-gptq
#        (calibration: tests/data/compare/requests.jsonl through the CUDA forward), with free host
#        memory before and after;
#     2. the seed's load-test table for the BF16, FP8 and W4A16 27B-shaped packages: each served on
#        cuda:0, `vllm-srun compare` against BF16 for the eval column, then `vllm-srun bench --sla-ms`
#        (one row each, appended to $OUT/loadtest.md), and `--quantize fp8-dynamic` of the BF16
#        package answering the same requests as the written FP8 package (the diff must be empty).
# Environment: SLA_MS (default 500), REQUESTS (default 200), SIZES (default "lite 27b-shape").
set -u
cd "$(dirname "$0")/../.."
REQ=tests/data/compare/requests.jsonl
measure() { # LABEL CMD... : one CSV row label,seconds,peak_rss_kb,mem_free_before_kb,mem_free_after_kb
  local label=$1; shift
  local before; before=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
  /usr/bin/time -f "%e %M" -o "$W/time.txt" "$@" >"$W/$label.out" 2>"$W/$label.err" || { echo "$label,FAILED,,,"; cat "$W/$label.err" >&2; return 1; }
  local after; after=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
  read -r secs rss <"$W/time.txt"
  echo "$label,$secs,$rss,$before,$after"
}

if [ "${1:-}" = cpu ]; then
  B=${VSR_BIN:-build/vllm-srun}
  W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
  export VSR_NO_PROGRESS=1
  echo "label,seconds,peak_rss_kb,mem_available_before_kb,mem_available_after_kb"
  for size in small lite; do
    "$B" fixture "$W/$size" --family decision3 --size "$size" --scheme bf16 --seed 0 >/dev/null
    for s in fp8-dynamic nvfp4; do
      measure "$size-$s" "$B" quantize "$W/$size" "$W/$size-$s" --scheme "$s"
      du -sb "$W/$size" "$W/$size-$s" | awk '{printf "#   %s %d bytes\n", $2, $1}'
      rm -rf "$W/$size-$s"
    done
    rm -rf "$W/$size"
  done
  exit 0
fi

[ "${1:-}" = h200 ] || { echo "usage: $0 cpu|h200" >&2; exit 2; }
. tools/gpu/cuda_env.sh   # $OUT, and cuBLASLt 13 on the library path
export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}" VSR_NO_PROGRESS=1
B=$PWD/.gpuw/vllm-srun
W=/tmp/qbench; rm -rf "$W"; mkdir -p "$W"
SLA_MS=${SLA_MS:-500}; REQUESTS=${REQUESTS:-200}; SIZES=${SIZES:-lite 27b-shape}
"$B" devices >"$OUT/devices.txt" 2>&1
{
  echo "label,seconds,peak_rss_kb,mem_available_before_kb,mem_available_after_kb"
  for size in $SIZES; do
    "$B" fixture "$W/$size" --family decision3 --size "$size" --scheme bf16 --seed 0 >/dev/null
    measure "$size-fp8-dynamic" "$B" quantize "$W/$size" "$W/$size-fp8" --scheme fp8-dynamic
    measure "$size-w4a16-gptq" "$B" quantize "$W/$size" "$W/$size-w4" --scheme w4a16-gptq \
      --calibration "$REQ" --device cuda:0
    du -sb "$W/$size" "$W/$size-fp8" "$W/$size-w4" | awk '{printf "#   %s %d bytes\n", $2, $1}'
  done
} | tee "$OUT/quantize_time.csv"
cp "$W"/*-fp8/quantization_record.json "$OUT/" 2>/dev/null

# The load-test table (largest size measured), one worker at a time on cuda:0.
size=$(echo $SIZES | awk '{print $NF}')
serve_bench() { # VARIANT PKG [serve options...]
  local v=$1 pkg=$2; shift 2
  "$B" serve "$pkg" --device cuda:0 --uds "$W/$v.sock" --served-model-name "$v" "$@" >"$OUT/serve-$v.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do curl -s --unix-socket "$W/$v.sock" http://x/health | grep -q '"ready"' && break; sleep 1; done
  curl -s --unix-socket "$W/$v.sock" http://x/v1/models >"$OUT/models-$v.json"
  local evalarg=(); [ -f "$W/$v-eval.json" ] && evalarg=(--eval "$W/$v-eval.json")
  "$B" bench --uds "$W/$v.sock" --sla-ms "$SLA_MS" --requests "$REQUESTS" --requests-file "$REQ" "${evalarg[@]}" \
    >"$OUT/bench-$v.txt" 2>&1
  grep '^| ' "$OUT/bench-$v.txt" | tail -1 >>"$OUT/loadtest.md"
  kill -TERM $pid; wait $pid
}
"$B" compare "$W/$size" "$W/$size-fp8" --requests "$REQ" --device cuda:0 --json "$W/fp8-eval.json" >"$OUT/compare-fp8.txt" 2>&1
"$B" compare "$W/$size" "$W/$size-w4" --requests "$REQ" --device cuda:0 --json "$W/w4a16-eval.json" >"$OUT/compare-w4a16.txt" 2>&1
"$B" compare "$W/$size" "$W/$size" --requests "$REQ" --device cuda:0 --json "$W/bf16-eval.json" >"$OUT/compare-bf16.txt" 2>&1
echo "| Variant | Device | Max concurrency at SLA (p95 <= $SLA_MS ms) | p95 ms | Requests/s | Eval |" >"$OUT/loadtest.md"
echo "|---|---|---|---|---|---|" >>"$OUT/loadtest.md"
serve_bench bf16 "$W/$size"
serve_bench fp8 "$W/$size-fp8"
serve_bench w4a16 "$W/$size-w4"
cat "$OUT/loadtest.md"

# serve --quantize fp8-dynamic answers exactly as the written FP8 package (same weights, same bytes)
for v in load-fp8 fp8; do
  pkg=$W/$size; opt=(--quantize fp8-dynamic); [ $v = fp8 ] && { pkg=$W/$size-fp8; opt=(); }
  "$B" serve "$pkg" --device cuda:0 --uds "$W/$v.sock" "${opt[@]}" >"$OUT/serve-$v-answers.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do curl -s --unix-socket "$W/$v.sock" http://x/health | grep -q '"ready"' && break; sleep 1; done
  [ $v = load-fp8 ] && curl -s --unix-socket "$W/$v.sock" http://x/v1/models >"$OUT/models-load-fp8.json"
  : >"$OUT/answers-$v.jsonl"
  while IFS= read -r line; do
    [ -z "$line" ] && continue
    curl -s --unix-socket "$W/$v.sock" -H 'content-type: application/json' --data-binary "$line" http://x/v1/decisions \
      | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("usage",None); d.pop("id",None); d.pop("model",None); print(json.dumps(d.get("answers", d), sort_keys=True))' \
      >>"$OUT/answers-$v.jsonl"
  done <"$REQ"
  kill -TERM $pid; wait $pid
done
if cmp -s "$OUT/answers-load-fp8.jsonl" "$OUT/answers-fp8.jsonl"; then
  echo "serve --quantize fp8-dynamic: answers identical to the written FP8 package ($(wc -l <"$OUT/answers-fp8.jsonl") requests)" | tee "$OUT/load_fp8_equal.txt"
else
  echo "serve --quantize fp8-dynamic: answers DIFFER from the written FP8 package" | tee "$OUT/load_fp8_equal.txt"
  diff "$OUT/answers-load-fp8.jsonl" "$OUT/answers-fp8.jsonl" | head -20
fi
