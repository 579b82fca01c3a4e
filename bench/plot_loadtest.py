#!/usr/bin/env python3
"""Plots the seed's load-test table (the markdown rows `vllm-srun bench --sla-ms` prints, one file):
requests/s and the largest concurrency whose p95 stays under the SLA, one bar pair per variant.
Usage: plot_loadtest.py TABLE.md OUT.png TITLE"""
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

table, png, title = sys.argv[1:4]
rows = []
for line in open(table):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 6 or cells[0] in ("Variant", "") or set(cells[0]) <= set("-"):
        continue
    conc = int(cells[2].split()[0])
    rows.append((cells[0], conc, float(cells[3]), float(cells[4]), cells[5]))
if not rows:
    sys.exit(f"{table}: no load-test rows")
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
names = [r[0] for r in rows]
a.bar(names, [r[3] for r in rows], color="tab:blue")
a.set_ylabel("requests/s at the SLA's concurrency")
for i, r in enumerate(rows):
    a.annotate(f"{r[3]:.1f}", (i, r[3]), ha="center", va="bottom")
b.bar(names, [r[1] for r in rows], color="tab:orange")
b.set_ylabel("max concurrency with p95 under the SLA")
for i, r in enumerate(rows):
    b.annotate(f"{r[1]} (p95 {r[2]:.0f} ms)", (i, r[1]), ha="center", va="bottom")
fig.suptitle(title)
fig.tight_layout()
fig.savefig(png, dpi=110)
print(f"wrote {png}")
