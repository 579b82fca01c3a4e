#!/usr/bin/env bash
# vllm-srun fixture --like: each published layout (vllm-sr/d3, d3-flash, d3-mini, d3-nano,
# d3-lite) is written with the published file set, and goes through the path a real package
# takes: verify, inspect (vision counted, not loaded), decide on the golden request, with the
# same answers as the fixture's own layout (the vision tower is never loaded). A changed vision
# byte is refused by verify; --install names the package after the layout; bad options refused.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
vsr_tmpdir
export VSR_NO_PROGRESS=1
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }

# The file sets of published-d3-pins.json (files_sha256 keys at the pinned revisions).
common="MODEL_MANIFEST.json chat_template.jinja config.json decision_config.json preprocessor_config.json readout.safetensors tokenizer.json tokenizer_config.json"
expected() { # shards
  local n=$1 list=$common i
  if [ "$n" = 1 ]; then list="$list model.safetensors"
  else
    for i in $(seq 1 "$n"); do list="$list $(printf 'model-%05d-of-%05d.safetensors' "$i" "$n")"; done
    list="$list model.safetensors.index.json"
  fi
  tr ' ' '\n' <<<"$list" | LC_ALL=C sort
}

# The golden request of published-d3.md.
cat > "$T/req.json" <<'EOF'
{"state":"Write a Python function that merges two sorted lists and explain its running time.","questions":{"domain":{"type":"choice","instructions":"Which domain does this request belong to?","criteria":{"code":"Programming","math":"Mathematics","other":"Anything else"}},"reasoning":{"type":"noul","instructions":"Does answering this request need multi-step reasoning?"},"difficulty":{"type":"score","instructions":"How difficult is this request?","criteria":["Trivial","Moderate","Hard"]}}}
EOF

# Seed 7: seed 0's plain package is the built-in vllm-sr-c/d3-tiny (its golden answers would be
# checked too, which is test_decision's and decide.sh's business, not this layout's).
"$BIN" fixture "$T/plain" --family decision3 --size tiny --scheme bf16 --seed 7 >/dev/null
plain=$("$BIN" decide "$T/plain" --device cpu --request "$T/req.json" 2>/dev/null)
[ -n "$plain" ] && ok "the fixture's own layout decides" || bad "plain decide"

for spec in vllm-sr/d3:11 d3-flash:4 d3-mini:2 d3-nano:1 d3-lite:1; do
  like=${spec%:*} n=${spec#*:} name=${like#vllm-sr/} d="$T/$name"
  out=$("$BIN" fixture "$d" --like "$like" --seed 7 2>&1)
  if [ $? = 0 ] && grep -q "model_name       $name\$" <<<"$out" && grep -q "weight files     $n\$" <<<"$out" \
     && grep -q " vision + " <<<"$out"; then ok "$name: written"; else bad "$name: write: $out"; continue; fi
  got=$(ls -1 "$d" | LC_ALL=C sort)
  [ "$got" = "$(expected "$n")" ] && ok "$name: the published file set" || bad "$name: files: $got"
  grep -q '"model_name": "'"$name"'"' "$d/MODEL_MANIFEST.json" && ok "$name: model_name" || bad "$name: model_name"
  grep -q '"preprocessor_config.json": "' "$d/MODEL_MANIFEST.json" && ok "$name: preprocessor_config.json listed" \
    || bad "$name: preprocessor_config.json not listed"
  grep -q '"model_type": "qwen3_5_vision"' "$d/config.json" && ok "$name: vision_config" || bad "$name: vision_config"

  v=$("$BIN" verify "$d" 2>&1); rc=$?
  [ $rc = 0 ] && ok "$name: verify" || bad "$name: verify: $rc $v"

  j=$("$BIN" inspect "$d" --json 2>&1); rc=$?
  mv=$(grep -o '"vision": [0-9]*' "$d/MODEL_MANIFEST.json" | grep -o '[0-9]*$')
  mt=$(grep -o '"text": [0-9]*' "$d/MODEL_MANIFEST.json" | grep -o '[0-9]*$')
  mr=$(grep -o '"readout": [0-9]*' "$d/MODEL_MANIFEST.json" | grep -o '[0-9]*$')
  ml=$(grep -o '"loaded": [0-9]*' "$d/MODEL_MANIFEST.json" | grep -o '[0-9]*$')
  if [ $rc = 0 ] && [ "${mv:-0}" -gt 0 ] && [ "$ml" = $((mt + mv + mr)) ] \
     && grep -q "\"vision\": *$mv" <<<"$j" && grep -q "\"loaded\": *$((mt + mr))" <<<"$j"; then
    ok "$name: inspect counts $mv vision parameters apart (not loaded)"
  else bad "$name: inspect: rc=$rc manifest text=$mt vision=$mv readout=$mr loaded=$ml: $j"; fi

  a=$("$BIN" decide "$d" --device cpu --request "$T/req.json" 2>"$T/err"); rc=$?
  if [ $rc = 0 ] && grep -q "\"model\":\"$name\",\"answers\":{\"domain\":{\"type\":\"choice\"" <<<"$a" \
     && [ "${a#*answers}" = "${plain#*answers}" ]; then ok "$name: decide answers as the same text model"
  else bad "$name: decide: $rc $a $(cat "$T/err")"; fi
done

# A request with an image: the tower is in the package but not loaded, and the refusal says so.
python3 - "$T/req.json" "$T/req_img.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); r["images"] = ["data:image/png;base64,iVBORw0KGgo="]
json.dump(r, open(sys.argv[2], "w"))
PY
a=$("$BIN" decide "$T/d3-lite" --device cpu --request "$T/req_img.json" 2>&1); rc=$?
if [ $rc != 0 ] && grep -q "no image modality here: vllm-srun answers text only; the package's vision tower is verified but not loaded" <<<"$a"; then
  ok "d3-lite: an image request is refused: the tower is verified, not loaded"
else bad "d3-lite: image request: rc=$rc $a"; fi

# The index names every tensor once; d3's first shard holds only vision tensors: change its
# last byte (a vision weight, never loaded) and verify refuses the file by its hash.
idx="$T/d3/model.safetensors.index.json"
first=model-00001-of-00011.safetensors
if [ "$(grep -c "\": \"$first\"" "$idx")" -gt 0 ] && ! grep "\": \"$first\"" "$idx" | grep -qv '"model\.visual\.'; then
  ok "d3: $first holds vision tensors only"
else bad "d3: $first: $(grep "$first" "$idx")"; fi
f="$T/d3/$first"
size=$(stat -c %s "$f")
b=$(tail -c1 "$f" | od -An -tu1 | tr -d ' ')
printf "\\$(printf %o $((b ^ 1)))" | dd of="$f" bs=1 seek=$((size - 1)) conv=notrunc status=none
v=$("$BIN" verify "$T/d3" 2>&1); rc=$?
[ $rc != 0 ] && grep -q "$first: sha256 mismatch" <<<"$v" && ok "a changed vision byte is refused by verify" \
  || bad "tampered vision: rc=$rc $v"

# --install names the package after the layout; inspect resolves it by name.
out=$("$BIN" fixture --install --store "$T/store" --like d3-lite 2>&1)
rev=$(sed -n 's/.*installed *vllm-sr-c\/d3-lite@\([0-9a-f]\{40\}\).*/\1/p' <<<"$out")
[ -n "$rev" ] && HF_HUB_CACHE="$T/store" "$BIN" inspect vllm-sr-c/d3-lite 2>&1 | grep -q "$rev" \
  && ok "--install --like d3-lite installs vllm-sr-c/d3-lite" || bad "install: $out"

expect_refusal() { # name, expected rc, message substring, args...
  local name=$1 rc=$2 msg=$3; shift 3
  out=$("$BIN" fixture "$@" 2>&1); got=$?
  if [ "$got" = "$rc" ] && grep -qF -- "$msg" <<<"$out"; then ok "$name"; else bad "$name: rc=$got out=$out"; fi
}
expect_refusal "unknown layout" 1 "unknown --like 'd3-edge'" "$T/r1" --like d3-edge
expect_refusal "a quantized scheme" 1 "--like applies only to --scheme bf16" "$T/r2" --like d3 --scheme fp8
expect_refusal "a shard size" 1 "--max-shard-bytes does not apply with --like" "$T/r3" --like d3 --max-shard-bytes 100000
[ ! -e "$T/r1" ] && [ ! -e "$T/r2" ] && [ ! -e "$T/r3" ] && ok "refusals write nothing" || bad "a refusal left files"

echo "== $fails failures"
[ "$fails" = 0 ]
