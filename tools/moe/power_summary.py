#!/usr/bin/env python3
"""Power and SM clock per implementation, from scripts/gpu/moe_power.sh's output.

Usage: tools/moe/power_summary.py RUN   (its folder or its moe_power.tar.xz): v<i>.variant, v<i>.json (bench), v<i>.csv
       (nvidia-smi)

Per variant and GPU, over the samples of the timed part (the samples whose power is at least half of the
call's highest reading, which drops the set-up, the untimed first run and the idle gaps): how many, the median
and 90th-percentile power, the median SM clock, and the share of those samples flagged with the software power
cap (the driver's "SW power cap" clock event reason). With the bench's median layer time beside it.
"""
import argparse
import csv
import io
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402


def number(text):
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def samples(text):
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    if not rows or not rows[0][0].startswith("timestamp"):
        raise ValueError("not an nvidia-smi CSV (no header)")
    head = [h.strip() for h in rows[0]]
    col = {name.split(" ")[0]: i for i, name in enumerate(head)}
    out = []
    for r in rows[1:]:
        if len(r) != len(head):
            continue
        out.append({"gpu": int(r[col["index"]]), "power": number(r[col["power.draw"]]), "sm": number(r[col.get("clocks.sm", col.get("clocks.current.sm"))]),
                    "cap": r[col["clocks_event_reasons.sw_power_cap"]].strip() == "Active"})
    return out


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="the folder scripts/gpu/moe_power.sh filled, or its moe_power.tar.xz")
    a = ap.parse_args()
    run = results.Run(a.run)
    files = {name: run.text(name) for name in run.names()}
    variants = sorted(int(n[1:-8]) for n in files if n.startswith("v") and n.endswith(".variant"))
    if not variants:
        sys.exit(f"{a.run}: no v<i>.variant files")
    print(f"{'variant':40s} {'median ms':>9s} {'gpu':>3s} {'samples':>7s} {'W p50':>6s} {'W p90':>6s} {'MHz p50':>7s} {'power cap':>9s}")
    for v in variants:
        name = files[f"v{v}.variant"].strip()
        bench = json.loads(files.get(f"v{v}.json", "{}") or "{}")
        med = [r["median_ms"] for r in bench.get("results", [])]
        med_text = f"{med[0]:.3f}" if med else "-"
        rows = samples(files[f"v{v}.csv"])
        for gpu in sorted({s["gpu"] for s in rows}):
            mine = [s for s in rows if s["gpu"] == gpu and s["power"] is not None and s["sm"] is not None]
            if not mine:
                continue
            top = max(s["power"] for s in mine)
            busy = [s for s in mine if s["power"] >= 0.5 * top]
            watts, mhz = [s["power"] for s in busy], [s["sm"] for s in busy]
            capped = sum(s["cap"] for s in busy) / len(busy)
            print(f"{name:40s} {med_text:>9s} {gpu:3d} {len(busy):7d} {statistics.median(watts):6.0f} "
                  f"{percentile(watts, 0.9):6.0f} {statistics.median(mhz):7.0f} {100 * capped:8.0f}%")


if __name__ == "__main__":
    main()
