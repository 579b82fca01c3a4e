#!/usr/bin/env bash
# Runs every test program (build/tests/test_*) and every shell test (tests/sh/*.sh).
# BUILD selects the build folder (build, build-asan).
#
# A suite says "skipped" by exiting 77 (as automake's test driver does) after printing why on a
# line starting "SKIP:"; a suite that exits 0 having printed only a "SKIP:" line as its verdict
# is counted as skipped too, never as passed. The last line is `N passed, N failed, N skipped`,
# after the list of skipped suites with their reasons.
# Exit status: 0 only if nothing failed and nothing skipped but GPU suites (test_cuda_*), which
# may skip where no GPU is present; VSR_ALLOW_SKIP=1 lets any suite skip (a machine without
# the tools scripts/setup.sh installs).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export VSR_BIN="$PWD/$BUILD/vllm-srun" VSR_REPO="$PWD" VSR_NO_PROGRESS=1
pass=0; fail=0; skip=0; failed=(); skipped=(); bad_skips=()
run_one() { # name, command...
  local name=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  local why
  why=$(printf '%s\n' "$out" | grep -m1 '^SKIP:' | sed 's/^SKIP: *//')
  if [ $rc = 77 ] || { [ $rc = 0 ] && [ -n "$why" ] && ! printf '%s\n' "$out" | grep -q '^\(ok \|PASS\|pass\)'; }; then
    skip=$((skip+1)); skipped+=("$name: ${why:-no reason given}"); echo "SKIP $name: ${why:-no reason given}"
    case "$name" in test_cuda_*) ;; *) bad_skips+=("$name");; esac
  elif [ $rc = 0 ]; then pass=$((pass+1)); echo "PASS $name"
  else fail=$((fail+1)); failed+=("$name"); echo "FAIL $name (exit $rc)"; printf '%s\n' "$out" | tail -40; fi
}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  run_one "$(basename "$t")" "$t"
done
for t in tests/sh/*.sh; do
  [ -f "$t" ] || continue
  run_one "$(basename "$t")" bash "$t"
done
if [ $skip -gt 0 ]; then
  echo "== skipped:"
  for s in "${skipped[@]}"; do echo "   $s"; done
fi
[ $fail -gt 0 ] && echo "== failed: ${failed[*]}"
rc=0
[ $fail -eq 0 ] || rc=1
if [ ${#bad_skips[@]} -gt 0 ] && [ "${VSR_ALLOW_SKIP:-0}" != 1 ]; then
  echo "== these suites must run here but skipped (install what scripts/setup.sh installs, or VSR_ALLOW_SKIP=1): ${bad_skips[*]}"
  rc=1
fi
echo "$pass passed, $fail failed, $skip skipped"
exit $rc
