#!/usr/bin/env bash
# `vllm-srun serve` on a Vela 2.0 decoder fixture (issue 23) as a real process on loopback:
#  - /v1/decisions answers (span with the router and broad heads, the pii/halu/relevance presets,
#    choice, noul, score, set, a failing question, states, a long span target read in windows)
#    are byte-identical to `vllm-srun decide` on the same bodies;
#  - /v1/classify (token kind; heads pii over text and halu over grounded inputs) gives the spans
#    and thresholds of the same preset asked through `vllm-srun decide`; overflow window /
#    truncate / reject; per-input errors;
#  - /v1/models describes the package (family, surfaces, question types, presets, heads, span
#    heads, the exact profile only); /metrics (memory, family, span questions, classify requests);
#  - deadlines between trees: the states whose trees ran keep their answers, the rest answer
#    deadline_exceeded; a client that goes away stops its job;
#  - a small request sent while a large one runs is answered first;
#  - every refusal with its message (bodies, options, heads, inputs, other surfaces, the batching
#    profile and --quantize at startup, /v1/classify on a Decision 3.0 package), the worker
#    serving on after each; SIGTERM exits 0.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
vsr_tmpdir
export HF_HUB_CACHE=$T/store
"$BIN" fixture "$T/v2" --family vela2 --size tiny >/dev/null 2>&1 || { echo "FAIL fixture"; exit 1; }
PORT=$(vsr_free_port)
URL=http://127.0.0.1:$PORT
start() { # start PACKAGE [extra args]; sets pid
  local pkg=$1; shift
  vsr_start_worker "$pkg" --device cpu --port "$PORT" --threads 1 --log-level warn "$@"
}

# ---- startup refusals ----
out=$("$BIN" serve "$T/v2" --device cpu --port "$PORT" --profile batching 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "profile batching applies to Decision 3.0 packages only: $T/v2 is a Vela 2.0 decoder package, whose requests run tree by tree under the exact profile (serve it with --profile exact)" \
  && ok "--profile batching refused for a vela2 package" || bad "--profile batching: $rc $out"
out=$("$BIN" serve "$T/v2" --device cpu --port "$PORT" --quantize fp8-dynamic 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "only Decision 3.0 packages may carry quantized weights; $T/v2 is a vela2 package (serve it in BF16, without --quantize)" \
  && ok "--quantize refused for a vela2 package" || bad "--quantize: $rc $out"

start "$T/v2" || { bad "worker did not become ready"; exit 1; }
ok "vela2 worker ready on $PORT"

# ---- request bodies ----
python3 - "$T" <<'PY'
import json, sys
T = sys.argv[1]
state = {"request": "Hi, I'm Tom Baker (tom.baker@example.com). 東京に住んでいます — see https://example.org/dose).",
         "source": "For adults, the maximum dose of paracetamol is 4 grams in 24 hours.",
         "answer": "Adults can take up to 6 grams of paracetamol in 24 hours 😀."}
qs = {"pii": {"preset": "pii", "over": "request"}, "halu": {"preset": "halu"},
      "places": {"type": "span", "instructions": "Which spans name a city?",
                 "labels": [{"key": "city", "description": "a city name"}], "threshold": 0.5, "head": "broad", "over": "request"},
      "domain": {"type": "choice", "instructions": "Which domain?", "criteria": {"health": "Health", "code": "Code"}},
      "ok": {"type": "noul", "instructions": "Is the answer correct?"},
      "level": {"type": "score", "instructions": "How hard?", "criteria": ["easy", "mid", "hard"]},
      "rel": {"preset": "relevance"},
      "topics": {"type": "set", "instructions": "Topics?", "criteria": {"dose": "dosage", "pii": "personal data"}},
      "bad": {"type": "span", "instructions": "x", "criteria": {"a": "b"}, "threshold": 2}}
json.dump({"state": state, "questions": qs}, open(f"{T}/all.json", "w"), ensure_ascii=False)
long = " ".join(f"Mr Tom Baker{i} wrote to tom{i}@example.com from Paris on day {i}." for i in range(12))
json.dump({"state": {"answer": long, "notes": "a note", "source": "context"},
           "questions": {"win": {"type": "span", "instructions": "Which spans name a person?",
                                 "criteria": {"person": "a person's name"}, "over": "answer", "require_full_input": True},
                         "cut": {"preset": "halu", "overflow": "truncate"},
                         "n": {"type": "noul", "instructions": "Is it long?"}},
           "states": {"second": {"state": "Call Ann at +1 555 0100.", "questions": {"pii": {"preset": "pii"}}},
                      "third": {"state": {"request": "Where?", "notes": "Ann lives in Oslo.", "source": "x"},
                                "questions": {"w": {"type": "span", "instructions": "Places?", "criteria": {"city": "a city"},
                                                    "over": "notes"}}}}},
          open(f"{T}/states.json", "w"), ensure_ascii=False)
# classify bodies and the decisions bodies they stand for
texts = ["Hi, I am Tom Baker (tom.baker@example.com).", "Call Ann at +1 555 0100 or ann@example.org.", long]
g = {"context": "For adults, the maximum dose of paracetamol is 4 grams in 24 hours.", "question": "What is the max dose?",
     "answer": "Adults can take up to 6 grams of paracetamol in 24 hours."}
json.dump({"input": texts + ["  "], "head": "pii"}, open(f"{T}/c_pii.json", "w"))
json.dump({"input": [g], "head": "halu", "options": {"return_meta": True}}, open(f"{T}/c_halu.json", "w"))
json.dump({"input": [texts[2]], "options": {"overflow": "truncate", "threshold": 0.3}}, open(f"{T}/c_trunc.json", "w"))
json.dump({"input": [texts[0], texts[2]], "options": {"overflow": "reject"}}, open(f"{T}/c_reject.json", "w"))
json.dump({"state": {"request": texts[0]}, "questions": {"pii": {"preset": "pii", "over": "request"}},
           "states": {"t1": {"state": {"request": texts[1]}, "questions": {"pii": {"preset": "pii", "over": "request"}}},
                      "t2": {"state": {"request": texts[2]}, "questions": {"pii": {"preset": "pii", "over": "request"}}},
                      "g": {"state": {"request": g["question"], "source": g["context"], "answer": g["answer"]},
                            "questions": {"halu": {"preset": "halu"}}},
                      "tr": {"state": {"request": texts[2]},
                             "questions": {"pii": {"preset": "pii", "over": "request", "overflow": "truncate",
                                                   "threshold": 0.3}}}}},
          open(f"{T}/c_as_decisions.json", "w"))
# a large request (256 span questions, one tree each) and deadline work (40 states of 3 trees)
text = "Hi, I'm Tom Baker (tom.baker@example.com), I live in Paris and call +33 6 12 34 56 78 on Mondays."
json.dump({"state": " ".join([text] * 3), "questions": {f"q{i}": {"type": "span", "instructions": f"Which spans are kind {i}?",
                                                  "criteria": {"a": "thing a", "b": "thing b"}} for i in range(256)}},
          open(f"{T}/big.json", "w"))
json.dump({"state": text, "questions": {"pii": {"preset": "pii"}}, "options": {"deadline_ms": 100},
           "states": {f"s{i}": {"state": f"{text} #{i}", "questions": {f"q{k}": {"type": "span", "instructions": f"Spans {k}?",
                                                                                 "criteria": {"a": "x"}} for k in range(3)}}
                      for i in range(40)}}, open(f"{T}/deadline.json", "w"))
json.dump({"state": "Ann lives in Oslo.", "questions": {"pii": {"preset": "pii"}}}, open(f"{T}/small.json", "w"))
PY

# ---- /v1/decisions over HTTP = vllm-srun decide ----
for b in all states c_as_decisions small; do
  curl -s -D "$T/$b.h" "$URL/v1/decisions" --data-binary @"$T/$b.json" > "$T/$b.http"
  "$BIN" decide "$T/v2" --device cpu --request "$T/$b.json" 2>"$T/decide.err" > "$T/$b.dec" || bad "decide $b: $(cat "$T/decide.err")"
  cmp -s <(cat "$T/$b.http"; echo) "$T/$b.dec" && ok "POST /v1/decisions $b.json = vllm-srun decide (byte for byte)" \
    || { bad "$b: HTTP and decide differ"; head -c 600 "$T/$b.http"; echo; head -c 600 "$T/$b.dec"; }
done
grep -qi '^Server-Timing: parse;dur=[0-9.]*, tokenize;dur=[0-9.]*, queue;dur=[0-9.]*, forward;dur=[0-9.]*, post;dur=[0-9.]*, serialize;dur=[0-9.]*, total;dur=[0-9.]*' "$T/all.h" \
  && ok "Server-Timing on a vela2 answer" || bad "Server-Timing: $(cat "$T/all.h")"
python3 - "$T" <<'PY' && ok "the answers hold every question type, spans, span_heads, sets, windows and a states answer" || bad "answer shapes"
import json, sys
T = sys.argv[1]
a = json.load(open(f"{T}/all.http"))
assert list(a) == ["model", "answers", "usage", "spans", "span_heads", "sets", "thresholds"], list(a)
assert a["span_heads"] == {"pii": "router", "halu": "router", "places": "broad"}
assert a["answers"]["domain"]["type"] == "choice" and "abstain_probability" in a["answers"]["domain"]
assert a["answers"]["level"]["type"] == "score" and a["answers"]["rel"]["type"] == "score"
assert a["answers"]["ok"]["type"] == "noul" and "topics.dose" in a["answers"]
assert a["answers"]["bad"] == {"type": "span", "error": "invalid_question", "message": "threshold must be a number in [0, 1]"}
assert sum(len(v) for v in a["spans"].values()) > 0
s = json.load(open(f"{T}/states.http"))
assert s["answers"]["win"]["input_coverage"] == "complete", s["answers"]["win"]
assert s["answers"]["cut"]["type"] == "noul" and "error" not in s["answers"]["cut"], s["answers"]["cut"]
assert set(s["states"]) == {"second", "third"} and "spans" in s["states"]["third"]
PY

# ---- /v1/classify (token kind) = the same presets through decide ----
for b in c_pii c_halu c_trunc c_reject; do
  code=$(curl -s -o "$T/$b.http" -D "$T/$b.h" -w '%{http_code}' "$URL/v1/classify" --data-binary @"$T/$b.json")
  [ "$code" = 200 ] || bad "classify $b: $code $(cat "$T/$b.http")"
done
grep -qi '^Server-Timing: parse;dur=' "$T/c_pii.h" && ok "Server-Timing on a classify answer" || bad "classify Server-Timing"
python3 - "$T" <<'PY' && ok "classify: kind token, head labels, spans and thresholds = decide's pii/halu answers, windows/truncate/reject, per-input errors, usage, meta" || bad "classify checks"
import json, sys
T = sys.argv[1]
d = json.load(open(f"{T}/c_as_decisions.dec"))
req = json.load(open(f"{T}/c_pii.json"))
c = json.load(open(f"{T}/c_pii.http"))
assert list(c) == ["model", "head", "kind", "labels", "results", "usage"], list(c)
assert c["model"] == "v2" and c["head"] == "pii" and c["kind"] == "token" and len(c["labels"]) == 17 and "PERSON" in c["labels"]
want = [(d["spans"]["pii"], d["thresholds"]["pii"], d["usage"]["input_tokens"]),
        (d["states"]["t1"]["spans"]["pii"], d["states"]["t1"]["thresholds"]["pii"], d["states"]["t1"]["usage"]["input_tokens"]),
        (d["states"]["t2"]["spans"]["pii"], d["states"]["t2"]["thresholds"]["pii"], d["states"]["t2"]["usage"]["input_tokens"])]
for i, (spans, th, _) in enumerate(want):
    r = c["results"][i]
    assert r["index"] == i and r["spans"] == spans and r["threshold"] == th, (i, r, spans, th)
    for s in r["spans"]:
        assert req["input"][i][s["start"]:s["end"]] == s["text"], s
assert sum(len(r["spans"]) for r in c["results"][:3]) > 0
assert c["results"][0]["input"] == {"tokens": c["results"][0]["input"]["tokens"], "processed_tokens": c["results"][0]["input"]["tokens"],
                                    "truncated": False, "windows": 1}
assert c["results"][2]["input"]["windows"] > 1 and c["results"][2]["input"]["tokens"] > 48 and not c["results"][2]["input"]["truncated"]
assert c["results"][3] == {"index": 3, "error": "invalid_input", "message": "input 3 is empty or whitespace: there is no text to read"}
assert c["usage"] == {"input_tokens": sum(w[2] for w in want), "output_tokens": 0}, (c["usage"], want)
h = json.load(open(f"{T}/c_halu.http"))
g = d["states"]["g"]
assert h["head"] == "halu" and h["labels"] == ["unsupported"]
assert h["results"][0]["spans"] == g["spans"]["halu"] and h["results"][0]["threshold"] == g["thresholds"]["halu"] == 0.55
assert h["usage"]["input_tokens"] == g["usage"]["input_tokens"]
assert h["meta"]["model_id"] == "v2" and h["meta"]["profile"] == "exact" and h["meta"]["device"] == "cpu" and len(h["meta"]["model_sha256"]) == 64
t = json.load(open(f"{T}/c_trunc.http"))["results"][0]
tr = d["states"]["tr"]
assert t["spans"] == tr["spans"]["pii"] and t["threshold"] == 0.3 == tr["thresholds"]["pii"]
assert t["input"]["truncated"] is True and t["input"]["processed_tokens"] == 48 and t["input"]["tokens"] > 48 and t["input"]["windows"] == 1
rj = json.load(open(f"{T}/c_reject.http"))["results"]
assert rj[0]["spans"] == d["spans"]["pii"], rj[0]
assert rj[1]["index"] == 1 and rj[1]["error"] == "max_length_exceeded" and "over the 48 this model reads at once (overflow: reject)" in rj[1]["message"], rj[1]
assert "spans" not in rj[1]
PY

# ---- /v1/models and /metrics ----
curl -s "$URL/v1/models" > "$T/models.json"
python3 - "$T" <<'PY' && ok "/v1/models describes the vela2 package (family, surfaces, question types, presets, heads, span heads, exact profile only, limits, golden)" || { bad "/v1/models"; cat "$T/models.json"; }
import json, sys
m = json.load(open(sys.argv[1] + "/models.json"))["data"][0]
assert m["family"] == "vela2" and m["id"] == "v2" and m["status"] == "ready" and m["ready"] is True
assert m["surfaces"] == ["decisions", "classify"]
assert m["question_types"] == ["choice", "noul", "score", "set", "span"] and m["modalities"] == ["text"]
assert m["presets"] == ["pii", "halu", "relevance"] and m["span_heads"] == ["router", "broad"]
assert [(h["name"], h["kind"], h["inputs"]) for h in m["heads"]] == [("pii", "token", "text"), ("halu", "token", "grounded")]
assert len(m["heads"][0]["labels"]) == 17 and m["heads"][1]["labels"] == ["unsupported"] and m["heads"][1]["default_threshold"] == 0.55
assert m["heads"][0]["window"] == {"tokens": 40, "overlap": 8} and m["heads"][0]["max_unwindowed_tokens"] == 48
assert m["profile"] == "exact" and [p["name"] for p in m["profiles"]] == ["exact"]
assert m["limits"]["max_input_tokens"] == 4096 and m["limits"]["max_labels"] == 255
assert m["limits"]["span_layout"] == {"hybrid_rmax": 48, "window": 40, "stride": 32}
assert len(m["model_sha256"]) == 64 and m["quantization"]["scheme"] == "bf16" and m["dtype"] == "bf16/fp32-heads"
assert m["parameters"] > 0 and m["memory_bytes"] > 0 and m["device"] == "cpu"
assert m["golden"]["status"] in ("matched", "unverified") and m["golden"]["checked"] == 6, m["golden"]
assert m["model_name"] == "vllm-sr-c/Vela-2.0-tiny-fixture"
PY
sha=$("$BIN" verify "$T/v2" 2>&1 | grep -o '[0-9a-f]\{64\}' | head -1)
grep -q "\"model_sha256\":\"$sha\"" "$T/models.json" && ok "model_sha256 = vllm-srun verify's identity" || bad "model_sha256 vs verify ($sha)"

# ---- deadlines between trees ----
code=$(curl -s -o "$T/dl.http" -w '%{http_code}' "$URL/v1/decisions" --data-binary @"$T/deadline.json")
python3 - "$T" "$code" <<'PY' && ok "deadline_ms: states whose trees ran keep their answers, the rest answer deadline_exceeded" || { bad "deadline"; head -c 800 "$T/dl.http"; }
import json, sys
T, code = sys.argv[1], sys.argv[2]
assert code == "200", code
o = json.load(open(f"{T}/dl.http"))
states = [o] + list(o["states"].values())
expired = [all(a.get("error") == "deadline_exceeded" for a in s["answers"].values()) for s in states]
answered = [all("error" not in a for a in s["answers"].values()) for s in states]
assert all(e or a for e, a in zip(expired, answered)), "a state half answered"
assert sum(answered) >= 1 and sum(expired) >= 1, (sum(answered), sum(expired))
# trees run in order: once one state expired every later one did
first = expired.index(True)
assert all(expired[first:]), expired
s = next(s for s, e in zip(states, expired) if e)
assert next(iter(s["answers"].values())) == {"type": "span", "error": "deadline_exceeded",
                                              "message": "the deadline passed before this question was run"}
PY

# ---- a small request while a large one runs; a client that goes away ----
python3 - "$URL" "$T" <<'PY' && ok "a small request sent while a 256-tree request runs is answered before it (and equals its answer alone)" || bad "fairness"
import json, sys, threading, time, urllib.request
URL, T = sys.argv[1], sys.argv[2]
def post(path, body):
    r = urllib.request.urlopen(urllib.request.Request(URL + path, data=body, headers={"Content-Type": "application/json"}), timeout=120)
    return r.read()
big, small = open(f"{T}/big.json", "rb").read(), open(f"{T}/small.json", "rb").read()
done = {}
def run_big():
    done["big_out"] = post("/v1/decisions", big)
    done["big"] = time.monotonic()
th = threading.Thread(target=run_big)
t0 = time.monotonic()
th.start()
time.sleep(0.15)
out = post("/v1/decisions", small)
t_small = time.monotonic()
th.join()
print(f"small answered after {t_small - t0:.3f} s, large after {done['big'] - t0:.3f} s")
assert t_small < done["big"], "the small request waited for the large one"
assert out.decode() + "\n" == open(f"{T}/small.dec").read()
b = json.loads(done["big_out"])
assert len(b["answers"]) == 256 and all("error" not in a for a in b["answers"].values())
PY
before=$(curl -s "$URL/metrics" | grep '^vllm_srun_forward_duration_seconds_count' | awk '{print $2}')
curl -s -m 0.3 "$URL/v1/decisions" --data-binary @"$T/big.json" >/dev/null 2>&1
sleep 1
after=$(curl -s "$URL/metrics" | grep '^vllm_srun_forward_duration_seconds_count' | awk '{print $2}')
depth=$(curl -s "$URL/metrics" | grep '^vllm_srun_queue_depth' | awk '{print $2}')
sleep 0.5
after2=$(curl -s "$URL/metrics" | grep '^vllm_srun_forward_duration_seconds_count' | awk '{print $2}')
[ "$depth" = 0 ] && [ "$after" = "$after2" ] && [ "$((after - before))" -lt 256 ] \
  && ok "a client that went away stops its job ($((after - before)) of 256 trees ran, queue empty)" \
  || bad "cancel: before $before after $after/$after2 depth $depth"

# ---- refusals (the worker serves on after each) ----
refuse() { # name path status code message body
  local got out
  got=$(curl -s -o "$T/r.out" -w '%{http_code}' "$URL$2" -H 'Content-Type: application/json' --data-binary "$6")
  out=$(cat "$T/r.out")
  if [ "$got" = "$3" ] && echo "$out" | grep -qF "\"code\":\"$4\"" && echo "$out" | grep -qF -- "$5"; then ok "refused: $1 ($3 $4)"
  else bad "$1: got $got $out"; fi
}
refuse "decisions: not JSON" /v1/decisions 400 invalid_request "the body is not valid JSON" '{"state":'
refuse "decisions: unknown field" /v1/decisions 400 invalid_request "unknown field 'stat'" '{"stat":"x","questions":{"a":{"preset":"pii"}}}'
refuse "decisions: no valid question" /v1/decisions 400 invalid_request "no valid question: a: preset must be one of ['pii', 'halu', 'relevance']" '{"state":"x","questions":{"a":{"preset":"toxic"}}}'
refuse "decisions: images" /v1/decisions 400 invalid_request "this model has no image modality: the Vela 2.0 packages read text only" '{"state":"x","questions":{"a":{"preset":"pii"}},"images":["data:image/png;base64,AA=="]}'
refuse "decisions: another model" /v1/decisions 404 model_not_found "model 'other' is not served here (this worker serves 'v2')" '{"model":"other","state":"x","questions":{"a":{"preset":"pii"}}}'
refuse "decisions: batching profile" /v1/decisions 400 invalid_request "options.profile: unknown profile 'batching'; available: exact" '{"state":"x","questions":{"a":{"preset":"pii"}},"options":{"profile":"batching"}}'
refuse "decisions: max_tokens" /v1/decisions 400 invalid_request "options.max_tokens applies only to models with a scan budget" '{"state":"x","questions":{"a":{"preset":"pii"}},"options":{"max_tokens":5}}'
refuse "decisions: deadline_ms 0" /v1/decisions 400 invalid_request "options.deadline_ms must be a number greater than 0" '{"state":"x","questions":{"a":{"preset":"pii"}},"options":{"deadline_ms":0}}'
refuse "decisions: too many questions" /v1/decisions 400 invalid_request "questions holds 300 questions; at most 256 are allowed" \
  "$(python3 -c 'import json; print(json.dumps({"state":"x","questions":{f"q{i}":{"preset":"pii"} for i in range(300)}}))')"
refuse "classify: not JSON" /v1/classify 400 invalid_request "the body is not valid JSON" '["x"'
refuse "classify: not an object" /v1/classify 400 invalid_request "the body must be a JSON object" '["x"]'
refuse "classify: unknown field" /v1/classify 400 invalid_request "unknown field 'inputs'" '{"inputs":["x"]}'
refuse "classify: no input" /v1/classify 400 invalid_request "input is required" '{"head":"pii"}'
refuse "classify: empty input list" /v1/classify 400 invalid_request "input must hold at least one input" '{"input":[]}'
refuse "classify: too many inputs" /v1/classify 400 invalid_request "at most 2048 inputs per request" \
  "$(python3 -c 'import json; print(json.dumps({"input":["x"]*2049}))')"
refuse "classify: unknown head" /v1/classify 400 invalid_request "head must be one of ['pii', 'halu']" '{"input":"x","head":"default"}'
refuse "classify: pair on the pii head" /v1/classify 400 invalid_request "input[0]: head pii reads text inputs (strings); got an object" '{"input":[{"text":"a","text_pair":"b"}]}'
refuse "classify: text on the halu head" /v1/classify 400 invalid_request "input[0]: head halu reads grounded inputs {context, question, answer}; got a string" '{"input":["x"],"head":"halu"}'
refuse "classify: grounded without answer" /v1/classify 400 invalid_request "input[0]: a grounded input needs an answer" '{"input":[{"context":"c"}],"head":"halu"}'
refuse "classify: grounded unknown field" /v1/classify 400 invalid_request "input[0]: unknown field 'text'; a grounded input holds context, question and answer" '{"input":[{"text":"c","answer":"a"}],"head":"halu"}'
refuse "classify: grounded non-string" /v1/classify 400 invalid_request "input[0].answer must be a string" '{"input":[{"answer":3}],"head":"halu"}'
refuse "classify: another model" /v1/classify 404 model_not_found "model 'vela-pii' is not served here (this worker serves 'v2')" '{"model":"vela-pii","input":"x"}'
refuse "classify: overflow" /v1/classify 400 invalid_request "options.overflow must be one of ['reject', 'truncate', 'window']" '{"input":"x","options":{"overflow":"cut"}}'
refuse "classify: threshold" /v1/classify 400 invalid_request "options.threshold must be a number in [0, 1]" '{"input":"x","options":{"threshold":1.5}}'
refuse "classify: window" /v1/classify 400 invalid_request "options.window: this model reads a text longer than 48 tokens in windows of its span_layout (40 tokens every 32)" '{"input":"x","options":{"window":{"tokens":512,"overlap":64}}}'
refuse "classify: max_tokens" /v1/classify 400 invalid_request "options.max_tokens: this model reads each input whole" '{"input":"x","options":{"max_tokens":100}}'
refuse "classify: return_tokens" /v1/classify 400 invalid_request "options.return_tokens: this model scores words, not tokens" '{"input":"x","options":{"return_tokens":true}}'
refuse "classify: profile" /v1/classify 400 invalid_request "options.profile must be one of ['exact']" '{"input":"x","options":{"profile":"batching"}}'
refuse "classify: deadline_ms" /v1/classify 400 invalid_request "options.deadline_ms must be a number greater than 0" '{"input":"x","options":{"deadline_ms":-1}}'
refuse "classify: unknown option" /v1/classify 400 invalid_request "options: unknown field 'top_k'" '{"input":"x","options":{"top_k":1}}'
refuse "embeddings on vela2" /v1/embeddings 422 unsupported_surface "v2 is a Vela 2.0 model: it serves POST /v1/decisions and POST /v1/classify, not /v1/embeddings" '{"input":"x"}'
refuse "rerank on vela2" /v1/rerank 422 unsupported_surface "v2 is a Vela 2.0 model: it serves POST /v1/decisions and POST /v1/classify, not /v1/rerank" '{"query":"x"}'
code=$(curl -s -o "$T/r.out" -w '%{http_code}' "$URL/v1/classify" --data-binary @"$T/c_pii.json")
cmp -s "$T/r.out" "$T/c_pii.http" && [ "$code" = 200 ] && ok "after every refusal the worker answers the same classify again" || bad "after refusals: $code"

# ---- the OpenAPI document the worker serves describes these requests and answers ----
curl -s "$URL/openapi.yaml" > "$T/openapi.yaml"
curl -s -o "$T/err.json" "$URL/v1/classify" -d '{"input":[]}'
if python3 -c 'import jsonschema, yaml' 2>/dev/null; then
python3 - "$T" <<'PY' && ok "requests and answers (decisions, states, deadline, classify, card, errors) validate against the served /openapi.yaml" || bad "OpenAPI validation"
import json, sys, jsonschema, yaml
T = sys.argv[1]
spec = yaml.safe_load(open(f"{T}/openapi.yaml"))
def conv(s):
    if isinstance(s, list): return [conv(x) for x in s]
    if not isinstance(s, dict): return s
    s = {k: conv(v) for k, v in s.items()}
    if "$ref" in s: s["$ref"] = s["$ref"].replace("#/components/schemas/", "#/$defs/")
    if s.pop("nullable", False) and "type" in s: s["type"] = [s["type"], "null"]
    if s.get("exclusiveMinimum") is True: s.pop("exclusiveMinimum"); s["exclusiveMinimum"] = s.pop("minimum", 0)
    return s
defs = {k: conv(v) for k, v in spec["components"]["schemas"].items()}
def check(name, doc):
    jsonschema.validate(doc, {"$ref": f"#/$defs/{name}", "$defs": defs})
allq = json.load(open(f"{T}/all.json")); del allq["questions"]["bad"]  # bad: an invalid threshold on purpose
for doc in (allq, json.load(open(f"{T}/states.json")), json.load(open(f"{T}/deadline.json")), json.load(open(f"{T}/big.json"))):
    check("DecisionRequest", doc)
for b in ("c_pii", "c_halu", "c_trunc", "c_reject"):
    check("ClassifyRequest", json.load(open(f"{T}/{b}.json")))
    check("ClassifyResponse", json.load(open(f"{T}/{b}.http")))
for b in ("all", "states", "dl", "c_as_decisions"):
    check("DecisionResponse", json.load(open(f"{T}/{b}.http")))
check("ModelCard", json.load(open(f"{T}/models.json"))["data"][0])
check("Error", json.load(open(f"{T}/err.json")))
PY
else echo "note: no python3 jsonschema/yaml here: the OpenAPI validation was not run"; fi

met=$(curl -s "$URL/metrics")
for f in 'vllm_srun_model_memory_bytes{model="v2"} [1-9]' 'vllm_srun_model_info{model="v2",revision="local",family="vela2"' \
         'vllm_srun_questions_total{type="span",outcome="answered"} [1-9]' 'vllm_srun_questions_total{type="span",outcome="deadline_exceeded"} [1-9]' \
         'vllm_srun_requests_total{endpoint="/v1/classify",status="200"} [1-9]' 'vllm_srun_requests_total{endpoint="/v1/classify",status="400"} [1-9]' \
         'vllm_srun_deadline_dropped_questions_total [1-9]' 'vllm_srun_ready 1' 'vllm_srun_queue_depth 0'; do
  echo "$met" | grep -q "$f" && ok "/metrics has $f" || bad "/metrics lacks $f"
done

kill -TERM $pid; wait $pid; rc=$?
[ $rc = 0 ] && ok "SIGTERM: exit 0" || bad "SIGTERM exit $rc"

# ---- /v1/classify on a Decision 3.0 package keeps its 422 ----
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny >/dev/null || bad "install d3-tiny"
start vllm-sr-c/d3-tiny || { bad "d3 worker did not become ready"; exit 1; }
refuse "classify on decision3" /v1/classify 422 unsupported_surface "vllm-sr-c/d3-tiny is a Decision 3.0 model: it serves POST /v1/decisions, not /v1/classify" '{"input":"x"}'
curl -s "$URL/v1/models" | grep -q '"surfaces":\["decisions"\]' && ok "a Decision 3.0 card lists decisions only" || bad "d3 card"
kill -TERM $pid; wait $pid
exit $fail
