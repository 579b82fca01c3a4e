#!/usr/bin/env bash
# The router end to end (issue #21, Done when): `vllm-sr serve --config` starts two MANAGED CPU
# workers (deployment d3: two replicas of the built-in d3-tiny fixture, each a `vllm-srun serve`
# on a Unix socket in the 0700 socket directory) and routes to three real OpenAI-compatible
# upstreams (tests/tools/openai_upstream: a, b and the canary c; real HTTP, real SSE).
#  1. routing by decision: two decisions whose rules differ (a noul threshold set between the
#     decision model's answers to two prompts, and a choice label), so the two prompts go to
#     different models; the x-vsr-* headers and the upstream's own header say so; SSE too;
#  2. under load (clients sending both prompts, plain and streaming, without pause):
#     - one worker is killed with SIGKILL and comes back (restarts counter 1, two ready replicas);
#     - a canary config (weights 90/10) is applied with SIGHUP, then rolled back;
#     - the decision deployment is switched to another package (new workers start, the old
#       ones serve until the new ones are ready, then stop);
#  3. no request is lost: every one is answered 200 (a stream ends with [DONE]) or with an
#     error status and a JSON error message; none fails at the transport level;
#  4. SIGTERM: the router exits 0 and no worker outlives it.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:?}
vsr_router_tools
vsr_tmpdir
vsr_on_exit() { touch "$T/stop"; [ -n "${RPID:-}" ] && kill -9 "$RPID" 2>/dev/null; }
export VSR_NO_PROGRESS=1
STATE=$T/state
S=$T/store

# ---- fixtures: the built-in d3-tiny in the store; a second package (another seed) for the switch ----
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny --store "$S" >/dev/null 2>&1 || { echo "FAIL install d3-tiny"; exit 1; }
"$BIN" fixture "$T/d3-seed1" --family decision3 --size tiny --scheme bf16 --seed 1 >/dev/null 2>&1 \
  || { echo "FAIL fixture seed 1"; exit 1; }

# ---- the upstreams, on free ports ----
vsr_start_upstreams "a b c" --chunks 4 --chunk-delay-ms 20
PA=$(cat "$T/port-a"); PB=$(cat "$T/port-b"); PC=$(cat "$T/port-c")
RP=$(vsr_free_port)
R=http://127.0.0.1:$RP

QR_INS="Does answering this request need multi-step reasoning?"
QD_INS="Which domain does this request belong to?"
config() { # file, threshold, weight a, weight c, d3 artifact
  cat > "$1" <<EOF
global:
  model_catalog:
    deployments:
      d3:
        provider: model_runtime
        artifact: $5
        replicas:
          - {device: cpu}
          - {device: cpu}
    system:
      decision_model: {deployment: d3}
providers:
  models:
    - name: m-a
      backend_refs:
        - {name: a, endpoint: 'http://127.0.0.1:$PA', weight: $3}
        - {name: c, endpoint: 'http://127.0.0.1:$PC', weight: $4}
    - name: m-b
      backend_refs:
        - {name: b, endpoint: 'http://127.0.0.1:$PB', weight: 1}
  defaults:
    default_model: m-b
routing:
  decisions:
    - name: reasoning
      priority: 20
      rules:
        operator: AND
        on_unknown: no_match
        conditions:
          - question: reasoning
            type: noul
            instructions: $QR_INS
            threshold: $2
      modelRefs: [{model: m-a}]
    - name: domain
      priority: 10
      rules:
        operator: AND
        on_unknown: no_match
        conditions:
          - question: domain
            type: choice
            instructions: $QD_INS
            criteria: {code: Programming, other: Anything else}
            label: LABEL
      modelRefs: [{model: m-b}]
EOF
  sed -i "s/label: LABEL/label: ${LABEL:-code}/" "$1"
}
wait_gen() { # generation
  for _ in $(seq 100); do curl -s "$R/health" | grep -q "\"config_generation\":$1[,}]" && return 0; sleep 0.1; done
  return 1
}
ready_replicas() {
  curl -s "$R/v1/models" | python3 -c 'import json,sys
m=json.load(sys.stdin); print([d["ready_replicas"] for d in m["deployments"] if d["id"]=="d3"][0])' 2>/dev/null
}
wait_replicas() { # n, tries of 0.1 s
  for _ in $(seq "${2:-300}"); do [ "$(ready_replicas)" = "$1" ] && return 0; sleep 0.1; done
  return 1
}
metric() { curl -s "$R/metrics" | grep "^$1 " | awk '{print $2}'; }
worker_pids() { pgrep -P "$RPID" -f 'vllm-srun serve' | sort; }

# ---- start: two managed workers ----
config "$T/r.yaml" 0.99 100 0 vllm-sr-c/d3-tiny
"$SR" serve --config "$T/r.yaml" --port "$RP" --store "$S" --state-dir "$STATE" --seed 7 --grace-s 10 \
  --log-level info > "$T/router.log" 2>&1 &
RPID=$!
if wait_replicas 2 600; then ok "two managed workers ready"; else bad "workers not ready: $(tail -20 "$T/router.log")"; exit 1; fi
PIDS0=$(worker_pids)
[ "$(echo "$PIDS0" | wc -l)" = 2 ] && ok "two vllm-srun serve children of the router: $(echo $PIDS0)" || bad "children: $PIDS0"
mode=$(stat -c %a "$STATE/sockets")
nsock=$(find "$STATE/sockets" -name 'd3-r-*.sock' -type s | wc -l)
[ "$mode" = 700 ] && [ "$nsock" = 2 ] && ok "sockets: two in $STATE/sockets (mode $mode)" || bad "socket dir mode $mode, $nsock sockets"
for i in 0 1; do
  grep -q -- "---- vllm-sr: starting replica $i of d3: .* serve vllm-sr-c/d3-tiny --device cpu --store $S --served-model-name d3 --uds $STATE/sockets/d3-r-" \
    "$STATE/logs/d3-$i.log" && ok "replica $i's log names its command" || bad "log $i: $(head -3 "$STATE/logs/d3-$i.log")"
done

# ---- the decision model's answers decide the threshold (read, not assumed) ----
PROMPTS=("Write a Python function that merges two sorted lists." "Fix this segfault in my C code" \
  "What is the capital of France?" "How do I bake bread?" "Tell me a joke about cats." "hello" "Explain quantum physics")
QJSON="{\"reasoning\":{\"type\":\"noul\",\"instructions\":\"$QR_INS\"},\"domain\":{\"type\":\"choice\",\"instructions\":\"$QD_INS\",\"criteria\":{\"code\":\"Programming\",\"other\":\"Anything else\"}}}"
: > "$T/answers"
for p in "${PROMPTS[@]}"; do
  a=$(curl -s "$R/v1/decisions" -d "{\"state\":[{\"role\":\"user\",\"content\":\"$p\"}],\"questions\":$QJSON}")
  echo "$a" | python3 -c 'import json,sys
a=json.load(sys.stdin)["answers"]; print(repr(a["reasoning"]["noul"]), a["domain"]["choice"], sys.argv[1])' "$p" >> "$T/answers" \
    || bad "decision answer for '$p': $a"
done
python3 - "$T/answers" > "$T/pick" <<'EOF'
import sys
rows = []
for line in open(sys.argv[1]):
    v, ch, p = line.rstrip("\n").split(" ", 2)
    rows.append((float(v), ch, p))
rows.sort()
lo, hi = rows[0], rows[-1]
print(hi[2]); print(lo[2]); print("%.6f" % ((lo[0] + hi[0]) / 2)); print(lo[1]); print("%.6f" % (hi[0] - lo[0]))
EOF
HI_P=$(sed -n 1p "$T/pick"); LO_P=$(sed -n 2p "$T/pick"); THR=$(sed -n 3p "$T/pick"); LABEL=$(sed -n 4p "$T/pick"); GAP=$(sed -n 5p "$T/pick")
if python3 -c "import sys; sys.exit(0 if float('$GAP') >= 0.004 else 1)"; then
  ok "answers read: '$HI_P' reasoning higher than '$LO_P' by $GAP; threshold $THR; domain label $LABEL"
else bad "the decision model answers every prompt alike (gap $GAP): $(cat "$T/answers")"; fi
export LABEL
config "$T/r.yaml" "$THR" 100 0 vllm-sr-c/d3-tiny
kill -HUP $RPID; wait_gen 2 || bad "SIGHUP (threshold) not applied: $(tail -3 "$T/router.log")"

# ---- routing by decision ----
body() { printf '{"model":"auto","stream":%s,"messages":[{"role":"user","content":"%s"}]}' "$2" "$1"; }
hdr() { grep -i "^$1:" "$2" | head -1 | cut -d' ' -f2- | tr -d '\r'; }
route_check() { # prompt, decision, model, backend
  code=$(curl -s -D "$T/h" -o "$T/b" -w '%{http_code}' "$R/v1/chat/completions" -d "$(body "$1" false)")
  if [ "$code" = 200 ] && [ "$(hdr x-vsr-route "$T/h")" = decision ] && [ "$(hdr x-vsr-decision "$T/h")" = "$2" ] \
     && [ "$(hdr x-vsr-model "$T/h")" = "$3" ] && [ "$(hdr x-vsr-backend "$T/h")" = "$4" ] \
     && [ "$(hdr x-upstream-backend "$T/h")" = "$4" ] && grep -q "\"model\":\"$3\"" "$T/b" && grep -qF "[$4] $3: $1" "$T/b"; then
    ok "'$1' -> decision $2, model $3, backend $4 (headers and the upstream's answer)"
  else bad "route '$1' ($code): $(cat "$T/h" "$T/b")"; fi
}
route_check "$HI_P" reasoning m-a a
route_check "$LO_P" domain m-b b
curl -s -N -D "$T/h" "$R/v1/chat/completions" -d "$(body "$HI_P" true)" > "$T/sse"
nev=$(grep -c '^data: {' "$T/sse")
[ "$nev" = 6 ] && tail -2 "$T/sse" | grep -q '^data: \[DONE\]' && [ "$(hdr x-vsr-decision "$T/h")" = reasoning ] \
  && hdr content-type "$T/h" | grep -q '^text/event-stream' \
  && ok "SSE by decision: 6 chunks then [DONE] from backend $(hdr x-upstream-backend "$T/h")" || bad "SSE ($nev events): $(cat "$T/h" "$T/sse")"

# ---- load: 6 clients, both prompts, every third request streaming ----
client() { # id
  local i=0 p s code tag
  while [ ! -e "$T/stop" ]; do
    i=$((i + 1))
    if [ $((i % 2)) = 0 ]; then p=$HI_P; tag=hi; else p=$LO_P; tag=lo; fi
    if [ $((i % 3)) = 0 ]; then s=true; else s=false; fi
    local req; req=$(body "$p" $s)
    # every tenth request names a model nobody serves: the error path is part of the load
    if [ $((i % 10)) = 5 ]; then tag=bad; s=false; req='{"model":"nope","messages":[{"role":"user","content":"x"}]}'; fi
    code=$(curl -s -N --max-time 60 -D "$T/c$1.h" -o "$T/c$1.b" -w '%{http_code}' "$R/v1/chat/completions" -d "$req")
    local t; t=$(date +%s%N)
    local dec model be up err=""
    dec=$(hdr x-vsr-decision "$T/c$1.h"); model=$(hdr x-vsr-model "$T/c$1.h"); be=$(hdr x-vsr-backend "$T/c$1.h")
    up=$(hdr x-upstream-backend "$T/c$1.h")
    if [ "$code" = 200 ]; then
      if [ $s = true ]; then tail -2 "$T/c$1.b" | grep -q '^data: \[DONE\]' || err="stream without [DONE]"
      else grep -q '"object":"chat.completion"' "$T/c$1.b" || err="no completion"; fi
      [ -n "$up" ] && [ "$up" = "$be" ] || err="$err; backend header '$be' but upstream '$up'"
    else
      err=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["error"]["message"])' "$T/c$1.b" 2>/dev/null)
      [ -n "$err" ] || err="UNCLEAR: $(head -c 200 "$T/c$1.b")"
      err="ERR $err"
    fi
    echo "$t $1 $code $s ${dec:--} ${model:--} ${be:--} $tag |$err" >> "$T/results"
  done
}
: > "$T/results"
for c in 1 2 3 4 5 6; do client $c & done
CLIENTS=$(jobs -p | tail -6)
sleep 2

# kill a worker mid-load; the supervisor restarts it
victim=$(echo "$PIDS0" | head -1)
kill -9 "$victim"
T_KILL=$(date +%s%N)
for _ in $(seq 300); do [ "$(metric 'vsr_model_runtime_restarts_total{deployment="d3"}')" = 1 ] && break; sleep 0.1; done
if [ "$(metric 'vsr_model_runtime_restarts_total{deployment="d3"}')" = 1 ] && wait_replicas 2 300 \
   && grep -q "deployment d3 replica [01]: worker pid $victim was killed by signal 9 (Killed); restarting in 1.0 s" "$T/router.log"; then
  ok "worker $victim killed under load: restarted after 1.0 s (restarts_total 1, two ready replicas)"
else bad "restart: restarts=$(metric 'vsr_model_runtime_restarts_total{deployment="d3"}') ready=$(ready_replicas): $(grep -i 'd3 replica' "$T/router.log" | tail -5)"; fi
PIDS1=$(worker_pids)
echo "$PIDS1" | grep -qx "$victim" && bad "the killed worker is still listed"
sleep 1

# canary 90/10 under load, then rollback
config "$T/r.yaml" "$THR" 90 10 vllm-sr-c/d3-tiny
kill -HUP $RPID; wait_gen 3 || bad "canary config not applied"
T_CANARY=$(date +%s%N)
nc=0; na=0
for _ in $(seq 100); do
  curl -s -D "$T/h" -o /dev/null "$R/v1/chat/completions" -d "$(body "$HI_P" false)"
  case "$(hdr x-upstream-backend "$T/h")" in a) na=$((na + 1));; c) nc=$((nc + 1));; esac
done
[ $((na + nc)) = 100 ] && [ "$nc" -ge 2 ] && [ "$nc" -le 30 ] && ok "canary 90/10 under load: $nc of 100 m-a requests on c" \
  || bad "canary share: a=$na c=$nc"
config "$T/r.yaml" "$THR" 100 0 vllm-sr-c/d3-tiny
kill -HUP $RPID; wait_gen 4 || bad "rollback not applied"
T_ROLLBACK=$(date +%s%N)
nc=0
for _ in $(seq 20); do
  curl -s -D "$T/h" -o /dev/null "$R/v1/chat/completions" -d "$(body "$HI_P" false)"
  [ "$(hdr x-upstream-backend "$T/h")" = a ] || nc=$((nc + 1))
done
[ $nc = 0 ] && ok "rollback under load: 20 of 20 m-a requests on a" || bad "rollback: $nc of 20 not on a"
[ "$(echo "$PIDS1" | sort)" = "$(worker_pids)" ] && ok "reloads that change only routing keep the same workers" \
  || bad "workers changed by a routing reload: $PIDS1 -> $(worker_pids)"

# switch the decision deployment to another package under load: new workers, the old ones go
config "$T/r.yaml" "$THR" 100 0 "$T/d3-seed1"
kill -HUP $RPID; wait_gen 5 || bad "switch not applied: $(tail -3 "$T/router.log")"
T_SWITCH=$(date +%s%N)
for _ in $(seq 600); do
  now=$(worker_pids)
  gone=1; for p in $PIDS1; do echo "$now" | grep -qx "$p" && gone=0; done
  [ $gone = 1 ] && [ "$(echo "$now" | grep -c .)" = 2 ] && break
  sleep 0.1
done
NEW=$(worker_pids)
if [ $gone = 1 ] && [ "$(echo "$NEW" | grep -c .)" = 2 ] && wait_replicas 2 100 \
   && grep -q 'reload: 0 replica(s) kept, 2 started, 2 retired' "$T/router.log" \
   && [ "$(grep -c 'retired by reload; SIGTERM to worker pid' "$T/router.log")" = 2 ]; then
  ok "switch to $T/d3-seed1 under load: two new workers ($(echo $NEW)), the two old ones stopped after the new were ready"
else bad "switch: old $(echo $PIDS1) now $(echo $NEW): $(grep -E 'reload|retired' "$T/router.log" | tail -5)"; fi
grep -q -- " serve $T/d3-seed1 --device cpu" "$STATE/logs/d3-0.log" && ok "the new replica 0 runs the new package" \
  || bad "log after switch: $(tail -3 "$STATE/logs/d3-0.log")"
sleep 1
touch "$T/stop"
for p in $CLIENTS; do wait "$p"; done

# ---- no request lost ----
total=$(wc -l < "$T/results")
n200=$(awk '$3 == 200' "$T/results" | wc -l)
bad200=$(awk -F'|' '$1 ~ / 200 / && $2 != ""' "$T/results")
transport=$(awk '$3 == "000"' "$T/results")
unclear=$(grep 'UNCLEAR' "$T/results")
nerr=$(awk '$3 != 200 && $3 != "000"' "$T/results" | wc -l)
during_kill=$(awk -v a="$T_KILL" -v b="$T_CANARY" '$1 >= a && $1 < b' "$T/results" | wc -l)
during_switch=$(awk -v a="$T_SWITCH" '$1 >= a' "$T/results" | wc -l)
echo "load: $total requests ($n200 answered 200, $nerr with an error status; $during_kill between the kill and the canary, $during_switch after the switch)"
awk '$3 != 200' "$T/results" | cut -d' ' -f3- | sort | uniq -c | head -10
[ "$total" -ge 60 ] && [ "$during_kill" -ge 5 ] && [ "$during_switch" -ge 5 ] && ok "the load ran through every phase" \
  || bad "too little load: $total requests ($during_kill after the kill, $during_switch after the switch)"
[ -z "$transport" ] && ok "no request failed at the transport level" || bad "transport failures: $(echo "$transport" | head -5)"
[ -z "$bad200" ] && ok "every 200 is a whole answer from the backend the headers name (streams end with [DONE])" \
  || bad "broken 200s: $(echo "$bad200" | head -5)"
[ -z "$unclear" ] && ok "every error status carries a JSON error message ($nerr)" || bad "unclear errors: $(echo "$unclear" | head -5)"
nbad=$(awk '$8 == "bad"' "$T/results" | wc -l)
badok=$(grep -c " bad |ERR model 'nope' is not served by this router" "$T/results")
# (an error on another request is allowed when it carries its message, as checked above;
# the counts say how many there were)
[ "$nbad" -ge 5 ] && [ "$badok" = "$nbad" ] \
  && ok "the $nbad requests for an unknown model got 404 with their message ($((nerr - nbad)) other errors)" \
  || bad "errors: $nbad unknown-model requests, $badok answered as expected, $nerr errors in all"
# routing under load: before the switch, each prompt went to its model (or the default model when
# its signal was unknown: the killed worker's in-flight call)
# fields: time client code stream decision model backend tag |error
wrong=$(awk -v b="$T_SWITCH" '$1 < b && $3 == 200 && (($8 == "hi" && $6 != "m-a" && $5 != "-") || ($8 == "lo" && $6 != "m-b"))' "$T/results" | head -5)
nhi=$(awk -v b="$T_SWITCH" '$1 < b && $3 == 200 && $8 == "hi" && $5 == "reasoning" && $6 == "m-a"' "$T/results" | wc -l)
nlo=$(awk -v b="$T_SWITCH" '$1 < b && $3 == 200 && $8 == "lo" && $5 == "domain" && $6 == "m-b"' "$T/results" | wc -l)
[ -z "$wrong" ] && [ "$nhi" -ge 10 ] && [ "$nlo" -ge 10 ] \
  && ok "under load before the switch: $nhi to reasoning/m-a, $nlo to domain/m-b, none elsewhere but the default model" \
  || bad "routing under load ($nhi, $nlo): $wrong"
can=$(awk -v r="$T_ROLLBACK" -v s="$T_SWITCH" '$1 >= r + 500000000 && $1 < s && $7 == "c"' "$T/results" | head -3)
[ -z "$can" ] && ok "after the rollback, no request reached the canary c" || bad "canary after rollback: $can"

# ---- SIGTERM: the router drains, stops its workers, exits 0 ----
ALL=$(worker_pids)
kill -TERM $RPID
wait $RPID; rc=$?
RPID=
left=""
for p in $ALL; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
[ $rc = 0 ] && [ -z "$left" ] && grep -q 'stopping 2 workers (SIGTERM; SIGKILL after 10.0 s)' "$T/router.log" \
  && ok "SIGTERM: exit 0, both workers stopped" || bad "SIGTERM (rc $rc, left:$left): $(tail -5 "$T/router.log")"
grep -q 'did not stop within' "$T/router.log" && bad "a worker needed SIGKILL: $(grep 'did not stop' "$T/router.log")"
exit $fail
