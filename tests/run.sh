#!/usr/bin/env bash
# Runs every test program (build/tests/test_*) and every shell test (tests/sh/*.sh).
# BUILD selects the build folder (build, build-asan). Exit status: 0 only if all pass.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export VSR_BIN="$PWD/$BUILD/vllm-srun" VSR_REPO="$PWD" VSR_NO_PROGRESS=1
pass=0; fail=0; failed=()
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  if out=$("$t" 2>&1); then pass=$((pass+1)); echo "PASS $name"
  else fail=$((fail+1)); failed+=("$name"); echo "FAIL $name"; echo "$out" | tail -40; fi
done
for t in tests/sh/*.sh; do
  [ -f "$t" ] || continue
  name=$(basename "$t")
  if out=$(bash "$t" 2>&1); then pass=$((pass+1)); echo "PASS $name"
  else fail=$((fail+1)); failed+=("$name"); echo "FAIL $name"; echo "$out" | tail -40; fi
done
echo "== $pass passed, $fail failed ${failed[*]:-}"
[ "$fail" -eq 0 ]
