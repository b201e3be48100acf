#!/usr/bin/env python3
"""The MoE results table of README.md / docs/MOE.md from one `xstage moe bench` JSON.

Usage: tools/moe/table.py BENCH [BENCH_M_PAIRS]
  BENCH  a bench.json (plain or .xz), or a run (its folder or its moe.tar.xz) holding bench.json and, if the run
         made one, bench-m-pairs.json

One row per configuration: the unfused baseline, each fused schedule (the fastest in bold), the best fused
time against the unfused one, and its TFLOP/s; then how many configurations the fused layer wins and which
schedule wins how often. With a second bench (the same grid with `--cluster-m 2`), one more column: its best
fused time and the speedup over the unfused time measured in that same call.
"""
import argparse
import os
import re
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402
from common.moe_names import schedule_of  # noqa: E402

SCHEDULES = [("expert-wave", "wave"), ("pipelined", "pipelined"), ("interleaved", "interleaved")]


def load(path, member="bench.json"):
    return results.Run(path).json(member) if results.is_run(path) else results.load_json(path)


def by_config(doc):
    rows = {}
    for r in doc["results"] if doc else []:
        if r.get("median_ms") is not None:
            rows.setdefault(r["config"], {})[schedule_of(r["impl"])] = r
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench")
    ap.add_argument("bench_m_pairs", nargs="?")
    a = ap.parse_args()
    rows = by_config(load(a.bench))
    if a.bench_m_pairs:
        m_pairs = by_config(load(a.bench_m_pairs))
    else:
        m_pairs = by_config(load(a.bench, "bench-m-pairs.json")) if results.is_run(a.bench) else {}
    extra = " M-pairs best ms (vs its unfused) |" if m_pairs else ""
    print("| config (h-h_inter-E-k / tokens per rank / routing / dtype) | tile | unfused ms | expert-wave ms | "
          "pipelined ms | interleaved ms | best fused vs unfused | best fused TFLOP/s |" + extra)
    print("|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if m_pairs else ""))
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
        m_cell = ""
        if m_pairs:
            mp = m_pairs.get(config, {})
            m_fused = [mp[s]["median_ms"] for _, s in SCHEDULES if s in mp]
            m_cell = f" {min(m_fused):.2f} ({mp['unfused']['median_ms'] / min(m_fused):.2f}×) |" if m_fused and "unfused" in mp else " – |"
        print(f"| {name} | {tile.replace(' pairs', '')} | {by['unfused']['median_ms']:.2f} | " + " | ".join(cells) +
              f" | {speedup:.2f}× | {fused[best]['tflops_per_rank']:.0f} |" + m_cell)
    print(f"\nfused faster on {wins} of {n}; best schedule: " +
          ", ".join(f"{s} {best_count[s]}" for _, s in SCHEDULES) + " (ᵖ: CTA pairs)")


if __name__ == "__main__":
    main()
