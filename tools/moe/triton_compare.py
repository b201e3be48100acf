#!/usr/bin/env python3
"""The Triton fused-MoE baseline beside xstage's fused layer: a markdown table from a run of
scripts/gpu/moe_triton.sh (its folder or its moe_triton.tar.xz), which holds `triton-*.json`
(tools/moe/triton_moe.py --json) and `xstage-*.json` (`xstage moe bench --out`) of the same layers.

One row per layer (tokens, dtype): the Triton layer's median time, its TFLOP/s and weight TB/s, then per xstage
schedule (`auto`, with what it chose, and the fixed ones by family, whatever their wave size or lead) its median time
and Triton ms / xstage ms (> 1: xstage faster). With several rounds, each entry is
the median over the rounds of the per-run medians (the rounds column says how many).

    python3 tools/moe/triton_compare.py RUN [--markdown OUT.md]
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common.results import Run  # noqa: E402
from common.moe_names import family_of  # noqa: E402


def collect(run: Run):
    """-> (triton {(config, tokens, dtype): [run records]}, xstage {(config, tokens, dtype): {family: [median_ms]}},
    choices {(config, tokens, dtype): {what auto chose}})."""
    triton, xstage, choices = {}, {}, {}
    for name in run.matching("triton-*.json"):
        for r in run.json(name)["results"]:
            if "median_ms" in r:  # a layer that failed its check is not timed
                key = (f"h{r['h']}-i{r['h_inter']}-e{r['E']}-k{r['k']}", r["tokens"], r["dtype"])
                triton.setdefault(key, []).append(r)
    for name in run.matching("xstage-*.json"):
        for r in run.json(name)["results"]:
            if r.get("routing") != "balanced":
                continue
            key = (f"h{r['h']}-i{r['h_inter']}-e{r['E']}-k{r['k']}", r["tokens_per_rank"], r["dtype"])
            xstage.setdefault(key, {}).setdefault(family_of(r["impl"]), []).append(r["median_ms"])
            if family_of(r["impl"]) == "auto":
                choices.setdefault(key, set()).add(r["impl"].split(": ", 1)[-1])
    return triton, xstage, choices


def table(triton, xstage, choices) -> str:
    impls = sorted({impl for per in xstage.values() for impl in per})
    head = ["layer", "tokens", "dtype", "rounds", "Triton blocks", "Triton ms", "Triton TFLOP/s", "Triton weights TB/s"]
    for impl in impls:
        head += [f"xstage {impl} ms", f"Triton / {impl}"] + (["auto's choice"] if impl == "auto" else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in sorted(set(triton) | set(xstage), key=lambda k: (k[0], k[2], k[1])):
        layer, tokens, dtype = key
        recs = triton.get(key, [])
        t_ms = statistics.median(r["median_ms"] for r in recs) if recs else None
        row = [layer, str(tokens), dtype, str(max([len(recs)] + [len(v) for v in xstage.get(key, {}).values()]))]
        if recs:
            blocks = sorted({"{block_m}x{block_n}x{block_k}".format(**r["blocks"]) for r in recs})
            row += [", ".join(blocks), f"{t_ms:.3f}", f"{recs[0]['flop'] / (t_ms * 1e-3) / 1e12:.0f}",
                    f"{recs[0]['weight_bytes'] / (t_ms * 1e-3) / 1e12:.2f}"]
        else:
            row += ["", "", "", ""]
        for impl in impls:
            ms = xstage.get(key, {}).get(impl)
            x_ms = statistics.median(ms) if ms else None
            row += [f"{x_ms:.3f}" if x_ms else "", f"{t_ms / x_ms:.2f}" if x_ms and t_ms else ""]
            if impl == "auto":
                row.append(", ".join(sorted(choices.get(key, ()))))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="the run's folder or archive (moe_triton.tar.xz)")
    p.add_argument("--markdown", help="also write the table to this file")
    args = p.parse_args(argv)
    try:
        triton, xstage, choices = collect(Run(args.run))
    except (FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {args.run}: {e}", file=sys.stderr)
        return 2
    if not triton and not xstage:
        print(f"error: {args.run} holds no triton-*.json or xstage-*.json results", file=sys.stderr)
        return 2
    text = table(triton, xstage, choices)
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
