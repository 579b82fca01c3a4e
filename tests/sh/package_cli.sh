#!/usr/bin/env bash
# vllm-srun inspect / verify / models on fixture packages of every scheme: a package
# verifies, built-ins installed in a store match their pins, a tampered byte is refused
# with the file named, and the catalogue lists the published packages.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
vsr_tmpdir
fail() { echo "FAIL: $*"; exit 1; }

for s in bf16 fp8 w4a16-gptq w4a16-awq nvfp4; do
  "$BIN" fixture "$T/$s" --family decision3 --size tiny --scheme "$s" --seed 1 >/dev/null 2>&1 || fail "fixture $s"
  out=$("$BIN" verify "$T/$s" 2>&1) || fail "verify $s: $out"
  echo "$out" | grep -q "^verified $T/$s" || fail "verify $s output: $out"
  echo "$out" | grep -q "verification     local" || fail "local verification $s: $out"
  out=$("$BIN" inspect "$T/$s" --gpu-memory-gb 24 2>&1) || fail "inspect $s: $out"
  echo "$out" | grep -q "not verified (run vllm-srun verify)" || fail "inspect identity $s"
  echo "$out" | grep -q "24.0 GB x 0.92 = 22.1 GB" || fail "inspect memory math $s: $out"
  echo "$out" | grep -q "cpu .*: " || fail "inspect device verdict $s"
done
# The CPU's verdict on FP8 is the seed's refusal.
"$BIN" inspect "$T/fp8" | grep -q "FP8 weights need an NVIDIA GPU of compute capability 8.9 or later" \
  || fail "inspect fp8 on cpu should show the FP8 refusal"
"$BIN" inspect "$T/nvfp4" | grep -q "NVFP4 packages need FP4 tensor cores" || fail "nvfp4 refusal"
"$BIN" inspect "$T/w4a16-gptq" | grep -Eq "MLP +up_proj +int4 in all" || fail "int4 scheme rows"
"$BIN" inspect "$T/fp8" --verify --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["identity"]["status"]=="verified", d["identity"]' \
  || fail "inspect --verify --json"

# tampered weights: named, exit 1
cp -r "$T/fp8" "$T/bad"
printf '\x01' | dd of="$T/bad/model.safetensors" bs=1 seek=100000 conv=notrunc 2>/dev/null
out=$("$BIN" verify "$T/bad" 2>&1) && fail "tampered package verified"
echo "$out" | grep -q "model.safetensors: sha256 mismatch: manifest says" || fail "tamper message: $out"

# a revision with a local path
out=$("$BIN" verify "$T/fp8" --revision main 2>&1) && fail "revision with a path accepted"
echo "$out" | grep -q "revision applies only to Hub repositories" || fail "path+revision message: $out"

# built-ins in a store: pinned
"$BIN" fixture --install-builtin all --store "$T/hub" >/dev/null 2>&1 || fail "install built-ins"
"$BIN" verify vllm-sr-c/d3-tiny-FP8 --store "$T/hub" | grep -q "pinned (matches the catalogue's pins)" || fail "pinned FP8 built-in"
out=$("$BIN" verify vllm-sr/d3-FP8 --store "$T/hub" 2>&1) && fail "absent repo verified"
echo "$out" | grep -q "vllm-sr/d3-FP8 is not in the package store $T/hub (the store holds: " || fail "absent repo message: $out"
out=$("$BIN" verify vllm-sr-c/d3-tiny@v9 --store "$T/hub" 2>&1) && fail "absent revision verified"
echo "$out" | grep -q 'revision "v9" is not in the package store' || fail "absent revision message: $out"

# models
out=$("$BIN" models)
echo "$out" | grep -q "^vllm-sr/d3-FP8@2fb271adbdaf6dc969ca1ca746b61a6a5127ed62  decision3  " || fail "models FP8 line"
echo "$out" | grep -q "^vllm-sr/d3-NVFP4-AWQ@27dbfdc48957f9cbc3b83ac49a58d3434451a0a9  decision3" || fail "models NVFP4-AWQ"
echo "$out" | grep -Eq "^vllm-sr-c/d3-tiny@[0-9a-f]{40}  decision3  [0-9,]+ parameters .*default" || fail "models default"
"$BIN" models --json | python3 -c 'import json,sys; d=json.load(sys.stdin); p=[x for x in d if x["published"]]; assert len(d) >= 21 and len(p) == 16 and sum(len(x.get("files_sha256",{})) for x in p) == 62 and sum(x["golden"]=="cpu,rocm" for x in p) == 6' \
  || fail "models --json"
echo "package_cli: all passed"
