#!/usr/bin/env bash
# Realistic traffic against one worker, exact and batching, at c = 1, 4, 16, 64 (issue #25).
#   bench/traffic_bench.sh NAME MODEL DEVICE [REQUESTS_PER_LEVEL] [extra serve args]
#   bench/traffic_bench.sh small-cpu /abs/path/small cpu 128
#   bench/traffic_bench.sh lite-h200 /tmp/lite cuda:0 512 --autotune-cache /tmp/tune
# Writes bench/traffic/NAME.{csv,lat.csv,png}: per level and profile requests/s and p50/p95/p99,
# every request's latency (the CDF), and the repeated request at the varied set's mean length
# (the reference point of "varied traffic at c=1 has p95 within 1.25x of the repeated p50").
# The worker runs with --profile batching, so both profiles are served by the same process and
# measured back to back in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1; MODEL=$2; DEVICE=$3; N=${4:-256}; shift 4 || shift $#
BIN=${VSR_BIN:-$PWD/build/vllm-srun}
OUTD=${TRAFFIC_OUT:-bench/traffic}
mkdir -p "$OUTD"
T=$(mktemp -d)
python3 tools/bench_traffic.py --requests 256 --seed 1 > "$T/varied.jsonl"
python3 tools/bench_traffic.py --requests 256 --seed 1 --repeated > "$T/repeated.jsonl"
PORT=$((30000 + RANDOM % 20000))
"$BIN" serve "$MODEL" --device "$DEVICE" --port "$PORT" --log-level warn --profile batching --max-queue 4096 "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$T"' EXIT
t0=$(date +%s.%N)
until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ]; do
  kill -0 $pid || exit 1; sleep 0.2; done
echo "ready after $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
: > "$OUTD/$NAME.csv"; : > "$OUTD/$NAME.lat.csv"
run() { # label profile file levels
  "$BIN" bench --port "$PORT" --concurrency "$4" --requests "$N" --requests-file "$3" --profile "$2" \
    --csv "$T/l.csv" --latencies "$T/lat.csv"
  if [ ! -s "$OUTD/$NAME.csv" ]; then head -1 "$T/l.csv" | sed 's/^/traffic,profile,/' > "$OUTD/$NAME.csv"; fi
  tail -n +2 "$T/l.csv" | sed "s/^/$1,$2,/" >> "$OUTD/$NAME.csv"
  if [ ! -s "$OUTD/$NAME.lat.csv" ]; then head -1 "$T/lat.csv" | sed 's/^/traffic,profile,/' > "$OUTD/$NAME.lat.csv"; fi
  tail -n +2 "$T/lat.csv" | sed "s/^/$1,$2,/" >> "$OUTD/$NAME.lat.csv"
}
run repeated exact "$T/repeated.jsonl" 1
run varied exact "$T/varied.jsonl" 1,4,16,64
run varied batching "$T/varied.jsonl" 1,4,16,64
# the plot: the first Python with matplotlib (pyenv's python3 may lack it where Debian's has it)
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import matplotlib' 2>/dev/null; then
    "$py" bench/plot_traffic.py "$OUTD/$NAME.csv" "$OUTD/$NAME.lat.csv" "$OUTD/$NAME.png" "$NAME"; exit 0
  fi
done
echo "no plot: no python3 with matplotlib (apt-get install python3-matplotlib)" >&2
