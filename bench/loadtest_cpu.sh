#!/usr/bin/env bash
# The seed's workflow end to end on the CPU (issue 22): a BF16 Decision 3.0 fixture, quantized to
# W4A16 (GPTQ and AWQ, calibrated on the traffic generator's prompts), each compared against BF16
# (the eval column), each served and load-tested with `vllm-srun bench --sla-ms` (the table row).
# FP8 and NVFP4 are refused on this CPU by the device table, so they have no row here.
#   bench/loadtest_cpu.sh [SIZE [SLA_MS [REQUESTS]]]   (default: small 1000 48)
# Writes bench/loadtest/SIZE-cpu.md (the table), its plot SIZE-cpu.png and the compare summaries beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-small}; SLA=${2:-1000}; N=${3:-48}
B=${VSR_BIN:-$PWD/build/vllm-srun}
OUTD=bench/loadtest; mkdir -p "$OUTD"
T=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
export VSR_NO_PROGRESS=1
REQ=tests/data/compare/requests.jsonl
python3 tools/bench_traffic.py --requests 128 --seed 7 > "$T/calib.jsonl"
"$B" fixture "$T/bf16" --family decision3 --size "$SIZE" --scheme bf16 --seed 0 >/dev/null
for s in gptq awq; do
  /usr/bin/time -f "%e %M" -o "$T/time-$s" "$B" quantize "$T/bf16" "$T/w4-$s" --scheme w4a16-$s \
    --calibration "$T/calib.jsonl" --device cpu >/dev/null
  read -r secs rss < "$T/time-$s"; echo "quantize $SIZE -> w4a16-$s: $secs s, peak RSS $((rss / 1024)) MiB"
  "$B" compare "$T/bf16" "$T/w4-$s" --requests "$REQ" --device cpu --json "$OUTD/$SIZE-cpu-eval-w4a16-$s.json" \
    > "$OUTD/$SIZE-cpu-compare-w4a16-$s.txt"
done
echo "| Variant | Device | Max concurrency at SLA (p95 <= $SLA ms) | p95 ms | Requests/s | Eval |" > "$OUTD/$SIZE-cpu.md"
echo "|---|---|---|---|---|---|" >> "$OUTD/$SIZE-cpu.md"
for v in bf16 w4-gptq w4-awq; do
  "$B" serve "$T/$v" --device cpu --uds "$T/$v.sock" --served-model-name "$SIZE-$v" --log-level warn &
  pid=$!
  until curl -s --unix-socket "$T/$v.sock" http://x/health | grep -q '"ready"'; do kill -0 $pid; sleep 0.2; done
  ev=(); case $v in w4-*) ev=(--eval "$OUTD/$SIZE-cpu-eval-w4a16-${v#w4-}.json") ;; esac
  "$B" bench --uds "$T/$v.sock" --sla-ms "$SLA" --max-concurrency 16 --requests "$N" --requests-file "$REQ" \
    --variant "$SIZE-$v" "${ev[@]}" > "$T/bench-$v.txt"
  grep '^| ' "$T/bench-$v.txt" | tail -1 >> "$OUTD/$SIZE-cpu.md"
  kill -TERM $pid; wait $pid
done
cat "$OUTD/$SIZE-cpu.md"
# the plot: the first Python with matplotlib (pyenv's python3 may lack it where Debian's has it)
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import matplotlib' 2>/dev/null; then
    "$py" bench/plot_loadtest.py "$OUTD/$SIZE-cpu.md" "$OUTD/$SIZE-cpu.png" "$SIZE fixtures on the CPU, SLA p95 <= $SLA ms"
    exit 0
  fi
done
echo "no plot: no python3 with matplotlib (apt-get install python3-matplotlib)" >&2
