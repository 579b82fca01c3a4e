#!/usr/bin/env bash
# `vllm-srun render`: every request of tests/data/decision/render_corpus.jsonl (one body a
# line) rendered and tokenized on the tiny fixture must equal, byte for byte, what the
# independent Python renderer (tools/d3_render_oracle.py: published-d3.md + Hugging Face
# tokenizers) wrote to render_expected.jsonl. Then: no weight is read (a truncated weight
# file still renders), an unknown chat template and a wrong tokenizer class are refused
# with the published messages, usage errors.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
D=${VSR_REPO:?}/tests/data/decision
vsr_tmpdir
"$BIN" fixture "$T/pkg" --family decision3 --size tiny --scheme bf16 --seed 1 >/dev/null || { bad fixture; exit 1; }

n=0
while IFS= read -r line; do
  n=$((n+1))
  printf '%s' "$line" > "$T/req.json"
  "$BIN" render "$T/pkg" --request "$T/req.json" 2>>"$T/stderr"
done < "$D/render_corpus.jsonl" > "$T/got.jsonl"
if cmp -s "$T/got.jsonl" "$D/render_expected.jsonl"; then
  ok "render: $n requests, $(wc -l < "$T/got.jsonl") lines equal to the Python oracle byte for byte"
else
  bad "render differs from render_expected.jsonl:"; diff <(cut -c1-300 "$T/got.jsonl") <(cut -c1-300 "$D/render_expected.jsonl") | head -20
fi

# the golden request from stdin; the weights are never read: with every tensor byte after
# the safetensors header zeroed (same size, so the manifest's sizes still hold) it renders
# the same
head -n1 "$D/render_corpus.jsonl" > "$T/golden.json"
want=$(head -n3 "$D/render_expected.jsonl")
cp -r "$T/pkg" "$T/noweights"
w="$T/noweights/model.safetensors"
hl=$(od -An -tu8 -N8 "$w" | tr -d ' ')
size=$(stat -c %s "$w")
truncate -s $((8 + hl)) "$w" && truncate -s "$size" "$w"
got=$("$BIN" render "$T/noweights" --request - < "$T/golden.json" 2>&1); rc=$?
[ $rc = 0 ] && [ "$got" = "$want" ] && ok "no weight is read" || bad "noweights: $rc ${got:0:300}"

# an unknown chat template is refused with the published message (one byte changed, so
# MODEL_MANIFEST.json's sizes still hold)
cp -r "$T/pkg" "$T/tmpl"
sed -i 's/assistant/Assistant/' "$T/tmpl/chat_template.jinja"
sha=$(sha256sum "$T/tmpl/chat_template.jinja" | cut -c1-12)
got=$("$BIN" render "$T/tmpl" --request "$T/golden.json" 2>&1); rc=$?
case "$got" in *"chat_template.jinja (sha256 $sha) is not a chat template the decision3 family renders"*)
  [ $rc = 1 ] && ok "unknown chat template refused" || bad "template rc $rc";;
  *) bad "template: $rc $got";; esac

# a tokenizer of another class is refused with the published message (same length)
cp -r "$T/pkg" "$T/cls"
sed -i 's/"tokenizer_class": *"Qwen2Tokenizer"/"tokenizer_class": "Qwen3Tokenizer"/' "$T/cls/tokenizer_config.json"
got=$("$BIN" render "$T/cls" --request "$T/golden.json" 2>&1); rc=$?
case "$got" in *"unsupported tokenizer class 'Qwen3Tokenizer'"*) [ $rc = 1 ] && ok "tokenizer class refused" || bad "class rc $rc";;
  *) bad "class: $rc $got";; esac

# a request-level error is one error line and exit status 1
got=$(printf '{"state":"x"}' | "$BIN" render "$T/pkg" --request - 2>/dev/null); rc=$?
[ $rc = 1 ] && [ "$got" = '{"error":{"code":"invalid_request","message":"questions must be an object with at least one question"}}' ] \
  && ok "request-level error" || bad "request error: $rc $got"
"$BIN" render "$T/pkg" >/dev/null 2>&1; [ $? = 2 ] && ok "usage without --request" || bad "usage"
"$BIN" render "$T/pkg" --request "$T/missing.json" >/dev/null 2>&1; [ $? = 2 ] && ok "unreadable request" || bad "missing file"
"$BIN" render --help | grep -q "usage: vllm-srun render" && ok "--help" || bad "help"
exit $fail
