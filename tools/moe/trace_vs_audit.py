#!/usr/bin/env python3
"""The MoE audit's per-tile predictions against the fused kernel's per-tile trace.

Usage: tools/moe/trace_vs_audit.py TRACE_DIR PLAN [--out FILE] [--dt-json FILE]
  TRACE_DIR  `xstage moe bench --trace DIR` from an instrumented build (CMake -DXSTAGE_MOE_STATS=ON): one JSON per
             configuration and implementation, rank 0's last trial (format: src/cli/moe.cpp, write_trace)
  PLAN       `xstage plan moe --grid <the same grid> --choose --json` (plain or .xz): the audit per schedule
  --dt-json  also write {config: {schedule: predicted Δt per Linear-2 tile in µs}} for tools/moe/trace_figures.py --predictions
             (its schedule key is the implementation's first word: expert-wave, pipelined waves and M-pairs share one)

Per Linear-2 tile, measured (cycles to ns with each CTA's anchors, as tools/moe/trace_figures.py does) against the audit's
prediction for the same schedule on the balanced load:
  T_RS     staged -> last store issued (the drain record's issued - staged): the span the MMA can see
  T_fence  staged -> stores drained (drained - staged; tools/moe/trace_figures.py calls this T_RS)
  T_cover  this tile staged (epilogue end) -> the mainloop end of the CTA's Linear-2 tile S later (S staging slots:
           1 at b_n = 256, 2 at 128)
  dt       the consumers' wait for a free staging slot (the tile record's staging_wait), and the share of tiles > 0
  K_act    CTAs with staged <= t < drained at each tile's staged time t, itself included
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402
import auto_eval as ev  # noqa: E402  (beside this file)


def to_ns_fn(anchors):
    s_ns, s_clk, e_ns, e_clk = anchors
    if e_ns <= s_ns or e_clk <= s_clk:
        return None, None
    f = (e_ns - s_ns) / (e_clk - s_clk)  # ns per cycle
    return (lambda clk: s_ns + (clk - s_clk) * f), f


def measure(doc, slots):
    tiles = []  # per L2 tile: dict
    spans = []  # (staged_ns, drained_ns)
    col = {name: i for i, name in enumerate(doc["columns"]["drains"])}  # storer warp 0's stamps, by name
    for cta in doc["ctas"]:
        to_ns, ns_per_clk = to_ns_fn(cta["anchors"])
        if to_ns is None:
            continue
        l2 = [t for t in cta["tiles"] if t[0] == 2]
        drains = cta["drains"]
        for j, d in enumerate(drains):
            staged, issued, drained = (to_ns(d[col[name]]) for name in ("staged", "issued", "drained"))
            rec = {"T_RS": issued - staged, "T_fence": drained - staged, "staged": staged, "drained": drained}
            if j < len(l2):
                rec["dt"] = l2[j][5] * ns_per_clk
                if j + slots < len(l2):
                    rec["T_cover"] = to_ns(l2[j + slots][3]) - to_ns(l2[j][4])
            tiles.append(rec)
            spans.append((staged, drained))
    for rec in tiles:  # K_act: draining at this tile's staged time (itself included)
        t = rec["staged"]
        rec["K_act"] = sum(1 for s, e in spans if s <= t < e)
    return tiles


def dist(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    return {"mean": statistics.fmean(xs), "p90": xs[int(0.9 * (len(xs) - 1))], "min": xs[0]}


def fmt(p, m, key="mean", scale=1e-3):
    ps = "–" if p is None else f"{p[key] * scale:.2f}"
    ms = "–" if m is None else f"{m[key] * scale:.2f}"
    return f"{ps} / {ms}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace_dir")
    ap.add_argument("plan")
    ap.add_argument("--out")
    ap.add_argument("--dt-json")
    a = ap.parse_args()
    plan = ev.load_plan(a.plan)
    out = ["# The audit's per-tile predictions against the kernel's trace", "",
           f"`tools/moe/trace_vs_audit.py {a.trace_dir} {a.plan}`; predicted (balanced load) / measured (rank 0, last trial), µs.", "",
           "| config | variant | T_RS mean | T_RS p90 | T_fence mean | T_cover min | dt/tile mean | tiles with dt > 0 | K_act mean |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for path in results.matching(a.trace_dir, "*.json"):
        doc = results.load_json(path)
        impl, config = doc.get("impl", ""), doc.get("config", "")
        v = ev.variant_of(impl)
        key, _ = ev.plan_key(config)
        p = plan.get(key)
        s = None
        if p:
            s = next((x for x in p["schedules"] if ev.rule_name({"name": x["variant"]["name"]}) == v), None)
        slots = s["staging_slots"] if s else (1 if "128x256" in impl else 2)
        tiles = measure(doc, slots)
        m = {k: dist([t.get(k) for t in tiles]) for k in ("T_RS", "T_fence", "T_cover", "dt", "K_act")}
        waited = sum(1 for t in tiles if (t.get("dt") or 0) > 0) / max(1, len(tiles))
        c = s["combine"] if s else {}
        pk = lambda name: c.get(name)  # noqa: E731
        stalled = "–" if not s else f"{100 * c['stalled_fraction']:.1f}%"
        out.append(f"| {config} | {ev.short(v or impl)} | {fmt(pk('T_RS_ns'), m['T_RS'])} | {fmt(pk('T_RS_ns'), m['T_RS'], 'p90')} | "
                   f"{fmt(pk('T_fence_ns'), m['T_fence'])} | {fmt(pk('T_cover_ns'), m['T_cover'], 'min')} | "
                   f"{fmt(pk('stall_ns'), m['dt'])} | {stalled} / {100 * waited:.1f}% | "
                   f"{fmt(pk('K_act'), m['K_act'], 'mean', 1.0)} |")
    text = "\n".join(out) + "\n"
    if a.out:
        open(a.out, "w").write(text)
    print(text)
    if a.dt_json:
        dt = {}
        for key, p in plan.items():
            for s in p["schedules"]:
                name = s["variant"]["name"].split()[0]  # tools/moe/trace_figures.py's key: the implementation's first word
                for routing in ("balanced", "skewed"):
                    parts = key.split("/")
                    dt.setdefault("/".join(parts[:2] + [routing] + parts[2:]), {}).setdefault(name, s["combine"]["stall_ns"]["mean"] / 1e3)
        json.dump(dt, open(a.dt_json, "w"), indent=1)


if __name__ == "__main__":
    main()
