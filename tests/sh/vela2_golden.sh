#!/usr/bin/env bash
# Vela 2.0 golden answers and inspect (issue 23, "golden answers recorded for the CPU class"):
# the built-ins vllm-sr-c/vela2-* are installed, `vllm-srun golden` reports matched on the CPU
# (by name and for a local copy with the same bytes), `golden --record` prints what
# data/golden_answers.json holds for them, a weight byte changed with MODEL_MANIFEST.json and
# SHA256SUMS rewritten is refused by name (catalogue pin) and is `unverified` as a local copy,
# `fixture --install --family vela2` gives the built-in's revision, and `inspect` shows the heads.
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
REPO=${VSR_REPO:?}
vsr_tmpdir
export VSR_NO_PROGRESS=1
S=$T/store

out=$("$BIN" fixture --install-builtin vllm-sr-c/vela2-tiny --store "$S" 2>&1) \
  && "$BIN" fixture --install-builtin vela2-tiny-no-broad --store "$S" >/dev/null 2>&1 \
  && ok "install-builtin vela2-tiny, vela2-tiny-no-broad" || bad "install: $out"
SNAP=$(awk '{print $2}' <<<"$out")

for n in vela2-tiny vela2-tiny-no-broad; do
  g=$("$BIN" golden "vllm-sr-c/$n" --store "$S" --device cpu 2>&1); rc=$?
  [ $rc = 0 ] && grep -q "golden self-check on cpu: matched (6 of 6 values matched, reference cpu)" <<<"$g" \
    && ok "golden $n by name: matched on cpu" || bad "golden $n: $rc $g"
done

# --record prints the answers, spans and thresholds; they are what data/golden_answers.json records
"$BIN" golden vllm-sr-c/vela2-tiny --store "$S" --device cpu --record > "$T/rec.json" 2>/dev/null
python3 - "$T/rec.json" "$REPO/data/golden_answers.json" <<'PY' && ok "golden --record = the recorded CPU answers (answers, spans, thresholds)" || bad "record: $(head -c 300 "$T/rec.json")"
import json, math, sys
got = json.load(open(sys.argv[1]))["cpu"]
want = json.load(open(sys.argv[2]))["vllm-sr-c/vela2-tiny"]["cpu"]
assert set(got) == {"answers", "spans", "thresholds"} == set(want), list(got)
def close(a, b):
    if isinstance(b, float) or isinstance(a, float):
        return math.isclose(a, b, abs_tol=1e-9)
    if isinstance(b, dict):
        return set(a) == set(b) and all(close(a[k], b[k]) for k in b)
    if isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    return a == b
assert close(got, want)
assert any("@" in s["text"] for s in got["spans"]["pii"])
PY

# a local copy written by the fixture command has the built-in's bytes: matched too
"$BIN" fixture "$T/local" --family vela2 --size tiny >/dev/null 2>&1
g=$("$BIN" golden "$T/local" --device cpu 2>&1)
grep -q "matched (6 of 6" <<<"$g" && ok "golden of a local copy: matched" || bad "local: $g"

# --install --family vela2 names the package as the built-in and gives its revision
out=$("$BIN" fixture --install --family vela2 --size tiny --store "$T/s2" 2>&1)
grep -q "installed        vllm-sr-c/vela2-tiny@47b673d48e317c110cb0abc65d330f01a96826f5" <<<"$out" \
  && ok "fixture --install --family vela2: the built-in's revision" || bad "install vela2: $out"
out=$("$BIN" fixture "$T/x" --family vela2 --scheme fp8 2>&1); rc=$?
[ $rc = 2 ] && grep -q -- "--family vela2 takes OUT or --install" <<<"$out" && ok "vela2 with --scheme refused" || bad "scheme: $rc $out"

out=$("$BIN" fixture "$T/y" --install --family vela2 2>&1); rc=$?
[ $rc = 2 ] && grep -q "give an OUT folder, or --install (not both)" <<<"$out" && ok "vela2: OUT and --install refused" || bad "out+install: $rc $out"
out=$("$BIN" fixture "$T/y" --family vela2 --store "$T/s3" 2>&1); rc=$?
[ $rc = 2 ] && grep -q -- "--store applies only with --install or --install-builtin" <<<"$out" && ok "vela2: --store without --install refused" || bad "store: $rc $out"

# another calibration in the built-in's snapshot, manifest rewritten: the manifest pin refuses it
"$BIN" fixture --install-builtin vllm-sr-c/vela2-tiny --store "$T/s4" >/dev/null 2>&1
SNAP4=$(ls -d "$T"/s4/models--vllm-sr-c--vela2-tiny/snapshots/*)
python3 - "$SNAP4" <<'PY'
import hashlib, json, os, sys
d = sys.argv[1]; p = lambda f: os.path.join(d, f)
c = json.load(open(p("calibration.json"))); c["thresholds"]["span:halu"] = 0.9
os.unlink(p("calibration.json")); json.dump(c, open(p("calibration.json"), "w"))
sha = lambda f: hashlib.sha256(open(p(f), "rb").read()).hexdigest()
m = json.load(open(p("MODEL_MANIFEST.json"))); m["files_sha256"]["calibration.json"] = sha("calibration.json")
os.unlink(p("MODEL_MANIFEST.json")); json.dump(m, open(p("MODEL_MANIFEST.json"), "w"))
os.unlink(p("SHA256SUMS"))
PY
g=$("$BIN" golden vllm-sr-c/vela2-tiny --store "$T/s4" --device cpu 2>&1); rc=$?
[ $rc = 1 ] && grep -q "manifest_sha256 is [0-9a-f]\{64\} but the catalogue pins 5c51512ae2b6ebc195350ec26faa2fcec231146f8d76d7cde055f3604b19ed4a for this built-in package" <<<"$g" \
  && ok "another calibration in the built-in's snapshot: refused by the manifest pin" || bad "manifest pin: $rc $g"

# one weight byte changed (the sign of span2.v.weight[0]) and every digest rewritten to match
flip() { python3 - "$1" <<'PY'
import hashlib, json, os, struct, sys
d = sys.argv[1]
shard = os.path.join(d, "model-00002-of-00002.safetensors")
b = bytearray(open(shard, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
off = 8 + n + h["span2.v.weight"]["data_offsets"][0]
b[off + 3] ^= 0x80
os.unlink(shard); open(shard, "wb").write(b)
sha = lambda p: hashlib.sha256(open(os.path.join(d, p), "rb").read()).hexdigest()
m = json.load(open(os.path.join(d, "MODEL_MANIFEST.json")))
m["files_sha256"]["model-00002-of-00002.safetensors"] = sha("model-00002-of-00002.safetensors")
os.unlink(os.path.join(d, "MODEL_MANIFEST.json"))
json.dump(m, open(os.path.join(d, "MODEL_MANIFEST.json"), "w"), indent=2, sort_keys=True)
names = sorted(f for f in os.listdir(d) if f != "SHA256SUMS")
os.unlink(os.path.join(d, "SHA256SUMS"))
open(os.path.join(d, "SHA256SUMS"), "w").write("".join(f"{sha(f)}  {f}\n" for f in names))
PY
}
flip "$SNAP"
g=$("$BIN" golden vllm-sr-c/vela2-tiny --store "$S" --device cpu 2>&1); rc=$?
[ $rc = 1 ] && grep -q "model_sha256 is [0-9a-f]\{64\} but the catalogue pins b52203853b1e0ffdad0346642f67a336f06ca83f1f36f6ffcd15f2085c045a82 for this built-in package" <<<"$g" \
  && ok "changed weight byte, digests rewritten: refused by name (catalogue pin)" || bad "tampered by name: $rc $g"
cp -r "$T/local" "$T/tampered"
flip "$T/tampered"
g=$("$BIN" golden "$T/tampered" --device cpu 2>&1); rc=$?
[ $rc = 0 ] && grep -q "golden self-check on cpu: unverified" <<<"$g" \
  && ok "the same change to a local copy: no longer the built-in, unverified (never matched)" || bad "tampered copy: $rc $g"

# inspect shows the vela2 heads, not a Decision 3.0 readout
i=$("$BIN" inspect vllm-sr-c/vela2-tiny-no-broad --store "$S" 2>&1)
grep -q "^  router span span2.\*, d 32, slots 8" <<<"$i" && grep -q "^  broad span  none (no broad_head.safetensors)" <<<"$i" \
  && grep -q "^parameters:  backbone 10,007,800, heads 17,602, loaded 10,025,402" <<<"$i" \
  && grep -q "^presets:     pii, halu, relevance" <<<"$i" && grep -q "golden answers recorded for cpu" <<<"$i" \
  && ! grep -q "readout" <<<"$i" && ok "inspect: heads, parameters, presets, catalogue" || bad "inspect: $i"
"$BIN" inspect "$T/local" --json --verify 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
v = d["vela2"]
assert v["heads"]["broad_span"] == {"tensors": "span_broad.*", "d": 32, "slots": 8}, v
assert v["heads"]["router_span"]["d"] == 32 and v["heads"]["candidate"]["head_dim"] == 32
assert d["parameters"]["heads"] == 26691 and d["parameters"]["loaded"] == 10034491
assert d["identity"]["computed_model_sha256"] == "b52203853b1e0ffdad0346642f67a336f06ca83f1f36f6ffcd15f2085c045a82"
assert d["identity"]["model_sha256"] is None and d["load"]["status"] == "ok"' \
  && ok "inspect --json --verify: vela2 heads and the computed identity" || bad "inspect --json"

exit $fail
