#!/usr/bin/env bash
# Runs each libFuzzer target (FUZZ_BUILD/fuzz_*, built by `make fuzz`) for FUZZ_SECONDS (20)
# seconds, starting from its committed seed corpus tests/fuzz/corpus_<name>; new inputs go to a
# scratch folder, never into the corpus. Prints each target's executions and coverage; exits 1
# if any target crashed, leaked or timed out (the reproducer is kept in FUZZ_ARTIFACTS, default
# a temporary folder, and named in the output).
set -u
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
SECS=${FUZZ_SECONDS:-20}
ART=${FUZZ_ARTIFACTS:-$(mktemp -d)}
mkdir -p "$ART"
fail=0; n=0
for t in "$FUZZ_BUILD"/fuzz_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t"); corpus=tests/fuzz/corpus_${name#fuzz_}
  [ -d "$corpus" ] || { echo "FAIL $name: no seed corpus $corpus"; fail=1; continue; }
  work=$(mktemp -d)
  "$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
       -artifact_prefix="$ART/$name-" "$work" "$corpus" > "$work.log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work.log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$work.log" | tail -1)
  if [ $rc = 0 ]; then echo "ok   $name: ${execs:-?} executions in ${SECS} s, ${cov:-cov ?}, seeds $(ls "$corpus" | wc -l)"
  else echo "FAIL $name: exit $rc; reproducer in $ART"; grep -m5 -A15 'ERROR\|runtime error\|deadly signal' "$work.log" | head -40; fail=1; fi
  n=$((n+1))
  rm -rf "$work" "$work.log"
done
[ $n -gt 0 ] || { echo "FAIL no fuzz targets in $FUZZ_BUILD (make fuzz)"; exit 1; }
exit $fail
