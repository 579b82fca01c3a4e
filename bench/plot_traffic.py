#!/usr/bin/env python3
"""Plots bench/traffic_bench.sh output: latency CDFs per level and profile, and requests/s per level."""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

levels_csv, lat_csv, png, name = sys.argv[1:5]
rows = list(csv.DictReader(open(levels_csv)))
lat = list(csv.DictReader(open(lat_csv)))
fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
styles = {"exact": "-", "batching": "--"}
for prof in ("exact", "batching"):
    for conc in sorted({int(r["concurrency"]) for r in lat if r["traffic"] == "varied" and r["profile"] == prof}):
        v = sorted(float(r["latency_ms"]) for r in lat
                   if r["traffic"] == "varied" and r["profile"] == prof and int(r["concurrency"]) == conc and r["status"] == "200")
        if v:
            a.plot(v, [(i + 1) / len(v) for i in range(len(v))], styles[prof], label=f"{prof} c={conc}")
rep = sorted(float(r["latency_ms"]) for r in lat if r["traffic"] == "repeated" and r["status"] == "200")
if rep:
    a.axvline(rep[len(rep) // 2], color="k", lw=0.8, label="repeated request p50 (c=1)")
a.set_xscale("log"); a.set_xlabel("latency ms"); a.set_ylabel("fraction of requests"); a.grid(True); a.legend(fontsize=7)
for prof in ("exact", "batching"):
    rr = [r for r in rows if r["traffic"] == "varied" and r["profile"] == prof]
    b.plot([int(r["concurrency"]) for r in rr], [float(r["rps"]) for r in rr], "o" + styles[prof], label=prof)
b.set_xscale("log", base=2); b.set_xlabel("concurrent clients"); b.set_ylabel("requests/s"); b.set_ylim(bottom=0)
b.grid(True); b.legend()
fig.suptitle(f"vllm-srun worker, {name}: varied /v1/decisions traffic (tools/bench_traffic.py)")
fig.tight_layout()
fig.savefig(png, dpi=100)
