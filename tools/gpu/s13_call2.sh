#!/bin/bash
# tools/gpu/s13_call2.sh: the thirteenth session's second device call (bench/NOTES.md):
#   1. the built-ins' golden self-check on cuda:0 against the cuda answers recorded in call 1,
#      and the worker (new event-driven HTTP server) serving d3-tiny on cuda:0;
#   2. the GPU peer for the lite fixtures: transformers' Qwen3_5TextModel in bfloat16 on the H200
#      (the reference runtime's GPU numerics) on the same prompts, then our cuda:0 answers
#      against it (tolerance 0.02), and transformers bf16 against transformers fp32 (CPU, committed).
# Carried: .gpuc/w.tar.xz (.gpuw/ of HEAD).
set -u
python3 -c "import tarfile; tarfile.open('.gpuc/w.tar.xz').extractall('.')"
if ls .whl/*.whl >/dev/null 2>&1; then python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site; fi
. tools/gpu/cuda_env.sh
export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}" VSR_REPO=$PWD VSR_NO_PROGRESS=1 HF_HUB_CACHE=/tmp/store
B=$PWD/.gpuw/vllm-srun
M="$OUT/main.log"
step() { echo "== $(date -u +%T) $*" | tee -a "$M"; }
step "1. golden self-check on cuda:0"
$B fixture --install-builtin all >/dev/null 2>&1
for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
  timeout 60 $B golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1 | tee -a "$M"
done
req='{"state":"Write a Python function that merges two sorted lists and explain its running time.","questions":{"domain":{"type":"choice","instructions":"Which domain does this request belong to?","criteria":{"code":"Programming","math":"Mathematics","other":"Anything else"}},"reasoning":{"type":"noul","instructions":"Does answering this request need multi-step reasoning?"},"difficulty":{"type":"score","instructions":"How difficult is this request?","criteria":["Trivial","Moderate","Hard"]}}}'
$B serve vllm-sr-c/d3-tiny --device cuda:0 --port 8100 --log-level warn 2>>"$M" &
pid=$!
for i in $(seq 1 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:8100/health)" = 200 ] && break; sleep 0.1; done
{ curl -s localhost:8100/v1/decisions -d "$req"; echo; curl -s localhost:8100/v1/models | head -c 600; echo;
  timeout 60 $B bench --port 8100 --concurrency 1,8 --requests 200; } 2>&1 | tee -a "$M"
kill -TERM $pid; wait $pid; echo "serve exit $?" | tee -a "$M"
python3 -c "import compressed_tensors" 2>/dev/null && schemes="bf16 w4a16-gptq" || { schemes=bf16; echo "no compressed_tensors: int4 peer not run" | tee -a "$M"; }
for s in $schemes; do
  step "2. lite $s: transformers bf16 on cuda"
  timeout 150 python3 tools/d3_transformers_answers.py record --scheme $s --size lite --vsr-bin $B \
    --torch-device cuda --torch-dtype bfloat16 --answers "$OUT/lite-$s-tbf16.json" 2>&1 | grep -v "^\[transformers\]" | tail -2 | tee -a "$M"
  timeout 100 python3 tools/d3_transformers_answers.py compare --scheme $s --size lite --vsr-bin $B --device cuda:0 \
    --tol 0.02 --answers "$OUT/lite-$s-tbf16.json" --log "$OUT/lite-$s-ours-vs-tbf16.log" >/dev/null 2>>"$M"
  tail -1 "$OUT/lite-$s-ours-vs-tbf16.log" | tee -a "$M"
  python3 - "$OUT/lite-$s-tbf16.json" tests/data/reference/d3-lite-$s-answers.json <<'PY' 2>&1 | tee -a "$M"
import json, sys
a = {(r["line"], r["state"], r["question"]): r["probabilities"] for r in json.load(open(sys.argv[1]))["answers"]}
b = {(r["line"], r["state"], r["question"]): r["probabilities"] for r in json.load(open(sys.argv[2]))["answers"]}
d = {k: max(abs(x - y) for x, y in zip(a[k], b[k])) for k in b}
print(f"transformers bf16 (cuda) vs fp32 (cpu): {len(d)} answers, worst {max(d.values()):.3g}, "
      f"over 0.02: {sum(v > 0.02 for v in d.values())}")
PY
done
step done
