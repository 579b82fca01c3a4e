#!/usr/bin/env bash
# vllm-srun tokenize: ids for --text and stdin lines (expected ids from Hugging Face
# `tokenizers` 0.23 on data/tokenizers/qwen3), package names through the store, refusals.
set -u
fail=0
TOK="$VSR_REPO/data/tokenizers/qwen3"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
check() { # name, got, want
  if [ "$2" != "$3" ]; then echo "FAIL $1: got [$2] want [$3]"; fail=1; else echo "ok   $1"; fi
}

check text "$("$VSR_BIN" tokenize "$TOK" --text 'Hello, world! <|im_start|>')" "[9707,11,1879,0,220,151644]"
check text-pcre2 "$("$VSR_BIN" tokenize "$TOK" --split pcre2 --text "It'S 2024 — naïve café 😀")" \
  "[2132,13272,220,17,15,17,19,1959,94880,586,51950,90316]"
want=$'[64,293]\n[]\n[220,856,197,14522,256]\n[151667]'
check stdin "$(printf 'a b\n\n  x\t\ty  \n<think>\n' | "$VSR_BIN" tokenize "$TOK")" "$want"

# a package name resolves through the store (refs/main -> snapshots/<commit>)
c=0123456789abcdef0123456789abcdef01234567
mkdir -p "$tmp/store/models--acme--tok/refs" "$tmp/store/models--acme--tok/snapshots/$c"
echo "$c" > "$tmp/store/models--acme--tok/refs/main"
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$tmp/store/models--acme--tok/snapshots/$c/"
check package "$("$VSR_BIN" tokenize acme/tok --store "$tmp/store" --text 'a b')" "[64,293]"
check package-at-rev "$("$VSR_BIN" tokenize "acme/tok@$c" --store "$tmp/store" --text 'a b')" "[64,293]"

# refusals: invalid UTF-8 (with the line and byte offset), unknown package, no tokenizer.json
out=$(printf 'ok\nx\xffy\n' | "$VSR_BIN" tokenize "$TOK" 2>&1); rc=$?
check bad-utf8-rc "$rc" 1
case "$out" in *"stdin line 2: tokenizer: text is not valid UTF-8 at byte offset 1"*) echo "ok   bad-utf8-msg";;
  *) echo "FAIL bad-utf8-msg: $out"; fail=1;; esac
out=$("$VSR_BIN" tokenize acme/none --store "$tmp/store" --text x 2>&1); rc=$?
check unknown-pkg-rc "$rc" 1
case "$out" in *"acme/none is not in the package store"*"acme/tok"*) echo "ok   unknown-pkg-msg";;
  *) echo "FAIL unknown-pkg-msg: $out"; fail=1;; esac
mkdir -p "$tmp/empty"
out=$("$VSR_BIN" tokenize "$tmp/empty" --text x 2>&1); rc=$?
check no-json-rc "$rc" 1
case "$out" in *"tokenizer.json: file is missing"*) echo "ok   no-json-msg";;
  *) echo "FAIL no-json-msg: $out"; fail=1;; esac
"$VSR_BIN" tokenize "$TOK" --split regex --text x >/dev/null 2>&1; check bad-split-rc "$?" 2
exit $fail
