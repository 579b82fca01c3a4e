#!/bin/bash
# session 12, call 3 (binaries of 2321f35 = HEAD's code): the 27B-shaped BF16 package at 3 x 128 under four GEMM
# selections (cuBLASLt autotuned by the default 16-candidate timing, cold; no autotune cache = the heuristic's
# first; the widened search; the first cache loaded again), with the SM clock, power and throttle reasons sampled
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
SECONDS=0
rm -rf /tmp/d3-27b
( time timeout 300 .gpu-me/mkfixture /tmp/d3-27b 27b-shape bf16 ) > /tmp/fx.log 2>&1; echo "fixture ${SECONDS}s"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 100 > $OUT/smi.csv 2>&1 &
SMI=$!
run() { # name, env...
  local name=$1; shift
  echo "$(date +%T.%N | cut -c1-12) start $name" >> $OUT/marks.txt
  env "$@" VSR_BENCH_E2E_ONLY=1 VSR_BENCH_PROFILE=0 VSR_BENCH_E2E_SHAPES=3x128 timeout 120 .gpu-old/bench_cuda /tmp/d3-27b > /tmp/e2e-$name.log 2>&1
  echo "$(date +%T.%N | cut -c1-12) end $name" >> $OUT/marks.txt
  echo "== $name rc=$? ${SECONDS}s"; grep -E "graphs on: each|graphs on: best" /tmp/e2e-$name.log
  cat /tmp/e2e-$name.log >> $OUT/e2e.log
  sleep 5
}
rm -rf /tmp/vsr-tune /tmp/vsr-wide; mkdir -p /tmp/vsr-tune /tmp/vsr-wide
run tune VSR_AUTOTUNE_DIR=/tmp/vsr-tune
run heur1 X=1
run wide VSR_AUTOTUNE_DIR=/tmp/vsr-wide VSR_CUDA_LT_SEARCH=1
run tune2 VSR_AUTOTUNE_DIR=/tmp/vsr-tune
run heur1b X=1
kill $SMI
python3 - $OUT/smi.csv $OUT/marks.txt <<'PY'
import sys, csv
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 6]
marks = [l.split() for l in open(sys.argv[2])]
def secs(t):
    h, m, s = t.strip().split(' ')[-1].split(':') if ' ' in t.strip() else t.strip().split(':')
    return int(h) * 3600 + int(m) * 60 + float(s)
print('samples', len(rows))
for i in range(0, len(marks) - 1, 2):
    a, b = secs(marks[i][0]), secs(marks[i + 1][0])
    sel = [r for r in rows if a <= secs(r[0].split(' ')[1]) <= b]
    if not sel: continue
    clk = [float(r[1].split()[0]) for r in sel]; pw = [float(r[3].split()[0]) for r in sel]
    thr = {}
    for r in sel: thr[r[5].strip()] = thr.get(r[5].strip(), 0) + 1
    print(marks[i][2], 'n', len(sel), 'sm MHz min/med/max', min(clk), sorted(clk)[len(clk)//2], max(clk),
          'power W med/max', sorted(pw)[len(pw)//2], max(pw), 'throttle', thr)
PY
tar czf $OUT/tune.tgz -C /tmp vsr-tune vsr-wide
