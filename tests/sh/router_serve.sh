#!/usr/bin/env bash
# vllm-sr serve --config (router mode) against a real worker (vllm-srun serve of the built-in
# d3-tiny fixture, attached over its Unix socket) and two real OpenAI-compatible upstreams
# (tests/tools/openai_upstream, built by make): routing by the decision model's real answers
# (the rule is written from what the worker answers), the headers naming decision, model and
# backend, SSE passed through event by event (the upstream waits 400 ms between events),
# explicit models, /v1/decisions forwarding, /v1/models, /health, /ready, /metrics, the
# canary share by weight (seeded), SIGHUP reload (applied; invalid file kept out), a span
# signal whose deployment is down (no_match and fail_request), the decision model down
# (unknown -> default, /ready 503), startup refusals printed as `vllm-sr validate` prints
# them, and a SIGTERM drain that finishes a stream in flight.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:?}
vsr_router_tools
vsr_tmpdir
export VLLM_SR_STATE_DIR=$T/state VSR_NO_PROGRESS=1

B=$(vsr_free_port 3)
RP=$B; UA=$((B + 1)); UB=$((B + 2))
R=http://127.0.0.1:$RP

# ---- the worker (attached over a Unix socket) and the upstreams ----
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny --store "$T/store" >/dev/null 2>&1 || bad "install d3-tiny"
"$BIN" serve vllm-sr-c/d3-tiny --store "$T/store" --device cpu --uds "$T/w.sock" --log-level warn > "$T/worker.log" 2>&1 &
WPID=$!
"$UP" --port "$UA" --name a > "$T/a.log" 2>&1 &
# b streams 4 events 400 ms apart: the role, the whole content (one chunk), finish_reason, [DONE]
"$UP" --port "$UB" --name b --chunks 1 --chunk-delay-ms 400 > "$T/b.log" 2>&1 &
vsr_wait_http --unix-socket "$T/w.sock" http://w/health 200 100
vsr_wait_http "http://127.0.0.1:$UA/health" 200 100 && vsr_wait_http "http://127.0.0.1:$UB/health" 200 100 || bad "upstreams up"

# What the decision model answers to the prompt decides which rule matches: read it first.
PROMPT="Write a Python function that merges two sorted lists."
Q='{"type":"choice","instructions":"Which domain does this request belong to?","criteria":{"code":"Programming","other":"Anything else"}}'
ans=$(curl -s --unix-socket "$T/w.sock" http://w/v1/decisions \
  -d "{\"state\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"questions\":{\"domain\":$Q}}")
CHOICE=$(echo "$ans" | python3 -c 'import json,sys;print(json.load(sys.stdin)["answers"]["domain"]["choice"])' 2>/dev/null)
[ "$CHOICE" = code ] || [ "$CHOICE" = other ] || bad "the worker's answer: $ans"
OTHER=$([ "$CHOICE" = code ] && echo other || echo code)

config() { # file, label of the high-priority rule, weight a, weight b, on_unknown of the pii rule
  cat > "$1" <<EOF
global:
  model_catalog:
    signal_timeout_ms: 5000
    deployments:
      d3:
        provider: model_runtime
        endpoint: unix://$T/w.sock
        served_name: vllm-sr-c/d3-tiny
      spans:
        provider: model_runtime
        endpoint: http://127.0.0.1:1
        served_name: vela
    bindings:
      pii: spans
    system:
      decision_model: {deployment: d3}
providers:
  models:
    - name: coder
      backend_refs:
        - {name: a, endpoint: 'http://127.0.0.1:$UA', weight: $3}
        - {name: b, endpoint: 'http://127.0.0.1:$UB', weight: $4}
    - name: general
      backend_refs:
        - {name: b, endpoint: 'http://127.0.0.1:$UB'}
    - name: private
      backend_refs:
        - {name: a, endpoint: 'http://127.0.0.1:$UA'}
  defaults:
    default_model: general
routing:
  decisions:
    - name: pii-private
      priority: 100
      rules:
        operator: AND
        on_unknown: $5
        conditions:
          - signal: pii
      modelRefs: [{model: private}]
    - name: by-domain
      priority: 10
      rules:
        operator: AND
        on_unknown: fail_request
        conditions:
          - question: domain
            type: choice
            instructions: Which domain does this request belong to?
            criteria: {code: Programming, other: Anything else}
            label: $2
      modelRefs: [{model: coder}]
EOF
}
config "$T/r.yaml" "$CHOICE" 1 0 no_match
"$SR" serve --config "$T/r.yaml" --port "$RP" --seed 7 --log-level info > "$T/router.log" 2>&1 &
RPID=$!
vsr_wait_http "$R/ready" 200 100 || bad "router ready: $(cat "$T/router.log")"
chat() { # extra curl args..., body last
  curl -s -D "$T/h" -o "$T/body" -w '%{http_code}' "$R/v1/chat/completions" "$@"
}
hdr() { grep -i "^$1:" "$T/h" | head -1 | cut -d' ' -f2- | tr -d '\r'; }
BODY="{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}]}"

# ---- routing by the decision model's answer ----
code=$(chat -d "$BODY")
if [ "$code" = 200 ] && [ "$(hdr x-vsr-route)" = decision ] && [ "$(hdr x-vsr-decision)" = by-domain ] \
   && [ "$(hdr x-vsr-model)" = coder ] && [ "$(hdr x-vsr-backend)" = a ] && [ "$(hdr x-upstream-backend)" = a ] \
   && grep -q "\"model\":\"coder\"" "$T/body" && grep -qF "[a] coder: $PROMPT" "$T/body"; then
  ok "chat routed by the answer '$CHOICE' to decision by-domain, model coder, backend a"
else bad "routing ($code): $(cat "$T/h" "$T/body")"; fi

# ---- SSE passed through as it comes (not buffered): 3 events 400 ms apart ----
curl -s -N "$R/v1/chat/completions" -d '{"model":"general","stream":true,"messages":[{"role":"user","content":"hi"}]}' \
  | while IFS= read -r l; do [ -n "$l" ] && echo "$(date +%s%N) $l"; done > "$T/sse"
n=$(grep -c 'data: ' "$T/sse")
first=$(head -1 "$T/sse" | cut -d' ' -f1); last=$(tail -1 "$T/sse" | cut -d' ' -f1)
gap=$(( (last - first) / 1000000 ))
if [ "$n" = 4 ] && grep -q 'data: \[DONE\]' "$T/sse" && grep -qF '"content":"[b] general: hi"' "$T/sse" && [ "$gap" -ge 1000 ]; then
  ok "SSE: 4 events arrive as sent (first to last ${gap} ms; the upstream spaces them 1200 ms)"
else bad "SSE ($n events, ${gap} ms): $(cat "$T/sse")"; fi
code=$(curl -s -D "$T/h" -o /dev/null -w '%{http_code}' "$R/v1/chat/completions" -d '{"model":"general","stream":true,"messages":[{"role":"user","content":"hi"}]}')
[ "$code" = 200 ] && hdr content-type | grep -q '^text/event-stream' && [ "$(hdr x-vsr-route)" = explicit ] \
  && ok "SSE headers: text/event-stream, x-vsr-route explicit" || bad "SSE headers: $(cat "$T/h")"

# ---- explicit model, refusals ----
code=$(chat -d '{"model":"private","messages":[{"role":"user","content":"x"}]}')
[ "$code" = 200 ] && [ "$(hdr x-vsr-route)" = explicit ] && [ "$(hdr x-vsr-model)" = private ] && [ -z "$(hdr x-vsr-decision)" ] \
  && ok "a model the config names is called without a decision" || bad "explicit ($code): $(cat "$T/h")"
code=$(chat -d '{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}')
[ "$code" = 404 ] && grep -q "model 'gpt-9' is not served by this router; send \\\\\"auto\\\\\" (routing by decisions) or one of coder, general, private" "$T/body" \
  && ok "unknown model: 404 naming the models" || bad "unknown model ($code): $(cat "$T/body")"
code=$(chat -d '{"model":"auto"}')
[ "$code" = 400 ] && grep -q 'messages must be a non-empty array of {role, content}' "$T/body" \
  && ok "no messages: 400" || bad "no messages ($code): $(cat "$T/body")"
code=$(chat -d '{"model":')
[ "$code" = 400 ] && grep -q 'the body is not a JSON object' "$T/body" && ok "bad JSON: 400" || bad "bad JSON ($code): $(cat "$T/body")"
code=$(curl -s -o "$T/body" -w '%{http_code}' "$R/v1/nothing"); [ "$code" = 404 ] && grep -q 'no route /v1/nothing' "$T/body" \
  && ok "unknown path: 404" || bad "404 ($code)"
code=$(curl -s -o "$T/body" -w '%{http_code}' "$R/v1/chat/completions"); [ "$code" = 405 ] && grep -q 'method not allowed' "$T/body" \
  && ok "GET on a POST route: 405" || bad "405 ($code)"

# ---- /v1/decisions forwarded ----
code=$(curl -s -D "$T/h" -o "$T/body" -w '%{http_code}' "$R/v1/decisions" \
  -d "{\"state\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"questions\":{\"domain\":$Q}}")
[ "$code" = 200 ] && grep -q "\"choice\":\"$CHOICE\"" "$T/body" && [ "$(hdr x-vsr-deployment)" = d3 ] && hdr server-timing | grep -q 'total;dur=' \
  && ok "/v1/decisions forwarded to d3 (its answer and Server-Timing)" || bad "/v1/decisions ($code): $(cat "$T/h" "$T/body")"
code=$(curl -s -o "$T/body" -w '%{http_code}' "$R/v1/decisions" -d '{"model":"d3","state":"x","questions":{}}')
[ "$code" = 400 ] && grep -q 'invalid_request' "$T/body" && ok "the worker's 400 comes back as is" || bad "worker 400 ($code): $(cat "$T/body")"
code=$(curl -s -o "$T/body" -w '%{http_code}' "$R/v1/decisions" -d '{"model":"nope","state":"x","questions":{"a":{"type":"noul","instructions":"x"}}}')
[ "$code" = 404 ] && grep -q "model 'nope' is not a deployment this router uses" "$T/body" && ok "/v1/decisions unknown model: 404" || bad "decisions 404 ($code)"

# ---- GET endpoints ----
curl -s "$R/v1/models" > "$T/models"
python3 - "$T/models" <<'EOF' && ok "/v1/models: auto, the providers' models, the deployments" || bad "/v1/models: $(cat "$T/models")"
import json, sys
m = json.load(open(sys.argv[1]))
ids = [d["id"] for d in m["data"]]
assert ids == ["auto", "coder", "general", "private"], ids
deps = {d["id"]: d for d in m["deployments"]}
assert deps["d3"]["role"] == "decision_model" and deps["d3"]["ready_replicas"] == 1, deps
assert deps["spans"]["ready_replicas"] == 0
EOF
code=$(curl -s -o "$T/body" -w '%{http_code}' "$R/health"); [ "$code" = 200 ] && grep -q '"config_generation":1' "$T/body" \
  && ok "/health" || bad "/health ($code)"
curl -s "$R/metrics" > "$T/m"
grep -q '^vsr_router_decision_matches_total{decision="by-domain"} 1$' "$T/m" \
  && grep -q '^vsr_model_runtime_requests_total{deployment="d3",outcome="ok"} [0-9]' "$T/m" \
  && grep -q '^vsr_model_runtime_request_duration_seconds_count{deployment="d3",surface="decisions"} [1-9]' "$T/m" \
  && grep -q '^vsr_model_runtime_ready{deployment="d3"} 1$' "$T/m" && grep -q '^vsr_model_runtime_ready{deployment="spans"} 0$' "$T/m" \
  && grep -q '^vsr_model_runtime_restarts_total{deployment="d3"} 0$' "$T/m" \
  && grep -q '^vsr_model_runtime_unknown_answers_total{deployment="spans",reason="no_ready_replica"} [1-9]' "$T/m" \
  && grep -q '^vsr_router_backend_requests_total{model="coder",backend="a",outcome="ok"} 1$' "$T/m" \
  && grep -q '^vsr_router_backend_duration_seconds_bucket{model="coder",backend="a",le="+Inf"} 1$' "$T/m" \
  && grep -q '^vsr_router_requests_total{endpoint="/v1/chat/completions",status="404"} 1$' "$T/m" \
  && grep -q '^vsr_router_config_generation 1$' "$T/m" \
  && ok "/metrics: matches, deployment calls and latency, ready, restarts, unknown signals, backends" || bad "/metrics: $(grep -v '^#' "$T/m" | grep -v bucket)"

# ---- canary: weights 9:1, seeded; then SIGHUP shifts it ----
share() { # n -> count of backend b
  local nb=0
  for _ in $(seq "$1"); do
    chat -d "$BODY" > /dev/null
    [ "$(hdr x-vsr-backend)" = b ] && nb=$((nb + 1))
  done
  echo $nb
}
config "$T/r.yaml" "$CHOICE" 9 1 no_match
kill -HUP $RPID
for _ in $(seq 50); do curl -s "$R/health" | grep -q '"config_generation":2' && break; sleep 0.1; done
nb=$(share 200)
[ "$nb" -ge 8 ] && [ "$nb" -le 40 ] && ok "SIGHUP applied weights 9:1: $nb of 200 on the canary b" || bad "canary share: $nb of 200"
grep -q 'SIGHUP: applied' "$T/router.log" || bad "reload not logged"
# an invalid file keeps the config in use, and the log says why
sed 's/operator: AND/operator: XOR/' "$T/r.yaml" > "$T/bad.yaml"; cp "$T/bad.yaml" "$T/r.yaml"
kill -HUP $RPID; sleep 0.5
grep -q "SIGHUP: $T/r.yaml is invalid; keeping the config in use (generation 2):" "$T/router.log" \
  && grep -q 'routing.decisions\[0\].rules.operator (line [0-9]*, column [0-9]*): operator must be AND or OR (found "XOR")' "$T/router.log" \
  && curl -s "$R/health" | grep -q '"config_generation":2' && [ "$(chat -d "$BODY")" = 200 ] \
  && curl -s "$R/metrics" | grep -q '^vsr_router_config_reloads_total{result="refused"} 1$' \
  && ok "SIGHUP with an invalid file: refused, logged with path/line/column, old config serves" || bad "invalid reload: $(tail -5 "$T/router.log")"
# full shift, then rollback by reloading the previous file
config "$T/r.yaml" "$CHOICE" 0 1 no_match; kill -HUP $RPID
for _ in $(seq 50); do curl -s "$R/health" | grep -q '"config_generation":3' && break; sleep 0.1; done
nb=$(share 20); [ "$nb" = 20 ] && ok "full shift: 20 of 20 on b" || bad "full shift: $nb of 20"
config "$T/r.yaml" "$CHOICE" 1 0 no_match; kill -HUP $RPID
for _ in $(seq 50); do curl -s "$R/health" | grep -q '"config_generation":4' && break; sleep 0.1; done
nb=$(share 20); [ "$nb" = 0 ] && ok "rollback: 0 of 20 on b" || bad "rollback: $nb of 20"

# ---- the other label: the rule does not match, the default model answers ----
config "$T/r.yaml" "$OTHER" 1 0 no_match; kill -HUP $RPID
for _ in $(seq 50); do curl -s "$R/health" | grep -q '"config_generation":5' && break; sleep 0.1; done
code=$(chat -d "$BODY")
[ "$code" = 200 ] && [ "$(hdr x-vsr-route)" = default ] && [ "$(hdr x-vsr-model)" = general ] && [ -z "$(hdr x-vsr-decision)" ] \
  && ok "label $OTHER does not match: default model general" || bad "default route ($code): $(cat "$T/h")"

# ---- a span signal that is unknown (its deployment is down) with fail_request ----
config "$T/r.yaml" "$CHOICE" 1 0 fail_request; kill -HUP $RPID
for _ in $(seq 50); do curl -s "$R/health" | grep -q '"config_generation":6' && break; sleep 0.1; done
code=$(chat -d "$BODY")
[ "$code" = 503 ] && grep -q "decision 'pii-private' (priority 100, on_unknown: fail_request) could not be evaluated: signal pii is unknown: deployment 'spans' has no ready replica" "$T/body" \
  && ok "pii unknown + fail_request: 503 naming the decision and why" || bad "fail_request ($code): $(cat "$T/body")"

# ---- the decision model down: /ready 503, its questions unknown ----
config "$T/r.yaml" "$CHOICE" 1 0 no_match; kill -HUP $RPID
for _ in $(seq 50); do curl -s "$R/health" | grep -q '"config_generation":7' && break; sleep 0.1; done
kill -9 $WPID; wait $WPID 2>/dev/null
vsr_wait_http "$R/ready" 503 100 || bad "ready stays 200 with the worker gone"
curl -s "$R/ready" | grep -q "decision deployment 'd3' has no ready replica" && ok "/ready: 503 when the decision deployment has no ready replica" \
  || bad "/ready body: $(curl -s "$R/ready")"
code=$(chat -d "$BODY")
[ "$code" = 503 ] && grep -q "decision 'by-domain' (priority 10, on_unknown: fail_request) could not be evaluated: question 'domain' is unknown: deployment 'd3' has no ready replica" "$T/body" \
  && ok "decision model down + fail_request: 503" || bad "model down ($code): $(cat "$T/body")"
sed -i 's/        on_unknown: fail_request/        on_unknown: no_match/' "$T/r.yaml"; kill -HUP $RPID
for _ in $(seq 50); do curl -s "$R/health" | grep -q '"config_generation":8' && break; sleep 0.1; done
code=$(chat -d "$BODY")
[ "$code" = 200 ] && [ "$(hdr x-vsr-route)" = default ] && ok "decision model down + no_match: the default model, the router keeps serving" \
  || bad "model down no_match ($code): $(cat "$T/body")"

# ---- SIGTERM: a stream in flight finishes, then the router exits 0 ----
curl -s -N "$R/v1/chat/completions" -d '{"model":"general","stream":true,"messages":[{"role":"user","content":"hi"}]}' > "$T/drain" &
CPID=$!
sleep 0.3
kill -TERM $RPID
wait $CPID
wait $RPID; rc=$?
[ $rc = 0 ] && grep -q 'data: \[DONE\]' "$T/drain" && grep -q 'drained in' "$T/router.log" \
  && ok "SIGTERM: the stream in flight finished, exit 0" || bad "drain (rc $rc): $(cat "$T/drain"; tail -3 "$T/router.log")"

# ---- startup refusals, printed as validate prints them ----
out=$("$SR" serve --config "$T/bad.yaml" --port "$RP" 2>&1); rc=$?
want=$("$SR" validate "$T/bad.yaml" 2>&1)
[ $rc = 1 ] && [ "$out" = "$want" ] && echo "$out" | head -1 | grep -qx 'Configuration validation failed:' \
  && ok "invalid config at startup: exit 1, the same lines as validate" || bad "startup refusal ($rc): $out"
out=$("$SR" serve --config "$T/absent.yaml" 2>&1); [ $? = 1 ] && echo "$out" | grep -q "cannot read $T/absent.yaml" \
  && ok "unreadable config: refused" || bad "absent: $out"
out=$("$SR" serve --config "$T/bad.yaml" --port 0 2>&1); [ $? = 2 ] && echo "$out" | grep -q -- '--port' \
  && ok "--port 0 refused" || bad "--port 0: $out"
out=$("$SR" serve --config "$T/bad.yaml" --seed x 2>&1); [ $? = 2 ] && echo "$out" | grep -q -- '--seed' \
  && ok "--seed x refused" || bad "--seed x: $out"
out=$("$SR" serve --config "$T/bad.yaml" --bogus 2>&1); [ $? = 2 ] && echo "$out" | grep -q 'unknown option --bogus' \
  && ok "unknown option refused" || bad "--bogus: $out"
config "$T/r.yaml" "$CHOICE" 1 0 no_match
out=$("$SR" serve --config "$T/r.yaml" --host localhost --port "$RP" 2>&1); [ $? = 1 ] \
  && echo "$out" | grep -q -- '--host localhost: expected an IPv4 address' && ok "--host localhost refused" || bad "--host: $out"
"$UP" --port "$RP" --name squat > /dev/null 2>&1 &
SQ=$!
vsr_wait_http "$R/health" 200 100
out=$("$SR" serve --config "$T/r.yaml" --port "$RP" 2>&1); [ $? = 1 ] \
  && echo "$out" | grep -q "cannot listen on 127.0.0.1:$RP (is the port in use?)" && ok "port in use refused" || bad "port in use: $out"
kill $SQ

# Span signals with spans FOUND need a worker that serves the span family (vela2) on
# /v1/decisions. The tiny vela2 fixture exists, but `vllm-srun serve` refuses it today ("does not
# serve the span family yet"), so only the unknown path is exercised here; spans found / not
# found are evaluated in tests/test_router_route.c on the documented wire format.
if "$BIN" fixture "$T/v2" --family vela2 --size tiny --seed 0 >/dev/null 2>&1; then
  out=$(timeout 20 "$BIN" serve "$T/v2" --device cpu --port "$UA" 2>&1 | head -3)
  echo "$out" | grep -q 'does not serve the span family' \
    || echo "note: vllm-srun serve may serve vela2 now ($out): extend this test with a span deployment that finds pii"
fi

exit $fail
