#!/usr/bin/env bash
# `vllm-srun inspect` reports what a load would refuse: on a package broken in one way (a
# required tensor missing, no usable input limit, an unknown chat template), with its
# manifest rewritten so the hashes and identity still match, inspect shows the refusal as
# every device's verdict and exits 1, and `decide` refuses the same package with the same
# reason. The untouched package inspects with "load check: ok" and exit 0.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
vsr_tmpdir

# Rewrites MODEL_MANIFEST.json from the files (sha256, bytes, identity as the reference's
# model_identity computes it), keeping everything else.
remanifest() {
  python3 - "$1" <<'PY'
import hashlib, json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "MODEL_MANIFEST.json")))
sha = lambda n: hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest()
for n in list(m["files_sha256"]):
    m["files_sha256"][n] = sha(n)
    if n in m.get("files_bytes", {}):
        m["files_bytes"][n] = os.path.getsize(os.path.join(d, n))
dec = json.load(open(os.path.join(d, "decision_config.json")))
keys = ("format_version", "format_id", "prompt", "base_model", "revision", "codes", "token_ids",
        "temperature", "attention_mode", "pooling", "max_length", "readout_dtype")
files = {n: sha(n) for n in m["files_sha256"]
         if (n.endswith(".safetensors") and n != "readout.safetensors")
         or n in ("readout.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")}
blob = json.dumps({"files": files, "decision": {k: dec[k] for k in keys if k in dec}},
                  sort_keys=True, separators=(",", ":")).encode()
m["identity"]["model_sha256"] = hashlib.sha256(blob).hexdigest()
for k, v in list(m["identity"].get("files_sha256", {}).items()):
    m["identity"]["files_sha256"][k] = files.get(k, v)
json.dump(m, open(os.path.join(d, "MODEL_MANIFEST.json"), "w"), indent=2, sort_keys=True)
PY
}

"$BIN" fixture "$T/good" --family decision3 --size tiny --scheme bf16 --seed 3 >/dev/null 2>&1 || { echo "FAIL fixture"; exit 1; }
printf '%s' '{"state":"Is 17 prime?","questions":{"m":{"type":"noul","instructions":"Math?"}}}' > "$T/req.json"

out=$("$BIN" inspect "$T/good" 2>&1); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q "^load check:  ok (tensors" && echo "$out" | grep -Eq "^  cpu .*: ok$" \
  && ok "an intact package: load check ok, exit 0" || bad "intact: $rc $out"

# 1. a required tensor missing: rename it in the safetensors header (same length), so the
#    file stays well formed and the manifest can match it again.
cp -r "$T/good" "$T/notensor"
python3 - "$T/notensor/model.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = bytes(b[8:8 + n])
old = b"model.language_model.layers.0.mlp.up_proj.weight\""
assert h.count(old) == 1, "tensor not in header"
b[8:8 + n] = h.replace(old, b"model.language_model.layers.0.mlp.uq_proj.weight\"")
open(p, "wb").write(b)
PY
remanifest "$T/notensor"
want='tensor "model.language_model.layers.0.mlp.up_proj.weight" is missing'
out=$("$BIN" inspect "$T/notensor" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -Fq "load check:  a load refuses this package: weights: $want" \
  && echo "$out" | grep -E "^  cpu " | grep -Fq "refused: weights: $want" \
  && ok "missing tensor: refused in the device verdict, exit 1" || bad "missing tensor inspect: $rc $out"
out=$("$BIN" inspect "$T/notensor" --json 2>/dev/null); rc=$?
[ $rc = 1 ] && echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["load"]["status"] == "refused" and "up_proj.weight\" is missing" in d["load"]["reason"], d["load"]
assert d["devices"] and all(x["verdict"] == "refused" and x["reason"] == d["load"]["reason"] for x in d["devices"]), d["devices"]
' && ok "missing tensor: --json load and device verdicts" || bad "missing tensor json: $rc $out"
out=$("$BIN" inspect "$T/notensor" --verify 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -Fq "refused: weights: $want" && ok "--verify: hashes match, the tensor check refuses" \
  || bad "missing tensor --verify: $rc $out"
out=$("$BIN" decide "$T/notensor" --device cpu --request "$T/req.json" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -Fq "$want" && ok "decide refuses it with the same reason" || bad "decide: $rc $out"

# 2. no usable input limit: max_length null and max_position_embeddings 8
cp -r "$T/good" "$T/nolimit"
python3 - "$T/nolimit" <<'PY'
import json, os, sys
d = sys.argv[1]
for name, edit in (("decision_config.json", lambda j: j.__setitem__("max_length", None)),
                   ("config.json", lambda j: j["text_config"].__setitem__("max_position_embeddings", 8))):
    p = os.path.join(d, name)
    j = json.load(open(p))
    edit(j)
    json.dump(j, open(p, "w"), indent=2)
PY
remanifest "$T/nolimit"
out=$("$BIN" inspect "$T/nolimit" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -E "^  cpu " | grep -Fq "refused: the package declares no usable input limit" \
  && ok "no input limit: refused, exit 1" || bad "no limit: $rc $out"
out=$("$BIN" decide "$T/nolimit" --device cpu --request "$T/req.json" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -Fq "the package declares no usable input limit" && ok "decide refuses it too" \
  || bad "decide no limit: $rc $out"

# 3. a chat template the family does not render (checked by the decider a load opens)
cp -r "$T/good" "$T/template"
printf '{{ messages }}\n' > "$T/template/chat_template.jinja"
remanifest "$T/template"
out=$("$BIN" inspect "$T/template" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -E "^  cpu " | grep -Fq "is not a chat template the decision3 family renders" \
  && ok "unknown chat template: refused, exit 1" || bad "template: $rc $out"
"$BIN" verify "$T/template" >/dev/null 2>&1 && ok "(the same package verifies: only a load's decider refuses it)" \
  || bad "template package should verify"
exit $fail
