#!/usr/bin/env python3
"""The fused MoE kernel's per-tile traces (`xstage moe bench --trace DIR` from an instrumented build,
CMake -DXSTAGE_MOE_STATS=ON) as the paper shows them:

  fig9_<config>.png   tensor-core activity timeline: per CTA, its Linear-1 and Linear-2 mainloops over time,
                      the waits for a free staging slot marked, one panel per schedule (paper Fig. 9);
  fig10.png           the sender-visible remote-store span T_RS per Linear-2 tile (staging full -> stores
                      drained), its distribution per schedule and configuration (paper Fig. 10);
  table2.md / .json   per configuration and schedule: median T_RS, median mainloop times T_mma of L2 and L1
                      tiles, the measured stall per L2 tile Δt (the consumer's wait for a free staging slot:
                      mean, median, p90, fraction of tiles that waited), beside the audit's prediction when
                      --predictions names a JSON of {config: {schedule: Δt_us}} (paper Table 2);
  tiles.md / .json    per configuration and schedule, where each consumer's time goes: the CTA's span, the share of
                      it in mainloops, the median mainloop and epilogue of L1 and L2 tiles, the median gap from one
                      tile's epilogue end to the next tile's mainloop start and their sum per CTA, and when the
                      first tile starts after the CTA does (medians over CTAs where per CTA);
  phases.md / .json   traces that stamp the storer's phases (drain columns `loaded`, `released`): per
                      configuration, schedule and storer warp, the median and p90 of each phase of T_RS:
                      RowSource loads, store issue (staged rows read and stored), fence (the staging-slot
                      arrive and the system-scope fence), release (the count and l2_done releases);
  l1_epilogue.md/.json  traces that stamp the Linear-1 epilogue's phases (tile columns `l1_stored`,
                      `l1_fenced`): per configuration and schedule, the median and p90 of its SwiGLU and ring
                      stores, its fence, and the consumer warpgroups' barrier with the l1_done release.

    python3 tools/moe/trace_figures.py DIR [--predictions FILE] --out OUTDIR

Cycle stamps convert to ns per CTA with the frequency its two anchors give (clock64 and %globaltimer read
together at the CTA's start and end), so every CTA lands on one timeline.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402


def schedule_of(impl):
    name = impl.split()[0]
    return name.replace("megamoe-", "").rstrip(":")


def per_cta(doc):
    """Yields (cta, to_ns, tiles, drains) with to_ns(clock) -> ns on the common timeline."""
    for c, cta in enumerate(doc["ctas"]):
        s_ns, s_clk, e_ns, e_clk = cta["anchors"]
        if e_ns <= s_ns or e_clk <= s_clk:
            continue
        f = (e_clk - s_clk) / (e_ns - s_ns)  # cycles per ns
        yield c, (lambda clk, s_ns=s_ns, s_clk=s_clk, f=f: s_ns + (clk - s_clk) / f), f, cta["tiles"], cta["drains"]


def drain_columns(doc):
    """Column index by name of the drain records (older traces: staged, issued, drained only)."""
    return {name: i for i, name in enumerate(doc["columns"]["drains"])}


# The storer's phases: (name, from column, to column); suffix "_w1" for storer warp 1.
PHASES = [("loads", "staged", "loaded"), ("store issue", "loaded", "issued"), ("fence", "issued", "drained"),
          ("release", "drained", "released"), ("T_RS", "staged", "drained")]


def phase_summary(doc):
    """Per storer warp, per phase: (median, p90) in µs over the L2 tiles; None for traces without phase stamps."""
    col = drain_columns(doc)
    if "loaded" not in col:
        return None
    warps = [""] + sorted({k[len("staged"):] for k in col if k.startswith("staged_w")})
    out = {}
    for w in warps:
        xs = {name: [] for name, _, _ in PHASES}
        for _, _to_ns, f, _tiles, drains in per_cta(doc):
            for d in drains:
                if d[col["staged" + w]] == 0:  # that warp left no record of this tile
                    continue
                for name, a, b in PHASES:
                    xs[name].append((d[col[b + w]] - d[col[a + w]]) / f / 1e3)
        out["warp 0" if not w else "warp " + w[2:]] = {name: (median(v), quantile(v, 0.9), len(v)) for name, v in xs.items()}
    return out


def quantile(xs, p):
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize(doc):
    t_rs, ml1, ml2, waits = [], [], [], []
    col = drain_columns(doc)
    for _, to_ns, f, tiles, drains in per_cta(doc):
        for d in drains:
            t_rs.append((d[col["drained"]] - d[col["staged"]]) / f / 1e3)
        for stage, _row, m0, m1, _end, wait, *_ in tiles:
            (ml1 if stage == 1 else ml2).append((m1 - m0) / f / 1e3)
            if stage == 2:
                waits.append(wait / f / 1e3)
    q, med = quantile, median
    return {
        "T_RS_median_us": med(t_rs), "T_RS_p90_us": q(t_rs, 0.9), "l2_tiles": len(t_rs),
        "T_mma_L2_median_us": med(ml2), "T_mma_L1_median_us": med(ml1),
        "dt_mean_us": statistics.fmean(waits) if waits else float("nan"), "dt_median_us": med(waits), "dt_p90_us": q(waits, 0.9),
        "dt_waited_fraction": sum(w > 0.05 for w in waits) / len(waits) if waits else float("nan"),
        "_t_rs": t_rs,
    }


def tile_walk(doc):
    """Where the consumers' time goes (µs; medians over tiles, or over CTAs for the per-CTA sums)."""
    spans, busy, gap_sums, firsts = [], [], [], []
    ml = {1: [], 2: []}
    epi = {1: [], 2: []}
    gaps = []
    for c, _to_ns, f, tiles, _drains in per_cta(doc):
        s_ns, s_clk, e_ns, _e_clk = doc["ctas"][c]["anchors"]
        spans.append((e_ns - s_ns) / 1e3)
        b, g, prev = 0.0, 0.0, None
        for stage, _row, m0, m1, end, _wait, *_ in tiles:
            ml[stage].append((m1 - m0) / f / 1e3)
            epi[stage].append((end - m1) / f / 1e3)
            b += (m1 - m0) / f / 1e3
            if prev is None:
                firsts.append((m0 - s_clk) / f / 1e3)
            else:
                gaps.append((m0 - prev) / f / 1e3)
                g += (m0 - prev) / f / 1e3
            prev = end
        busy.append(b)
        gap_sums.append(g)
    return {"span_us": median(spans), "mainloop_share": median([b / s for b, s in zip(busy, spans) if s > 0]),
            "T_mma_L1_us": median(ml[1]), "T_epi_L1_us": median(epi[1]), "T_mma_L2_us": median(ml[2]),
            "T_epi_L2_us": median(epi[2]), "gap_us": median(gaps), "gap_sum_per_cta_us": median(gap_sums),
            "first_tile_after_us": median(firsts), "ctas": len(spans)}


def write_tiles(docs, out):
    rows = [{"config": d["config"], "schedule": schedule_of(d["impl"]), **tile_walk(d)} for d in docs]
    lines = ["| configuration | schedule | CTA span (µs) | in mainloops | L1 mainloop / epilogue (µs) | L2 mainloop / epilogue (µs) | gap between tiles (µs) | gaps per CTA (µs) | first tile after (µs) | CTAs |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['schedule']} | {r['span_us']:.0f} | {r['mainloop_share']:.2f} | {r['T_mma_L1_us']:.1f} / "
                     f"{r['T_epi_L1_us']:.2f} | {r['T_mma_L2_us']:.1f} / {r['T_epi_L2_us']:.2f} | {r['gap_us']:.2f} | "
                     f"{r['gap_sum_per_cta_us']:.0f} | {r['first_tile_after_us']:.1f} | {r['ctas']} |")
    with open(os.path.join(out, "tiles.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "tiles.json"), "w") as f:
        json.dump(rows, f, indent=1)


# The Linear-1 epilogue's phases: (name, from column, to column) of a tile record.
L1_PHASES = [("SwiGLU + stores", "mainloop_end", "l1_stored"), ("fence", "l1_stored", "l1_fenced"),
             ("barrier + release", "l1_fenced", "epilogue_end"), ("epilogue", "mainloop_end", "epilogue_end")]


def l1_epilogue_summary(doc):
    """Per phase of the Linear-1 epilogue: (median, p90) in µs over L1 tiles; None for traces without the stamps."""
    col = {name: i for i, name in enumerate(doc.get("columns", {}).get("tiles", []))}
    if "l1_stored" not in col:
        return None
    spans = {name: [] for name, _, _ in L1_PHASES}
    for _, _to_ns, f, tiles, _drains in per_cta(doc):
        for t in tiles:
            if t[col["stage"]] == 1:
                for name, a, b in L1_PHASES:
                    spans[name].append((t[col[b]] - t[col[a]]) / f / 1e3)
    return {name: (median(v), quantile(v, 0.9), len(v)) for name, v in spans.items()}


def write_phase_table(out, stem, rows, keys, names, count):
    """STEM.md / .json: one row per summary, its key columns (header, row key), then each phase's median / p90 (µs) and
    a count column (header, row key). Nothing is written for no rows."""
    if not rows:
        return
    lines = ["| " + " | ".join([h for h, _ in keys] + [f"{n} median / p90 (µs)" for n in names] + [count[0]]) + " |",
             "|" + "---|" * len(keys) + "---:|" * (len(names) + 1)]
    for r in rows:
        lines.append("| " + " | ".join([str(r[k]) for _, k in keys] +
                                       [f"{r[n + ' median_us']:.2f} / {r[n + ' p90_us']:.2f}" for n in names] +
                                       [str(r[count[1]])]) + " |")
    with open(os.path.join(out, stem + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, stem + ".json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))


def medians_and_p90s(summary):
    """{phase: (median, p90, n)} -> the row fields "<phase> median_us" and "<phase> p90_us"."""
    return {**{f"{name} median_us": m for name, (m, _p, _n) in summary.items()},
            **{f"{name} p90_us": p for name, (_m, p, _n) in summary.items()}}


def write_l1_epilogue(docs, out):
    """l1_epilogue.md / .json: the Linear-1 epilogue's phases per configuration and schedule (traces that stamp them)."""
    rows = [{"config": d["config"], "schedule": schedule_of(d["impl"]), **medians_and_p90s(ph), "l1_tiles": ph["epilogue"][2]}
            for d in docs if (ph := l1_epilogue_summary(d))]
    write_phase_table(out, "l1_epilogue", rows, [("configuration", "config"), ("schedule", "schedule")],
                      [name for name, _, _ in L1_PHASES], ("L1 tiles", "l1_tiles"))


def write_phases(docs, out):
    """phases.md / .json: the storer's phases per configuration, schedule and warp (traces that stamp them)."""
    rows = [{"config": d["config"], "schedule": schedule_of(d["impl"]), "warp": warp, **medians_and_p90s(phases),
             "l2_tiles": phases["T_RS"][2]}
            for d in docs for warp, phases in (phase_summary(d) or {}).items()]
    write_phase_table(out, "phases", rows, [("configuration", "config"), ("schedule", "schedule"), ("storer warp", "warp")],
                      [name for name, _, _ in PHASES], ("L2 tiles", "l2_tiles"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace_dir")
    ap.add_argument("--predictions", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ctas", type=int, default=16, help="CTAs drawn in each timeline (default 16)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    docs = [results.load_json(p) for p in results.matching(args.trace_dir, "*.json")]
    if not docs:
        raise SystemExit(f"no trace JSON in {args.trace_dir} (run `xstage moe bench --trace DIR` from an instrumented build)")
    pred = results.load_json(args.predictions) if args.predictions else {}
    rows, by_config = [], {}
    for d in docs:
        s = summarize(d)
        sched = schedule_of(d["impl"])
        p = pred.get(d["config"], {}).get(sched)
        rows.append({"config": d["config"], "impl": d["impl"], "schedule": sched, **{k: v for k, v in s.items() if k != "_t_rs"},
                     "dt_predicted_us": p})
        by_config.setdefault(d["config"], []).append((sched, d, s))
    lines = ["| configuration | schedule | T_RS median (µs) | T_RS p90 | T_mma L2 (µs) | T_mma L1 (µs) | Δt measured mean / median / p90 (µs) | L2 tiles that waited | Δt predicted (µs) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        pstr = "–" if r["dt_predicted_us"] is None else f"{r['dt_predicted_us']:.2f}"
        lines.append(f"| {r['config']} | {r['schedule']} | {r['T_RS_median_us']:.2f} | {r['T_RS_p90_us']:.2f} | {r['T_mma_L2_median_us']:.2f} | "
                     f"{r['T_mma_L1_median_us']:.2f} | {r['dt_mean_us']:.2f} / {r['dt_median_us']:.2f} / {r['dt_p90_us']:.2f} | "
                     f"{100 * r['dt_waited_fraction']:.0f}% | {pstr} |")
    with open(os.path.join(args.out, "table2.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "table2.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))
    write_tiles(docs, args.out)
    write_phases(docs, args.out)
    write_l1_epilogue(docs, args.out)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no figures")
        return
    # Fig. 10: T_RS distributions.
    fig, ax = plt.subplots(figsize=(7, 4))
    for cfg, runs in sorted(by_config.items()):
        for sched, _d, s in runs:
            xs = sorted(s["_t_rs"])
            if xs:
                ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=f"{cfg} {sched}")
    ax.set_xscale("log")
    ax.set_xlabel("T_RS per Linear-2 tile (µs): staging full -> remote stores drained")
    ax.set_ylabel("fraction of tiles")
    ax.legend(fontsize=6)
    fig.tight_layout()
    results.save_png(fig, os.path.join(args.out, "fig10.png"), dpi=140)
    # Fig. 9: timelines, one figure per configuration, one panel per schedule.
    for cfg, runs in sorted(by_config.items()):
        fig, axes = plt.subplots(len(runs), 1, figsize=(9, 1.2 + 1.6 * len(runs)), squeeze=False)
        for ax, (sched, d, _s) in zip(axes[:, 0], runs):
            t0 = min(cta["anchors"][0] for cta in d["ctas"])
            for c, to_ns, f, tiles, _drains in per_cta(d):
                if c >= args.ctas:
                    break
                for stage, _row, m0, m1, end, wait, *_ in tiles:
                    a, b = (to_ns(m0) - t0) / 1e3, (to_ns(m1) - t0) / 1e3
                    ax.broken_barh([(a, b - a)], (c - 0.4, 0.8), color="tab:blue" if stage == 1 else "tab:orange")
                    if stage == 2 and wait > 0:
                        e = (to_ns(end) - t0) / 1e3
                        ax.broken_barh([(e - wait / f / 1e3, wait / f / 1e3)], (c - 0.4, 0.8), color="tab:red")
            ax.set_title(f"{cfg}: {sched} (blue L1, orange L2 mainloops, red staging wait)", fontsize=8)
            ax.set_ylabel("CTA")
        axes[-1, 0].set_xlabel("µs since the first CTA started")
        fig.tight_layout()
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in cfg)
        results.save_png(fig, os.path.join(args.out, f"fig9_{safe}.png"), dpi=130)
        plt.close(fig)


if __name__ == "__main__":
    main()
