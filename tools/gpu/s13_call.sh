#!/bin/bash
# tools/gpu/s13_call.sh: one device call of the thirteenth session (bench/NOTES.md), in priority
# order, each step bounded, logs in $OUT:
#   1. the cuda golden answers of the built-ins re-recorded for the published prompt
#      (tools/record_goldens.py with .gpuw/vllm-srun);
#   2. the lite fixtures (bf16, w4a16-gptq) decided on cuda:0 against transformers' CPU answers
#      for the published prompt (tests/data/reference/d3-lite-*-answers.json), tolerance 0.02;
#   3. the CUDA tests of the split backend (.gpu, HEAD) and
#   4. of the build before the split (.gpu-before, 8fbb06c): same checks, same counts.
# Carried: .gpuc/after.tar.xz (.gpu/ and .gpuw/ of HEAD), .gpuc/before.tar.xz (.gpu-before/).
set -u
python3 -c "import tarfile; tarfile.open('.gpuc/after.tar.xz').extractall('.'); tarfile.open('.gpuc/before.tar.xz').extractall('.gpu-before')"
. tools/gpu/cuda_env.sh
export LD_LIBRARY_PATH="$PWD/.gpuw/lib:${LD_LIBRARY_PATH:-}" VSR_REPO=$PWD VSR_NO_PROGRESS=1
M="$OUT/main.log"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader; } | tee "$M"
step() { echo "== $(date -u +%T) $*" | tee -a "$M"; }
step "1. golden answers on cuda:0"
timeout 150 python3 tools/record_goldens.py --bin .gpuw/vllm-srun --device cuda:0 2>&1 | tail -8 | tee -a "$M"
cp data/golden_answers.json src/fixture/golden_answers.c "$OUT/"
for s in bf16 w4a16-gptq; do
  step "2. lite $s on cuda:0 against transformers (CPU, FP32), tolerance 0.02"
  timeout 200 python3 tools/d3_transformers_answers.py compare --scheme $s --size lite --vsr-bin .gpuw/vllm-srun \
    --device cuda:0 --tol 0.02 --log "$OUT/lite-$s-cuda.log" > /dev/null 2>>"$M"; echo "rc=$?" | tee -a "$M"
  tail -1 "$OUT/lite-$s-cuda.log" | tee -a "$M"
done
run_suite() { # dir label
  for t in test_cuda_ops test_cuda_fused test_cuda_quant; do
    s=$(date +%s)
    ( cd /tmp && timeout 200 "$OLDPWD/$1/$t" ) > "/tmp/$2-$t.log" 2>&1; rc=$?
    echo "$2 $t rc=$rc $(( $(date +%s) - s )) s: $(grep -E '^[0-9]+ checks' /tmp/$2-$t.log | tail -1)" | tee -a "$M"
    grep -E "^FAIL|failed" "/tmp/$2-$t.log" | head -5 | tee -a "$M"
  done
  cat /tmp/$2-test_cuda_*.log > "$OUT/$2-tests.log"
}
step "3. CUDA tests, HEAD (split backend)"; run_suite .gpu after
step "4. CUDA tests, before the split"; run_suite .gpu-before before
step done
