#!/bin/bash
# tools/gpu/vela2_serve_check.sh: `vllm-srun serve` on a Vela 2.0 decoder fixture on the GPU
# (issue 23; the CPU run is tests/sh/vela2_serve.sh).
#   here:               tools/gpu/worker_run.sh build      (-> .gpuw/vllm-srun; carry .gpuw)
#   on the GPU machine: bash tools/gpu/vela2_serve_check.sh  (repository root)
# For the tiny and the 0.8B-shaped lite fixtures: the worker on $DEVICE (default cuda:0) answers
# a /v1/decisions body with every question type and a /v1/classify body (pii and halu heads) with
# the same bytes `vllm-srun decide --device $DEVICE` gives (same device, same kernels); a small
# request sent while a 64-span-question request runs is answered first; timings of both go to
# $OUT/vela2_serve.log. Exit 0 when every check passed.
# Dry run on the CPU: DEVICE=cpu SIZES=tiny B=build-hb/vllm-srun OUT=/tmp/o bash tools/gpu/vela2_serve_check.sh
set -u
cd "$(dirname "$0")/../.."
if [ -z "${B:-}" ]; then
  . tools/gpu/cuda_env.sh   # $OUT, and cuBLASLt 13 on the library path
  export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  B=$PWD/.gpuw/vllm-srun
fi
B=$(readlink -f "$B")
OUT=${OUT:-/tmp/vela2-serve-out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda:0}
export VSR_NO_PROGRESS=1
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
L=$OUT/vela2_serve.log
fail=0
ok() { echo "ok   $*" | tee -a "$L"; }
bad() { echo "FAIL $*" | tee -a "$L"; fail=1; }
PORT=$((20000 + RANDOM % 20000)); URL=http://127.0.0.1:$PORT

python3 - "$T" <<'PY'
import json, sys
T = sys.argv[1]
state = {"request": "Hi, I'm Tom Baker (tom.baker@example.com). What is the maximum daily dose of paracetamol for an adult?",
         "source": "For adults, the maximum dose of paracetamol is 4 grams in 24 hours.",
         "answer": "Adults can take up to 6 grams of paracetamol in 24 hours."}
qs = {"pii": {"preset": "pii", "over": "request"}, "halu": {"preset": "halu"},
      "places": {"type": "span", "instructions": "Which spans name a city?", "labels": [{"key": "city", "description": "a city name"}],
                 "threshold": 0.5, "head": "broad", "over": "request"},
      "domain": {"type": "choice", "instructions": "Which domain?", "criteria": {"health": "Health", "code": "Code"}},
      "ok": {"type": "noul", "instructions": "Is the answer correct?"},
      "level": {"type": "score", "instructions": "How hard?", "criteria": ["easy", "mid", "hard"]},
      "topics": {"type": "set", "instructions": "Topics?", "criteria": {"dose": "dosage", "pii": "personal data"}}}
json.dump({"state": state, "questions": qs}, open(f"{T}/all.json", "w"))
long = " ".join(f"Mr Tom Baker{i} wrote to tom{i}@example.com from Paris on day {i}." for i in range(300))
json.dump({"state": {"request": state["request"]}, "questions": {"pii": {"preset": "pii", "over": "request"}},
           "states": {"long": {"state": {"request": long}, "questions": {"pii": {"preset": "pii", "over": "request"}}},
                      "g": {"state": state, "questions": {"halu": {"preset": "halu"}}}}}, open(f"{T}/c_dec.json", "w"))
json.dump({"input": [state["request"], long]}, open(f"{T}/c_pii.json", "w"))
json.dump({"head": "halu", "input": [{"context": state["source"], "question": state["request"], "answer": state["answer"]}]},
          open(f"{T}/c_halu.json", "w"))
json.dump({"state": " ".join([state["request"]] * 8), "questions": {f"q{i}": {"type": "span", "instructions": f"Which spans are kind {i}?",
                                                  "criteria": {"a": "thing a", "b": "thing b"}} for i in range(64)}},
          open(f"{T}/big.json", "w"))
json.dump({"state": "Ann lives in Oslo.", "questions": {"pii": {"preset": "pii"}}}, open(f"{T}/small.json", "w"))
PY

for size in ${SIZES:-tiny lite}; do
  P=$T/v2-$size
  "$B" fixture "$P" --family vela2 --size $size >/dev/null 2>&1 || { bad "$size: fixture"; continue; }
  "$B" serve "$P" --device "$DEVICE" --port $PORT --log-level warn 2>>"$OUT/vela2_serve_worker.log" &
  pid=$!
  up=0
  for _ in $(seq 1 1200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && { up=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  [ $up = 1 ] || { bad "$size: worker not ready on $DEVICE"; tail -5 "$OUT/vela2_serve_worker.log"; continue; }
  curl -s "$URL/v1/models" > "$OUT/models-$size.json"
  for b in all c_dec small; do
    curl -s "$URL/v1/decisions" --data-binary @"$T/$b.json" > "$T/$b.http"
    "$B" decide "$P" --device "$DEVICE" --request "$T/$b.json" 2>>"$L" > "$T/$b.dec"
    cmp -s <(cat "$T/$b.http"; echo) "$T/$b.dec" && ok "$size on $DEVICE: /v1/decisions $b = decide" \
      || { bad "$size on $DEVICE: /v1/decisions $b differs from decide"; cp "$T/$b.http" "$OUT/$size-$b.http"; cp "$T/$b.dec" "$OUT/$size-$b.dec"; }
  done
  for b in c_pii c_halu; do curl -s "$URL/v1/classify" --data-binary @"$T/$b.json" > "$T/$b.http"; done
  cp "$T/c_pii.http" "$OUT/classify-$size.json"
  python3 - "$T" <<'PY' && ok "$size on $DEVICE: /v1/classify spans and thresholds = decide's pii/halu answers (a windowed input included)" || bad "$size: classify"
import json, sys
T = sys.argv[1]
d = json.load(open(f"{T}/c_dec.dec")); c = json.load(open(f"{T}/c_pii.http")); h = json.load(open(f"{T}/c_halu.http"))
assert c["kind"] == "token", c
assert c["results"][0]["spans"] == d["spans"]["pii"] and c["results"][0]["threshold"] == d["thresholds"]["pii"]
assert c["results"][1]["spans"] == d["states"]["long"]["spans"]["pii"] and c["results"][1]["input"]["windows"] > 1, c["results"][1]["input"]
assert h["results"][0]["spans"] == d["states"]["g"]["spans"]["halu"]
PY
  python3 - "$URL" "$T" <<'PY' 2>&1 | tee -a "$L"
import sys, threading, time, urllib.request
URL, T = sys.argv[1], sys.argv[2]
def post(b):
    return urllib.request.urlopen(urllib.request.Request(URL + "/v1/decisions", data=b), timeout=600).read()
big, small = open(f"{T}/big.json", "rb").read(), open(f"{T}/small.json", "rb").read()
t0 = time.monotonic(); post(big); alone = time.monotonic() - t0
r = {}
th = threading.Thread(target=lambda: (post(big), r.__setitem__("big", time.monotonic())))
t0 = time.monotonic(); th.start(); time.sleep(min(0.05, alone / 4))
post(small); ts = time.monotonic(); th.join()
print(f"64-span request alone {alone:.3f} s; with it running, a small request answered after {ts - t0:.3f} s, the large after {r['big'] - t0:.3f} s")
print("ok   small first" if ts < r["big"] else "FAIL the small request waited for the large one")
PY
  grep -q "^FAIL the small" "$L" && fail=1
  kill -TERM $pid; wait $pid || bad "$size: SIGTERM exit status"
done
echo "vela2_serve_check: $([ $fail = 0 ] && echo passed || echo FAILED)" | tee -a "$L"
exit $fail
