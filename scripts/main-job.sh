#!/usr/bin/env bash
# The main job: install what is missing, build, install the built-in default
# package (a deterministic Decision 3.0 fixture) into a package store, start a
# worker on it, wait until it is ready, ask it one decision with curl, print the
# answer, and stop the worker with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
make -j"$(nproc)" build/vllm-srun >/dev/null
BIN=$PWD/build/vllm-srun
export HF_HUB_CACHE=${HF_HUB_CACHE:-$PWD/build/store}
PORT=${PORT:-8100}
MODEL=vllm-sr-c/d3-tiny

echo "== devices"
"$BIN" devices
echo "== installing the built-in package $MODEL into $HF_HUB_CACHE"
"$BIN" fixture --install-builtin "$MODEL"
"$BIN" inspect "$MODEL"

echo "== starting the worker on 127.0.0.1:$PORT"
"$BIN" serve "$MODEL" --device cpu --port "$PORT" --log-level warn &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health" || true)
  [ "$code" = 200 ] && break
  kill -0 $pid 2>/dev/null || { echo "the worker exited"; exit 1; }
  sleep 0.2
done
[ "$code" = 200 ] || { echo "the worker did not become ready"; exit 1; }
curl -s "http://127.0.0.1:$PORT/v1/models" | python3 -c 'import json,sys; m=json.load(sys.stdin)["data"][0]; print("ready:", m["id"], "revision", m["revision"], "model_sha256", m["model_sha256"], "golden", m["golden"]["status"])'

echo "== POST /v1/decisions"
curl -s -D /dev/stderr "http://127.0.0.1:$PORT/v1/decisions" -H 'Content-Type: application/json' -d '{
  "state": "Write a Python function that merges two sorted lists and explain its running time.",
  "questions": {
    "domain": {"type": "choice", "instructions": "Which domain does this request belong to?",
               "criteria": {"code": "Programming", "math": "Mathematics", "other": "Anything else"}},
    "reasoning": {"type": "noul", "instructions": "Does answering this request need multi-step reasoning?"},
    "difficulty": {"type": "score", "instructions": "How difficult is this request?",
                   "criteria": ["Trivial", "Moderate", "Hard"]}},
  "options": {"return_meta": true}}' 2> >(grep -i server-timing >&2) | python3 -m json.tool
kill -TERM $pid; wait $pid; trap - EXIT
echo "== worker stopped cleanly"
