#!/usr/bin/env bash
# `vllm-srun compare`: a package against itself (0 flips, |dp| 0, exit 0); the BF16 tiny fixture
# against its W4A16-GPTQ variant (nonzero |dp|; --max-prob-diff below the observed max exits 1
# naming it, above exits 0; --max-flip-rate); the CSV (one row per question) and the PNG; the
# --json summary; refusals and usage.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
REQ=$REPO/tests/data/compare/requests.jsonl
vsr_tmpdir
"$BIN" fixture "$T/bf16" --family decision3 --size tiny --scheme bf16 --seed 0 >/dev/null || bad "fixture bf16"
"$BIN" fixture "$T/w4" --family decision3 --size tiny --scheme w4a16-gptq --seed 0 >/dev/null || bad "fixture w4a16"
"$BIN" fixture "$T/fp8" --family decision3 --size tiny --scheme fp8 --seed 0 >/dev/null || bad "fixture fp8"
# questions in the requests file (main and `states` entries)
nq=$(python3 -c '
import json,sys
n=0
for l in open(sys.argv[1]):
    if not l.strip(): continue
    r=json.loads(l); n+=len(r["questions"])
    for s in (r.get("states") or {}).values(): n+=len(s["questions"])
print(n)' "$REQ")

out=$("$BIN" compare "$T/bf16" "$T/bf16" --requests "$REQ" --device cpu --max-flip-rate 0 --max-prob-diff 0 \
      --csv "$T/self.csv" 2>"$T/err"); rc=$?
[ $rc = 0 ] && echo "$out" | grep -Eq "^all +$nq +0 +1.0000 +0 +0$" && echo "$out" | grep -q "flipped answers: 0" \
  && echo "$out" | grep -q "PASS: within the limits" && ok "a package against itself: $nq questions, 0 flips, |dp| 0" \
  || bad "self: rc=$rc $out $(cat "$T/err")"
[ "$(($(wc -l < "$T/self.csv") - 1))" = "$nq" ] && ok "self CSV: one row per question" || bad "self csv rows"

out=$("$BIN" compare "$T/bf16" "$T/w4" --requests "$REQ" --device cpu --csv "$T/w4.csv" --plot "$T/w4.png" \
      --plot-size 700x350 --json "$T/w4.json" 2>"$T/err"); rc=$?
maxdp=$(echo "$out" | awk '$1=="all"{print $5}')
[ $rc = 0 ] && python3 -c "import sys; x=float(sys.argv[1]); sys.exit(0 if 1e-6 < x < 0.5 else 1)" "$maxdp" \
  && ok "bf16 vs w4a16-gptq: max |dp| $maxdp" || bad "w4: rc=$rc maxdp=$maxdp $out $(cat "$T/err")"
# the CSV parsed back: one row per question, max |dp| agrees with the report, flipped is 0/1,
# a flipped row's answers differ
python3 - "$T/w4.csv" "$nq" "$maxdp" "$T/w4.json" <<'EOF' && ok "CSV and --json parsed back and consistent" || bad "csv/json"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == int(sys.argv[2]), len(rows)
assert set(rows[0]) == {"line","state","question","type","a_answer","b_answer","a_value","b_value",
                        "a_margin","b_margin","max_abs_dp","flipped"}
mx = max(float(r["max_abs_dp"]) for r in rows)
assert abs(mx - float(sys.argv[3])) <= 1e-4 * mx, (mx, sys.argv[3])
for r in rows:
    assert r["flipped"] in ("0", "1")
    assert (r["a_answer"] != r["b_answer"]) == (r["flipped"] == "1"), r
    assert r["type"] in ("choice", "noul", "score")
assert any(r["state"] == "second" for r in rows)
j = json.load(open(sys.argv[4]))
assert j["questions"] == len(rows) and abs(j["max_dp"] - mx) <= 1e-6
assert j["flips"] == sum(r["flipped"] == "1" for r in rows)
assert sum(t["count"] for t in j["types"].values()) == len(rows)
EOF
head -c 8 "$T/w4.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" \
  && [ "$(od -An -tu1 -j16 -N8 "$T/w4.png" | tr -s ' ')" = " 0 0 2 188 0 0 1 94" ] \
  && ok "PNG signature and IHDR 700x350" || bad "png header"

lower=$(python3 -c "import sys; print(float(sys.argv[1])/2)" "$maxdp")
higher=$(python3 -c "import sys; print(float(sys.argv[1])*2)" "$maxdp")
out=$("$BIN" compare "$T/bf16" "$T/w4" --requests "$REQ" --device cpu --max-prob-diff "$lower" 2>"$T/err"); rc=$?
[ $rc = 1 ] && grep -q "max |dp| .* is over --max-prob-diff $lower" "$T/err" && echo "$out" | grep -q "FAIL: 1 limit exceeded" \
  && ok "--max-prob-diff below the observed max exits 1 naming it" || bad "below: rc=$rc $out $(cat "$T/err")"
out=$("$BIN" compare "$T/bf16" "$T/w4" --requests "$REQ" --device cpu --max-prob-diff "$higher" --max-flip-rate 1 2>"$T/err"); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q "PASS: within the limits" && ok "--max-prob-diff above the observed max exits 0" \
  || bad "above: rc=$rc $out $(cat "$T/err")"
# a flip rate limit: a different seed answers differently on some questions
"$BIN" fixture "$T/other" --family decision3 --size tiny --scheme bf16 --seed 5 >/dev/null
out=$("$BIN" compare "$T/bf16" "$T/other" --requests "$REQ" --device cpu --max-flip-rate 0 2>"$T/err"); rc=$?
flips=$(echo "$out" | awk '$1=="all"{print $3}')
if [ "${flips:-0}" -gt 0 ]; then
  [ $rc = 1 ] && grep -q "flip rate .* ($flips of $nq) is over --max-flip-rate 0" "$T/err" \
    && echo "$out" | grep -Eq "^ +[0-9]+  " && ok "--max-flip-rate 0 with $flips flips exits 1 naming it, flips listed" \
    || bad "flip limit: rc=$rc $out $(cat "$T/err")"
else
  bad "seed 5 against seed 0 gave no flip: $out"
fi

# refusals
out=$("$BIN" compare "$T/bf16" "$T/fp8" --requests "$REQ" --device cpu 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "FP8 weights need an NVIDIA GPU of compute capability 8.9 or later" \
  && ok "FP8 refused on the CPU" || bad "fp8: rc=$rc $out"
printf '{"state":"x"}\n' > "$T/bad.jsonl"
out=$("$BIN" compare "$T/bf16" "$T/w4" --requests "$T/bad.jsonl" --device cpu 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "line 1: both refused the request (HTTP 400 invalid_request" \
  && echo "$out" | grep -q "no question was answered by both packages (1 requests refused)" \
  && ok "only refused requests: nothing compared, exit 1" || bad "refused request: rc=$rc $out"
head -n 2 "$REQ" >> "$T/bad.jsonl"
out=$("$BIN" compare "$T/bf16" "$T/w4" --requests "$T/bad.jsonl" --device cpu 2>&1); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q "line 1: both refused the request (HTTP 400 invalid_request" \
  && echo "$out" | grep -q "(1 requests refused by both packages and not compared)" \
  && echo "$out" | grep -Eq "^all +5 " && ok "a request both refuse is reported and not compared" || bad "refused request 2: rc=$rc $out"
printf '\n\n' > "$T/empty.jsonl"
out=$("$BIN" compare "$T/bf16" "$T/w4" --requests "$T/empty.jsonl" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "holds no request" && ok "an empty requests file" || bad "empty: rc=$rc $out"
out=$("$BIN" compare "$T/bf16" "$T/w4" --requests "$T/missing.jsonl" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "cannot read --requests" && ok "unreadable requests file" || bad "missing: rc=$rc $out"
"$BIN" compare "$T/bf16" --requests "$REQ" >/dev/null 2>&1; [ $? = 2 ] && ok "usage: one package" || bad "usage one package"
out=$("$BIN" compare "$T/bf16" "$T/w4" --requests "$REQ" --max-flip-rate x 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "max-flip-rate must be a non-negative number (found 'x')" && ok "bad --max-flip-rate" || bad "bad rate: $rc $out"
out=$("$BIN" compare "$T/bf16" "$T/w4" --requests "$REQ" --plot-size 5x5 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "plot-size must be WxH" && ok "bad --plot-size" || bad "bad plot size: $rc $out"

# bench --sla-ms: the load-test row, with the eval column from compare --json
"$BIN" serve "$T/w4" --device cpu --uds "$T/s.sock" >"$T/serve.log" 2>&1 & SP=$!
vsr_wait_http --unix-socket "$T/s.sock" http://x/health 200 100
out=$("$BIN" bench --uds "$T/s.sock" --sla-ms 100000 --max-concurrency 3 --requests 6 --eval "$T/w4.json" 2>&1); rc=$?
flips=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["flips"])' "$T/w4.json")
[ $rc = 0 ] && echo "$out" | grep -q "^| w4 (int4) | .*(cpu) | 3 (the --max-concurrency) | [0-9.]* | [0-9.]* | [01]\.[0-9]* agreement ($flips flips of $nq) |$" \
  && [ "$(echo "$out" | grep -cE '^ +[0-9]+ +6 +6 ')" = 3 ] \
  && ok "bench --sla-ms: a loose SLA reaches --max-concurrency (1, 2, 3), eval column from --json" || bad "sla loose: rc=$rc $out"
out=$("$BIN" bench --uds "$T/s.sock" --sla-ms 0.001 --requests 4 --variant W4A16 2>&1); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q "^| W4A16 | .* | 0 (concurrency 1 misses the SLA: p95 .* ms) | - | - | - |$" \
  && ok "bench --sla-ms: an SLA nothing meets gives 0" || bad "sla tight: rc=$rc $out"
echo '{"x":1}' > "$T/noteval.json"
out=$("$BIN" bench --uds "$T/s.sock" --sla-ms 10 --eval "$T/noteval.json" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "not a \`vllm-srun compare --json\` summary" && ok "bench --eval refuses a file that is not a compare summary" || bad "eval: rc=$rc $out"
out=$("$BIN" bench --uds "$T/s.sock" --sla-ms -3 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "sla-ms must be a positive number" && ok "bench --sla-ms -3 refused" || bad "sla -3: rc=$rc $out"
kill "$SP"; wait "$SP" 2>/dev/null
exit $fail
