#!/usr/bin/env bash
# `vllm-srun decide` and `vllm-srun golden`: one answer from the command line with the server's
# gating, identity check and golden self-check; a local copy of a built-in package is matched
# by its identity; a package without recorded answers is `unverified`; refusals and usage.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
vsr_tmpdir
export HF_HUB_CACHE=$T/store
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny >/dev/null
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny-FP8 >/dev/null
req='{"state":"Is 17 prime?","questions":{"math":{"type":"noul","instructions":"Is this a math question?"},"lvl":{"type":"score","instructions":"How hard?","criteria":["easy","hard"]}}}'
printf '%s' "$req" > "$T/req.json"

out=$("$BIN" decide vllm-sr-c/d3-tiny --device cpu --request "$T/req.json" 2>"$T/err"); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q '"model":"vllm-sr-c/d3-tiny","answers":{"math":{"type":"noul","noul":' \
  && grep -q "golden self-check matched" "$T/err" && ok "decide by name, golden matched" || bad "decide: $rc $out $(cat "$T/err")"
cp -r "$T"/store/models--vllm-sr-c--d3-tiny/snapshots/* "$T/my-copy"
out2=$("$BIN" decide "$T/my-copy" --request - < "$T/req.json" 2>"$T/err"); rc=$?
[ $rc = 0 ] && echo "$out2" | grep -q '"model":"my-copy"' && grep -q "golden self-check matched" "$T/err" \
  && [ "${out2#*answers}" = "${out#*answers}" ] && ok "a local copy is matched by identity and answers the same" || bad "local copy: $rc $out2 $(cat "$T/err")"
"$BIN" fixture "$T/other" --family decision3 --size tiny --scheme bf16 --seed 9 >/dev/null
"$BIN" decide "$T/other" --request "$T/req.json" >/dev/null 2>"$T/err"; rc=$?
[ $rc = 0 ] && grep -q "golden self-check unverified: no recorded answers for device class cpu" "$T/err" \
  && ok "a package without recorded answers is unverified" || bad "unverified: $rc $(cat "$T/err")"
g=$("$BIN" golden vllm-sr-c/d3-tiny --device cpu 2>&1); rc=$?
[ $rc = 0 ] && echo "$g" | grep -q "matched (6 of 6 values matched, reference cpu)" && ok "vllm-srun golden" || bad "golden: $rc $g"
g=$("$BIN" golden vllm-sr-c/d3-tiny --device cpu --record 2>/dev/null); rc=$?
[ $rc = 0 ] && echo "$g" | grep -q '^{"cpu":{"domain":{"type":"choice"' && ok "golden --record" || bad "record: $rc $g"
out=$("$BIN" decide vllm-sr-c/d3-tiny-FP8 --device cpu --request "$T/req.json" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "FP8 weights need an NVIDIA GPU of compute capability 8.9 or later" && ok "FP8 refused on the CPU" || bad "fp8: $rc $out"
printf '{"state":"x"}' > "$T/bad.json"
out=$("$BIN" decide vllm-sr-c/d3-tiny --request "$T/bad.json" 2>/dev/null); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q '"code":"invalid_request","message":"questions must be an object' && ok "a bad request prints the error body" || bad "bad request: $rc $out"
"$BIN" decide vllm-sr-c/d3-tiny >/dev/null 2>&1; [ $? = 2 ] && ok "usage without --request" || bad "usage"
out=$("$BIN" decide vllm-sr-c/d3-tiny --request "$T/missing.json" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "cannot read --request" && ok "unreadable request file" || bad "missing file: $rc $out"
exit $fail
