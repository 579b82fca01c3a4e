"""bench/plot_gemm_cuda.py: plot the CUDA GEMM sweep (bench/gemm_cuda.csv, ours, and the torch
peers' CSV) as time per shape against rows. Usage:
  python3 bench/plot_gemm_cuda.py bench/gemm_cuda.csv bench/gemm_cuda.torch.csv bench/gemm_cuda.png"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ours, torch_csv, out = sys.argv[1], sys.argv[2], sys.argv[3]
data = {}
for f in (ours, torch_csv):
    for r in csv.reader(line for line in open(f) if not line.startswith("#")):
        if r[0] == "variant":
            continue
        data.setdefault(r[1], {}).setdefault(r[0], []).append((int(r[4]), float(r[5])))
styles = {"bf16_linear": ("C0", "-"), "torch_bf16": ("C0", ":"), "fp8_linear": ("C3", "-"),
          "torch_fp8": ("C3", ":"), "int4_linear": ("C2", "-"), "int4_unpack": ("C2", "--"),
          # variants of the later passes (present in their CSVs only): the previous kernels and the
          # FP8 wgmma kernel alone
          "int4_prev": ("C8", "-."), "fp8_old": ("C1", "-."), "fp8_pq_auto": ("C4", "--"),
          # the FP8 GEMM alone on prequantized activations by the forward's route (FP32 out), and the
          # product kept in BF16 (what torch_fp8 computes: compare these two lines)
          "fp8_pq_route": ("C5", "--"), "fp8_kept_lt": ("C3", "--")}
shapes = list(data)
fig, axes = plt.subplots(2, 4, figsize=(18, 8))
for ax, s in zip(axes.flat, shapes):
    for v, (c, ls) in styles.items():
        pts = sorted(data[s].get(v, []))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c, linestyle=ls, marker=".", label=v)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(s)
    ax.set_xlabel("rows")
    ax.set_ylabel("us (median)")
    ax.grid(True, which="both", alpha=0.3)
axes.flat[-1].axis("off")
axes.flat[0].legend(fontsize=8)
fig.suptitle("CUDA GEMM sweep on the H200: ours (solid) vs torch 2.11 (dotted)")
fig.tight_layout()
fig.savefig(out, dpi=80)
