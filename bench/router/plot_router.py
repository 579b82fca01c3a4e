#!/usr/bin/env python3
"""Plots bench/router/router_cpu.csv: p50/p99 of the four paths and the router's overheads, at 1 and 64 clients."""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = list(csv.DictReader(open(sys.argv[1])))
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
paths = ["upstream", "explicit", "worker", "routed"]
for ax, q in zip(axes, ("p50", "p99")):
    width = 0.2
    for i, p in enumerate(paths):
        xs = [j + (i - 1.5) * width for j in range(len(rows))]
        ax.bar(xs, [float(r[f"{p}_{q}_ms"]) for r in rows], width, label=p)
    ax.set_xticks(range(len(rows)), [f"{r['clients']} client(s)\nproxy overhead {float(r[f'proxy_overhead_{q}_ms']):.2f} ms\n"
                                     f"routing overhead {float(r[f'routing_overhead_{q}_ms']):.2f} ms" for r in rows])
    ax.set_yscale("log"); ax.set_ylabel(f"{q} latency, ms"); ax.grid(True, axis="y"); ax.legend(fontsize=8)
fig.suptitle("vllm-sr router on the 2-core CPU: upstream, proxy (model named), worker /v1/decisions, routed (auto)")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
