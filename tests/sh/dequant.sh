#!/usr/bin/env bash
# vllm-srun dequant on the compressed-tensors-written samples (tests/data/ct): every output
# tensor must be bit-identical to the library's decompressed weights the sample script saved
# (ct_expected.safetensors, "decompressed.<module>.weight"). Compared with the Python standard
# library only (no torch), plus the command's usage and refusal paths.
set -u
BIN=${VSR_BIN:?}; REPO=${VSR_REPO:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0; pass=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL: $*"; }

compare() { # OURS EXPECTED -> prints "N identical" or the first difference
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def read(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]]) for k, v in h.items()}
ours, exp = read(sys.argv[1]), read(sys.argv[2])
want = {k[len("decompressed."):]: v for k, v in exp.items() if k.startswith("decompressed.")}
if sorted(ours) != sorted(want):
    print("names differ:", sorted(ours), sorted(want)); sys.exit(1)
for k in ours:
    if ours[k] != want[k]:
        print("differs:", k, ours[k][:2], want[k][:2]); sys.exit(1)
print(len(ours), "identical")
PY
}

for s in fp8_dynamic w4a16_asym_g128 w4a16_gidx_g128 nvfp4; do
  pkg="$REPO/tests/data/ct/$s"
  if out=$("$BIN" dequant "$pkg" --out "$tmp/$s.safetensors" 2>&1) && [[ $out == "wrote 2 dequantized BF16 weights"* ]]; then
    if r=$(compare "$tmp/$s.safetensors" "$pkg/ct_expected.safetensors") && [[ $r == "2 identical" ]]; then ok
    else bad "$s: $r"; fi
  else bad "$s: dequant: $out"; fi
done

# --tensor: one module, with or without ".weight"
"$BIN" dequant "$REPO/tests/data/ct/nvfp4" --out "$tmp/one.safetensors" --tensor model.layers.0.mlp.up_proj.weight >/dev/null \
  && python3 -c "import json,struct,sys;b=open(sys.argv[1],'rb').read();h=json.loads(b[8:8+struct.unpack('<Q',b[:8])[0]]);h.pop('__metadata__',None);sys.exit(0 if list(h)==['model.layers.0.mlp.up_proj.weight'] and h[list(h)[0]]['shape']==[24,128] else 1)" "$tmp/one.safetensors" \
  && ok || bad "--tensor did not write exactly the one module"
out=$("$BIN" dequant "$REPO/tests/data/ct/nvfp4" --out "$tmp/x.safetensors" --tensor model.nope 2>&1); rc=$?
[[ $rc == 1 && $out == *'no quantized module "model.nope"'* ]] && ok || bad "--tensor unknown: rc $rc: $out"

# usage errors
"$BIN" dequant "$REPO/tests/data/ct/nvfp4" >/dev/null 2>&1; [[ $? == 2 ]] && ok || bad "missing --out is not a usage error"
"$BIN" dequant --out "$tmp/x.safetensors" >/dev/null 2>&1; [[ $? == 2 ]] && ok || bad "missing PKG_DIR is not a usage error"

# a BF16 package: nothing to dequantize
mkdir -p "$tmp/bf16" && echo '{"model_type":"qwen3"}' > "$tmp/bf16/config.json"
out=$("$BIN" dequant "$tmp/bf16" --out "$tmp/x.safetensors" 2>&1); rc=$?
[[ $rc == 1 && $out == *"the package is BF16, nothing to dequantize"* ]] && ok || bad "bf16: rc $rc: $out"

# a refused config: the seed's text and the reason
mkdir -p "$tmp/awq" && cp "$REPO/tests/data/ct/w4a16_asym_g128/model.safetensors" "$tmp/awq/"
python3 -c "import json,sys;c=json.load(open(sys.argv[1]));c['quantization_config']['quant_method']='awq';json.dump(c,open(sys.argv[2],'w'))" \
  "$REPO/tests/data/ct/w4a16_asym_g128/config.json" "$tmp/awq/config.json"
out=$("$BIN" dequant "$tmp/awq" --out "$tmp/x.safetensors" 2>&1); rc=$?
[[ $rc == 1 && $out == *"only compressed-tensors int4 (pack-quantized), FP8 (float-quantized) and NVFP4 (nvfp4-pack-quantized) weights are supported: quantization_config.quant_method is \"awq\""* ]] \
  && ok || bad "awq: rc $rc: $out"

# a tensor whose shape breaks the layout: named in the message
mkdir -p "$tmp/badshape" && cp "$REPO/tests/data/ct/fp8_dynamic/config.json" "$tmp/badshape/"
python3 - "$REPO/tests/data/ct/fp8_dynamic/model.safetensors" "$tmp/badshape/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
# relabel q_proj's [16,1] scale as [1,16]: same bytes, wrong layout
h["model.layers.0.self_attn.q_proj.weight_scale"]["shape"] = [1, 16]
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
out=$("$BIN" dequant "$tmp/badshape" --out "$tmp/x.safetensors" 2>&1); rc=$?
[[ $rc == 1 && $out == *"tensor model.layers.0.self_attn.q_proj.weight_scale: BF16 [1,16], expected BF16 [16,1]"* ]] \
  && ok || bad "bad shape: rc $rc: $out"

echo "dequant: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
