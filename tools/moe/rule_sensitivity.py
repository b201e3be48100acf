#!/usr/bin/env python3
"""What each term of the MegaMoE schedule rule contributes on a measured grid: the rule as shipped, then with one
constant replaced (`xstage plan moe --grid GRID --choose --json --rule NAME=VALUE`), each scored like
tools/moe/auto_eval.py (ratio = best measured / measured time of the chosen variant, per configuration).

Usage: tools/moe/rule_sensitivity.py XSTAGE GRID BENCH [--folder NAME] [--ranks P] [--out FILE]
  XSTAGE  the built binary (build/xstage)
  GRID    the bench grid (configs/moe_grid.json)
  BENCH   the run (its folder or its archive: bench.json + bench-m-pairs.json)
  --folder the folder inside the run that holds them (as tools/moe/auto_eval.py)
  --ranks the run's EP ranks P (`xstage plan moe --ranks`; default 2)
"""
import argparse

import auto_eval as ev

VARIANTS = [
    ("the rule as shipped", []),
    ("no tile-time jitter in the lockstep", ["time_jitter=0"]),
    ("tile-time jitter ±20%", ["time_jitter=0.2"]),
    ("tile-time jitter ±30%", ["time_jitter=0.3"]),
    ("no interleaved bf16 mainloop factor (1.073 -> 1)", ["factor_interleaved_bf16=1"]),
    ("no interleaved fp8 mainloop factor (0.970 -> 1)", ["factor_interleaved_fp8=1"]),
    ("no pipelined-waves factor (1.11 -> 1)", ["factor_pipelined=1"]),
    ("pipelined-waves factor from the timings (1.11 -> 1.032)", ["factor_pipelined=1.032"]),
    ("no M-pairs factor (0.939 -> 1)", ["factor_m_pairs=1"]),
    ("no routing-skew hedges", ["skew_hedge_waves=0", "skew_hedge_m_pairs=0"]),
    ("no weight re-read term", ["reread_cost=0"]),
    ("re-reads at full HBM time (reread_cost 1)", ["reread_cost=1"]),
    ("M-pairs at any load (no row test)", ["m_pairs_min_rows=0"]),
    ("M-pairs only from 512 rows per expert", ["m_pairs_min_rows=512"]),
    ("never M-pairs", ["m_pairs_min_rows=1000000000"]),
    ("tile times from 20% lower throughputs", ["tflops_bf16=440", "tflops_fp8=632"]),
    ("fence latency 4 us instead of 1 us", ["latency_ns=4000"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("xstage")
    ap.add_argument("grid")
    ap.add_argument("bench")
    ap.add_argument("--folder", default="")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    _, measured = ev.load_bench(a.bench, a.folder)
    lines = ["# The schedule rule with one term changed", "",
             f"`tools/moe/rule_sensitivity.py {a.xstage} {a.grid} {a.bench}{' --folder ' + a.folder if a.folder else ''} --ranks {a.ranks}`: "
             "each row runs",
             f"`xstage plan moe --grid {a.grid} --ranks {a.ranks} --choose --json [--rule NAME=VALUE ...]` and scores it like "
             "tools/moe/auto_eval.py.", "",
             "| rule | --rule | geomean | median | min | >= 0.98 | >= 0.95 |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, overrides in VARIANTS:
        plan = ev.rule_plan(a.xstage, a.grid, a.ranks, overrides)
        ratios = [r["ratio"] for r in ev.evaluate(measured, plan)]
        row = ev.summary_line(name, ratios)
        lines.append(row.replace(f"| {name} |", f"| {name} | {' '.join(overrides) or '–'} |", 1))
    text = "\n".join(lines) + "\n"
    if a.out:
        open(a.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
