#!/bin/bash
# session 6, call 8 (130590c, final): test_cuda_fused and test_cuda_ops; the built-ins' golden self-check on
# cuda:0 (and NVFP4's refusal); the FP8 worker with --autotune-cache; the 27B-shaped packages end to end, BF16
# then FP8 in one call (the same clocks for the ratio), FP8 also with VSR_CUDA_FP8_FAST_ACCUM=1; test_cuda_quant
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
G=.gpu-me
( cd /tmp && timeout 120 $OLDPWD/$G/test_cuda_fused ) > $OUT/fused.txt 2>&1; echo "fused rc=$?"
grep -hE "checks|^FAIL|failed" $OUT/fused.txt | head -6
( cd /tmp && timeout 200 $OLDPWD/$G/test_cuda_ops ) > $OUT/ops.txt 2>&1; echo "ops rc=$?"; grep -E "checks|^FAIL" $OUT/ops.txt | tail -3
grep -o "v6 output hash [0-9a-f]*" $OUT/ops.txt | md5sum
export HF_HUB_CACHE=/tmp/store VSR_NO_PROGRESS=1
B=".gpuw/vllm-srun"
( export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}"
  $B fixture --install-builtin all > /dev/null 2>&1
  for m in d3-tiny d3-tiny-FP8 d3-tiny-W4A16-GPTQ d3-tiny-W4A16-AWQ d3-tiny-NVFP4; do
    echo "-- $m"; timeout 60 $B golden vllm-sr-c/$m --device cuda:0 2>&1 | tail -1
  done
  req='{"state":"Write a Python function that merges two sorted lists and explain its running time.","questions":{"domain":{"type":"choice","instructions":"Which domain does this request belong to?","criteria":{"code":"Programming","math":"Mathematics","other":"Anything else"}},"reasoning":{"type":"noul","instructions":"Does answering this request need multi-step reasoning?"},"difficulty":{"type":"score","instructions":"How difficult is this request?","criteria":["Trivial","Moderate","Hard"]}}}'
  $B serve vllm-sr-c/d3-tiny-FP8 --device cuda:0 --port 8100 --autotune-cache /tmp/wtune --log-level warn 2> $OUT/worker.err &
  pid=$!
  for i in $(seq 1 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:8100/health)" = 200 ] && break; kill -0 $pid || break; sleep 0.1; done
  echo "-- worker d3-tiny-FP8 --autotune-cache"; curl -s localhost:8100/v1/decisions -d "$req"; echo
  curl -s localhost:8100/v1/models | python3 -c 'import json,sys; c=json.load(sys.stdin)["data"][0]; print({k: c[k] for k in ("device","quantization","golden","status")})'
  kill -TERM $pid; wait $pid; echo "worker exit $?"
) 2>&1 | tee $OUT/golden.txt
mkdir -p /tmp/vsr-tune
for scheme in bf16 fp8; do
  rm -rf /tmp/d3-27b
  ( time timeout 300 $G/mkfixture /tmp/d3-27b 27b-shape $scheme ) > $OUT/fixture27-$scheme.log 2>&1; tail -n 3 $OUT/fixture27-$scheme.log | head -1
  VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 timeout 200 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-$scheme.log 2>&1
  echo "== $scheme rc=$?"; grep -E "whole forward|^forward.*(best|median)" $OUT/e2e27-$scheme.log
done
VSR_CUDA_FP8_FAST_ACCUM=1 VSR_AUTOTUNE_DIR=/tmp/vsr-tune VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=1 timeout 200 $G/bench_cuda /tmp/d3-27b > $OUT/e2e27-fp8-fast.log 2>&1
echo "== fp8 fast rc=$?"; grep -E "^forward.*(best|median)" $OUT/e2e27-fp8-fast.log
( cd /tmp && timeout 170 $OLDPWD/$G/test_cuda_quant ) > $OUT/quant.txt 2>&1; echo "quant rc=$?"; grep -E "checks|^FAIL" $OUT/quant.txt | tail -4
tar czf $OUT/logs.tgz -C $OUT fused.txt ops.txt quant.txt worker.err 2>/dev/null; rm -f $OUT/fused.txt $OUT/ops.txt $OUT/quant.txt $OUT/worker.err
ls $OUT
