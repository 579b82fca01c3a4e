#!/usr/bin/env bash
# `make tsan`: the ThreadSanitizer build of the worker under load: 64 clients with a small
# queue (429s), clients that disconnect mid-request (cancellation), metrics scrapes, and
# SIGTERM while a request is in flight. Fails on any ThreadSanitizer report or a nonzero exit.
set -u
TS=${VSR_TSAN_BIN:?}; BIN=${VSR_BIN:?}
cd "$(dirname "$0")/.."
T=$(mktemp -d); trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
export HF_HUB_CACHE=$T/store
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny >/dev/null || exit 1
. tests/sh/lib/common.sh
PORT=$(vsr_free_port) # below the kernel's ephemeral ports
TSAN_OPTIONS="halt_on_error=0" "$TS" serve vllm-sr-c/d3-tiny --device cpu --port $PORT --log-level warn --max-queue 32 2>"$T/tsan.log" &
pid=$!
for _ in $(seq 1 600); do [ "$(curl -s -o /dev/null -w '%{http_code}' "localhost:$PORT/health")" = 200 ] && break; sleep 0.2; done
long=$(python3 -c 'import json;print(json.dumps({"state":"x "*300,"questions":{f"q{i}":{"type":"noul","instructions":"is it %d?"%i} for i in range(100)}}))')
(for k in 1 2 3; do curl -s -m 0.3 "localhost:$PORT/v1/decisions" -d "$long" >/dev/null; curl -s "localhost:$PORT/metrics" >/dev/null; done) &
"$BIN" bench --port $PORT --concurrency 64 --requests 400 --requests-file tests/data/server/mixed.jsonl | tail -1
wait %2 2>/dev/null
curl -s "localhost:$PORT/v1/decisions" -d "$long" -o /dev/null &
sleep 0.3
kill -TERM $pid; wait $pid; rc=$?
n=$(grep -c "WARNING: ThreadSanitizer" "$T/tsan.log")
echo "worker exit $rc, ThreadSanitizer reports: $n"
[ "$n" = 0 ] || grep -A20 "WARNING: ThreadSanitizer" "$T/tsan.log" | head -80
[ $rc = 0 ] && [ "$n" = 0 ]
