#!/bin/bash
# tools/gpu/s20.sh: the twentieth session's traffic call (issue 25, batching at c=16 on lite), from the
# repository root on the GPU machine, carrying .gpuc with two builds of `bash tools/gpu/s15.sh build`:
#   .gpuc/old.tar.xz  the scheduler before this session (a coalescing job joins a forward only once it has
#                     waited --batch-wait-ms itself);
#   .gpuc/s15.tar.xz  this session's (once the oldest has waited, every coalescing job that has arrived joins;
#                     no wait at all when their work already fills a forward).
# Both run bench/traffic_bench.sh on the lite fixture, buckets on, back to back on the same GPU (96 requests a
# level); `vllm-srun bench` reports each level's device-busy %, forwards and rows per forward from /metrics.
# Then the new build at --batch-wait-ms 0 and 5. Outputs under $OUT: one s15-traffic*.tgz per run.
# Second call of the session: `bash tools/gpu/s20.sh tests old new` with the window held only while requests come
# together, and the int4 wide list on by default.
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
summ() { # the batching rows and the exact c=1 row of a run's CSV
  python3 - "$1" <<'PY'
import csv, sys, glob
for f in glob.glob(sys.argv[1]):
    for r in csv.DictReader(open(f)):
        if r["traffic"] == "varied":
            print(f"  {r['profile']:9s} c={r['concurrency']:>2s} {float(r['rps']):7.1f} req/s p50 {float(r['p50_ms']):6.1f} "
                  f"p95 {float(r['p95_ms']):6.1f} ms  busy {r['device_busy_pct']}%  forwards {r['forwards']}  "
                  f"rows/fwd {r['rows_per_forward']}")
PY
}
run() { # tag tarball warm extra-serve-args
  mkdir -p "$OUT/$1"
  OUT=$OUT/$1 S15_TARBALL=$2 TRAFFIC_WARM=$3 TRAFFIC_MODES=buckets TRAFFIC_N=${TRAFFIC_N:-96} TRAFFIC_TAG=$1 \
    TRAFFIC_ARGS="$4" timeout 170 bash tools/gpu/s15.sh run traffic 2>&1 | tail -4
  tar -xzf "$OUT/$1"/s15-traffic.tgz -C /tmp 2>/dev/null && summ "/tmp/s15/lite-h200-buckets-$1.csv"; rm -rf /tmp/s15
  echo "-- $1 done at $(( $(date +%s) - T0 )) s"
}
# steps (default: old new new-w0 new-w5); "tests": the CUDA int4 tests and test_buckets of the new build first
STEPS=${*:-old new new-w0 new-w5}
for st in $STEPS; do
  case $st in
    tests)
      rm -rf .gpus; tar -xJf .gpuc/s15.tar.xz; S=$PWD/.gpus
      for f in $S/lib/*; do ldconfig -p | grep -qE "^[[:space:]]*$(basename "$f") " && rm -f "$f"; done
      ( export LD_LIBRARY_PATH=$S/lib; . tools/gpu/cuda_env.sh
        ( cd /tmp && VSR_QUANT_TESTS=int4 timeout 150 $S/test_cuda_quant ) > "$OUT/test_cuda_quant.log" 2>&1
        echo "test_cuda_quant (int4) rc=$? $(tail -1 "$OUT/test_cuda_quant.log")"
        grep -E "FAIL|int4: [0-9]+ fused" "$OUT/test_cuda_quant.log" | head -8
        VSR_BK_DEVICE=cuda:0 VSR_BK_TOL=0.02 timeout 120 $S/test_buckets > "$OUT/test_buckets.log" 2>&1
        echo "test_buckets (cuda:0) rc=$? $(tail -1 "$OUT/test_buckets.log")" )
      echo "-- tests done at $(( $(date +%s) - T0 )) s" ;;
    old) rm -rf .gpus; run old .gpuc/old.tar.xz 0 ""; rm -rf .gpus ;;
    new) run new .gpuc/s15.tar.xz 1 "" ;;
    new-w0) run new-w0 .gpuc/s15.tar.xz 0 "--batch-wait-ms 0" ;;
    new-w5) run new-w5 .gpuc/s15.tar.xz 0 "--batch-wait-ms 5" ;;
  esac
done
echo "total $(( $(date +%s) - T0 )) s"
