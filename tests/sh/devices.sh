#!/usr/bin/env bash
# `vllm-srun devices`: the table and --json on this host (the CPU is always there; no GPU
# library is needed), and usage errors.
set -eu
t=$("$VSR_BIN" devices)
echo "$t" | head -1 | grep -q '^ID  *NAME  *ARCH  *MEMORY GiB free/total  *BF16  *FP8  *int4  *NVFP4$'
echo "$t" | grep -q '^cpu  .* yes (.*)  *no  *unverified  *no$'
echo "$t" | grep -q '^auto: \(cpu\|cuda:[0-9]*\|rocm:[0-9]*\) '
echo "$t" | grep -q '^cpu      CPU; NVFP4: the device is a CPU$'

"$VSR_BIN" devices --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert set(j) == {"auto", "devices", "notes", "build"}, j.keys()
ids = [d["id"] for d in j["devices"]]
assert ids.count("cpu") == 1, ids
assert j["auto"] in ids, (j["auto"], ids)
kinds = [d["kind"] for d in j["devices"]]
# auto is the first ROCm device, else the first CUDA device, else the CPU
want = next((d["id"] for k in ("rocm", "cuda", "cpu") for d in j["devices"] if d["kind"] == k))
assert j["auto"] == want, (j["auto"], want)
cpu = j["devices"][ids.index("cpu")]
assert cpu["fp8"] == "no" and cpu["int4"] == "unverified" and cpu["nvfp4"] == "no" and cpu["bf16"] is True, cpu
assert cpu["nvfp4_missing"] == "the device is a CPU"
assert cpu["cores"] >= 1 and 0 < cpu["mem_free_bytes"] <= cpu["mem_total_bytes"], cpu
for d in j["devices"]:
    assert d["fp8"] in ("no", "e4m3", "e4m3fnuz") and d["int4"] in ("no", "fused", "unpacked", "unverified")
    if d["kind"] == "cuda":
        assert "cc" in d and d["int4"] in ("fused", "no")
        # No FP4 activation-quantization kernel exists yet: NVFP4 is refused on every GPU.
        assert d["nvfp4"] == "no" and d["nvfp4_missing"], d
assert j["build"]["fp4_act_kernel"] is False
'

set +e
err=$("$VSR_BIN" devices --bogus 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" -eq 2 ]
echo "$err" | grep -q "^vllm-srun devices: unknown argument '--bogus'$"
"$VSR_BIN" devices --help | grep -q '^usage: vllm-srun devices \[--json\]'
echo ok
