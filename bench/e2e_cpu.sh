#!/bin/bash
# CPU end to end, ours against transformers on PyTorch CPU (issue 3 "Speed"):
#
#   bench/e2e_cpu.sh [WORKDIR]            (default /tmp/vsr-e2e)
#   env: SCHEMES="bf16 w4a16-gptq w4a16-awq"  SEED=7  WARMUP=1  RUNS=3  ROUNDS=1
#        THREADS=2  PNG=bench/e2e_cpu.png
#
# For each scheme: writes the lite package once (vllm-srun fixture --size lite), then per
# round runs build/bench/e2e_cpu (ours: golden request + 8 questions over a 512-token state,
# warm-up then RUNS timed runs, token ids dumped) and bench/e2e_cpu_torch.py on the same
# package and ids (which also checks that its probabilities agree with ours within 1e-3).
# Ours and PyTorch for a scheme run back to back in the same round. Writes
# WORKDIR/e2e_cpu.md (the table, with the spread over rounds and runs) and the plot.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/vsr-e2e}
SCHEMES=${SCHEMES:-"bf16 w4a16-gptq w4a16-awq"}
SEED=${SEED:-7}
WARMUP=${WARMUP:-1}
RUNS=${RUNS:-3}
ROUNDS=${ROUNDS:-1}
THREADS=${THREADS:-2}
PNG=${PNG:-$REPO/bench/e2e_cpu.png}
mkdir -p "$W"

make -s -C "$REPO/bench" e2e_cpu >/dev/null
make -s -C "$REPO" BUILD=build-nocuda VSR_NO_CUDA=1 build-nocuda/vllm-srun >/dev/null
BIN=$REPO/build/bench/e2e_cpu
SRUN=$REPO/build-nocuda/vllm-srun

{ echo "# $(date -u +%FT%TZ) $(uname -n)"; lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-200; } > "$W/machine.txt"

for s in $SCHEMES; do
    pkg=$W/lite-$s
    if [ ! -f "$pkg/MODEL_MANIFEST.json" ]; then
        rm -rf "$pkg"
        VSR_NO_PROGRESS=1 "$SRUN" fixture "$pkg" --family decision3 --size lite --scheme "$s" --seed "$SEED" >/dev/null
    fi
done

for r in $(seq 1 "$ROUNDS"); do
    for s in $SCHEMES; do
        pkg=$W/lite-$s
        d=$W/round$r
        mkdir -p "$d"
        echo "== round $r, $s: $(uptime)" | tee -a "$W/load.txt"
        "$BIN" "$pkg" --threads "$THREADS" --warmup "$WARMUP" --runs "$RUNS" --json "$d/ours-$s.json"
        echo "   (after ours: $(uptime | sed 's/.*load/load/'))" | tee -a "$W/load.txt"
        python3 "$REPO/bench/e2e_cpu_torch.py" "$pkg" "$d/ours-$s.json" --threads "$THREADS" --warmup "$WARMUP" \
            --runs "$RUNS" --out "$d/torch-$s.json" 2> >(grep -v -e 'falling back' -e Warning >&2)
        echo "   (after torch: $(uptime | sed 's/.*load/load/'))" | tee -a "$W/load.txt"
    done
done

python3 - "$W" "$PNG" "$ROUNDS" $SCHEMES <<'EOF'
import glob, json, os, statistics, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

W, png, rounds, schemes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
PEAK_1, PEAK_2 = 264.0, 528.0   # GFLOP/s FP32 FMA, 1 core / 2 cores (bench/notes/cpu.md "## CPU GEMM")
BW = 38.6                       # GB/s streaming read, 1 thread (same section)


def flops_and_bytes(pkg, rows):
    """Forward FLOPs of one request as our forward runs it (linears: every layer on all tokens
    except the last layer's out-projection and MLP, which run on the last token of each row;
    attention 4*len^2*d per head; DeltaNet ~6*dk*dv per token and head) and weight bytes read."""
    c = json.load(open(os.path.join(pkg, "config.json")))["text_config"]
    D, I, H, Hkv, hd = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    Hk, Hv, dk, dv = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"], c["linear_value_head_dim"]
    types = c["layer_types"]
    lens = [len(r["ids"]) for r in rows]
    T, R = sum(lens), len(rows)
    f = 0.0
    nk = 0
    for li, t in enumerate(types):
        last = li == len(types) - 1
        if t == "linear_attention":
            inp = D * (2 * Hk * dk + Hv * dv) + D * Hv * dv + 2 * D * Hv
            out = Hv * dv * D
            f += sum(6.0 * dk * dv * Hv * n for n in lens)
        else:
            inp = D * 2 * H * hd + 2 * D * Hkv * hd
            out = H * hd * D
            f += sum(4.0 * n * n * hd * H for n in lens)
        mlp = 3 * D * I
        nk += inp + out + mlp
        f += 2.0 * inp * T + 2.0 * (out + mlp) * (R if last else T)
    sch = json.load(open(os.path.join(pkg, "config.json"))).get("quantization_config")
    wbytes = nk * (0.5 + 2 / 128 if sch else 2)  # int4: nibbles + bf16 scales per group of 128
    return f, wbytes


def spread(vals):
    return statistics.median(vals), min(vals), max(vals)


res = {}
for s in schemes:
    for req in ("golden", "q8x512"):
        ours_t, torch_t, meta, diffs = [], [], None, []
        for r in range(1, rounds + 1):
            d = os.path.join(W, f"round{r}")
            o = json.load(open(os.path.join(d, f"ours-{s}.json")))
            t = json.load(open(os.path.join(d, f"torch-{s}.json")))
            oq = next(x for x in o["requests"] if x["name"] == req)
            tq = next(x for x in t["requests"] if x["name"] == req)
            ours_t += oq["times_ms"]
            torch_t += tq["times_ms"]
            diffs.append(tq["max_prob_diff"])
            meta = oq
        fl, wb = flops_and_bytes(os.path.join(W, f"lite-{s}"), meta["rows"])
        res[(s, req)] = dict(ours=spread(ours_t), torch=spread(torch_t), rows=len(meta["rows"]), tokens=meta["tokens"],
                             padded=meta["padded_tokens"], flops=fl, wbytes=wb, diff=max(diffs),
                             floor_ms=max(fl / PEAK_2 / 1e6, wb / BW / 1e6))

lines = ["| package | request | rows x tokens (padded) | ours ms median [min-max] | PyTorch ms median [min-max] | speedup (median) | "
         "ours GFLOP/s (% of 528 / 264) | floor ms | max prob diff |",
         "|---|---|---|---|---|---|---|---|---|"]
for (s, req), v in res.items():
    om, omin, omax = v["ours"]
    tm, tmin, tmax = v["torch"]
    gf = v["flops"] / (om * 1e6)
    lines.append(f"| lite {s} | {req} | {v['rows']} x {v['tokens'] / v['rows']:.0f} ({v['padded']}) | "
                 f"{om:.0f} [{omin:.0f}-{omax:.0f}] | {tm:.0f} [{tmin:.0f}-{tmax:.0f}] | {tm / om:.2f}x | "
                 f"{gf:.0f} ({100 * gf / PEAK_2:.0f}% / {100 * gf / PEAK_1:.0f}%) | {v['floor_ms']:.0f} | {v['diff']:.1e} |")
table = "\n".join(lines)
print(table)
open(os.path.join(W, "e2e_cpu.md"), "w").write(table + "\n")

fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
for ax, req in zip(axes, ("golden", "q8x512")):
    xs = range(len(schemes))
    for k, (who, col, off) in enumerate((("ours", "tab:blue", -0.2), ("torch", "tab:orange", 0.2))):
        med = [res[(s, req)][who][0] / 1e3 for s in schemes]
        lo = [med[i] - res[(s, req)][who][1] / 1e3 for i, s in enumerate(schemes)]
        hi = [res[(s, req)][who][2] / 1e3 - med[i] for i, s in enumerate(schemes)]
        ax.bar([x + off for x in xs], med, 0.4, yerr=[lo, hi], capsize=4, color=col,
               label="vllm-sr-c (ours)" if who == "ours" else "transformers / PyTorch CPU")
    for i, s in enumerate(schemes):
        v = res[(s, req)]
        ax.text(i + 0.2, v["torch"][0] / 1e3 * 1.02, f"{v['torch'][0] / v['ours'][0]:.1f}x", ha="center", va="bottom",
                fontweight="bold")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"lite {s}" for s in schemes])
    ax.set_ylabel("seconds per request (median, min-max)")
    v0 = res[(schemes[0], req)]
    ax.set_title(f"{req}: {v0['rows']} rows, {v0['padded']} padded tokens")
    ax.legend(loc="upper right", fontsize=8)
fig.suptitle("Decision 3.0 lite (0.8B) on 2 CPU cores: vsr_decision_run vs transformers")
fig.tight_layout()
fig.savefig(png, dpi=110)
print("plot:", png)
EOF
