#!/usr/bin/env python3
"""Paper Fig. 8 for the MegaMoE grid: the speedup of the interleaved schedule over expert-wave on every measured
configuration, as a distribution (geometric mean, median, min, max), a plot and a table that says for each
configuration where interleaving loses why, from the kernel's own counters.

Usage: tools/moe/fig8.py BENCH --out DIR
  BENCH  a run (its folder or its moe.tar.xz: bench.json, and bench-m-pairs.json if the run has it) or a bench.json
  DIR    gets fig8.png and fig8.md

Speedup = expert-wave time / interleaved time, both from the same `xstage moe bench` call (the kernel's defaults:
interleaved on CTA pairs where the tiles pair up, expert-wave on single CTAs). With bench-m-pairs.json, a second
series: both on M-pairs (--cluster-m 2). Why a configuration loses: the per-CTA differences (interleaved minus
expert-wave, rank 0's last trial, clock64 µs) of
  compute       consumer busy time less its producer-gated and staging-slot waits (the mainloop and epilogues: where
                weight locality and L2 load show),
  dep. waits    the producer's waits on counters (wave boundaries, L1 stragglers, the first rows' dispatch),
  staging       the consumers' waits for a staging slot (the X-Stage reaching the MMA),
  tail          the wait for the other rank's combine rows plus the top-k reduction (kernel %globaltimer),
and the largest positive one is named.
"""
import argparse
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402


def load(path, member):
    if results.is_run(path):
        return results.Run(path).json(member)
    return results.load_json(path) if member == "bench.json" else None


def pairs(doc):
    """config -> (expert-wave result, interleaved result) from one bench document."""
    by = {}
    for r in (doc or {}).get("results", []):
        if r.get("median_ms") is None or r["impl"].startswith("unfused"):
            continue
        if "interleaved" in r["impl"]:
            by.setdefault(r["config"], {})["int"] = r
        elif "lag=" not in r["impl"]:
            by.setdefault(r["config"], {})["wave"] = r
    return {c: (v["wave"], v["int"]) for c, v in by.items() if "wave" in v and "int" in v}


def breakdown(w, i):
    kw, ki = w["kernel_stats_rank0_last_trial"], i["kernel_stats_rank0_last_trial"]
    if not kw or not ki:
        return None

    def compute(k):
        return k["consumer_us_per_cta"] - k["producer_wait_us_per_cta"] - k["staging_wait_us_per_cta"]

    return {"compute": compute(ki) - compute(kw),
            "dep. waits": ki["producer_wait_us_per_cta"] - kw["producer_wait_us_per_cta"],
            "staging": ki["staging_wait_us_per_cta"] - kw["staging_wait_us_per_cta"],
            "tail": ki["tail_us"] - kw["tail_us"],
            "K_act": (kw["K_act_mean"], ki["K_act_mean"])}


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def stats(xs):
    s = sorted(xs)
    n = len(s)
    median = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"n": n, "geomean": geomean(s), "median": median, "min": s[0], "max": s[-1], "wins": sum(x > 1 for x in s)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    series = {"default": pairs(load(a.bench, "bench.json")), "M-pairs": pairs(load(a.bench, "bench-m-pairs.json"))}
    series = {k: v for k, v in series.items() if v}
    os.makedirs(a.out, exist_ok=True)

    md = ["# Interleaved over expert-wave on the grid (paper Fig. 8)", "", f"`tools/moe/fig8.py {a.bench} --out {a.out}`", "",
          "Speedup = expert-wave ms / interleaved ms, same bench call. default: interleaved on CTA pairs where the tiles pair up,",
          "expert-wave on single CTAs (the kernel's defaults); M-pairs: both with --cluster-m 2 (where they apply).", "",
          "| series | configurations | geomean | median | min | max | interleaved faster |", "|---|---:|---:|---:|---:|---:|---:|"]
    allstats = {}
    for name, ps in series.items():
        s = stats([w["median_ms"] / i["median_ms"] for w, i in ps.values()])
        allstats[name] = s
        md.append(f"| {name} | {s['n']} | {s['geomean']:.3f} | {s['median']:.3f} | {s['min']:.3f} | {s['max']:.3f} | {s['wins']} of {s['n']} |")
    for dt in ("bf16", "fp8"):
        for rt in ("balanced", "skewed"):
            xs = [w["median_ms"] / i["median_ms"] for c, (w, i) in series["default"].items() if c.endswith("/" + dt) and f"/{rt}/" in c]
            if xs:
                s = stats(xs)
                md.append(f"| default, {dt} {rt} | {s['n']} | {s['geomean']:.3f} | {s['median']:.3f} | {s['min']:.3f} | {s['max']:.3f} | {s['wins']} of {s['n']} |")

    md += ["", "Per configuration (default series), the interleaved kernel's per-CTA differences against expert-wave in µs",
           "(+ = interleaved spends more), and for each loser the largest positive difference:", "",
           "| config | wave ms | interleaved ms | speedup | compute | dep. waits | staging | tail | K_act wave / inter | why interleaved loses |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    ps = series["default"]
    for c, (w, i) in sorted(ps.items(), key=lambda x: x[1][0]["median_ms"] / x[1][1]["median_ms"]):
        sp = w["median_ms"] / i["median_ms"]
        b = breakdown(w, i)
        if b is None:
            md.append(f"| {c} | {w['median_ms']:.2f} | {i['median_ms']:.2f} | {sp:.3f} | | | | | | |")
            continue
        terms = {k: v for k, v in b.items() if k != "K_act"}
        reason = ""
        if sp < 1.0:
            k = max(terms, key=terms.get)
            labels = {"compute": "mainloop: slower compute (weight locality, L2 load)", "dep. waits": "dependency waits",
                      "staging": "X-Stage: staging-slot waits", "tail": "tail: other rank's rows and the reduction"}
            reason = labels[k] + f" (+{terms[k]:.0f} us per CTA)"
        md.append(f"| {c} | {w['median_ms']:.2f} | {i['median_ms']:.2f} | {sp:.3f} | {b['compute']:+.0f} | {b['dep. waits']:+.0f} | "
                  f"{b['staging']:+.0f} | {b['tail']:+.0f} | {b['K_act'][0]:.0f} / {b['K_act'][1]:.0f} | {reason} |")
    open(os.path.join(a.out, "fig8.md"), "w").write("\n".join(md) + "\n")

    fig, axes = plt.subplots(len(series), 1, figsize=(12, 4.2 * len(series)), squeeze=False)
    colors = {"bf16": "#3b6fb6", "fp8": "#d9822b"}
    for ax, (name, ps) in zip(axes[:, 0], series.items()):
        items = sorted(ps.items(), key=lambda x: x[1][0]["median_ms"] / x[1][1]["median_ms"])
        xs = [w["median_ms"] / i["median_ms"] for _, (w, i) in items]
        cs = [colors["fp8" if c.endswith("/fp8") else "bf16"] for c, _ in items]
        hatch = ["//" if "/skewed/" in c else "" for c, _ in items]
        bars = ax.bar(range(len(xs)), xs, color=cs, edgecolor="black", linewidth=0.3)
        for bar, h in zip(bars, hatch):
            bar.set_hatch(h)
        ax.axhline(1.0, color="black", linewidth=0.8)
        s = allstats[name]
        ax.axhline(s["geomean"], color="gray", linestyle="--", linewidth=0.8)
        ax.set_ylim(min(0.7, min(xs) - 0.03), max(1.25, max(xs) + 0.03))
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([c.replace("deepseek-v3:", "").replace("/balanced", "/b").replace("/skewed", "/s") for c, _ in items],
                           rotation=90, fontsize=5.5)
        ax.set_ylabel("expert-wave ms / interleaved ms")
        ax.set_title(f"{name}: geomean {s['geomean']:.3f}, median {s['median']:.3f}, min {s['min']:.3f}, max {s['max']:.3f}; "
                     f"interleaved faster on {s['wins']} of {s['n']} (blue bf16, orange fp8, hatched skewed routing)", fontsize=9)
    fig.tight_layout()
    results.save_png(fig, os.path.join(a.out, "fig8.png"), dpi=90)
    print("\n".join(md[:16]))


if __name__ == "__main__":
    main()
