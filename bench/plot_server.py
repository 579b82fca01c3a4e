#!/usr/bin/env python3
"""Plots a `vllm-srun bench --csv` file: requests/s and latency percentiles per concurrency."""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = list(csv.DictReader(open(sys.argv[1])))
conc = [int(r["concurrency"]) for r in rows]
fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
a.plot(conc, [float(r["rps"]) for r in rows], "o-")
a.set_xscale("log", base=2); a.set_xlabel("concurrent clients"); a.set_ylabel("requests/s"); a.set_ylim(bottom=0); a.grid(True)
for k in ("p50_ms", "p95_ms", "p99_ms"):
    b.plot(conc, [float(r[k]) for r in rows], "o-", label=k)
b.plot(conc, [float(r["forward_ms"]) for r in rows], "s--", label="forward (Server-Timing mean)")
b.plot(conc, [float(r["overhead_p50_ms"]) for r in rows], "^:", label="overhead p50 (latency - queue - forward)")
b.set_xscale("log", base=2); b.set_yscale("log"); b.set_xlabel("concurrent clients"); b.set_ylabel("ms")
b.legend(); b.grid(True)
fig.suptitle(f"vllm-srun worker, {sys.argv[3] if len(sys.argv) > 3 else ''} package, /v1/decisions golden request")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
