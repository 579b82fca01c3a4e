#!/usr/bin/env bash
# `vllm-srun quantize`: fp8-dynamic and nvfp4 packages of the BF16 tiny fixture (plain and
# --like d3: 11 shards + index + a vision tower) are byte-for-byte the packages the
# compressed-tensors oracle checked (model_sha256 of tests/data/reference/ct_quantize_*.json);
# `vllm-srun dequant` of each equals the library's decompressed weights (sha256 per tensor);
# verify and inspect accept them; the record and manifest; NVFP4's fused global scales; every
# refusal. Python standard library only.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
REF=$REPO/tests/data/reference
vsr_tmpdir

"$BIN" fixture "$T/tiny" --family decision3 --size tiny --scheme bf16 --seed 0 >/dev/null || bad "fixture tiny"
"$BIN" fixture "$T/like" --like d3 --size tiny >/dev/null || bad "fixture --like d3"

field() { python3 -c 'import json,sys;d=json.load(open(sys.argv[1]));print(eval("d"+sys.argv[2]))' "$1" "$2"; }

# sha256 of every tensor of a dequant output, compared with the library's decompressed weights
same_as_library() { # DEQUANT.safetensors REF.json
  python3 - "$1" "$2" <<'PY'
import hashlib, json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
ours = {k: hashlib.sha256(b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]]).hexdigest() for k, v in h.items()}
ref = json.load(open(sys.argv[2]))
want = ref["decompressed_sha256"]
ok = ours == want and ref["config_equal"] and ref["ignore_is_kept_linears"] and ref["ignore_order_is_named_modules"] \
    and (ref["rtn_all_identical"] or ref["scheme"].startswith("w4a16"))
print(f"{len(ours)} tensors, {sum(ours.get(k) == v for k, v in want.items())} identical" if ok else
      f"differ: ours {len(ours)} library {len(want)}")
sys.exit(0 if ok else 1)
PY
}

for src in tiny like; do
  for s in fp8-dynamic nvfp4; do
    ref=$REF/ct_quantize_${src}_${s}.json
    out=$("$BIN" quantize "$T/$src" "$T/$src-$s" --scheme "$s" 2>&1); rc=$?
    [ $rc = 0 ] || { bad "$src $s: quantize rc $rc: $out"; continue; }
    got=$(field "$T/$src-$s/MODEL_MANIFEST.json" '["identity"]["model_sha256"]')
    want=$(field "$ref" '["package_model_sha256"]')
    [ "$got" = "$want" ] && ok "$src $s: model_sha256 $got is the package the oracle checked" \
      || bad "$src $s: model_sha256 $got, the oracle checked $want"
    "$BIN" verify "$T/$src-$s" >/dev/null 2>&1 && ok "$src $s: verify" || bad "$src $s: verify refuses it"
    "$BIN" inspect "$T/$src-$s" >"$T/inspect" 2>&1
    grep -q "written by 0.20.1" "$T/inspect" && ok "$src $s: inspect reads its quantization_config" \
      || bad "$src $s: inspect: $(head -5 "$T/inspect")"
    if "$BIN" dequant "$T/$src-$s" --out "$T/$src-$s.deq" >/dev/null 2>&1 && r=$(same_as_library "$T/$src-$s.deq" "$ref"); then
      ok "$src $s: dequant equals compressed-tensors' decompression ($r)"
    else bad "$src $s: dequant vs library: ${r:-dequant failed}"; fi
  done
done

# w4a16-gptq / w4a16-awq: calibrated on the compare requests through our CPU forward. Their bytes
# depend on the CPU GEMM's summation order (AVX2 vs AVX-512 kernels), so the library comparison runs
# when this host reproduces the package the oracle checked; the packages must verify and load anyway.
CAL=(--calibration "$REPO/tests/data/compare/requests.jsonl" --group-size 64)
for s in w4a16-gptq w4a16-awq; do
  ref=$REF/ct_quantize_tiny_${s}.json
  out=$("$BIN" quantize "$T/tiny" "$T/tiny-$s" --scheme "$s" "${CAL[@]}" 2>&1) || { bad "$s: $out"; continue; }
  [[ $out == *"calibration      49226330353be32dfef52bba1e342db3c8a5f9f82a2bea0686ecf8de9acd5d42 (14 samples)"* ]] \
    && ok "$s: calibration sha256 and sample count reported" || bad "$s: $out"
  "$BIN" verify "$T/tiny-$s" >/dev/null 2>&1 && ok "$s: verify" || bad "$s: verify refuses it"
  head -1 "$REPO/tests/data/compare/requests.jsonl" >"$T/req.json"
  "$BIN" decide "$T/tiny-$s" --device cpu --request "$T/req.json" >/dev/null 2>&1 \
    && ok "$s: loads and answers on the CPU" || bad "$s: decide failed"
  got=$(field "$T/tiny-$s/MODEL_MANIFEST.json" '["identity"]["model_sha256"]')
  if [ "$got" = "$(field "$ref" '["package_model_sha256"]')" ]; then
    if "$BIN" dequant "$T/tiny-$s" --out "$T/$s.deq" >/dev/null 2>&1 && r=$(same_as_library "$T/$s.deq" "$ref"); then
      ok "$s: dequant equals compressed-tensors' decompression ($r)"
    else bad "$s: dequant vs library: ${r:-dequant failed}"; fi
  else
    echo "note $s: this host's calibration gives model_sha256 $got, not the oracle's; library comparison not run"
  fi
done

# Same input, same bytes (a second run), and the source is not touched.
"$BIN" quantize "$T/tiny" "$T/again" --scheme fp8-dynamic >/dev/null 2>&1
cmp -s "$T/again/model.safetensors" "$T/tiny-fp8-dynamic/model.safetensors" && cmp -s "$T/again/MODEL_MANIFEST.json" \
  "$T/tiny-fp8-dynamic/MODEL_MANIFEST.json" && ok "deterministic: a second run writes the same bytes" || bad "second run differs"
"$BIN" verify "$T/tiny" >/dev/null 2>&1 && ok "the source still verifies" || bad "the source changed"

# The record and the manifest
P=$T/tiny-fp8-dynamic
python3 - "$P" "$T/tiny" <<'PY' && ok "record: scheme, tool version, source identity, no calibration; listed in the manifest" || bad "record/manifest"
import json, sys
p, src = sys.argv[1], sys.argv[2]
r = json.load(open(p + "/quantization_record.json"))
m = json.load(open(p + "/MODEL_MANIFEST.json"))
s = json.load(open(src + "/MODEL_MANIFEST.json"))
assert r["scheme"] == "fp8-dynamic" and r["tool"] == "vllm-srun quantize" and r["tool_version"].startswith("vllm-srun quantize 1")
assert r["calibration"] is None and r["source"]["model_sha256"] == s["identity"]["model_sha256"]
assert r["recipe"]["ignore_patterns"][:2] == ["lm_head", "re:.*embed_tokens$"]
assert "quantization_record.json" in m["files_sha256"] and "quantization_record.json" not in m["identity"]["files_sha256"]
assert m["quantization"] == {"scheme": "fp8-dynamic", "record": "quantization_record.json", "source_model_sha256": s["identity"]["model_sha256"]}
assert m["model_name"] == "d3-tiny-FP8-Dynamic" and m["parameters"] == s["parameters"]
assert m["identity"]["model_sha256"] != s["identity"]["model_sha256"]
PY

# NVFP4: q/k/v share one global scale, gate/up another, down_proj its own
python3 - "$T/tiny-nvfp4/model.safetensors" <<'PY' && ok "nvfp4: global scale shared over q/k/v and over gate/up" || bad "nvfp4 fused global scales"
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
gs = {k[:-len(".weight_global_scale")]: struct.unpack("<f", b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]])[0]
      for k, v in h.items() if k.endswith(".weight_global_scale")}
L = "model.language_model.layers.3."
qkv = {gs[L + "self_attn." + x] for x in ("q_proj", "k_proj", "v_proj")}
gu = {gs[L + "mlp." + x] for x in ("gate_proj", "up_proj")}
assert len(qkv) == 1 and len(gu) == 1 and gs[L + "mlp.down_proj"] not in gu | qkv
PY

# Refusals (exit 2: options; exit 1: the package)
refuse() { # RC SUBSTRING ARGS...
  local want_rc=$1 want=$2; shift 2
  local out; out=$("$BIN" quantize "$@" 2>&1); local rc=$?
  if [ $rc = "$want_rc" ] && [[ $out == *"$want"* ]]; then ok "refused ($rc): $want"; else bad "wanted rc $want_rc '$want', got $rc: $out"; fi
}
echo '{"text": "hello"}' >"$T/calib.jsonl"
refuse 2 "unknown scheme 'int3' (expected fp8-dynamic|w4a16-gptq|w4a16-awq|nvfp4)" "$T/tiny" "$T/o1" --scheme int3
refuse 2 "--scheme is required" "$T/tiny" "$T/o1"
refuse 2 "--scheme w4a16-gptq needs --calibration FILE.jsonl" "$T/tiny" "$T/o1" --scheme w4a16-gptq
refuse 2 "--scheme w4a16-awq needs --calibration FILE.jsonl" "$T/tiny" "$T/o1" --scheme w4a16-awq
refuse 2 "--calibration applies to w4a16-gptq and w4a16-awq; fp8-dynamic is round-to-nearest" "$T/tiny" "$T/o1" --scheme fp8-dynamic --calibration "$T/calib.jsonl"
refuse 2 "--samples applies only with --calibration" "$T/tiny" "$T/o1" --scheme nvfp4 --samples 8
refuse 2 "--group-size applies to w4a16-gptq and w4a16-awq (nvfp4 has groups of 16 by definition)" "$T/tiny" "$T/o1" --scheme nvfp4 --group-size 32
refuse 2 "--group-size must be a positive multiple of 8" "$T/tiny" "$T/o1" --scheme w4a16-gptq --calibration "$T/calib.jsonl" --group-size 12
refuse 2 "--actorder applies only to w4a16-gptq" "$T/tiny" "$T/o1" --scheme w4a16-awq --calibration "$T/calib.jsonl" --actorder
refuse 2 "--device applies to the calibration forward" "$T/tiny" "$T/o1" --scheme fp8-dynamic --device cuda
refuse 2 "needs BF16_PKG and OUT" "$T/tiny"
refuse 2 "unknown option --bogus" "$T/tiny" "$T/o1" --scheme nvfp4 --bogus
refuse 1 "already exists; quantize writes a new folder" "$T/tiny" "$T/tiny-nvfp4" --scheme nvfp4
refuse 1 "is not a BF16 package: its weights are already FP8" "$T/tiny-fp8-dynamic" "$T/o1" --scheme nvfp4
refuse 1 "--group-size 48 does not divide in_features 128 of model.language_model.layers.0.linear_attn.out_proj" \
  "$T/tiny" "$T/o1" --scheme w4a16-gptq --calibration "$T/calib.jsonl" --group-size 48
refuse 1 "--ignore: the recipe's ignore[7] \"re:((\" is not a valid regex" "$T/tiny" "$T/o1" --scheme nvfp4 --ignore 're:(('
refuse 1 "the recipe leaves no Linear module to quantize" "$T/tiny" "$T/o1" --scheme nvfp4 --ignore 're:.*'
# the source and the calibration file: each named once, with what was expected
refuse 1 "vllm-srun quantize: $T/nonexistent: no such package folder" "$T/nonexistent" "$T/o1" --scheme fp8-dynamic
out=$("$BIN" quantize "$T/nonexistent" "$T/o1" --scheme fp8-dynamic 2>&1)
[ "$(grep -o "$T/nonexistent" <<<"$out" | wc -l)" = 1 ] && ok "the missing source is named once" || bad "source named twice: $out"
: >"$T/empty.jsonl"; echo 'not json' >"$T/notjson.jsonl"; echo '{"foo": 1}' >"$T/notext.jsonl"
G32=(--scheme w4a16-gptq --group-size 32)
refuse 1 "--calibration: $T/none.jsonl: cannot open the calibration file" "$T/tiny" "$T/o1" "${G32[@]}" --calibration "$T/none.jsonl"
refuse 1 "--calibration: $T/empty.jsonl: no calibration samples (expected JSON lines)" "$T/tiny" "$T/o1" "${G32[@]}" --calibration "$T/empty.jsonl"
refuse 1 "$T/notjson.jsonl line 1: expected a JSON object ({\"text\": ...} or a decision request with \"state\" and \"questions\")" \
  "$T/tiny" "$T/o1" "${G32[@]}" --calibration "$T/notjson.jsonl"
refuse 1 "$T/notext.jsonl line 1: a sample needs \"text\" (a string) or \"questions\" (a decision request)" \
  "$T/tiny" "$T/o1" "${G32[@]}" --calibration "$T/notext.jsonl"
refuse 1 "--device rocm:0 (the calibration forward): no device can serve this package: rocm: not available on this host" \
  "$T/tiny" "$T/o1" "${G32[@]}" --calibration "$T/calib.jsonl" --device rocm:0
refuse 1 "--ignore needs a module name or a \"re:\" regex, got an empty one" "$T/tiny" "$T/o1" --scheme nvfp4 --ignore ''
many=(); for i in $(seq 33); do many+=(--ignore "x$i"); done
refuse 2 "at most 32 --ignore patterns" "$T/tiny" "$T/o1" --scheme nvfp4 "${many[@]}"
# a span (token-classification) package may not carry quantized weights
cp -r "$T/tiny" "$T/span" && rm "$T/span/decision_config.json"
python3 - "$T/span" <<'PY'
import hashlib, json, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json")); c["architectures"] = ["Qwen3_5ForTokenClassification"]
open(d + "/config.json", "w").write(json.dumps(c))
m = json.load(open(d + "/MODEL_MANIFEST.json"))
for k in ("files_sha256", "files_bytes"): m[k].pop("decision_config.json", None)
m["files_sha256"]["config.json"] = hashlib.sha256(open(d + "/config.json", "rb").read()).hexdigest()
m["files_bytes"]["config.json"] = len(open(d + "/config.json", "rb").read())
open(d + "/MODEL_MANIFEST.json", "w").write(json.dumps(m))
PY
refuse 1 "--scheme fp8-dynamic is not allowed for a span package: only Decision 3.0 packages may carry quantized weights" "$T/span" "$T/o1" --scheme fp8-dynamic
# a tampered source is refused before any weight is quantized
cp -r "$T/tiny" "$T/bad" && python3 -c 'import sys;f=open(sys.argv[1],"r+b");f.seek(100);c=f.read(1);f.seek(100);f.write(bytes([c[0]^1]))' "$T/bad/tokenizer.json"
refuse 1 "the source package does not verify" "$T/bad" "$T/o1" --scheme fp8-dynamic
[ ! -e "$T/o1" ] && ! ls -d "$T"/o1.tmp* >/dev/null 2>&1 && ok "no OUT (and no temporary folder) after a refusal" || bad "a refusal left files"

# serve --quantize fp8-dynamic: gated as FP8 (this host has only a CPU: refused with the table's reason,
# never served as BF16); only fp8-dynamic; only a BF16 package
serve_refused() { # SUBSTRING ARGS...
  local want=$1; shift
  local out; out=$(timeout 60 "$BIN" serve "$@" --uds "$T/s.sock" 2>&1); local rc=$?
  if [ $rc = 1 ] && [[ $out == *"$want"* ]]; then ok "serve refused: $want"; else bad "serve: wanted '$want', got $rc: $out"; fi
}
serve_refused "cpu: FP8 weights need an NVIDIA GPU of compute capability 8.9 or later or an AMD Instinct MI300 or MI350 series GPU" \
  "$T/tiny" --device cpu --quantize fp8-dynamic
serve_refused "--quantize takes fp8-dynamic (got 'w4a16-gptq')" "$T/tiny" --device cpu --quantize w4a16-gptq
serve_refused "--quantize fp8-dynamic quantizes a BF16 package; $T/tiny-fp8-dynamic is already FP8" \
  "$T/tiny-fp8-dynamic" --device cpu --quantize fp8-dynamic
exit $fail
