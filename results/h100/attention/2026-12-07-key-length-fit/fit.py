#!/usr/bin/env python3
"""Splits each backend's time at one query shape into a part per key and a part that does not grow with the keys.

Reads bench JSONs of tools/attention/cudnn_bench.py whose --shapes hold one (B, M, H, d) at several key lengths N,
fits t(N) = alpha + beta * N per backend, shape and file by least squares, and prints per shape: each backend's beta
(microseconds per 1000 keys) and alpha (microseconds), the residual, and xstage's over FlashAttention-4's for each.
alpha is what a launch pays whatever the keys: per tile (its Q load, its first product and softmax before the
pipeline overlaps, its last P.V, the epilogue; for FA4 also a CTA's start and end) times the waves, plus the launch.

    python3 fit.py r1.json [r2.json ...]
"""
import json
import sys
from collections import defaultdict


def fit(points):
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    beta = sum((x - mx) * (y - my) for x, y in points) / sxx
    alpha = my - beta * mx
    worst = max(abs(y - alpha - beta * x) / y for x, y in points)
    return alpha, beta, worst


def main(paths):
    print("| file | shape [B, M, H, d] | N | backend | beta (us / 1k keys) | alpha (us) | worst residual |")
    print("|---|---|---|---|---:|---:|---:|")
    ratios = []
    for path in paths:
        doc = json.load(open(path))
        groups = defaultdict(list)
        for p in doc["points"]:
            if "time_ms" in p:
                key = (p["batch"], p["seqlen"], p["heads"], p["head_dim"])
                groups[(key, p["backend"])].append((p["seqlen_k"], p["time_ms"] * 1e3))
        fits = {}
        for (key, backend), pts in sorted(groups.items()):
            if len({n for n, _ in pts}) < 2:
                sys.exit(f"fit.py: {path}: {backend} at {list(key)} has one key length only; a fit needs two or more")
            alpha, beta, worst = fit(pts)
            fits[(key, backend)] = (alpha, beta)
            ns = ",".join(str(n) for n, _ in sorted(pts))
            print(f"| {path.split('/')[-1]} | {list(key)} | {ns} | {backend} | {beta * 1e3:.2f} | {alpha:.1f} | {worst:.2%} |")
        for (key, backend), (alpha, beta) in fits.items():
            if backend == "xstage" and (key, "fa4") in fits:
                fa, fb = fits[(key, "fa4")]
                ratios.append((path.split("/")[-1], key, beta / fb, alpha - fa, alpha, fa))
    print()
    print("| file | shape [B, M, H, d] | xstage / FA4 per key (beta) | xstage - FA4 fixed (alpha, us) |")
    print("|---|---|---:|---:|")
    for name, key, rb, da, _, _ in ratios:
        print(f"| {name} | {list(key)} | {rb:.4f} | {da:+.1f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: fit.py BENCH.json [BENCH.json ...]")
    main(sys.argv[1:])
