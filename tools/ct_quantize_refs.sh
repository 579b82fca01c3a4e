#!/usr/bin/env bash
# Remakes tests/data/reference/ct_quantize_*.json: fixtures quantized by `vllm-srun quantize`,
# each checked by tools/ct_load_check.py (compressed-tensors + transformers + torch needed).
# Usage: VSR_BIN=build/vllm-srun bash tools/ct_quantize_refs.sh
set -eu
BIN=${VSR_BIN:-build/vllm-srun}; REPO=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$BIN" fixture "$tmp/tiny" --family decision3 --size tiny --scheme bf16 --seed 0 >/dev/null
"$BIN" fixture "$tmp/like" --like d3 --size tiny >/dev/null
CAL=(--calibration "$REPO/tests/data/compare/requests.jsonl" --group-size 64)
for case in "tiny fp8-dynamic" "tiny nvfp4" "like fp8-dynamic" "like nvfp4" "tiny w4a16-gptq" "tiny w4a16-awq"; do
  set -- $case
  out="$REPO/tests/data/reference/ct_quantize_${1}_${2}.json"
  extra=(); [[ $2 == w4a16-* ]] && extra=("${CAL[@]}")
  "$BIN" quantize "$tmp/$1" "$tmp/$1-$2" --scheme "$2" "${extra[@]}" >/dev/null
  python3 "$REPO/tools/ct_load_check.py" --bf16 "$tmp/$1" --out "$out" "$tmp/$1-$2"
done
