#!/usr/bin/env bash
# The worker as a real process on loopback: every endpoint, a table of bad requests
# (tests/data/server/bad_requests.tsv) each with its status, code and message, the
# Server-Timing header, 64 clients x 2,000 mixed requests answered identically to the
# same requests sent alone (or 429), a client that disconnects, SIGTERM draining,
# a restart, and a Unix socket. Under `make asan` the same runs against the
# sanitizer build, and a leak or error fails the worker's exit status.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:?}
vsr_tmpdir
export HF_HUB_CACHE=$T/store

"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny >/dev/null || { echo "FAIL install fixture"; exit 1; }
PORT=$(vsr_free_port)

start() { # start [extra args]; sets pid
  vsr_start_worker vllm-sr-c/d3-tiny --device cpu --port "$PORT" --max-request-bytes 65536 --log-level warn "$@"
}
stop() { vsr_stop_worker; }

# /health while loading is 503 with a status; here we only see it ready.
start || { bad "worker did not become ready"; exit 1; }
ok "worker ready on $PORT"
URL=http://127.0.0.1:$PORT

# ---- endpoints ----
h=$(curl -s "$URL/health"); echo "$h" | grep -q '"status":"ready"' && ok "/health ready" || bad "/health: $h"
l=$(curl -s "$URL/health/live"); echo "$l" | grep -q '"status":"alive"' && ok "/health/live" || bad "/health/live: $l"
m=$(curl -s "$URL/v1/models")
for f in '"revision":"[0-9a-f]\{40\}"' '"model_sha256":"[0-9a-f]\{64\}"' '"manifest_sha256":"[0-9a-f]\{64\}"' \
         '"golden":{"status":"matched"' '"status":"ready"' '"device":"cpu"' '"max_request_bytes":65536'; do
  echo "$m" | grep -q "$f" && ok "/v1/models has $f" || bad "/v1/models lacks $f: $m"
done
met=$(curl -s "$URL/metrics")
for f in 'vllm_srun_model_memory_bytes{model="vllm-sr-c/d3-tiny"} [1-9]' 'vllm_srun_model_info{model="vllm-sr-c/d3-tiny",revision="[0-9a-f]*"' \
         'vllm_srun_ready 1' 'vllm_srun_queue_depth 0'; do
  echo "$met" | grep -q "$f" && ok "/metrics has $f" || bad "/metrics lacks $f"
done
curl -s "$URL/openapi.yaml" | head -1 | grep -q '^openapi: 3' && ok "/openapi.yaml" || bad "/openapi.yaml"

# ---- a decision, with Server-Timing ----
golden='{"state":"Write a Python function that merges two sorted lists and explain its running time.","questions":{"domain":{"type":"choice","instructions":"Which domain does this request belong to?","criteria":{"code":"Programming","math":"Mathematics","other":"Anything else"}},"reasoning":{"type":"noul","instructions":"Does answering this request need multi-step reasoning?"},"difficulty":{"type":"score","instructions":"How difficult is this request?","criteria":["Trivial","Moderate","Hard"]}}}'
r=$(curl -s -D "$T/h" "$URL/v1/decisions" -d "$golden")
meta=$(curl -s "$URL/v1/decisions" -d "${golden%\}},\"options\":{\"return_meta\":true}}")
echo "$meta" | grep -q '"meta":{"model_id":"vllm-sr-c/d3-tiny","revision":"[0-9a-f]\{40\}","model_sha256":"[0-9a-f]\{64\}"' && ok "return_meta" || bad "meta: $meta"
echo "$r" | grep -q '"choice":"' && echo "$r" | grep -q '"noul":' && echo "$r" | grep -q '"score":' && ok "decision answered" || bad "decision: $r"
grep -qi '^Server-Timing: parse;dur=[0-9.]*, tokenize;dur=[0-9.]*, queue;dur=[0-9.]*, forward;dur=[0-9.]*, post;dur=[0-9.]*, serialize;dur=[0-9.]*, total;dur=[0-9.]*' "$T/h" \
  && ok "Server-Timing on 200" || bad "Server-Timing missing: $(cat "$T/h")"
r2=$(curl -s "$URL/v1/systemone" -d "$golden"); [ "$r2" = "$r" ] || echo "$r2" | grep -q '"choice"' && ok "/v1/systemone alias" || bad "alias: $r2"

# ---- the bad-request table ----
n=0
while IFS=$'\t' read -r name method path status code msg body; do
  case "$name" in \#*|"") continue;; esac
  n=$((n+1))
  case "$body" in
    printf:*) printf '%b' "${body#printf:}" > "$T/body";;
    big:*) head -c "${body#big:}" /dev/zero | tr '\0' 'a' > "$T/body";;
    *) printf '%s' "$body" > "$T/body";;
  esac
  if [ "$method" = GET ] || [ "$method" = DELETE ]; then
    got=$(curl -s -o "$T/out" -D "$T/hdr" -w '%{http_code}' -X "$method" "$URL$path")
  else
    got=$(curl -s -o "$T/out" -D "$T/hdr" -w '%{http_code}' -X "$method" -H 'Content-Type: application/json' --data-binary @"$T/body" "$URL$path")
  fi
  out=$(cat "$T/out")
  if [ "$status" = 200 ]; then want="\"error\":\"$code\""; else want="\"code\":\"$code\""; fi
  if [ "$got" = "$status" ] && grep -qF -- "$want" "$T/out" && grep -qF -- "$msg" "$T/out"; then ok "bad request $name -> $status $code"
  else bad "bad request $name: got $got $out; want $status $code \"$msg\""; fi
  case "$path" in /v1/decisions|/v1/classify|/v1/embeddings|/v1/rerank)
    [ "$method" = POST ] && { grep -qi '^Server-Timing:' "$T/hdr" || bad "no Server-Timing on $name"; };;
  esac
done < "$REPO/tests/data/server/bad_requests.tsv"
[ $n -ge 40 ] && ok "$n bad requests checked" || bad "only $n bad requests"
# a chunked body (no Content-Length) that streams past --max-request-bytes
head -c 70000 /dev/zero | tr '\0' 'a' > "$T/big"
got=$(curl -s -o "$T/out" -w '%{http_code}' -H 'Transfer-Encoding: chunked' --data-binary @"$T/big" "$URL/v1/decisions")
[ "$got" = 413 ] && grep -q 'the request body exceeds 65536 bytes' "$T/out" && ok "streamed body over the limit -> 413" || bad "chunked: $got $(cat "$T/out")"
curl -s "$URL/health" | grep -q ready && ok "still serving after the bad requests" || bad "worker unhealthy after bad requests"

# ---- a client that disconnects: its work is cancelled, the worker keeps serving ----
long=$(python3 -c 'import json;print(json.dumps({"state":"x "*300,"questions":{f"q{i}":{"type":"noul","instructions":"is it %d?"%i} for i in range(200)}}))')
curl -s -m 0.3 "$URL/v1/decisions" -d "$long" >/dev/null; sleep 1
curl -s "$URL/metrics" | grep -q 'vllm_srun_requests_total{endpoint="/v1/decisions",status="499"} 1' && ok "disconnect counted as 499" || bad "no 499 after a disconnect"
r3=$(curl -s "$URL/v1/decisions" -d "$golden"); [ "$r3" = "$r" ] && ok "same answer after a disconnect" || bad "answer changed after disconnect"
stop; rc=$?; [ $rc = 0 ] && ok "SIGTERM exits 0" || bad "SIGTERM exit $rc: $(tail -5 "$T/worker.log")"

# ---- 64 clients x 2,000 mixed requests, every one answered identically to the request alone ----
start || { bad "restart failed"; exit 1; }
ok "restarted on the same port"
r4=$(curl -s "$URL/v1/decisions" -d "$golden"); [ "$r4" = "$r" ] && ok "same answer after restart" || bad "answer after restart differs"
"$BIN" bench --port "$PORT" --concurrency 64 --requests 2000 --requests-file "$REPO/tests/data/server/mixed.jsonl" --verify \
  --csv "$T/bench.csv" > "$T/bench.out" 2>&1 \
  && grep -q "verify: concurrency 64: 2000 of 2000 answered 200 identical" "$T/bench.out" \
  && ok "64 clients x 2000 requests: $(grep '^verify' "$T/bench.out")" || bad "concurrency: $(cat "$T/bench.out")"
# the level's device share from /metrics: under exact every request runs at least one forward of
# its own rows, and the worker cannot be in forwards for more than the level's wall time
python3 - "$T/bench.csv" <<'EOF' && ok "bench's forward columns: $(tail -1 "$T/bench.csv" | cut -d, -f18-)" || bad "bench forward columns: $(cat "$T/bench.csv")"
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[-1]
busy, fwd, rows = float(r["device_busy_pct"]), float(r["forwards"]), float(r["rows_per_forward"])
sys.exit(0 if 0 < busy <= 100.5 and fwd >= 2000 and 1 <= rows <= 128 else 1)
EOF
curl -s "$URL/health" | grep -q ready && ok "healthy after load" || bad "unhealthy after load"
stop
# ---- overload: a queue of 4 under 64 clients answers 429, never an unbounded queue ----
start --max-queue 4 || { bad "restart failed"; exit 1; }
"$BIN" bench --port "$PORT" --concurrency 64 --requests 600 --requests-file "$REPO/tests/data/server/mixed.jsonl" --verify > "$T/bench2.out" 2>&1 \
  && grep -q "answered 429" "$T/bench2.out" && ! grep -q " 0 answered 429" "$T/bench2.out" \
  && ok "overload: $(grep '^verify' "$T/bench2.out")" || bad "overload: $(cat "$T/bench2.out")"
curl -s "$URL/metrics" | grep -q 'vllm_srun_requests_total{endpoint="/v1/decisions",status="429"} [1-9]' && ok "429 counted in metrics" || bad "429 not in metrics"
stop
# ---- admission by tokens: a job larger than --max-queued-tokens can never be admitted (413) ----
start --max-queued-tokens 1000 || { bad "restart failed"; exit 1; }
r6=$(curl -s "$URL/v1/decisions" -d "$golden"); [ "$r6" = "$r" ] && ok "a job under --max-queued-tokens is answered" || bad "tokens: $r6"
got=$(curl -s -o "$T/out" -w '%{http_code}' "$URL/v1/decisions" -d "$long")
[ "$got" = 413 ] && grep -q 'over --max-queued-tokens 1000' "$T/out" && ok "a job over --max-queued-tokens -> 413" || bad "tokens 413: $got $(cat "$T/out")"
curl -s "$URL/v1/models" | grep -q '"max_queued_tokens":1000' && ok "/v1/models shows max_queued_tokens" || bad "limits lack max_queued_tokens"
stop
start || { bad "restart failed"; exit 1; }

# ---- SIGTERM drains in-flight work ----
curl -s "$URL/v1/decisions" -d "$long" -o "$T/drain.out" -w '%{http_code}' > "$T/drain.code" &
cpid=$!
sleep 0.2
kill -TERM $pid; wait $pid; rc=$?
wait $cpid
[ $rc = 0 ] && [ "$(cat "$T/drain.code")" = 200 ] && grep -q '"q199"' "$T/drain.out" && ok "SIGTERM drained the in-flight request" \
  || bad "drain: exit $rc, HTTP $(cat "$T/drain.code")"

# ---- Unix socket ----
"$BIN" serve vllm-sr-c/d3-tiny --device cpu --uds "$T/w.sock" --log-level warn 2>>"$T/worker.log" &
pid=$!
vsr_wait_http --unix-socket "$T/w.sock" http://w/health
r5=$(curl -s --unix-socket "$T/w.sock" http://w/v1/decisions -d "$golden"); [ "$r5" = "$r" ] && ok "Unix socket answers the same" || bad "uds: $r5"
stop; [ $? = 0 ] && ok "uds worker exits 0" || bad "uds worker exit"

# ---- refusals at startup: before any weight is read ----
out=$("$BIN" serve vllm-sr/d3-FP8 --revision 2fb271adbdaf6dc969ca1ca746b61a6a5127ed62 --device rocm:0 --host 0.0.0.0 --port 8100 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "rocm: not available on this host" && ok "seed command refused: $out" || bad "seed command: $rc $out"
out=$("$BIN" serve vllm-sr-c/d3-tiny --device cuda:3 --port "$PORT" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "cuda" && ok "missing cuda:3 refused" || bad "cuda:3: $rc $out"
out=$("$BIN" serve vllm-sr-c/d3-tiny --device tpu --port "$PORT" 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q "device must be auto or one of" && ok "bad --device refused" || bad "--device tpu: $rc $out"
out=$("$BIN" serve vllm-sr-c/d3-tiny --device cpu --dtype bfloat16 --port "$PORT" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "cpu: --dtype bfloat16 is not available on the CPU" && ok "--dtype bfloat16 on the CPU refused at startup" || bad "dtype on cpu: $rc $out"
out=$("$BIN" serve vllm-sr-c/d3-tiny --dtype float16 --port "$PORT" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "dtype must be auto or bfloat16" && ok "--dtype float16 refused" || bad "dtype float16: $rc $out"
out=$("$BIN" serve vllm-sr-c/d3-tiny@main --revision other --port "$PORT" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "names revision main but --revision says other" && ok "conflicting revisions refused" || bad "revisions: $rc $out"
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny-FP8 >/dev/null
out=$("$BIN" serve vllm-sr-c/d3-tiny-FP8 --device cpu --port "$PORT" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "FP8 weights need an NVIDIA GPU of compute capability 8.9 or later or an AMD Instinct MI300 or MI350 series GPU" \
  && ok "FP8 package refused on the CPU" || bad "FP8 on cpu: $rc $out"
if grep -q "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$T/worker.log"; then bad "sanitizer reports in the worker log"; grep -A20 "Sanitizer\|runtime error" "$T/worker.log" | head -60; fi
exit $fail
