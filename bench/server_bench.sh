#!/usr/bin/env bash
# Drives a real worker with `vllm-srun bench` at concurrency 1, 8 and 64 and writes
# bench/server_<name>.csv and a plot. Usage: bench/server_bench.sh NAME MODEL [REQUESTS] [extra serve args]
#   bench/server_bench.sh tiny vllm-sr-c/d3-tiny 2000
#   bench/server_bench.sh lite /abs/path/to/lite-bf16 64
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1; MODEL=$2; N=${3:-2000}; shift 3 || true
BIN=${VSR_BIN:-$PWD/build/vllm-srun}
PORT=$((30000 + RANDOM % 20000))
"$BIN" serve "$MODEL" --device cpu --port "$PORT" --log-level warn "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ]; do
  kill -0 $pid || exit 1; sleep 0.2; done
"$BIN" bench --port "$PORT" --concurrency 1,8,64 --requests "$N" --csv "bench/server_$NAME.csv"
python3 bench/plot_server.py "bench/server_$NAME.csv" "bench/server_$NAME.png" "$NAME"
