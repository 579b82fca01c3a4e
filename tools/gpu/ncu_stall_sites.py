#!/usr/bin/env python3
"""Top stall sites of one kernel from ncu's source page (ncu ... --page source --print-source sass --csv > F):
the SASS instructions with the most warp-state samples and their leading stall reasons, then the stall reasons summed
over the instructions executed a given number of times (--group: e.g. the consumer loop vs the producer loop).
Usage: tools/gpu/ncu_stall_sites.py F [--top N]"""
import csv
import io
import sys
from collections import defaultdict


def main():
    path = sys.argv[1]
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 16
    lines = open(path).read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    h, rows = rows[0], rows[1:]
    col = {c: i for i, c in enumerate(h)}
    reasons = [c for c in h if c.startswith("stall_") and "Not" not in c]
    samp = lambda x: float(x[col["Warp Stall Sampling (All Samples)"]] or 0)
    tot = sum(samp(x) for x in rows) or 1.0
    print("samples %.0f over %d instructions" % (tot, len(rows)))
    for x in sorted(rows, key=lambda x: -samp(x))[:top]:
        rs = sorted(((c[6:], float(x[col[c]] or 0)) for c in reasons), key=lambda kv: -kv[1])[:3]
        print("%5.1f%%  %-58s exec %-8s %s" % (100 * samp(x) / tot, x[col["Source"]].strip()[:58],
                                                x[col["Instructions Executed"]], " ".join("%s:%.0f" % r for r in rs if r[1] > 0)))
    groups = defaultdict(lambda: defaultdict(float))
    for x in rows:
        g = groups[x[col["Instructions Executed"]] or "0"]
        for c in reasons:
            g[c[6:]] += float(x[col[c]] or 0)
    print("by execution count (instructions executed as often as each other: one loop or one path):")
    for e, g in sorted(groups.items(), key=lambda kv: -sum(kv[1].values()))[:5]:
        s = sum(g.values()) or 1.0
        print("  exec %-9s %5.1f%% of samples: %s" % (e, 100 * s / tot, " ".join(
            "%s %.0f%%" % (k, 100 * v / s) for k, v in sorted(g.items(), key=lambda kv: -kv[1])[:6] if v > 0)))


if __name__ == "__main__":
    main()
