#!/bin/bash
# session 5, call 8 (59be44c, final): test_cuda_quant's FP8 tests, the built-ins' golden self-check on cuda:0
# against the new recording, the FP8 worker with --autotune-cache (self-check, one decision), then the
# 27B-shaped packages end to end, BF16 then FP8, in one call (the same clocks for the ratio)
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
( cd /tmp && VSR_QUANT_TESTS=fp8 timeout 120 $OLDPWD/.gpu-me/test_cuda_quant ) > $OUT/quant_fp8.txt 2>&1; echo "quant rc=$?"
grep -hE "checks|^FAIL|failed|ovscale" $OUT/quant_fp8.txt | head -12
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
B=".gpuw/vllm-srun"
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  $B fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ; do
    echo "-- $m"; timeout 60 $B golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done
  req='{"state":"Write a Python function that merges two sorted lists and explain its running time.","questions":{"domain":{"type":"choice","instructions":"Which domain does this request belong to?","criteria":{"code":"Programming","math":"Mathematics","other":"Anything else"}},"reasoning":{"type":"noul","instructions":"Does answering this request need multi-step reasoning?"},"difficulty":{"type":"score","instructions":"How difficult is this request?","criteria":["Trivial","Moderate","Hard"]}}}'
  $B serve vllm-sr-c/d3-tiny-FP8 --device cuda:0 --port 8100 --autotune-cache /tmp/wtune --log-level warn 2> $OUT/worker.err &
  pid=$!
  for i in $(seq 1 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:8100/health)" = 200 ] && break; kill -0 $pid || break; sleep 0.1; done
  echo "-- worker d3-tiny-FP8 --autotune-cache"; curl -s localhost:8100/v1/decisions -d "$req"; echo
  curl -s localhost:8100/v1/models | python3 -c 'import json,sys; c=json.load(sys.stdin)["data"][0]; print({k: c[k] for k in ("device","quantization","golden","status")})'
  kill -TERM $pid; wait $pid; echo "worker exit $?"; ls /tmp/wtune | head -5
) 2>&1 | tee $OUT/golden.txt
GPU_OUT=.gpu-me bash tools/gpu/e2e27.sh bf16 fp8
