#!/usr/bin/env bash
# `vllm-srun decide` on a Vela 2.0 decoder fixture (issue 23): the pii and halu presets, a custom
# span question on the broad head, choice/noul/set; every span's offsets checked against Python's
# slicing of the text the question read; the response's key order; refusals as error bodies;
# `vllm-srun serve` refusing the batching profile for the family (vela2_serve.sh serves it).
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
vsr_tmpdir
"$BIN" fixture "$T/v2" --family vela2 --size tiny >/dev/null 2>&1 || { echo "FAIL fixture"; exit 1; }
cat > "$T/req.json" <<'JSON'
{"state":{"request":"Hi, I'm Tom Baker (tom.baker@example.com). 東京に住んでいます — see https://example.org/dose).","source":"For adults, the maximum dose of paracetamol is 4 grams in 24 hours.","answer":"Adults can take up to 6 grams of paracetamol in 24 hours 😀."},
 "questions":{"pii":{"preset":"pii","over":"request"},"halu":{"preset":"halu"},
  "places":{"type":"span","instructions":"Which spans name a city?","labels":[{"key":"city","description":"a city name"}],"threshold":0.5,"head":"broad","over":"request"},
  "domain":{"type":"choice","instructions":"Which domain?","criteria":{"health":"Health","code":"Code"}},
  "ok":{"type":"noul","instructions":"Is the answer correct?"},
  "topics":{"type":"set","instructions":"Topics?","criteria":{"dose":"dosage","pii":"personal data"}},
  "bad":{"type":"span","instructions":"x","criteria":{"a":"b"},"threshold":2}}}
JSON
out=$("$BIN" decide "$T/v2" --device cpu --request "$T/req.json" 2>"$T/err"); rc=$?
[ $rc = 0 ] && ok "decide answers a vela2 request" || bad "decide: $rc $(cat "$T/err")"
# the default tiny fixture is byte for byte the built-in vllm-sr-c/vela2-tiny: its recorded CPU answers apply
grep -q "golden self-check matched" "$T/err" && ok "golden: the family's question set ran twice and matched the recorded CPU answers" || bad "golden: $(cat "$T/err")"
printf '%s' "$out" > "$T/out.json"
python3 - "$T/req.json" "$T/out.json" <<'PY' && ok "span offsets are code points of the text read (Python slicing), key order, shapes" || { bad "response checks"; cat "$T/out.json"; }
import json, sys
req = json.load(open(sys.argv[1])); out = json.load(open(sys.argv[2]))
state = req["state"]
read = {"pii": state["request"], "places": state["request"], "halu": state["answer"]}
assert list(out) == ["model", "answers", "usage", "spans", "span_heads", "sets", "thresholds"], list(out)
n = 0
for qid, text in read.items():
    for s in out["spans"][qid]:
        assert 0 <= s["start"] < s["end"] <= len(text), s
        assert text[s["start"]:s["end"]] == s["text"], (qid, s, text[s["start"]:s["end"]])
        assert s["text"] == s["text"].strip(), s
        assert 0 < s["probability"] <= 1
        n += 1
    assert out["answers"][qid] == {"type": "noul", "noul": out["answers"][qid]["noul"]}
assert n > 0
assert out["span_heads"] == {"pii": "router", "halu": "router", "places": "broad"}
assert out["thresholds"]["halu"] == 0.55 and out["thresholds"]["places"] == 0.5 and out["thresholds"]["topics"] == 0.3
assert 0.005919 <= out["thresholds"]["pii"] <= 0.75
assert set(out["answers"]["domain"]) == {"type", "choice", "probabilities", "confidence", "abstain_probability"}
assert "topics.dose" in out["answers"] and "topics" not in out["answers"]
assert out["answers"]["bad"]["error"] == "invalid_question" and out["answers"]["bad"]["message"] == "threshold must be a number in [0, 1]"
assert all(l in ("unsupported",) for l in (s["label"] for s in out["spans"]["halu"]))
PY
out2=$("$BIN" decide "$T/v2" --device cpu --request "$T/req.json" 2>/dev/null)
[ "$out2" = "$out" ] && ok "the same answers twice" || bad "not deterministic"
printf '{"state":"x","questions":{"a":{"preset":"toxic"}}}' > "$T/bad.json"
o=$("$BIN" decide "$T/v2" --device cpu --request "$T/bad.json" 2>/dev/null); rc=$?
[ $rc = 1 ] && echo "$o" | grep -q "\"message\":\"no valid question: a: preset must be one of \['pii', 'halu', 'relevance'\]\"" \
  && ok "a request with no valid question is an error body" || bad "bad request: $rc $o"
printf '{"state":"x","questions":{"a":{"preset":"pii"}},"images":["data:image/png;base64,AA=="]}' > "$T/img.json"
o=$("$BIN" decide "$T/v2" --device cpu --request "$T/img.json" 2>/dev/null); rc=$?
[ $rc = 1 ] && echo "$o" | grep -q "this model has no image modality: the Vela 2.0 packages read text only" && ok "images refused" || bad "images: $rc $o"
o=$("$BIN" serve "$T/v2" --device cpu --port 18799 --profile batching 2>&1); rc=$?
[ $rc = 1 ] && echo "$o" | grep -q "profile batching applies to Decision 3.0 packages only" \
  && ok "serve refuses the batching profile for the span family (tests/sh/vela2_serve.sh serves it)" || bad "serve: $rc $o"
exit $fail
