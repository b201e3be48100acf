#!/usr/bin/env python3
"""Would a schedule choice that sees the routing pay on the held-out lists? The 2026-12-02 re-tune run (one H200,
EP = 1, every variant of the grid and three held-out lists, balanced and Zipf-1.2 skewed routing of each shape, 20
trials each) scored like tools/moe/auto_eval.py (ratio = the best variant's median / the chosen one's, per measured
configuration): the rule as shipped; the best routing-blind choice per (shape, tokens, dtype), knowing the
measurements (the most any rule that decides before the routing is known can reach); and the rule with one
device-side correction, its M-pairs choice replaced by the single-CTA twin when the routing is skewed (the simplest
choice a kernel could make from the routed counts). Then the configurations where even the routing-blind best stays
below 0.95, with each routing's measured winner.

    python3 results/cpu/2026-12-07-moe-routing-aware/analyze.py [XSTAGE] > results/cpu/2026-12-07-moe-routing-aware/analysis.md

XSTAGE (default build/xstage) gives the rule's choices (`xstage plan moe --choose --json`, CPU only)."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tools", "moe"), os.path.join(ROOT, "tools")]
import auto_eval as ae  # noqa: E402

RUN = os.path.join(ROOT, "results/h200/moe/2026-12-02-retune/moe_schedules.tar.xz")
LISTS = ["moe_grid", "moe_heldout", "moe_heldout2", "moe_heldout3"]


def main():
    xstage = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "xstage")
    print("# Would a schedule choice that sees the routing pay?\n")
    print("From `results/h200/moe/2026-12-02-retune/moe_schedules.tar.xz` (median of 20 trials); the rule as shipped. "
          "Written by `analyze.py`.\n")
    print("| list | configurations | rule: geomean / min | best routing-blind choice: geomean / min | "
          "rule, M-pairs to the single-CTA twin under skew: geomean / min |")
    print("|---|---:|---|---|---|")
    below = []
    for name in LISTS:
        _, measured = ae.load_bench(RUN, name)
        plan = ae.rule_plan(xstage, os.path.join(ROOT, "configs", name + ".json"), 1)
        rows = ae.evaluate(measured, plan)
        swapped = []
        for r in rows:
            by = measured[r["config"]]
            choice = r["chosen"].replace(" m-pairs", "") if r["routing"] == "skewed" else r["chosen"]
            swapped.append(r["best_ms"] / by[ae.fixed_variant(choice, by)]["median_ms"])
            if r["oracle_ratio"] < 0.95:
                below.append(f"| {name} | `{r['config']}` | {r['oracle_ratio']:.3f} | {ae.short(r['oracle'])} | "
                             f"{ae.short(r['best'])} | {ae.short(r['twin_best'])} |")
        rule = [r["ratio"] for r in rows]
        blind = [r["oracle_ratio"] for r in rows]
        print(f"| {name} | {len(rows)} | {ae.geomean(rule):.3f} / {min(rule):.3f} | {ae.geomean(blind):.3f} / {min(blind):.3f} | "
              f"{ae.geomean(swapped):.3f} / {min(swapped):.3f} |")
    print("\n**Where the best routing-blind choice stays below 0.95** (its ratio there, and the measured winner of this "
          "routing and of the other):\n")
    print("| list | configuration | best routing-blind: ratio | its variant | winner here | winner, other routing |")
    print("|---|---|---:|---|---|---|")
    print("\n".join(below) if below else "| – | none | | | | |")


if __name__ == "__main__":
    main()
