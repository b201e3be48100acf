#!/usr/bin/env python3
"""The MoE results table of README.md / docs/MOE.md from one `xstage moe bench` JSON.

Usage: tools/moe_table.py results/h200x2/moe/<run>/bench.json   (or a moe.tar.gz holding ./bench.json)

One row per configuration: the unfused baseline, each fused schedule (the fastest in bold), the best fused
time against the unfused one, and its TFLOP/s; then how many configurations the fused layer wins and which
schedule wins how often.
"""
import json
import re
import sys
import tarfile
from collections import Counter

SCHEDULES = [("expert-wave", "wave"), ("pipelined", "pipelined"), ("interleaved", "interleaved")]


def schedule_of(impl):
    if impl.startswith("unfused"):
        return "unfused"
    if "lag=" in impl:
        return "pipelined"
    return "wave" if "expert-wave" in impl else "interleaved"


def load(path):
    if path.endswith(".tar.gz"):
        with tarfile.open(path) as t:
            return json.load(t.extractfile("./bench.json"))
    with open(path) as f:
        return json.load(f)


def main():
    rows = {}
    for r in load(sys.argv[1])["results"]:
        if r.get("median_ms") is None:
            continue
        rows.setdefault(r["config"], {})[schedule_of(r["impl"])] = r
    print("| config (h-h_inter-E-k / tokens per rank / routing / dtype) | tile | unfused ms | expert-wave ms | "
          "pipelined ms | interleaved ms | best fused vs unfused | best fused TFLOP/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    wins, best_count, n = 0, Counter(), 0
    for config, by in rows.items():
        fused = {s: by[s] for _, s in SCHEDULES if s in by}
        if "unfused" not in by or not fused:
            continue
        best = min(fused, key=lambda s: fused[s]["median_ms"])
        best_count[best] += 1
        n += 1
        speedup = by["unfused"]["median_ms"] / fused[best]["median_ms"]
        wins += speedup > 1
        tile = re.search(r"128x\d+( pairs)?", fused[best]["impl"]).group(0)
        cells = []
        for _, s in SCHEDULES:
            if s not in fused:
                cells.append("–")
            else:
                ms = f"{fused[s]['median_ms']:.2f}" + (" ᵖ" if "pairs" in fused[s]["impl"] else "")
                cells.append(f"**{ms}**" if s == best else ms)
        name = f"**{config}**" if config.startswith("deepseek") or "t8192/balanced/fp8" in config and "h7168" in config else config
        print(f"| {name} | {tile.replace(' pairs', '')} | {by['unfused']['median_ms']:.2f} | " + " | ".join(cells) +
              f" | {speedup:.2f}× | {fused[best]['tflops_per_rank']:.0f} |")
    print(f"\nfused faster on {wins} of {n}; best schedule: " +
          ", ".join(f"{s} {best_count[s]}" for _, s in SCHEDULES) + " (ᵖ: CTA pairs)")


if __name__ == "__main__":
    main()
