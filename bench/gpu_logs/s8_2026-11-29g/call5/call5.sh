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
awk '/^  [a-zA-Z_]/{k=$1} /gpu__time_duration/{print k, $NF}' $OUT/ncu_i4.txt | awk '{k=$1; s[k]+=$2; n[k]++; if(!(k in mn)||$2<mn[k])mn[k]=$2} END{for(k in s) printf "%s n=%d avg=%.2f min=%.2f\n", substr(k,1,70), n[k], s[k]/n[k], mn[k]}'
