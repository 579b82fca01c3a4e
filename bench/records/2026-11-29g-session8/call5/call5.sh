#!/bin/bash
# session 8, call 5 (gemm_cuda at the HEAD of "VSR_SWEEP_GRAPH"; library as call 3): int4 against BF16 at 1, 8,
# 16 rows timed from CUDA graphs (as the forward runs), then the kernels' own durations under ncu
set -u
tar xzf .gpu-pk/bins.tgz
. tools/gpu/cuda_env.sh
rm -rf /tmp/vsr-tune; mkdir -p /tmp/vsr-tune
VSR_SWEEP_GRAPH=1 VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 150 .gpuq/gemm_cuda 1,8,16 --shapes=gate_up,down,q_proj,o_proj > $OUT/graph_i4.csv 2> $OUT/graph_i4.err; echo "graph sweep rc=$?"
grep -E '^(bf16_gemm|bf16_linear|int4_linear|int4_bf16in|int4_bulk_bf16in)' $OUT/graph_i4.csv; grep -i 'fail' $OUT/graph_i4.err | head -3
VSR_FP8=0 VSR_AUTOTUNE_DIR=/tmp/vsr-tune timeout 150 ncu --clock-control none -k regex:'k_i4_stream|nvjet' --metrics gpu__time_duration.sum --launch-count 600 .gpuq/gemm_cuda 1,16 --shapes=gate_up,o_proj > $OUT/ncu_i4.txt 2>&1; echo "ncu rc=$?"
python3 - "$OUT/ncu_i4.txt" <<'PY'
import re, sys, collections
d = collections.defaultdict(list); k = None
for l in open(sys.argv[1]):
    if ', Context' in l and l.startswith('  '):
        k = l.strip().split(', Context')[0].replace('void ', '')[:90]
    m = re.search(r'gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)', l)
    if m and k:
        v = float(m.group(2).replace(',', '')); v = v / 1000 if m.group(1) == 'ns' else v * 1000 if m.group(1) == 'ms' else v
        d[k].append(v)
for k, v in d.items():
    print(f"{k} n={len(v)} min={min(v):.2f} med={sorted(v)[len(v)//2]:.2f} us")
PY
