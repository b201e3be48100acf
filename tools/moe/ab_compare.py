#!/usr/bin/env python3
"""Two builds (or two option sets) of the MoE layer compared on the same configurations: the time ratio A / B per
configuration and schedule (> 1: B is faster), from `xstage moe bench` JSONs of alternating rounds, as
scripts/gpu/moe_ab.sh writes them (ab-r<round>-v<variant>.json) or named by a glob per side.

Usage:
  tools/moe/ab_compare.py RUN --a 'ab-r*-v0.json' --b 'ab-r*-v1.json' [--threshold 0.98] [--out summary.md]

  RUN        a run folder or archive holding the bench JSONs
  --a, --b   glob patterns of the two sides' JSONs inside RUN (one file per round)
  --threshold  count the configurations whose ratio falls below it (default 0.98)

Per configuration and schedule (expert-wave, pipelined waves, interleaved, auto: `megamoe-auto` results are one
schedule of their own, whatever they chose; the unfused baselines too), each side's median time is averaged over
its rounds. Per schedule: the geometric mean of A / B, its minimum and maximum with their configurations, and how
many fall below the threshold. The same-side spread (round 1 / round 2 of A, of B) shows how much of a
configuration's ratio is run-to-run noise.
"""
import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import results  # noqa: E402
from common.moe_names import family_of  # noqa: E402


def side(run, pattern):
    """-> [{(config, schedule): median ms}] per round (file), sorted by name."""
    names = run.matching(pattern)
    if not names:
        sys.exit(f"error: no file in {run.path} matches '{pattern}'")
    rounds = []
    for name in names:
        rows = run.json(name)["results"]
        rounds.append({(r["config"], family_of(r["impl"])): r["median_ms"] for r in rows})
    return names, rounds


def geomean(xs):
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def report(run_path, a_pattern, b_pattern, threshold):
    run = results.Run(run_path)
    a_names, a = side(run, a_pattern)
    b_names, b = side(run, b_pattern)
    keys = sorted(set.intersection(*(set(r) for r in a + b)))
    if not keys:
        sys.exit("error: the two sides share no (configuration, schedule)")
    mean = lambda rounds, k: statistics.fmean(r[k] for r in rounds)  # noqa: E731
    lines = [
        "# MoE A/B: time of A / time of B per configuration (> 1: B is faster)",
        "",
        f"A: {', '.join(a_names)}; B: {', '.join(b_names)} (each side's median ms averaged over its files).",
        "",
        f"| schedule | configurations | geomean A/B | min | at | max | at | below {threshold} |",
        "|---|---:|---:|---:|---|---:|---|---:|",
    ]
    for s in sorted({k[1] for k in keys}):
        ratios = [(mean(a, k) / mean(b, k), k[0]) for k in keys if k[1] == s]
        lo, hi = min(ratios), max(ratios)
        below = sum(r < threshold for r, _ in ratios)
        lines.append(f"| {s} | {len(ratios)} | {geomean([r for r, _ in ratios]):.3f} | {lo[0]:.3f} | {lo[1]} | "
                     f"{hi[0]:.3f} | {hi[1]} | {below} |")
    lines += ["", "Same-side spread, first file / last file over every (configuration, schedule):", "",
              "| side | geomean | min | max |", "|---|---:|---:|---:|"]
    for label, rounds in (("A", a), ("B", b)):
        if len(rounds) > 1:
            r = [rounds[0][k] / rounds[-1][k] for k in keys]
            lines.append(f"| {label} | {geomean(r):.3f} | {min(r):.3f} | {max(r):.3f} |")
    lines += ["", f"Below {threshold}, per round (A / B of each round's files in order):", "",
              "| configuration | schedule | A/B | per round |", "|---|---|---:|---|"]
    for k in keys:
        ratio = mean(a, k) / mean(b, k)
        if ratio < threshold:
            per = ", ".join(f"{ra[k]:.3f}/{rb[k]:.3f}" for ra, rb in zip(a, b))
            lines.append(f"| {k[0]} | {k[1]} | {ratio:.3f} | {per} ms |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="run folder or archive with the bench JSONs")
    p.add_argument("--a", required=True, help="glob of side A's JSONs in the run")
    p.add_argument("--b", required=True, help="glob of side B's JSONs in the run")
    p.add_argument("--threshold", type=float, default=0.98, help="count ratios below this (default 0.98)")
    p.add_argument("--out", help="write the markdown here (default: print it)")
    args = p.parse_args(argv)
    text = report(args.run, args.a, args.b, args.threshold)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
