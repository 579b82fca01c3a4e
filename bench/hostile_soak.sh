#!/usr/bin/env bash
# The long hostile soak (bench/NOTES.md "hostile soak"): a worker on the built-in tiny package
# (CPU, --request-timeout 10, --max-queue 16) through ROUNDS (5) rounds of tests/hostile at the
# soak scale: 1,030 slow clients + the per-client cap, bad framing, huge headers, 3,000 path-junk
# requests, a 5,000-request burst at 128 clients, 40 disconnects, 13 bodies of 512 KiB with 256
# questions at once; /health probed every 50 ms throughout, RSS after each round.
#   bench/hostile_soak.sh [ROUNDS]            (VSR_BIN: the worker binary, default build/vllm-srun)
# Against a worker you started yourself: tests/hostile/run.sh --port P --pid PID --scale soak
set -u
cd "$(dirname "$0")/.."
BIN=${VSR_BIN:-$PWD/build/vllm-srun}
ROUNDS=${1:-5}
T=$(mktemp -d); trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
export HF_HUB_CACHE=$T/store
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny >/dev/null || exit 1
PORT=$((20000 + RANDOM % 20000))
"$BIN" serve vllm-sr-c/d3-tiny --device cpu --port $PORT --request-timeout 10 --max-queue 16 --log-level warn 2>"$T/w.log" &
pid=$!
for _ in $(seq 1 600); do [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:$PORT/health)" = 200 ] && break; sleep 0.1; done
t0=$(date +%s)
tests/hostile/run.sh --port $PORT --pid $pid --scale soak --request-timeout 10 --rss-trace --soak-rounds "$ROUNDS"; rc=$?
echo "soak: $ROUNDS rounds in $(( $(date +%s) - t0 )) s, suite exit $rc; worker peak RSS $(grep VmHWM /proc/$pid/status | awk '{print $2/1024 " MiB"}')"
t1=$(date +%s.%N); kill -TERM $pid; wait $pid; wrc=$?
echo "SIGTERM: worker exit $wrc in $(python3 -c "import time; print(round(time.time() - $t1, 2))") s"
exit $rc
