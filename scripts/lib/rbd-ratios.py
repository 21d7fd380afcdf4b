#!/usr/bin/env python3
"""The summary of scripts/compare-spdk-rbd.sh: per step, initiator and workload, the
best round of each target (highest IOPS), SPDK's better mode as the anchor, and each
Sluice target's ratios to it (IOPS, mean latency, target CPU per I/O), with the OSD's
CPU per I/O and how busy the machine was. Then the issue's goals, met or not.

Usage: rbd-ratios.py RAW.tsv
"""
import csv
import sys

SPDK_MODES = ("spdk", "spdk-interrupt")

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
best = {}
rounds = {}
for row in rows:
    key = (row["step"], row["initiator"], row["workload"], row["target"])
    rounds.setdefault(key, []).append(float(row["iops"]))
    if key not in best or float(row["iops"]) > float(best[key]["iops"]):
        best[key] = row

steps = list(dict.fromkeys(row["step"] for row in rows))
targets = list(dict.fromkeys(row["target"] for row in rows))
sluices = [target for target in targets if target not in SPDK_MODES]


def number(value):
    try:
        return float(value)
    except ValueError:
        return float("nan")


def ratio(mine, theirs):
    mine, theirs = number(mine), number(theirs)
    return mine / theirs if theirs > 0 else float("nan")


goals = []
for step in steps:
    initiators = list(dict.fromkeys(row["initiator"] for row in rows if row["step"] == step))
    for initiator in initiators:
        print(f"\n### {step}, initiator {initiator}\n")
        header = "| workload | SPDK's better mode | IOPS | avg us | target CPU us/IO | OSD CPU us/IO | busy % |"
        line = "| --- | --- | --: | --: | --: | --: | --: |"
        for name in sluices:
            header += f" {name} IOPS (ratio) | avg us (ratio) | target CPU us/IO (ratio) | OSD CPU us/IO | busy % |"
            line += " --: | --: | --: | --: | --: |"
        print(header)
        print(line)
        workloads = list(dict.fromkeys(
            row["workload"] for row in rows if row["step"] == step and row["initiator"] == initiator))
        for workload in workloads:
            anchors = [best[key] for key in ((step, initiator, workload, mode) for mode in SPDK_MODES) if key in best]
            if not anchors:
                continue
            anchor = max(anchors, key=lambda row: float(row["iops"]))
            cells = [workload, anchor["target"], f"{float(anchor['iops']):.0f}", anchor["avg_us"],
                     anchor["target_cpu_us_per_io"], anchor["osd_cpu_us_per_io"], anchor["machine_busy_percent"]]
            for name in sluices:
                row = best.get((step, initiator, workload, name))
                if not row:
                    cells += ["-"] * 5
                    continue
                iops = ratio(row["iops"], anchor["iops"])
                latency = ratio(row["avg_us"], anchor["avg_us"])
                cpu = ratio(row["target_cpu_us_per_io"], anchor["target_cpu_us_per_io"])
                cells += [f"{float(row['iops']):.0f} ({iops:.2f}x)", f"{number(row['avg_us']):.0f} ({latency:.2f}x)",
                          f"{row['target_cpu_us_per_io']} ({cpu:.2f}x)", row["osd_cpu_us_per_io"],
                          row["machine_busy_percent"]]
                if initiator == "perf":
                    goals.append((step, workload, name, iops, latency, cpu))
            print("| " + " | ".join(cells) + " |")

# The goals, against spdk_nvme_perf's numbers.
print("\n### Goals (initiator perf; ratios to SPDK's better mode)\n")
print("| step | workload | target | goal | measured | met |")
print("| --- | --- | --- | --- | --- | --- |")
for step, workload, name, iops, latency, cpu in goals:
    rw, size, depth = workload.split(":")[:3]
    if rw == "randrw":
        continue
    if size == "4096" and depth == "1":
        goal, measured, met = "mean latency <= 0.90x", f"{latency:.3f}x", latency <= 0.90
    elif size == "4096":
        goal = "IOPS >= 1.25x, less target CPU/IO"
        measured = f"{iops:.3f}x IOPS, {cpu:.2f}x CPU"
        met = iops >= 1.25 and cpu < 1.0
    else:
        goal, measured, met = "IOPS >= 1.10x", f"{iops:.3f}x", iops >= 1.10
    print(f"| {step} | {workload} | {name} | {goal} | {measured} | {'yes' if met else '**no**'} |")
