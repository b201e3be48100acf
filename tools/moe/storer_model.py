#!/usr/bin/env python3
"""The MoE combine storer's own costs in the model (docs/MODEL.md, "The storer's own rate").

  costs BENCH [--tile-end publish|publish_gpu|storer] [--background none|hbm_read|l2_read]
      The platform file's "storer" section from `xstage_storer_bench --out BENCH` (plain or .xz): the loop the kernel
      runs (batch8: bf16's kStoreBatch), 2 storer warps, one CTA on every SM, and one of the kernel's tile ends:
      `publish` (one system-scope fence and relaxed adds per tile, the kernel at EP > 1; the default), `publish_gpu`
      (the same at GPU scope, the kernel at EP = 1, where every destination is local) or `storer` (a fence per warp and
      releases that wait, the kernel before 2026-12-06, which the shipped platform file's section still prices).
      Each tile's issue (RowSources to last store) is affine in its bytes, fixed work plus the stores: from the 256-
      and 512-byte-row tiles, R_S = Δbytes / Δissue and T_load = issue(256 B) - bytes(256 B) / R_S. With `publish*`,
      T_fence = its tile end of 512-byte rows and T_release = 0; with `storer`, T_fence = the `sys_warp` tile end (the
      fence alone) and T_release = the `storer` tile end less it. --background hbm_read | l2_read: the same from the
      variants run beside a read of HBM (or of the L2) on every SM, as a weight stream loads the memory system.
  compare XSTAGE PLATFORM TRACE_DIR
      The audit (`XSTAGE plan moe --platform PLATFORM --ranks 1 --json` per traced configuration) against the
      traced storer phases: TRACE_DIR holds phases.json and table2.json (plain or .xz) from tools/moe/trace_figures.py.
      Medians over the Linear-2 tiles, from the storers' start (the kernel's storers stamp "staged" when they take a
      tile, after the previous one's release): T_issue (-> last store issued; traced: loads + store issue, the sum of
      their medians) and T_drain (-> fence returned; what the trace calls T_RS); beside them the span the MMA sees,
      T_RS (staging -> slot free), and the stall per tile (mean; traced: the consumers' staging wait).

    python3 tools/moe/storer_model.py costs results/h200/moe/2026-12-01-storer-phases/after/storer_bench.json.xz --tile-end storer
    python3 tools/moe/storer_model.py compare build/xstage platforms/h200_nvlink4.json \\
        results/h200/moe/2026-12-01-storer-phases/after
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402

LOOP, WARPS, TILE_ROWS = "batch8", 2, 128


def costs(bench_path, background="none", tile_end="publish"):
    doc = results.load_json(bench_path)
    ctas = doc["sm_count"]

    def variant(row_bytes, end):
        found = [v for v in doc["variants"] if v["loop"] == LOOP and v["warps"] == WARPS and v["ctas"] == ctas
                 and v["row_bytes"] == row_bytes and v["tile_end"] == end and v.get("background", "none") == background]
        if len(found) != 1:
            raise SystemExit(f"{bench_path}: expected one {LOOP} variant with {WARPS} warps, {ctas} CTAs, {row_bytes}-byte rows, "
                             f"tile end {end}, background {background} (found {len(found)})")
        if found[0]["mismatches"]:
            raise SystemExit(f"{bench_path}: that variant stored wrong data")
        return found[0]

    small, large = variant(256, tile_end), variant(512, tile_end)
    b_small, b_large = 256 * TILE_ROWS, 512 * TILE_ROWS
    R_S = (b_large - b_small) / (large["issue_ns_per_tile_median"] - small["issue_ns_per_tile_median"])
    T_load = small["issue_ns_per_tile_median"] - b_small / R_S
    if tile_end == "storer":  # a fence per warp, then releases that wait: the fence alone, the rest after it
        T_fence = variant(512, "sys_warp")["end_ns_per_tile_median"]
        T_release = large["end_ns_per_tile_median"] - T_fence
        how = "T_fence the sys_warp tile end and T_release the storer tile end less it (512-byte rows)"
    else:  # one fence for the tile, then relaxed adds that do not wait
        T_fence, T_release = large["end_ns_per_tile_median"], 0.0
        how = f"T_fence the {tile_end} tile end (512-byte rows) and T_release 0 (the adds after the fence do not wait)"
    if min(R_S, T_load, T_fence) <= 0 or T_release < 0:
        raise SystemExit(f"{bench_path}: the storer's costs come out non-positive (R_S {R_S}, T_load {T_load}, "
                         f"T_fence {T_fence}, T_release {T_release}): the bench does not support this model")
    name = os.path.relpath(bench_path) if not os.path.isabs(bench_path) else bench_path
    loaded = "" if background == "none" else f", beside a background {background}"
    return {"R_S_bytes_per_ns": round(R_S, 2), "T_load_ns": round(T_load, 1), "T_fence_ns": round(T_fence, 1),
            "T_release_ns": round(T_release, 1),
            "source": f"{name} ({doc['date']}): xstage_storer_bench, loop {LOOP}, {WARPS} warps, {ctas} CTAs{loaded}; "
                      f"R_S and T_load from the issue time of 256- and 512-byte-row tiles with tile end {tile_end}, {how}; "
                      "tools/moe/storer_model.py costs"}


def parse_config(config):
    m = re.search(r"h(\d+)-i(\d+)-e(\d+)-k(\d+)/t(\d+)/\w+/(bf16|fp8)$", config)
    if not m:
        raise SystemExit(f"cannot read the shape of traced configuration '{config}'")
    h, i, e, k, t = (int(x) for x in m.groups()[:5])
    return {"hidden": h, "inter": i, "experts": e, "top_k": k, "tokens": t, "dtype": m.group(6)}


def matches(variant, schedule):
    """The plan's variant for a traced schedule (the kernel's defaults: single-CTA waves, interleaved as built)."""
    if variant["cluster_m"] != 1:
        return False
    if schedule == "expert-wave":
        return variant["schedule"] == "expert_wave" and variant["wave_lag"] == 0
    return variant["schedule"] == "interleaved"


def compare(xstage, platform, trace_dir):
    phases = results.load_json(os.path.join(trace_dir, "phases.json"))
    table2 = {(r["config"], r["schedule"]): r for r in results.load_json(os.path.join(trace_dir, "table2.json"))}
    plans = {}
    rows = ["| configuration | schedule | T_issue predicted | loads + issue traced (w0 / w1) | T_drain predicted | "
            "T_RS traced (w0 / w1) | predicted / traced | T_RS (MMA) predicted | storer-bound | binds | dt/tile predicted / traced | "
            "T_L2 assumed / traced |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    by_key = {}
    for r in phases:
        by_key.setdefault((r["config"], r["schedule"]), {})[r["warp"]] = r
    for (config, schedule), warps in by_key.items():
        if config not in plans:
            s = parse_config(config)
            cmd = [xstage, "plan", "moe", "--platform", platform, "--hidden", str(s["hidden"]), "--inter", str(s["inter"]),
                   "--experts", str(s["experts"]), "--top-k", str(s["top_k"]), "--tokens", str(s["tokens"]), "--ranks", "1",
                   "--dtype", s["dtype"], "--json"]
            plans[config] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        plan = plans[config]
        audit = next((a for a in plan["schedules"] if matches(a["variant"], schedule)), None)
        if audit is None:
            raise SystemExit(f"the plan of {config} has no {schedule} variant")
        c = audit["combine"]
        w = [warps[k] for k in sorted(warps)]
        issue = " / ".join(f"{x['loads median_us'] + x['store issue median_us']:.2f}" for x in w)
        traced = " / ".join(f"{x['T_RS median_us']:.2f}" for x in w)
        drain_us = c["T_drain_ns"]["median"] / 1e3
        ratio = " / ".join(f"{drain_us / x['T_RS median_us']:.2f}" for x in w)
        t2 = table2.get((config, schedule), {})
        dt = f"{c['stall_ns']['mean'] / 1e3:.2f} / {t2['dt_mean_us']:.2f}" if t2 else f"{c['stall_ns']['mean'] / 1e3:.2f} / –"
        tl2 = f"{plan['assumptions']['T_L2_ns'] / 1e3:.2f} / {t2['T_mma_L2_median_us']:.2f}" if t2 else "–"
        rows.append(f"| {config} | {schedule} | {c['T_issue_ns']['median'] / 1e3:.2f} | {issue} | {drain_us:.2f} | {traced} | {ratio} | "
                    f"{c['T_RS_ns']['median'] / 1e3:.2f} | {100 * c['storer_bound_fraction']:.0f}% | {c['binds']} | {dt} | {tl2} |")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("costs", help="the platform file's storer section from a storer bench JSON")
    c.add_argument("bench")
    c.add_argument("--background", choices=["none", "hbm_read", "l2_read"], default="none")
    c.add_argument("--tile-end", choices=["publish", "publish_gpu", "storer"], default="publish",
                   help="the kernel's tile end: publish (one release per tile at system scope, EP > 1), publish_gpu "
                        "(at GPU scope, EP = 1) or storer (before 2026-12-06)")
    p = sub.add_parser("compare", help="the audit's storer spans against traced phases")
    p.add_argument("xstage")
    p.add_argument("platform")
    p.add_argument("trace_dir")
    p.add_argument("--out")
    a = ap.parse_args()
    if a.command == "costs":
        print(json.dumps({"storer": costs(a.bench, a.background, a.tile_end)}, indent=2))
        return
    text = compare(a.xstage, a.platform, a.trace_dir)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
