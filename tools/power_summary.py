#!/usr/bin/env python3
"""Power and SM clock per implementation, from scripts/gpu/moe_power.sh's output.

Usage: tools/power_summary.py DIR   (or a moe_power.tar.gz): v<i>.variant, v<i>.json (bench), v<i>.csv (nvidia-smi)

Per variant and GPU, over the samples of the timed part (the samples whose power is at least half of the
call's highest reading, which drops the set-up, the untimed first run and the idle gaps): how many, the median
and 90th-percentile power, the median SM clock, and the share of those samples flagged with the software power
cap (the driver's "SW power cap" clock event reason). With the bench's median layer time beside it.
"""
import csv
import io
import json
import os
import statistics
import sys
import tarfile


def read_members(path):
    if os.path.isdir(path):
        return {name: open(os.path.join(path, name), encoding="utf-8").read() for name in os.listdir(path)
                if os.path.isfile(os.path.join(path, name))}
    with tarfile.open(path) as tar:
        return {os.path.basename(m.name): tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


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
    if len(sys.argv) != 2:
        sys.exit("usage: tools/power_summary.py DIR|moe_power.tar.gz")
    files = read_members(sys.argv[1])
    variants = sorted(int(n[1:-8]) for n in files if n.startswith("v") and n.endswith(".variant"))
    if not variants:
        sys.exit(f"{sys.argv[1]}: no v<i>.variant files")
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
