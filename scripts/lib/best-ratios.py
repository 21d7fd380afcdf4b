#!/usr/bin/env python3
"""Best round per side and workload (highest IOPS) from a raw rounds table, as a
Markdown table of each side's IOPS and mean latency next to their ratio to the
baseline side, with CPU per I/O. Used by compare-spdk.sh and compare-spdk-host.sh.

Usage: best-ratios.py RAW SIDE_COLUMN BASELINE "SIDES..." CPU_COLUMN BASELINE_LABEL
RAW is tab-separated with a header: SIDE_COLUMN, workload, iops, avg_us, CPU_COLUMN.
"""
import csv
import sys

raw, side_column, baseline, sides, cpu_column, label = sys.argv[1:7]
others = [name for name in sides.split() if name != baseline]
rows = list(csv.DictReader(open(raw), delimiter="\t"))
best = {}
for row in rows:
    key = (row[side_column], row["workload"])
    if key not in best or float(row["iops"]) > float(best[key]["iops"]):
        best[key] = row
workloads = list(dict.fromkeys(row["workload"] for row in rows))
print(f"| workload | {label} IOPS | {label} avg us | {label} CPU us/IO | " + " | ".join(
    f"{n} IOPS (ratio) | {n} avg us (ratio) | {n} CPU us/IO" for n in others) + " |")
print("| --- | --: | --: | --: | " + " | ".join("--: | --: | --:" for _ in others) + " |")
for workload in workloads:
    base = best.get((baseline, workload))
    if not base:
        continue
    cells = [workload, f"{float(base['iops']):.0f}", base["avg_us"], base[cpu_column]]
    for name in others:
        row = best.get((name, workload))
        if not row:
            cells += ["-", "-", "-"]
            continue
        cells += [f"{float(row['iops']):.0f} ({float(row['iops']) / float(base['iops']):.2f}x)",
                  f"{float(row['avg_us']):.1f} ({float(row['avg_us']) / float(base['avg_us']):.2f}x)",
                  row[cpu_column]]
    print("| " + " | ".join(cells) + " |")
