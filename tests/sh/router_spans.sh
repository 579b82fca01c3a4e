#!/usr/bin/env bash
# Issue 23's proof, end to end: "a pii rule routes a request that contains an e-mail address
# differently from one that does not". `vllm-sr serve --config` in the seed's shape: a MANAGED
# Vela 2.0 worker (`vllm-srun serve` of a vela2 package) bound as {pii: spans, hallucination:
# spans}, a managed Decision 3.0 worker as the decision model (the built-in d3-tiny), and two real
# OpenAI-compatible upstreams (tests/tools/openai_upstream). A rule on {signal: pii} sends a
# request whose text the span deployment marks as PII to model `private` (upstream a); any other
# goes to the default `public` (upstream b).
#
# Why the package's PII threshold is set here, and how it was chosen (never assumed):
# the fixture's weights are seeded random numbers, not a trained PII tagger. At the calibration's
# own length-rule threshold (0.75 for these short texts) it marks nearly every word of ANY text
# as some PII label (see the golden record in data/golden_answers.json), so the preset question
# alone cannot tell the two prompts apart. What it does do, deterministically: on the family's own
# golden text, "Hi, I'm Tom Baker (tom.baker@example.com). What is ...", the word with the
# highest probability is the e-mail address (0.99973 on the CPU), above every other word of that
# text (next: "What", 0.99919) and above every word of the same text without the address
# (highest 0.99767). So this script
#   1. asks `vllm-srun decide` (the same code the worker serves) for the pii preset on both
#      prompts: the highest word probability of each (answers.pii.noul), and by bisection on the
#      question's threshold the lowest threshold at which the e-mail address is the ONLY span of
#      the first prompt;
#   2. writes a copy of the fixture whose calibration.json puts the PII length rule at T, the
#      midpoint between that bound and the e-mail's probability (its manifest and SHA256SUMS
#      rewritten: a package of its own, golden `unverified`, as it is not the built-in's bytes);
#   3. checks with `vllm-srun decide` on that copy, asking the preset with NO threshold (as the
#      router asks it), that the first prompt's only pii span is the e-mail address and the second
#      prompt has none; only then
#   4. routes both prompts through the router and checks the x-vsr-* headers and the upstream's
#      own answer.
# The rule therefore routes on what the package answers at its calibrated threshold, the
# e-mail address being the span it reports. A trained package needs no step 2.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:?}
vsr_router_tools
vsr_tmpdir
vsr_on_exit() { [ -n "${RPID:-}" ] && kill -9 "$RPID" 2>/dev/null; }
export VSR_NO_PROGRESS=1
S=$T/store

EMAIL="tom.baker@example.com"
P_MAIL="Hi, I'm Tom Baker ($EMAIL). What is the maximum daily dose of paracetamol for an adult?"
P_PLAIN="Hi, I'm Tom Baker. What is the maximum daily dose of paracetamol for an adult?"

"$BIN" fixture "$T/v2" --family vela2 --size tiny >/dev/null 2>&1 || { echo "FAIL vela2 fixture"; exit 1; }
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny --store "$S" >/dev/null 2>&1 || { echo "FAIL install d3-tiny"; exit 1; }

# ---- 1. what the package answers (vllm-srun decide) ----
pii() { # package, prompt, threshold or "" -> the response
  python3 -c 'import json,sys
q={"preset":"pii","over":"request"}
if sys.argv[2]: q["threshold"]=float(sys.argv[2])
print(json.dumps({"state":{"request":sys.argv[1]},"questions":{"pii":q}}))' "$2" "$3" > "$T/q.json"
  "$BIN" decide "$1" --device cpu --request "$T/q.json" 2>/dev/null
}
noul() { python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["answers"]["pii"]["noul"]))'; }
only_email() { # response on stdin: 0 when the pii spans are exactly the e-mail address
  python3 -c 'import json,sys
s=json.load(sys.stdin)["spans"]["pii"]
sys.exit(0 if [x["text"] for x in s]==[sys.argv[1]] else 1)' "$EMAIL"
}
N_MAIL=$(pii "$T/v2" "$P_MAIL" "" | noul)
N_PLAIN=$(pii "$T/v2" "$P_PLAIN" "" | noul)
python3 -c "import sys; sys.exit(0 if $N_MAIL > $N_PLAIN else 1)" \
  && ok "decide: highest pii word probability $N_MAIL with the e-mail, $N_PLAIN without" \
  || { bad "the fixture does not rank the e-mail prompt higher ($N_MAIL vs $N_PLAIN)"; exit 1; }
pii "$T/v2" "$P_MAIL" "$N_PLAIN" | only_email && TOP_MAIL=1 || TOP_MAIL=0
# bisection: the lowest threshold in [N_PLAIN, N_MAIL) at which the e-mail is the only span
LO=$N_PLAIN; HI=$N_MAIL
if [ $TOP_MAIL = 0 ]; then
  for _ in $(seq 16); do
    MID=$(python3 -c "print(repr(($LO + $HI) / 2))")
    if pii "$T/v2" "$P_MAIL" "$MID" | only_email; then HI=$MID; else LO=$MID; fi
  done
fi
THR=$(python3 -c "print('%.9f' % (($LO + $N_MAIL) / 2))")
pii "$T/v2" "$P_MAIL" "$THR" | only_email && [ "$(pii "$T/v2" "$P_PLAIN" "$THR" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["spans"]["pii"]))')" = 0 ] \
  && ok "at threshold $THR the only pii span with the e-mail is '$EMAIL'; none without (bound $LO)" \
  || { bad "threshold $THR does not separate the prompts"; exit 1; }

# ---- 2. the package with its PII length rule at THR ----
cp -r "$T/v2" "$T/v2pii"
python3 - "$T/v2pii" "$THR" <<'PY'
import hashlib, json, os, sys
d, t = sys.argv[1], float(sys.argv[2])
p = lambda f: os.path.join(d, f)
cal = json.load(open(p("calibration.json")))
for a in cal["pii_length_rule"]["anchors"]:
    a["threshold"] = t
json.dump(cal, open(p("calibration.json"), "w"), indent=2, sort_keys=True)
sha = lambda f: hashlib.sha256(open(p(f), "rb").read()).hexdigest()
m = json.load(open(p("MODEL_MANIFEST.json")))
m["files_sha256"]["calibration.json"] = sha("calibration.json")
json.dump(m, open(p("MODEL_MANIFEST.json"), "w"), indent=2, sort_keys=True)
names = sorted(f for f in os.listdir(d) if f != "SHA256SUMS")
open(p("SHA256SUMS"), "w").write("".join(f"{sha(f)}  {f}\n" for f in names))
PY

# ---- 3. the preset with no threshold, as the router asks it, on that package ----
R_MAIL=$(pii "$T/v2pii" "$P_MAIL" "")
R_PLAIN=$(pii "$T/v2pii" "$P_PLAIN" "")
echo "$R_MAIL" | only_email && echo "$R_PLAIN" | python3 -c 'import json,sys
d=json.load(sys.stdin); assert d["spans"]["pii"]==[], d["spans"]; assert abs(d["thresholds"]["pii"]-float(sys.argv[1]))<1e-9' "$THR" \
  && ok "the calibrated package: pii spans [$EMAIL] with the e-mail, [] without (threshold from calibration.json)" \
  || { bad "calibrated package: $R_MAIL / $R_PLAIN"; exit 1; }

# ---- 4. the router ----
vsr_start_upstreams "a b"
PA=$(cat "$T/port-a"); PB=$(cat "$T/port-b")
RP=$(vsr_free_port)
R=http://127.0.0.1:$RP
config() { # file, span deployment's artifact, pii binding
  cat > "$1" <<EOF
global:
  model_catalog:
    signal_timeout_ms: 20000
    deployments:
      d3:
        provider: model_runtime
        artifact: vllm-sr-c/d3-tiny
        device: cpu
      spans:
        provider: model_runtime
        artifact: $2
        device: cpu
    bindings:
      pii: $3
      hallucination: $3
    system:
      decision_model: {deployment: d3}
providers:
  models:
    - name: private
      backend_refs:
        - {name: a, endpoint: 'http://127.0.0.1:$PA'}
    - name: public
      backend_refs:
        - {name: b, endpoint: 'http://127.0.0.1:$PB'}
  defaults:
    default_model: public
routing:
  decisions:
    - name: pii-private
      priority: 100
      rules:
        operator: AND
        on_unknown: fail_request
        conditions:
          - signal: pii
      modelRefs: [{model: private}]
EOF
}
# the same bindings on the Decision 3.0 deployment are refused at startup, with the issue's message
config "$T/bad.yaml" "$T/v2pii" d3
out=$("$SR" serve --config "$T/bad.yaml" --port "$RP" --store "$S" --state-dir "$T/state0" 2>&1); rc=$?
[ $rc != 0 ] && grep -qF 'model capability mismatch: deployment "d3" serves vllm-sr-c/d3-tiny, which has no classify head and no ready-made pii question; bind a token head or a model that defines the pii question, such as Vela 2.0' <<<"$out" \
  && ok "pii bound to Decision 3.0: refused with the issue's message" || bad "d3 binding: $rc $out"

config "$T/r.yaml" "$T/v2pii" spans
"$SR" serve --config "$T/r.yaml" --port "$RP" --store "$S" --state-dir "$T/state" --seed 7 --log-level info \
  > "$T/router.log" 2>&1 &
RPID=$!
ready() { curl -s "$R/v1/models" | python3 -c 'import json,sys
m={d["id"]: d["ready_replicas"] for d in json.load(sys.stdin)["deployments"]}
sys.exit(0 if m.get("d3") == 1 and m.get("spans") == 1 else 1)' 2>/dev/null; }
for _ in $(seq 600); do ready && break; sleep 0.1; done
ready && ok "two managed workers ready: d3 (decision model) and spans (vela2)" \
  || { bad "workers not ready: $(tail -20 "$T/router.log"; tail -5 "$T"/state/logs/*.log)"; exit 1; }
grep -q -- "serve $T/v2pii --device cpu .*--served-model-name spans" "$T/state/logs/spans-0.log" \
  && ok "the span deployment is a vllm-srun serve of the vela2 package" || bad "spans log: $(head -3 "$T/state/logs/spans-0.log")"
W=$(ls "$T"/state/sockets/spans-*.sock 2>/dev/null | head -1)
g=$(curl -s --unix-socket "$W" http://w/v1/models | python3 -c 'import json,sys
m=json.load(sys.stdin)["data"][0]; print(m.get("family"), m["golden"]["status"])' 2>/dev/null)
[ "$g" = "vela2 unverified" ] && ok "the worker serves family vela2, golden unverified (calibration is not the built-in's)" \
  || bad "worker card: $g"

hdr() { grep -i "^$1:" "$T/h" | head -1 | cut -d' ' -f2- | tr -d '\r'; }
route() { # prompt, route kind, decision ('' for none), model, backend
  body=$(python3 -c 'import json,sys; print(json.dumps({"model":"auto","messages":[{"role":"user","content":sys.argv[1]}]}))' "$1")
  code=$(curl -s -D "$T/h" -o "$T/b" -w '%{http_code}' "$R/v1/chat/completions" -d "$body")
  if [ "$code" = 200 ] && [ "$(hdr x-vsr-route)" = "$2" ] && [ "$(hdr x-vsr-decision)" = "$3" ] \
     && [ "$(hdr x-vsr-model)" = "$4" ] && [ "$(hdr x-vsr-backend)" = "$5" ] && [ "$(hdr x-upstream-backend)" = "$5" ] \
     && grep -q "\"model\":\"$4\"" "$T/b" && grep -qF "[$5] $4: $1" "$T/b"; then
    ok "'$1' -> route $2${3:+ ($3)}, model $4, backend $5 (headers and the upstream's answer)"
  else bad "route '$1' ($code): $(cat "$T/h" "$T/b")"; fi
}
route "$P_MAIL" decision pii-private private a
route "$P_PLAIN" default "" public b
route "$P_MAIL" decision pii-private private a # the same answer again
curl -s "$R/metrics" > "$T/metrics"
python3 - "$T/metrics" <<'PY' && ok "metrics: 3 ok calls to the span deployment, decisions pii-private 2 and (default) 1" \
  || bad "metrics: $(grep -E 'deployment="spans"|decision_matches' "$T/metrics")"
import re, sys
v = {}
for line in open(sys.argv[1]):
    m = re.match(r'^(\w+)\{(.*)\} (\S+)$', line.strip())
    if m:
        v[(m.group(1), m.group(2))] = float(m.group(3))
def get(name, **labels):
    return sum(x for (n, l), x in v.items() if n == name and all(f'{k}="{w}"' in l for k, w in labels.items()))
assert get("vsr_model_runtime_requests_total", deployment="spans", outcome="ok") == 3
assert get("vsr_model_runtime_requests_total", deployment="spans") == 3
assert get("vsr_router_decision_matches_total", decision="pii-private") == 2
assert get("vsr_router_decision_matches_total", decision="(default)") == 1
PY

# decision questions still go to the decision model
code=$(curl -s -D "$T/h" -o "$T/b" -w '%{http_code}' "$R/v1/decisions" \
  -d '{"state":"Fix this segfault in my C code","questions":{"r":{"type":"noul","instructions":"Is it hard?"}}}')
[ "$code" = 200 ] && [ "$(hdr x-vsr-deployment)" = d3 ] && grep -q '"noul"' "$T/b" \
  && ok "/v1/decisions goes to the decision model d3" || bad "/v1/decisions ($code): $(cat "$T/h" "$T/b")"

kill -TERM "$RPID"; wait "$RPID"; rc=$?; RPID=
left=$(pgrep -f "vllm-srun serve .*--store $S" || true)
[ $rc = 0 ] && [ -z "$left" ] && ok "SIGTERM: the router exits 0 and no worker outlives it" || bad "router exit $rc, left: $left"
exit $fail
