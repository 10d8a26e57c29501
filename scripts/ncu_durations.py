#!/usr/bin/env python3
"""Per-kernel-name totals from `ncu --metrics gpu__time_duration.sum --csv`
(kernels serialized, so launch gaps are excluded): compare the total with the
graph-replayed time of the same work to see how much is launch overhead.

  ncu_durations.py DURATIONS.csv [--per N]   (N: divide totals by N, e.g. tokens)
"""
import csv, statistics, sys
from collections import defaultdict

path = sys.argv[1]
per = float(sys.argv[sys.argv.index("--per") + 1]) if "--per" in sys.argv else 1.0
with open(path) as f:
    lines = [l for l in f if l.startswith('"')]
by = defaultdict(list)
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    us = v / 1e3 if unit.startswith("n") else v if unit.startswith("u") else v * 1e3
    name = r["Kernel Name"]
    name = name.split("(")[0] if "(" in name else name
    by[name[:100]].append(us)
n = sum(len(v) for v in by.values())
tot = sum(sum(v) for v in by.values())
print(f"kernels {n} ({n/per:.1f} per unit), sum of durations {tot:.1f} us ({tot/per:.1f} us per unit)")
print(f"{'us/unit':>8} {'n/unit':>7} {'median us':>9}  kernel")
for k, v in sorted(by.items(), key=lambda kv: -sum(kv[1])):
    print(f"{sum(v)/per:8.1f} {len(v)/per:7.1f} {statistics.median(v):9.2f}  {k}")
