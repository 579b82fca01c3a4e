#!/usr/bin/env python3
"""Plot GFLOP/s vs M for each weight format from build/bench/gemm_cpu output.

    build/bench/gemm_cpu | tee /tmp/gemm_cpu.log
    python3 bench/plot_gemm_cpu.py /tmp/gemm_cpu.log bench/gemm_cpu.png

Reads the "csv,format,M,K,N,threads,seconds,gflops,weight_gbs" lines and the measured
peaks; one panel per shape, a line per (format, threads), the FMA peaks dashed."""
import re
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "/tmp/gemm_cpu.log"
    out = sys.argv[2] if len(sys.argv) > 2 else "bench/gemm_cpu.png"
    rows, peaks = [], {}
    for line in open(src):
        if line.startswith("csv,"):
            f = line.strip().split(",")[1:]
            rows.append((f[0], int(f[1]), int(f[2]), int(f[3]), int(f[4]), float(f[6])))
        m = re.match(r"peak fma (\S+) (\d) thread\(s\): ([\d.]+)", line)
        if m:
            peaks[int(m.group(2))] = float(m.group(3))
    shapes = sorted({(k, n) for _, _, k, n, _, _ in rows})
    fig, axes = plt.subplots(1, len(shapes), figsize=(4.2 * len(shapes), 4), sharey=True)
    if len(shapes) == 1:
        axes = [axes]
    for ax, (k, n) in zip(axes, shapes):
        series = defaultdict(list)
        for fmt, m, kk, nn, t, gf in rows:
            if (kk, nn) == (k, n):
                series[(fmt, t)].append((m, gf))
        for (fmt, t), pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    linestyle="-" if fmt == "bf16" else "--", label=f"{fmt}, {t} thr")
        for t, gf in sorted(peaks.items()):
            ax.axhline(gf, color="gray", linestyle=":", linewidth=1)
            ax.text(1, gf, f" FMA peak {t} thr", va="bottom", fontsize=7, color="gray")
        ax.set_xscale("log", base=2)
        ax.set_title(f"K={k} -> N={n}")
        ax.set_xlabel("M (rows of X)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("GFLOP/s")
    axes[0].legend(fontsize=8)
    fig.suptitle("CPU GEMM, Y = X . W^T (FP32 activations), AMD EPYC 2 cores")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    main()
