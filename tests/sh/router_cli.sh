#!/usr/bin/env bash
# vllm-sr (the router front end, first slice): `validate` on the seed's YAML
# (tests/data/router/seed.yaml, "Use it from the Router") with a store that holds its
# artifacts, refusals with YAML path/line/column, `model list|show`, and engine mode:
# `serve MODEL --revision R --engine` resolves R once from the store, records the commit in
# the active deployment state, runs vllm-srun in the foreground and answers a request;
# `status` shows it and `stop` ends it. Every serve refusal of issue #21 is checked.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:?}
SR=$(dirname "$BIN")/vllm-sr
vsr_tmpdir
vsr_need_built "$SR"
export VLLM_SR_STATE_DIR=$T/state
S=$T/store
SEED=$REPO/tests/data/router/seed.yaml

# ---- the store: the seed's artifacts ----
# vllm-sr/d3-FP8 at the seed's commit (an FP8 fixture's files under that snapshot), refs/main -> it
FP8_REV=2fb271adbdaf6dc969ca1ca746b61a6a5127ed62
"$BIN" fixture "$T/fp8" --family decision3 --size tiny --scheme fp8 --seed 0 >/dev/null 2>&1 || bad "fp8 fixture"
mkdir -p "$S/models--vllm-sr--d3-FP8/refs" "$S/models--vllm-sr--d3-FP8/snapshots"
cp -r "$T/fp8" "$S/models--vllm-sr--d3-FP8/snapshots/$FP8_REV"
echo -n "$FP8_REV" > "$S/models--vllm-sr--d3-FP8/refs/main"
# vllm-sr/vela3-fast: a span-capable package's metadata (token-classification config), refs/main
SPAN_REV=5555555555555555555555555555555555555555
mkdir -p "$S/models--vllm-sr--vela3-fast/refs" "$S/models--vllm-sr--vela3-fast/snapshots/$SPAN_REV"
echo '{"architectures":["Qwen3_5ForTokenClassification"],"model_type":"qwen3_5_text"}' \
  > "$S/models--vllm-sr--vela3-fast/snapshots/$SPAN_REV/config.json"
echo -n "$SPAN_REV" > "$S/models--vllm-sr--vela3-fast/refs/main"
# the built-in fixture the engine serves
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny --store "$S" >/dev/null 2>&1 || bad "install d3-tiny"
TINY_REV=$(cat "$S/models--vllm-sr-c--d3-tiny/refs/main")

# ---- validate ----
out=$("$SR" validate "$SEED" --store "$S" 2>&1); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q '^Configuration is valid: .*seed.yaml (2 deployments, 2 bindings, 0 decisions)$' \
  && ok "validate: the seed's YAML" || bad "validate seed ($rc): $out"
out=$("$SR" validate "$SEED" --store "$T/empty" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | head -1 | grep -qx 'Configuration validation failed:' \
  && echo "$out" | grep -q 'global.model_catalog.deployments.spans.artifact (line 12, column 19): revision must be a 40-hex commit' \
  && ok "validate: a package that is not built in and not in the store needs revision" || bad "no store ($rc): $out"
check_broken() { # name, sed expression, expected line of output
  sed "$2" "$SEED" > "$T/broken.yaml"
  cmp -s "$SEED" "$T/broken.yaml" && { bad "$1: the edit changed nothing"; return; }
  out=$("$SR" validate "$T/broken.yaml" --store "$S" 2>&1); rc=$?
  if [ $rc = 1 ] && echo "$out" | head -1 | grep -qx 'Configuration validation failed:' && echo "$out" | grep -qF -- "$3"; then
    ok "validate refuses: $1"
  else bad "$1 ($rc): $out"; fi
}
check_broken "a branch as revision" 's/revision: 2fb271adbdaf6dc969ca1ca746b61a6a5127ed62/revision: main/' \
  'global.model_catalog.deployments.d3-fp8.revision (line 8, column 19): revision must be a 40-hex commit'
check_broken "pii bound to Decision 3.0" 's/pii: spans/pii: d3-fp8/' \
  'global.model_catalog.bindings.pii (line 14, column 12): model capability mismatch: deployment "d3-fp8" serves vllm-sr/d3-FP8, which has no classify head and no ready-made pii question; bind a token head or a model that defines the pii question, such as Vela 2.0'
check_broken "unknown binding deployment" 's/hallucination: spans/hallucination: spanz/' \
  "global.model_catalog.bindings.hallucination (line 15, column 22): Unknown model deployment 'spanz'"
check_broken "unknown decision deployment" 's/{deployment: d3-fp8}/{deployment: d3}/' \
  "global.model_catalog.system.decision_model.deployment (line 17, column 36): decision_model.deployment: unknown deployment 'd3'"
check_broken "decision_model not a mapping" 's/{deployment: d3-fp8}/d3-fp8/' \
  'global.model_catalog.system.decision_model (line 17, column 23): decision_model must be {deployment: <declared deployment key>}'
check_broken "unknown key" 's/device: rocm:0/gpu: rocm:0/' \
  "global.model_catalog.deployments.d3-fp8.gpu (line 9, column 9): unknown key 'gpu'"
check_broken "bad artifact" 's#artifact: vllm-sr/vela3-fast#artifact: vela3-fast#' \
  'global.model_catalog.deployments.spans.artifact (line 12, column 19): artifact must be a Hub repository ID or an absolute package path'
check_broken "revision on a path" "s#artifact: vllm-sr/d3-FP8#artifact: $T/fp8#" \
  'global.model_catalog.deployments.d3-fp8.revision (line 8, column 19): revision applies only to Hub repositories'
check_broken "managed without artifact" '/artifact: vllm-sr\/vela3-fast/d' \
  'global.model_catalog.deployments.spans (line 11, column 9): a managed model_runtime deployment requires artifact (a Hub repository or an absolute package path)'
check_broken "decision model over http" 's/provider: model_runtime/provider: http\n        endpoint: http:\/\/127.0.0.1:9\/x/;' \
  "decision_model.deployment 'd3-fp8' must use provider model_runtime"
out=$("$SR" validate "$T/absent.yaml" 2>&1); [ $? = 1 ] && echo "$out" | grep -q "cannot read $T/absent.yaml" \
  && ok "validate: unreadable file" || bad "absent file: $out"

# ---- model list / show ----
out=$("$SR" model list --config "$SEED" --store "$S" 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q "^d3-fp8 .*vllm-sr/d3-FP8 .*$FP8_REV .*rocm:0 .*decision3: decision_model" \
   && echo "$out" | grep -q "^spans .*vllm-sr/vela3-fast .*$SPAN_REV .*auto .*span: pii_classifier (token_spans.v1), hallucination_detector (token_spans.v1)"; then
  ok "model list"
else bad "model list ($rc): $out"; fi
out=$("$SR" model show spans --config "$SEED" --store "$S" 2>&1); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q "^revision: *$SPAN_REV (store refs/main)" && echo "$out" | grep -q '^family: *span (from the store)' \
  && ok "model show" || bad "model show ($rc): $out"
out=$("$SR" model show nope --config "$SEED" --store "$S" 2>&1); [ $? = 1 ] && echo "$out" | grep -q "Unknown model deployment 'nope'" \
  && ok "model show: unknown deployment" || bad "model show nope: $out"

# ---- serve --engine: refusals ----
refuse() { # name, expected rc, expected text, args...
  local name=$1 want=$2 text=$3; shift 3
  out=$("$SR" serve "$@" 2>&1); rc=$?
  if [ $rc = "$want" ] && echo "$out" | grep -qF -- "$text" && [ ! -e "$VLLM_SR_STATE_DIR/active.json" ]; then ok "serve refuses: $name"
  else bad "serve $name (rc $rc): $out"; fi
}
refuse "empty --revision" 2 '--revision must be a non-empty branch, tag or commit' vllm-sr-c/d3-tiny --revision '' --engine --store "$S"
refuse "empty @REV" 2 '--revision must be a non-empty branch, tag or commit' vllm-sr-c/d3-tiny@ --engine --store "$S"
refuse "--revision on a path" 2 '--revision applies only to Hub repositories' "$T/fp8" --revision main --engine --store "$S"
refuse "--revision with two models" 2 '--revision applies to a single MODEL; use MODEL@REVISION for several' \
  vllm-sr-c/d3-tiny vllm-sr/d3-FP8 --revision main --engine --store "$S"
refuse "uncached revision" 1 'Model revision is not cached; connect to the Hub or specify a cached commit' \
  vllm-sr-c/d3-tiny --revision v9 --engine --store "$S"
refuse "uncached commit" 1 'Model revision is not cached; connect to the Hub or specify a cached commit' \
  vllm-sr/d3-FP8 --revision 1234567890123456789012345678901234567890 --engine --store "$S"
refuse "--platform unknown" 2 '--platform must be cuda, rocm or cpu' vllm-sr-c/d3-tiny --engine --platform tpu --store "$S"
refuse "--device off the platform" 2 '--device cuda:0 does not belong to --platform rocm' vllm-sr-c/d3-tiny --engine --platform rocm --device cuda:0 --store "$S"
refuse "neither --engine nor --config" 2 'router mode needs --config CONFIG.yaml' vllm-sr-c/d3-tiny --store "$S"
refuse "--config with --engine" 2 '--config applies to the Router stack, not to --engine' vllm-sr-c/d3-tiny --engine --config "$SEED"
refuse "MODEL in router mode" 2 'MODEL arguments apply to engine mode (--engine)' vllm-sr-c/d3-tiny --config "$SEED"
# --platform against this host: a family the host lacks fails at once with the reason
devs=$("$BIN" devices 2>/dev/null)
if ! echo "$devs" | grep -q '^rocm:[0-9]'; then
  refuse "--platform rocm on a host without AMD GPUs" 1 '--platform rocm: this host has no AMD (ROCm) device (devices: cpu' \
    vllm-sr/d3-FP8 --revision "$FP8_REV" --engine --platform rocm --store "$S"
fi
if ! echo "$devs" | grep -q '^cuda:[0-9]'; then
  refuse "--platform cuda on a host without NVIDIA GPUs" 1 '--platform cuda: this host has no NVIDIA (CUDA) device' \
    vllm-sr/d3-FP8 --revision main --engine --platform cuda --store "$S"
fi

# ---- serve --engine on the built-in fixture, by branch: resolved once, recorded, served ----
PORT=$(vsr_free_port)
"$SR" serve vllm-sr-c/d3-tiny --revision main --engine --platform cpu --port "$PORT" --store "$S" 2>"$T/serve.log" &
pid=$!
if vsr_wait_http --pid $pid "http://127.0.0.1:$PORT/health"; then
  ok "serve --engine: worker ready"
  st=$(cat "$VLLM_SR_STATE_DIR/active.json")
  echo "$st" | grep -q "\"revision\": \"$TINY_REV\"" && echo "$st" | grep -q '"requested_revision": "main"' \
    && echo "$st" | grep -q "\"pid\": $pid" && echo "$st" | grep -q '"device": "cpu"' \
    && ok "active deployment state: main resolved to $TINY_REV, pid $pid" || bad "state: $st"
  grep -q "vllm-sr-c/d3-tiny revision main resolved to $TINY_REV" "$T/serve.log" && ok "resolution logged" || bad "log: $(cat "$T/serve.log")"
  m=$(curl -s "http://127.0.0.1:$PORT/v1/models")
  echo "$m" | grep -q "\"revision\":\"$TINY_REV\"" && ok "the worker loaded that commit" || bad "/v1/models: $m"
  r=$(curl -s "http://127.0.0.1:$PORT/v1/decisions" -d '{"state":"Write a Python function.","questions":{"domain":{"type":"choice","instructions":"Which domain?","criteria":{"code":"Programming","other":"Anything else"}}}}')
  echo "$r" | grep -q '"choice":"' && ok "a request answered" || bad "decision: $r"
  out=$("$SR" status 2>&1)
  echo "$out" | grep -q "^revision: $TINY_REV (requested main)" && echo "$out" | grep -q "^pid: *$pid (running)" \
    && ok "status" || bad "status: $out"
  out=$("$SR" stop 2>&1)
  echo "$out" | grep -q "stopped pid $pid" && ! kill -0 $pid 2>/dev/null && ok "stop: SIGTERM ended the worker" || { kill -0 $pid 2>/dev/null && sleep 1; kill -0 $pid 2>/dev/null && bad "stop: $out"; }
  wait $pid 2>/dev/null
  out=$("$SR" status 2>&1); [ $? = 1 ] && echo "$out" | grep -q 'no active deployment' && ok "status after stop" || bad "status after stop: $out"
else
  bad "serve --engine did not become ready: $(cat "$T/serve.log")"
fi
exit $fail
