#!/usr/bin/env bash
# The router's added latency per request (issue 21), on this machine:
#   bench/router/router_bench.sh [BUILD_DIR] [REQUESTS_1] [REQUESTS_64]
# Starts the built-in d3-tiny worker on a Unix socket (the decision model, attached), one
# upstream (tests/tools/openai_upstream, built by make; answers at once) and `vllm-sr serve --config` over both,
# then measures with bench/router/loadgen.c (closed loop, keep-alive), at 1 and 64 clients:
#   upstream   POST /v1/chat/completions straight to the upstream
#   explicit   the same through the router, model named (no decision call): the proxy alone
#   worker     POST /v1/decisions straight to the worker, the body the router sends it
#   routed     the chat request through the router with model "auto": decision call + proxy
# Overheads (p50): proxy = explicit - upstream; routing = routed - worker - upstream, the
# router's own time beyond the decision call and the backend. Writes bench/router/NAME.csv
# and, with matplotlib, bench/router/NAME.png (NAME: $ROUTER_BENCH_NAME, default router_cpu).
# LOADGEN=path uses a load generator built elsewhere (a host without libcurl's headers).
# ROUTER_BENCH_PIN=1: the worker on CPU 1 and the router, upstream and load generator on CPU 0 (taskset), so
# on a 2-core machine the router's CPU is not taken from the worker's forwards (both worker paths pinned alike).
# ROUTER_BENCH_PROBE=1: the worker's work per request direct and routed (below), no sweep, no CSV.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
N1=${2:-400}
N64=${3:-1500}
OUT=bench/router
NAME=${ROUTER_BENCH_NAME:-router_cpu}
if [ -n "${ROUTER_BENCH_PIN:-}" ]; then PW=(taskset -c 1); PR=(taskset -c 0); WT=(--threads 1); else PW=(); PR=(); WT=(); fi
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
UPSTREAM=$BUILD/tests/openai_upstream   # `make -C bench router_bench ROUTER_BUILD=$BUILD` builds what this needs
for b in "$BUILD/vllm-srun" "$BUILD/vllm-sr" "$UPSTREAM"; do
  [ -x "$b" ] || { echo "$b is not built: make -C bench router_bench ROUTER_BUILD=$BUILD"; exit 1; }
done
if [ -n "${LOADGEN:-}" ]; then cp "$LOADGEN" "$T/loadgen"; else cc -O2 -o "$T/loadgen" "$OUT/loadgen.c" -lcurl -lm; fi
P=$((20000 + RANDOM % 20000)); RP=$P; UP=$((P + 1))
"$BUILD/vllm-srun" fixture --install-builtin vllm-sr-c/d3-tiny --store "$T/store" >/dev/null 2>&1
VSR_NO_PROGRESS=1 "${PW[@]}" "$BUILD/vllm-srun" serve vllm-sr-c/d3-tiny --store "$T/store" --device cpu "${WT[@]}" --uds "$T/w.sock" --log-level warn 2>"$T/w.log" &
"${PR[@]}" "$UPSTREAM" --port "$UP" --name up 2>"$T/up.log" &
for _ in $(seq 200); do curl -sf --unix-socket "$T/w.sock" http://w/health >/dev/null && break; sleep 0.1; done
Q='{"type":"choice","instructions":"Which domain does this request belong to?","criteria":{"code":"Programming","other":"Anything else"}}'
PROMPT="Write a Python function that merges two sorted lists and explain its running time."
cat > "$T/r.yaml" <<YAML
global:
  model_catalog:
    deployments:
      d3: {provider: model_runtime, endpoint: 'unix://$T/w.sock', served_name: vllm-sr-c/d3-tiny}
    system:
      decision_model: {deployment: d3}
providers:
  models:
    - name: coder
      backend_refs: [{name: up, endpoint: 'http://127.0.0.1:$UP'}]
  defaults:
    default_model: coder
routing:
  decisions:
    - name: code
      priority: 10
      rules:
        conditions:
          - {question: domain, type: choice, instructions: Which domain does this request belong to?, criteria: {code: Programming, other: Anything else}, label: code}
      modelRefs: [{model: coder}]
YAML
"${PR[@]}" "$BUILD/vllm-sr" serve --config "$T/r.yaml" --port "$RP" --log-level warn 2>"$T/r.log" &
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$RP/ready" >/dev/null && break; sleep 0.1; done
echo "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}]}" > "$T/auto.json"
echo "{\"model\":\"coder\",\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}]}" > "$T/coder.json"
echo "{\"model\":\"vllm-sr-c/d3-tiny\",\"state\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"questions\":{\"domain\":$Q}}" > "$T/dec.json"
curl -s "http://127.0.0.1:$RP/v1/chat/completions" -d @"$T/auto.json" -D - -o /dev/null | grep -qi '^x-vsr-decision: code' \
  || { echo "the bench request is not routed by decision 'code'"; exit 1; }
RPID=$(jobs -p | tail -1)
if [ -n "${ROUTER_BENCH_PROBE:-}" ]; then
  # ROUTER_BENCH_PROBE=1: instead of the sweep, the worker's own work per request (its /metrics) when called directly
  # and through the router, 64 clients, twice each alternately: does the router add work or gaps at the worker?
  m() { curl -s --unix-socket "$T/w.sock" http://w/metrics | awk -v k="$1" '$1 == k {print $2}'; }
  probe() {
    local t0 f0 s0 t1 f1 s1
    t0=$(m vllm_srun_input_tokens_total) f0=$(m vllm_srun_forward_duration_seconds_count) s0=$(m vllm_srun_forward_duration_seconds_sum)
    "${PR[@]}" "$T/loadgen" "$@" --clients 64 --requests 600 --warmup 64 | tail -1
    t1=$(m vllm_srun_input_tokens_total) f1=$(m vllm_srun_forward_duration_seconds_count) s1=$(m vllm_srun_forward_duration_seconds_sum)
    python3 -c "print('  per request: %.1f tokens, %.2f forwards, %.3f ms of forward' % (($t1-$t0)/664, ($f1-$f0)/664, ($s1-$s0)/664*1e3))"
  }
  echo "label clients requests rps p50_ms p90_ms p99_ms errors"
  for _ in 1 2; do
    probe --label worker --url http://w/v1/decisions --uds "$T/w.sock" --body "$T/dec.json"
    probe --label routed --url "http://127.0.0.1:$RP/v1/chat/completions" --body "$T/auto.json"
  done
  exit 0
fi
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "label clients requests rps p50_ms p90_ms p99_ms errors" > "$T/res.txt"
for C in 1 64; do
  N=$([ "$C" = 1 ] && echo "$N1" || echo "$N64")
  W=$((C * 4))
  "${PR[@]}" "$T/loadgen" --label upstream --url "http://127.0.0.1:$UP/v1/chat/completions" --body "$T/coder.json" --clients "$C" --requests $((N * 4)) --warmup "$W" >> "$T/res.txt"
  "${PR[@]}" "$T/loadgen" --label explicit --url "http://127.0.0.1:$RP/v1/chat/completions" --body "$T/coder.json" --clients "$C" --requests $((N * 4)) --warmup "$W" >> "$T/res.txt"
  "${PR[@]}" "$T/loadgen" --label worker --url http://w/v1/decisions --uds "$T/w.sock" --body "$T/dec.json" --clients "$C" --requests "$N" --warmup "$W" >> "$T/res.txt"
  c0=$(cpu "$RPID")
  "${PR[@]}" "$T/loadgen" --label routed --url "http://127.0.0.1:$RP/v1/chat/completions" --body "$T/auto.json" --clients "$C" --requests "$N" --warmup "$W" >> "$T/res.txt"
  echo "router CPU per routed request at $C clients: $(( ( $(cpu "$RPID") - c0 ) * 10000 / (N + W) )) us" >> "$T/cpu.txt"
done
column -t "$T/res.txt"
cat "$T/cpu.txt"
python3 - "$T/res.txt" "$OUT/$NAME.csv" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
by = {(r[0], int(r[1])): r for r in rows}
out = open(sys.argv[2], "w")
out.write("clients,upstream_p50_ms,explicit_p50_ms,worker_p50_ms,routed_p50_ms,upstream_p99_ms,explicit_p99_ms,worker_p99_ms,routed_p99_ms,proxy_overhead_p50_ms,routing_overhead_p50_ms,proxy_overhead_p99_ms,routing_overhead_p99_ms,routed_rps\n")
for c in (1, 64):
    u, e, w, r = (by[(k, c)] for k in ("upstream", "explicit", "worker", "routed"))
    p50 = lambda x: float(x[4]); p99 = lambda x: float(x[6])
    vals = [p50(u), p50(e), p50(w), p50(r), p99(u), p99(e), p99(w), p99(r),
            p50(e) - p50(u), p50(r) - p50(w) - p50(u), p99(e) - p99(u), p99(r) - p99(w) - p99(u), float(r[3])]
    out.write(f"{c}," + ",".join(f"{v:.3f}" for v in vals) + "\n")
    print(f"{c:>2} clients: proxy overhead p50 {vals[8]:.3f} ms (p99 {vals[10]:.3f}); routing overhead beyond the decision call p50 {vals[9]:.3f} ms (p99 {vals[11]:.3f}); routed {vals[12]:.0f} req/s")
PY
# the plot: the first Python with matplotlib (pyenv's python3 may lack it where Debian's has it)
plotted=0
for py in python3 /usr/bin/python3; do
  if [ $plotted = 0 ] && "$py" -c 'import matplotlib' 2>/dev/null; then
    "$py" "$OUT/plot_router.py" "$OUT/$NAME.csv" "$OUT/$NAME.png" && echo "wrote $OUT/$NAME.png" && plotted=1
  fi
done
[ $plotted = 1 ] || echo "no plot: no python3 with matplotlib (apt-get install python3-matplotlib)"
grep -c . "$T/r.log" >/dev/null && grep -v '^$' "$T/r.log" | tail -3 || true
