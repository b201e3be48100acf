#!/usr/bin/env python3
"""How the MoE bench's statistic moves the schedule rule's score: the 2026-12-02 re-tune run (one H200, EP = 1, every
variant of the grid and three held-out lists, 20 trials each, the implementations of a configuration timed one after
the other) scored with the median of the 20 trials (what tools/moe/auto_eval.py takes), their minimum, the median of
the first 5 and of the last 10, and the median times the SM clock read after the trials (cycles, where the
clock held); with the drift of each series (median of the last 5 trials over the first 5) by layer
time, and `megamoe-auto` against the same variant measured on its own (same launch parameters) per statistic.

    python3 results/cpu/2026-12-07-moe-trial-drift/analyze.py [XSTAGE] > results/cpu/2026-12-07-moe-trial-drift/analysis.md

XSTAGE (default build/xstage) gives the rule's choices (`xstage plan moe --choose --json`, CPU only)."""
import os
import statistics as st
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tools", "moe"), os.path.join(ROOT, "tools")]
import auto_eval as ae  # noqa: E402

RUN = os.path.join(ROOT, "results/h200/moe/2026-12-02-retune/moe_schedules.tar.xz")
LISTS = ["moe_grid", "moe_heldout", "moe_heldout2", "moe_heldout3"]
T = "trial_max_over_ranks_ms"
STATS = {  # each of a result's statistics, in ms (the last in ms at 1 GHz: the median's SM cycles)
    "median of 20": lambda r: st.median(r[T]),
    "min of 20": lambda r: min(r[T]),
    "median of first 5": lambda r: st.median(r[T][:5]),
    "median of last 10": lambda r: st.median(r[T][-10:]),
    "median × SM clock after": lambda r: st.median(r[T]) * r["sm_clock_mhz_after"][0] / 1000,
}


def with_stat(measured, f):
    return {c: {v: dict(r, median_ms=f(r)) for v, r in by.items()} for c, by in measured.items()}


def main():
    xstage = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "xstage")
    print("# The MoE bench's statistic against the schedule rule's score\n")
    print("From `results/h200/moe/2026-12-02-retune/moe_schedules.tar.xz`; the rule as shipped. Written by `analyze.py`.\n")
    drift, slow = {}, []
    table = ["| list | statistic | rule: geomean / min | pipelined waves everywhere: geomean / min | best per shape, knowing the measurements | auto ÷ same variant: geomean, range |",
             "|---|---|---|---|---|---|"]
    for name in LISTS:
        docs, measured = ae.load_bench(RUN, name)
        plan = ae.rule_plan(xstage, os.path.join(ROOT, "configs", name + ".json"), 1)
        for doc in docs.values():
            for r in (doc or {}).get("results", []):
                t = r.get("trial_max_over_ranks_ms")
                if t and len(t) >= 10:
                    cls = "< 1 ms" if r["median_ms"] < 1 else "1-3 ms" if r["median_ms"] < 3 else ">= 3 ms"
                    drift.setdefault(cls, []).append(st.median(t[-5:]) / st.median(t[:5]))
        for doc in docs.values():  # auto faster than its twin under the trials' minimum: which, and the clocks after
            for r in (doc or {}).get("results", []):
                twin = measured.get(r["config"], {}).get(ae.variant_of(r["impl"])) if r["impl"].startswith("megamoe-auto") else None
                if twin and r.get(T) and min(r[T]) / min(twin[T]) < 0.97:
                    slow.append(f"| {name} | `{r['config']}` | {twin['median_ms']:.2f} | {min(r[T]) / min(twin[T]):.3f} | "
                                f"{r['sm_clock_mhz_after'][0]:.0f} / {twin['sm_clock_mhz_after'][0]:.0f} |")
        for label, f in STATS.items():
            m = with_stat(measured, f)
            rows = ae.evaluate(m, plan)
            rule = [r["ratio"] for r in rows]
            fixed = [r["fixed_ratios"]["pipelined waves"] for r in rows]
            oracle = [r["oracle_ratio"] for r in rows]
            pairs = []
            for doc in docs.values():
                for r in (doc or {}).get("results", []):
                    if r["impl"].startswith("megamoe-auto") and r.get(T):
                        twin = m.get(r["config"], {}).get(ae.variant_of(r["impl"]))
                        if twin:
                            pairs.append(f(r) / twin["median_ms"])
            table.append(f"| {name} | {label} | {ae.geomean(rule):.3f} / {min(rule):.3f} | {ae.geomean(fixed):.3f} / {min(fixed):.3f} | "
                         f"{ae.geomean(oracle):.3f} / {min(oracle):.3f} | {ae.geomean(pairs):.3f}, {min(pairs):.3f}–{max(pairs):.3f} |")
    print("**Drift within a series** (median of the last 5 trials over the first 5, every variant of every list):\n")
    print("| layer time | series | median | range |\n|---|---:|---:|---|")
    for cls in ("< 1 ms", "1-3 ms", ">= 3 ms"):
        x = drift[cls]
        print(f"| {cls} | {len(x)} | {st.median(x):.3f} | {min(x):.3f}–{max(x):.3f} |")
    print("\n**The rule's score by statistic** (ratio = the best variant's time / the chosen one's):\n")
    print("\n".join(table))
    print("\n**`auto` below 0.97 of its twin under the trials' minimum** (the twin measured before it in the same run; "
          "the SM clock read after each series):\n")
    print("| list | configuration | twin's median ms | min auto / min twin | clock after, auto / twin (MHz) |\n|---|---|---:|---:|---|")
    print("\n".join(slow))


if __name__ == "__main__":
    main()
