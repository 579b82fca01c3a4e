#!/usr/bin/env bash
# The hostile-traffic suite (tests/hostile) in CI, against a worker on the built-in tiny package
# with a short --request-timeout (4 s) and a small queue (8): 1,030 slow clients, the per-client
# cap, bad framing, huge headers, path junk, refusals a client sending its whole body sees, a
# burst far past the queue, clients leaving mid-forward, large states; /health under 100 ms
# throughout, nothing accepted lost, /metrics parsed by prometheus_client, RSS back to its
# start. Then: SIGTERM with 300 slow clients and one request in flight answers that request and
# exits 0 within 3 s of answering it; --uds never removes a file or a live socket, only a stale one.
# Exits 77 (skipped) without a python3 that has prometheus_client.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:?}
PY=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import prometheus_client.parser' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "SKIP: no python3 with prometheus_client (install python3-prometheus-client; scripts/setup.sh does)"; exit 77; }
ulimit -n 8192 2>/dev/null || true
vsr_tmpdir
export HF_HUB_CACHE=$T/store
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny >/dev/null || { echo "FAIL install fixture"; exit 1; }
PORT=$(vsr_free_port)
NAME='d3-tiny "hostile" \name'
vsr_start_worker vllm-sr-c/d3-tiny --device cpu --port "$PORT" --request-timeout 4 --max-queue 8 \
  --served-model-name "$NAME" --log-level warn || { bad "worker did not become ready"; exit 1; }
# Under `make asan` (VSR_TEST_SANITIZER=1) the worker is the sanitizer build: ASan keeps freed
# memory in quarantine and everything runs ~3x slower, so the RSS bound is lifted and /health
# gets 300 ms; the point there is that no sanitizer report appears.
extra=()
[ "${VSR_TEST_SANITIZER:-0}" = 1 ] && extra=(--health-ms 300 --rss-slack-mib 4096)
"$PY" "$REPO/tests/hostile/hostile.py" --port "$PORT" --pid "$pid" --request-timeout 4 --served-name "$NAME" \
  "${extra[@]}" > "$T/hostile.out" 2>&1; rc=$?
cat "$T/hostile.out"
[ $rc = 0 ] && ok "hostile suite passed" || bad "hostile suite: exit $rc"

# ---- SIGTERM with 300 slow clients connected and a request in flight ----
long=$("$PY" -c 'import json;print(json.dumps({"state":"x "*300,"questions":{f"q{i}":{"type":"noul","instructions":"is it %d?"%i} for i in range(60)}}))')
"$PY" - "$PORT" > "$T/slow.out" 2>&1 <<'PYEOF' &
import socket, sys, time
socks = []
for i in range(300):
    s = socket.socket(); s.bind((f"127.0.0.{2 + i // 150}", 0)); s.connect(("127.0.0.1", int(sys.argv[1])))
    s.sendall(b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nContent-Length: 1000\r\n\r\n{")
    socks.append(s)
print("connected", len(socks), flush=True)
time.sleep(20)
PYEOF
spid=$!
for _ in $(seq 50); do grep -q connected "$T/slow.out" && break; sleep 0.1; done
{ curl -s "http://127.0.0.1:$PORT/v1/decisions" -d "$long" -o "$T/drain.out" -w '%{http_code}' > "$T/drain.code"
  date +%s.%N > "$T/drain.end"; } &
cpid=$!
sleep 0.1
t0=$(date +%s.%N)
kill -TERM $pid; wait $pid; rc=$?
t1=$(date +%s.%N)
wait $cpid
# The drain answers the request in flight first (its forwards take seconds under the sanitizers);
# the slow clients must add at most 3 s after that answer.
dt=$("$PY" -c "print(round($t1 - $t0, 2))")
te=$(cat "$T/drain.end" 2>/dev/null || echo "$t0")
after=$("$PY" -c "print(round($t1 - max($t0, $te), 2))")
[ $rc = 0 ] && "$PY" -c "import sys; sys.exit(0 if $after < 3 else 1)" \
  && ok "SIGTERM with $(grep -o 'connected [0-9]*' "$T/slow.out") slow clients: exit 0 in $dt s ($after s after the in-flight answer)" \
  || bad "SIGTERM with slow clients: exit $rc in $dt s ($after s after the in-flight answer)"
code=$(cat "$T/drain.code")
{ [ "$code" = 200 ] && grep -q '"q59"' "$T/drain.out"; } || [ "$code" = 503 ] \
  && ok "the request in flight at SIGTERM was answered ($code)" || bad "in-flight request at SIGTERM: $code"
kill $spid 2>/dev/null; wait $spid 2>/dev/null

# ---- --uds: a regular file, a directory and a live socket are never removed; a stale socket is ----
echo "precious" > "$T/file.sock"
out=$("$BIN" serve vllm-sr-c/d3-tiny --device cpu --uds "$T/file.sock" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "the path exists and is not a socket; refusing to remove it" && [ "$(cat "$T/file.sock")" = precious ] \
  && ok "--uds on a regular file refused, the file kept" || bad "--uds file: $rc $out"
mkdir "$T/dir.sock"
out=$("$BIN" serve vllm-sr-c/d3-tiny --device cpu --uds "$T/dir.sock" 2>&1); rc=$?
[ $rc = 1 ] && [ -d "$T/dir.sock" ] && ok "--uds on a directory refused, kept" || bad "--uds dir: $rc $out"
"$BIN" serve vllm-sr-c/d3-tiny --device cpu --uds "$T/live.sock" --log-level warn 2>>"$T/worker.log" &
upid=$!
vsr_wait_http --unix-socket "$T/live.sock" http://w/health
out=$("$BIN" serve vllm-sr-c/d3-tiny --device cpu --uds "$T/live.sock" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "another process is listening on this socket" \
  && [ "$(curl -s --unix-socket "$T/live.sock" -o /dev/null -w '%{http_code}' http://w/health)" = 200 ] \
  && ok "--uds on a live socket refused, the other worker still serves" || bad "--uds live: $rc $out"
kill -9 $upid; wait $upid 2>/dev/null   # leaves a stale socket behind
[ -S "$T/live.sock" ] || bad "no stale socket left to test"
"$BIN" serve vllm-sr-c/d3-tiny --device cpu --uds "$T/live.sock" --log-level info 2>"$T/stale.log" &
upid=$!
vsr_wait_http --unix-socket "$T/live.sock" http://w/health
[ "$(curl -s --unix-socket "$T/live.sock" -o /dev/null -w '%{http_code}' http://w/health)" = 200 ] && grep -q "removed a stale socket" "$T/stale.log" \
  && ok "--uds replaces a stale socket" || bad "--uds stale: $(tail -3 "$T/stale.log")"
kill -TERM $upid; wait $upid; [ $? = 0 ] && [ ! -e "$T/live.sock" ] && ok "uds worker exits 0 and removes its socket" || bad "uds exit"
if grep -q "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$T/worker.log" "$T/stale.log"; then bad "sanitizer reports in the worker log"; fi
exit $fail
