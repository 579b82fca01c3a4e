#!/usr/bin/env bash
# vllm-srun fixture: the CLI writes a package, installs into a store that inspect resolves,
# installs built-ins, and refuses bad options with a message and exit status.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
vsr_tmpdir
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
expect_refusal() { # name, expected rc, message substring, args...
  local name=$1 rc=$2 msg=$3; shift 3
  out=$("$BIN" fixture "$@" 2>&1); got=$?
  if [ "$got" = "$rc" ] && grep -qF -- "$msg" <<<"$out"; then ok "$name"; else bad "$name: rc=$got out=$out"; fi
}

out=$("$BIN" fixture "$T/p" --family decision3 --size tiny --scheme bf16 --seed 0 2>&1)
if [ $? = 0 ] && grep -q "model_sha256     f438b524476632acf5fb4ab83cd58668dd68bb7306b969a2106fc615a2a1c1e7" <<<"$out" \
   && [ -f "$T/p/MODEL_MANIFEST.json" ] && [ -f "$T/p/model.safetensors" ]; then ok write; else bad "write: $out"; fi
[ "$(ls "$T/p" | wc -l)" = 8 ] && ok "eight files" || bad "file set: $(ls "$T/p")"

# --install with a store, then inspect resolves it by name
out=$("$BIN" fixture --install --store "$T/store" --family decision3 --size tiny --scheme w4a16-gptq --actorder --seed 0 2>&1)
rev=$(sed -n 's/.*installed.*@\([0-9a-f]\{40\}\).*/\1/p' <<<"$out")
if [ "$rev" = 556b26f480652c0fc113a9073a7413ca5aa92c2d ] && \
   [ "$(cat "$T/store/models--vllm-sr-c--d3-tiny-W4A16-GPTQ/refs/main")" = "$rev" ]; then ok install; else bad "install: $out"; fi
out=$(HF_HUB_CACHE="$T/store" "$BIN" inspect vllm-sr-c/d3-tiny-W4A16-GPTQ 2>&1)
grep -q "$rev" <<<"$out" && ok "inspect resolves the installed package" || bad "inspect: $out"

out=$("$BIN" fixture --install-builtin all --store "$T/store2" 2>&1)
[ $? = 0 ] && [ "$(grep -c '@' <<<"$out")" = 8 ] && ok "install-builtin all (5 Decision 3.0, 3 Vela 2.0)" || bad "install-builtin: $out"
[ "$(cat "$T/store2/models--vllm-sr-c--d3-tiny/refs/main")" = 093b448bd143d3ff19ae16b7797d6d7420e2d157 ] \
  && ok "built-in revision" || bad "built-in revision"

A=(--family decision3 --size tiny --seed 0)
expect_refusal "unknown family" 1 "unknown --family 'decision2'" "$T/r1" --family decision2 --size tiny --scheme bf16 --seed 0
expect_refusal "unknown size" 1 "unknown --size 'huge'" "$T/r2" --family decision3 --size huge --scheme bf16 --seed 0
expect_refusal "unknown scheme" 1 "unknown --scheme 'int8'" "$T/r3" "${A[@]}" --scheme int8
expect_refusal "actorder without gptq" 1 "--actorder applies only to --scheme w4a16-gptq" "$T/r4" "${A[@]}" --scheme fp8 --actorder
expect_refusal "group not multiple of 8" 1 "--group-size 20 must be a positive multiple of 8" "$T/r5" "${A[@]}" --scheme w4a16-awq --group-size 20
expect_refusal "group not dividing K" 1 "--group-size 256 does not divide K = 128 of model.language_model.layers.0.linear_attn.out_proj.weight" "$T/r6" "${A[@]}" --scheme w4a16-awq --group-size 256
expect_refusal "bad seed" 2 "--seed must be an integer" "$T/r7" --family decision3 --size tiny --scheme bf16 --seed -3
expect_refusal "missing seed" 2 "--seed are required" "$T/r8" --family decision3 --size tiny --scheme bf16
expect_refusal "unknown option" 2 "unknown option '--colour'" "$T/r9" "${A[@]}" --scheme bf16 --colour red
expect_refusal "not empty" 1 "folder is not empty" "$T/p" "${A[@]}" --scheme bf16
expect_refusal "unknown built-in" 1 "unknown built-in 'd3-huge'" --install-builtin d3-huge --store "$T/s3"
expect_refusal "out and install" 2 "not both" "$T/r10" --install "${A[@]}" --scheme bf16
[ ! -e "$T/r1" ] && [ ! -e "$T/r6" ] && ok "refusals write nothing" || bad "a refusal left files"

echo "== $fails failures"
[ "$fails" = 0 ]
