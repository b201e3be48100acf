#!/usr/bin/env python3
"""Sets each op's time through torch (time_ops.py) beside the same kernel's time through the CLI, round by round.

    python3 tools/python/torch_vs_cli.py DIR

DIR holds, per round i, time_ops_<i>.json, attention_bench_<i>.json and moe_bench_<i>.json (written, interleaved, by
scripts/gpu/torch_vs_cli.sh), and optionally clocks.csv (nvidia-smi samples of the SM clock and power meanwhile).
Prints a table (per point and round: torch's eager and graph times over the same kernel launched through the C ABI
in the same process, taking turns with them; the CLI's time over that; eager over the CLI; the host's time per
eager call) and writes DIR/torch_vs_cli.json. Not a test: it judges nothing; it exits non-zero only when a round's
files are missing or a point of one is absent from the other.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402


def attention_cli(doc):
    """{(heads, head_dim): ms} of an `xstage attention bench` JSON (batch 1, its one seqlen)."""
    return {(p["heads"], p["head_dim"]): p["time_ms"] for p in doc["points"] if p["batch"] == 1}


def moe_cli(doc):
    """{schedule: ms} of an `xstage moe bench` JSON: 'auto' for megamoe-auto, else the fixed schedule's name."""
    out = {}
    for r in doc["results"]:
        if not r["impl"].startswith("megamoe-"):
            continue
        fixed = r.get("schedule_reason", "as configured") == "as configured"
        key = r["impl"].split()[0].removeprefix("megamoe-") if fixed else "auto"
        out[key] = r["median_ms"]
    return out


def clocks(path):
    """(min, median, max) of the SM clock in MHz and of the power in W over the samples, or None."""
    try:
        text = results.read_text(path)
    except FileNotFoundError:
        return None
    mhz, watts = [], []
    with io.StringIO(text) as f:
        for row in csv.DictReader(f, skipinitialspace=True):
            try:
                mhz.append(float(row["clocks.current.sm [MHz]"].split()[0]))
                watts.append(float(row["power.draw [W]"].split()[0]))
            except (KeyError, ValueError, IndexError):
                continue
    if not mhz:
        return None
    s = lambda v: {"min": min(v), "median": statistics.median(v), "max": max(v), "samples": len(v)}  # noqa: E731
    return {"sm_clock_mhz": s(mhz), "power_w": s(watts)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="a folder with time_ops_<i>.json, attention_bench_<i>.json, moe_bench_<i>.json")
    d = ap.parse_args().dir
    if not os.path.isdir(d):
        ap.error(f"{d} is not a folder")
    rounds = sorted(int(re.search(r"_(\d+)\.json", p).group(1)) for p in results.matching(d, "time_ops_*.json"))
    if not rounds:
        sys.exit(f"torch_vs_cli.py: no time_ops_<i>.json in {d}")
    rows = {}
    for i in rounds:
        paths = {k: os.path.join(d, f"{k}_{i}.json") for k in ("time_ops", "attention_bench", "moe_bench")}
        try:
            docs = {k: results.load_json(p) for k, p in paths.items()}
        except FileNotFoundError as e:
            sys.exit(f"torch_vs_cli.py: round {i}: {e}")
        ops = docs["time_ops"]["results"]
        att, moe = attention_cli(docs["attention_bench"]), moe_cli(docs["moe_bench"])
        for r in ops:
            if r["op"] == "flash_attention" and (r["shape"]["heads"], r["shape"]["head_dim"]) in att and r["shape"]["seqlen"] == 8192:
                key, cli = f"flash_attention 1x8192 heads {r['shape']['heads']} d {r['shape']['head_dim']}", att[(r["shape"]["heads"], r["shape"]["head_dim"])]
            elif r["op"] == "moe" and r["shape"]["ranks"] == 1:
                if r["shape"]["schedule"] not in moe:
                    sys.exit(f"torch_vs_cli.py: round {i}: schedule {r['shape']['schedule']} is not in {paths['moe_bench']}")
                key, cli = f"moe {r['shape']['dtype']} {r['shape']['schedule']} T {r['shape']['tokens_per_rank']}", moe[r["shape"]["schedule"]]
            else:
                continue
            row = rows.setdefault(key, {"cli_ms": [], "eager_ms": [], "graph_ms": [], "c_abi_ms": [], "host_us": []})
            row[f"{r['mode']}_ms"].append(r["median_ms"])
            if r["mode"] == "eager":
                row["cli_ms"].append(cli)
                row["host_us"].append(r["host_us"])
    print(f"{len(rounds)} round(s); ms are medians per call. In-process ratios (eager, graph over c_abi: the same kernel "
          f"through the C ABI, timed in turn with them) and cross-process ones (over the CLI's time of the same round)")
    print(f"{'point':40s} {'c_abi ms':>20s} {'eager / c_abi':>20s} {'graph / c_abi':>20s} {'CLI / c_abi':>20s} "
          f"{'eager / CLI':>20s} {'host us/call':>14s}")
    fmt = lambda v, f: " ".join(f % x for x in v)  # noqa: E731
    ratio = lambda a, b: [x / y for x, y in zip(a, b)]  # noqa: E731
    for key, row in rows.items():
        row["eager_over_c_abi"] = ratio(row["eager_ms"], row["c_abi_ms"])
        row["graph_over_c_abi"] = ratio(row["graph_ms"], row["c_abi_ms"])
        row["cli_over_c_abi"] = ratio(row["cli_ms"], row["c_abi_ms"])
        row["eager_over_cli"] = ratio(row["eager_ms"], row["cli_ms"])
        row["graph_over_cli"] = ratio(row["graph_ms"], row["cli_ms"])
        print(f"{key:40s} {fmt(row['c_abi_ms'], '%6.4f'):>20s} {fmt(row['eager_over_c_abi'], '%6.3f'):>20s} "
              f"{fmt(row['graph_over_c_abi'], '%6.3f'):>20s} {fmt(row['cli_over_c_abi'], '%6.3f'):>20s} "
              f"{fmt(row['eager_over_cli'], '%6.3f'):>20s} {fmt(row['host_us'], '%4.0f'):>14s}")
    c = clocks(os.path.join(d, "clocks.csv"))
    if c:
        print(f"SM clock over the run: {c['sm_clock_mhz']['min']:.0f} / {c['sm_clock_mhz']['median']:.0f} / "
              f"{c['sm_clock_mhz']['max']:.0f} MHz (min / median / max of {c['sm_clock_mhz']['samples']} samples); "
              f"power {c['power_w']['min']:.0f} / {c['power_w']['median']:.0f} / {c['power_w']['max']:.0f} W")
    with open(os.path.join(d, "torch_vs_cli.json"), "w") as f:
        json.dump({"rounds": rounds, "points": rows, "clocks": c}, f, indent=1)


if __name__ == "__main__":
    main()
