#!/usr/bin/env bash
# The scheduler (issue #25), on a real worker over HTTP:
#  - fair: a one-question request sent while a 4,096-question request runs is answered while
#    the large one is still running (it waits for at most one forward of it, not all of them);
#  - deadlines between forwards: a large request with a short deadline keeps the answers of the
#    forwards that ran and answers the rest deadline_exceeded;
#  - the client going away cancels the remaining forwards (the worker goes idle at once);
#  - the `batching` profile: listed in /v1/models with its numerics; requests that ask for it
#    share forwards with other requests (rows per forward > 8 in /metrics) and answer within
#    0.02 of `exact`; `exact` on the same worker stays identical to the request sent alone;
#  - every option and request refusal with its message.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:?}
vsr_tmpdir
export HF_HUB_CACHE=$T/store

"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny >/dev/null || { echo "FAIL install fixture"; exit 1; }
PORT=$(vsr_free_port)
URL=http://127.0.0.1:$PORT
start() { vsr_start_worker vllm-sr-c/d3-tiny --device cpu --port "$PORT" --threads 1 --log-level warn "$@"; } # [extra args]; sets pid
stop() { vsr_stop_worker; }

# ---- option refusals ----
out=$("$BIN" serve vllm-sr-c/d3-tiny --device cpu --profile fast 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "unknown profile 'fast'; available: batching, exact" && ok "--profile fast refused" || bad "--profile fast: $rc $out"
out=$("$BIN" serve vllm-sr-c/d3-tiny --device cpu --batch-wait-ms -1 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "batch-wait-ms must be a number of milliseconds from 0 to 10000; got '-1'" && ok "--batch-wait-ms -1 refused" || bad "--batch-wait-ms: $rc $out"
out=$("$BIN" serve vllm-sr-c/d3-tiny --device cpu --max-batch-tokens 4 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "max-batch-tokens" && ok "--max-batch-tokens 4 refused" || bad "--max-batch-tokens: $rc $out"
out=$("$BIN" serve vllm-sr-c/d3-tiny --device cpu --warmup-tokens -1 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "warmup-tokens must be an integer from 0 to" && ok "--warmup-tokens -1 refused" || bad "--warmup-tokens: $rc $out"

python3 - "$T" <<'EOF'
import json, sys
T = sys.argv[1]
qs = lambda n, p="q": {f"{p}{i}": {"type": "noul", "instructions": f"Is this about topic {i}?"} for i in range(n)}
big = {"state": "a long shared state " * 20, "questions": qs(64),
       "states": {f"s{k}": {"state": f"state number {k} " * 10, "questions": qs(64)} for k in range(63)}}
json.dump(big, open(f"{T}/big.json", "w"))
json.dump({"state": "hello", "questions": qs(1)}, open(f"{T}/small.json", "w"))
json.dump(dict(big, options={"profile": "batching"}), open(f"{T}/bigb.json", "w"))
json.dump({"state": "hello", "questions": qs(1), "options": {"profile": "batching"}}, open(f"{T}/smallb.json", "w"))
dl = {"state": "x " * 50, "questions": qs(256), "options": {"deadline_ms": 150},
      "states": {f"s{k}": {"state": f"y{k} " * 50, "questions": qs(256)} for k in range(7)}}
json.dump(dl, open(f"{T}/deadline.json", "w"))
EOF

# fair TAG LABEL: the 4,096-question request $T/big$TAG.json in the background, then 0.5 s later the
# one-question $T/small$TAG.json: the small one is answered while the large one still runs, and its
# queue time is well under the large one's whole time (one forward of it, not all of them).
# Leaves $T/small$TAG.out (the small answer) and $T/big$TAG.{out,code}.
fair() {
  curl -s -o "$T/big$1.out" -w '%{http_code} %{time_total}\n' "$URL/v1/decisions" -d @"$T/big$1.json" > "$T/big$1.code" &
  local bigpid=$!
  sleep 0.5
  curl -s -D "$T/small$1.h" -o "$T/small$1.out" "$URL/v1/decisions" -d @"$T/small$1.json"
  if kill -0 $bigpid 2>/dev/null; then
    grep -q '"noul"' "$T/small$1.out" && ok "$2a 1-question request is answered while a 4,096-question request runs ($(grep -i server-timing "$T/small$1.h" | tr -d '\r'))" || bad "$2small answer: $(cat "$T/small$1.out")"
  else
    bad "$2the 4,096-question request finished before the small one was answered ($(cat "$T/big$1.code"))"
  fi
  wait $bigpid
  python3 - "$T/small$1.h" "$T/big$1.code" <<'EOF2' && ok "$2the small request's queue is a fraction of the large one's time" || bad "$2the small request waited for the large one ($(grep -i server-timing "$T/small$1.h" | tr -d '\r'); large: $(cat "$T/big$1.code"))"
import re, sys
q = float(re.search(r"queue;dur=([0-9.]+)", open(sys.argv[1]).read()).group(1))
big_ms = float(open(sys.argv[2]).read().split()[1]) * 1000
sys.exit(0 if q < big_ms / 4 else 1)
EOF2
}

# ---- fairness: the small request does not wait for the large one ----
start || { bad "worker did not start"; exit 1; }
fair "" ""
small=$(cat "$T/small.out")
grep -q '^200' "$T/big.code" && python3 -c "
import json,sys; r=json.load(open('$T/big.out'))
n=len(r['answers'])+sum(len(s['answers']) for s in r['states'].values())
ok=all('noul' in a for a in r['answers'].values()) and all('noul' in a for s in r['states'].values() for a in s['answers'].values())
sys.exit(0 if n==4096 and ok else 1)" && ok "the large request is answered in full afterwards ($(cat "$T/big.code"))" || bad "large request: $(head -c 300 "$T/big.out")"
alone=$(curl -s "$URL/v1/decisions" -d @"$T/small.json")
[ "$alone" = "$small" ] && ok "the small answer equals the request sent alone" || bad "small answer differs when interleaved"

# ---- deadlines between forwards: the answered part is kept ----
curl -s "$URL/v1/decisions" -d @"$T/deadline.json" > "$T/dl.out"
python3 - "$T/dl.out" <<'EOF' && ok "deadline_ms 150 on 2,048 questions: $(cat "$T/dl.sum")" || bad "deadline: $(head -c 300 "$T/dl.out")"
import json, sys, os
r = json.load(open(sys.argv[1]))
parts = [r["answers"]] + [r["states"][f"s{k}"]["answers"] for k in range(7)]
# the rows run in request order: main, then s0..s6; the first forwards ran, the rest were dropped
order = [("noul" in p[f"q{i}"]) for p in parts for i in range(256)]
late = sum(p[f"q{i}"].get("error") == "deadline_exceeded" for p in parts for i in range(256))
done = sum(order)
first_late = order.index(False) if False in order else len(order)
open(os.path.join(os.path.dirname(sys.argv[1]), "dl.sum"), "w").write(f"{done} answered, {late} deadline_exceeded")
sys.exit(0 if done >= 8 and late > 0 and done + late == 2048 and not any(order[first_late:]) else 1)
EOF
curl -s "$URL/metrics" | grep -q '^vllm_srun_deadline_dropped_questions_total [1-9]' && ok "dropped questions counted" || bad "dropped not counted"

# ---- a client that goes away cancels the remaining forwards ----
f0=$(curl -s "$URL/metrics" | awk '/^vllm_srun_forward_duration_seconds_count/{print $2}')
curl -s -m 0.5 "$URL/v1/decisions" -d @"$T/big.json" >/dev/null
sleep 0.5
f1=$(curl -s "$URL/metrics" | awk '/^vllm_srun_forward_duration_seconds_count/{print $2}')
sleep 0.5
f2=$(curl -s "$URL/metrics" | awk '/^vllm_srun_forward_duration_seconds_count/{print $2}')
[ "$f1" = "$f2" ] && [ $((f1 - f0)) -lt 512 ] && ok "a client gone: its remaining forwards cancelled ($((f1 - f0)) of 512 ran)" || bad "cancel: forwards $f0 $f1 $f2"

# ---- exact-only worker refuses the batching profile by name ----
r=$(curl -s "$URL/v1/decisions" -d '{"state":"hi","questions":{"v":{"type":"noul","instructions":"ok?"}},"options":{"profile":"batching"}}')
echo "$r" | grep -q "options.profile must be one of \['exact'\]" && ok "batching on an exact worker -> 400" || bad "profile refusal: $r"
stop

# ---- the batching profile ----
start --profile batching --batch-wait-ms 20 || { bad "batching worker did not start"; exit 1; }
m=$(curl -s "$URL/v1/models")
echo "$m" | python3 -c "
import json,sys; c=json.load(sys.stdin)['data'][0]; p={x['name']:x['numerics'] for x in c['profiles']}
sys.exit(0 if c['profile']=='batching' and p=={'exact':'exact','batching':'approximate'} else 1)" \
  && ok "/v1/models lists exact and batching with their numerics" || bad "profiles: $m"
r=$(curl -s "$URL/v1/decisions" -d '{"state":"hi","questions":{"v":{"type":"noul","instructions":"ok?"}},"options":{"profile":"fast"}}')
echo "$r" | grep -q "options.profile must be one of \['batching', 'exact'\]" && ok "an unknown request profile -> 400 naming both" || bad "profile refusal: $r"
python3 - "$URL" "$REPO/tests/data/server/mixed.jsonl" <<'EOF' > "$T/batch.sum" && ok "batching: $(cat "$T/batch.sum")" || bad "batching: $(cat "$T/batch.sum")"
import json, sys, threading, urllib.request
url, path = sys.argv[1], sys.argv[2]
reqs = [json.loads(l) for l in open(path) if l.strip()][:48]
def post(body):
    r = urllib.request.Request(url + "/v1/decisions", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=120))
def with_profile(b, p):
    b = json.loads(json.dumps(b)); b.setdefault("options", {})["profile"] = p; b["options"].pop("deadline_ms", None); return b
exact = [post(with_profile(b, "exact")) for b in reqs]
got = [None] * len(reqs)
def worker(i): got[i] = post(with_profile(reqs[i], "batching"))
ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(reqs))]
[t.start() for t in ts]; [t.join() for t in ts]
def nums(x, out):
    if isinstance(x, dict):
        for k, v in sorted(x.items()):
            if k not in ("confidence",): nums(v, out)
    elif isinstance(x, (int, float)) and not isinstance(x, bool): out.append(float(x))
worst = 0.0
for e, g in zip(exact, got):
    a, b = [], []
    nums(e.get("answers"), a); nums(g.get("answers"), b)
    if len(a) != len(b): print("answer shapes differ"); sys.exit(1)
    worst = max([worst] + [abs(x - y) for x, y in zip(a, b)])
exact2 = [post(with_profile(b, "exact")) for b in reqs[:8]]
same = all(x == y for x, y in zip(exact, exact2))
print(f"{len(reqs)} concurrent requests, worst |dp| against exact {worst:.2e}; exact unchanged: {same}")
sys.exit(0 if worst <= 0.02 and same else 1)
EOF
# fairness under batching: the rows of the job whose turn it is come first, so the small request's
# row is not sorted behind the large one's longer rows
fair b "batching: "
grep -q '^200' "$T/bigb.code" && ok "batching: the large request is answered in full afterwards ($(cat "$T/bigb.code"))" || bad "batching large request: $(head -c 300 "$T/bigb.out")"
# at most 128 rows per coalesced forward (the CUDA backend's sequences per call; 64 clients once
# packed 195 rows and the H200 refused the forward): 80 concurrent requests of 8 questions
python3 - "$URL" <<'EOF' || bad "80 concurrent batching requests did not all answer"
import json, sys, threading, urllib.request
url = sys.argv[1]
def post(i):
    qs = {f"q{k}": {"type": "noul", "instructions": f"Is claim {k} of message {i} polite?"} for k in range(8)}
    b = {"state": f"message {i}: thanks for the quick reply", "questions": qs, "options": {"profile": "batching"}}
    r = urllib.request.Request(url + "/v1/decisions", data=json.dumps(b).encode(), headers={"content-type": "application/json"})
    json.load(urllib.request.urlopen(r, timeout=120))
ts = [threading.Thread(target=post, args=(i,)) for i in range(80)]
[t.start() for t in ts]; [t.join() for t in ts]
EOF
met=$(curl -s "$URL/metrics")
big=$(echo "$met" | awk '/^vllm_srun_batch_rows_bucket\{le="8"\}/{a=$2} /^vllm_srun_batch_rows_count/{b=$2} END{print b-a}')

[ "${big:-0}" -gt 0 ] && ok "$big forwards carried more than 8 rows (rows of several requests)" || bad "no coalesced forward: $(echo "$met" | grep batch_rows)"
over=$(echo "$met" | awk '/^vllm_srun_batch_rows_bucket\{le="128"\}/{a=$2} /^vllm_srun_batch_rows_count/{b=$2} END{print b-a}')
wide=$(echo "$met" | awk '/^vllm_srun_batch_rows_bucket\{le="64"\}/{a=$2} /^vllm_srun_batch_rows_count/{b=$2} END{print b-a}')
[ "${over:-1}" = 0 ] && [ "${wide:-0}" -gt 0 ] && ok "no coalesced forward above 128 rows ($wide carried 65-128)" || bad "rows per forward: over 128: $over, 65-128: $wide"
echo "$met" | grep -q 'profile="batching"' && ok "/metrics model_info names the profile" || bad "metrics profile"
stop

# ---- the batching window is held only while requests come together ----
# A lone request on an idle worker (nothing else waiting, the last forward not shared) runs at once,
# however long --batch-wait-ms; a burst still shares forwards.
start --profile batching --batch-wait-ms 3000 || { bad "batching worker (3 s window) did not start"; exit 1; }
lone='{"state":"hi","questions":{"v":{"type":"noul","instructions":"ok?"}},"options":{"profile":"batching"}}'
for k in 1 2; do
  q=$(curl -s -D - -o /dev/null "$URL/v1/decisions" -d "$lone" | tr -d '\r' | sed -n 's/.*queue;dur=\([0-9.]*\).*/\1/p')
  python3 -c "import sys; sys.exit(0 if float('${q:-9999}') < 1500 else 1)" \
    && ok "lone batching request $k ran at once under a 3 s window (queue ${q} ms)" || bad "lone request $k waited the window: queue ${q:-?} ms"
done
f0=$(curl -s "$URL/metrics" | awk '/^vllm_srun_batch_rows_count/{print $2}')
# a 128-question request (one forward, run at once), and during it 7 one-question requests: those wait
# the window together and share one forward
python3 - "$URL" <<'EOF2' || bad "the burst's batching requests did not all answer"
import json, sys, threading, time, urllib.request
url = sys.argv[1]
def post(i, n):
    qs = {f"q{k}": {"type": "noul", "instructions": f"Is claim {k} polite?"} for k in range(n)}
    b = {"state": f"message {i}", "questions": qs, "options": {"profile": "batching"}}
    r = urllib.request.Request(url + "/v1/decisions", data=json.dumps(b).encode(), headers={"content-type": "application/json"})
    json.load(urllib.request.urlopen(r, timeout=60))
first = threading.Thread(target=post, args=(0, 128)); first.start()
time.sleep(0.05)
ts = [threading.Thread(target=post, args=(i, 1)) for i in range(1, 8)]
[t.start() for t in ts]; [t.join() for t in ts]; first.join()
EOF2
f1=$(curl -s "$URL/metrics" | awk '/^vllm_srun_batch_rows_count/{print $2}')
[ $((f1 - f0)) -le 3 ] && ok "a burst: 1 + 7 requests in $((f1 - f0)) forwards under the window" || bad "a burst of 1 + 7 requests took $((f1 - f0)) forwards"
# the last forward was shared (the 7), so the window is held again; but a request whose rows alone fill
# a forward (128 rows, the most a forward carries) does not wait for it
full=$(python3 -c "
import json; print(json.dumps({'state': 'full', 'options': {'profile': 'batching'},
  'questions': {f'q{k}': {'type': 'noul', 'instructions': f'Is claim {k} polite?'} for k in range(128)}}))")
q=$(curl -s -D - -o /dev/null "$URL/v1/decisions" -d "$full" | tr -d '\r' | sed -n 's/.*queue;dur=\([0-9.]*\).*/\1/p')
python3 -c "import sys; sys.exit(0 if float('${q:-9999}') < 1500 else 1)" \
  && ok "a request that fills a forward is not held by the window (queue ${q} ms)" || bad "a full forward waited the window: queue ${q:-?} ms"
stop
exit $fail
