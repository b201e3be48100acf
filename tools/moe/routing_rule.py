#!/usr/bin/env python3
"""Would a schedule choice made after routing (on the device, from the rows per expert) reach what the host-side rule
cannot? Fits a small routing-aware rule family on one measured list and scores it on others, like
tools/moe/auto_eval.py (ratio = best of the six measured variants / the chosen one's time, per configuration).

Usage:
  tools/moe/routing_rule.py BENCH --fit FOLDER PLAN [--score FOLDER PLAN ...] [--depth D] [--miss-weight W]
                            [--out FILE]

  BENCH     a one-rank run holding, per list, FOLDER/bench.json and FOLDER/bench-m-pairs.json
            (scripts/gpu/moe_schedules.sh, e.g. results/h200/moe/2026-12-02-retune/moe_schedules.tar.xz)
  --fit     the list the rule is fitted on and `xstage plan moe --grid <its grid> --ranks 1 --choose --json`
            (the shipped rule's choices)
  --score   a list it is scored on, once, with its plan (repeatable)
  --depth   the deepest tree the fit may use (default 2)
  --miss-weight  a second fit of the deepest trees counts each configuration's log ratio below 0.95 (the bar's minimum)
            1 + W times (default 10)
  --out     also write the report there (markdown)

The rows per expert are not in bench.json; they are regenerated here from the run's seed exactly as the harness
draws them (src/moe/problem/routing.cpp, `balanced_routing` / `skewed_routing`, seed + 7919 (i + 1) for the i-th
configuration, src/cli/moe.cpp). At one rank every configuration's rows_received is T k whatever the routing, so the
run itself cannot check them; the port was checked against the C++ generator instead (the results' README).

The rule family: a decision tree of depth <= D; each split is one feature against a threshold (midpoints between the
fitted list's values); each leaf runs either the shipped rule's choice or one fixed variant of the six. The fit
maximises the fitted list's geometric mean of the ratio (the time lost, in log), and once more with the loss below 0.95 weighted
(--miss-weight); a split is kept only where it raises the objective. Features: the routing's (max / mean rows per expert, empty experts / E, experts over 128 rows / E, the largest
expert's 128-row blocks, 128-row blocks / E) and the static shape's (mean rows per expert T k / E, fp8, h, h_inter,
E, k, T).
"""
import argparse
import math
import os
import sys

import numpy as np

import auto_eval as ev

B_M = 128  # the kernel's rows per m-block (one scheduler row)
ACTIONS = ["the shipped rule"] + ev.VARIANTS
FEATURES = ["max/mean rows per expert", "empty experts / E", "experts over 128 rows / E", "blocks of the largest expert",
            "128-row blocks / E", "mean rows per expert (T k / E)", "fp8", "h", "h_inter", "E", "k", "T"]
ROUTING_FEATURES = FEATURES[:5]


class MT19937_64:
    """std::mt19937_64, which the C++ standard specifies exactly."""
    N, M = 312, 156
    MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.mt = [seed & self.MASK]
        for i in range(1, self.N):
            self.mt.append((6364136223846793005 * (self.mt[-1] ^ (self.mt[-1] >> 62)) + i) & self.MASK)
        self.i = self.N

    def _twist(self):
        mt, upper, lower = self.mt, 0xFFFFFFFF80000000, 0x7FFFFFFF
        for i in range(self.N):
            x = (mt[i] & upper) | (mt[(i + 1) % self.N] & lower)
            mt[i] = mt[(i + self.M) % self.N] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
        self.i = 0

    def __call__(self):
        if self.i >= self.N:
            self._twist()
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        return y ^ (y >> 43)


def seeded_permutation(n, rng):
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def expert_rows(E, k, T, zipf_s, seed):
    """Rows per expert of one rank (P = 1) as the harness routes them: zipf_s < 0 balanced, else Zipf-skewed."""
    rng = MT19937_64(seed)
    perm = seeded_permutation(E, rng)
    rows = [0] * E
    if zipf_s < 0:
        for q in range(T * k):
            rows[perm[q % E]] += 1
        return rows
    weight = [0.0] * E
    for i in range(E):
        weight[perm[i]] = 1.0 / math.pow(i + 1.0, zipf_s)
    total0 = sum_in_order(weight)
    for _ in range(T):
        w = list(weight)
        total = total0
        for _ in range(k):  # without replacement, the same float steps as the C++ loop
            x = (rng() >> 11) * 2.0 ** -53 * total
            e = 0
            while e < E - 1 and (w[e] == 0.0 or x >= w[e]):
                if w[e] > 0.0:
                    x -= w[e]
                e += 1
            while w[e] == 0.0:
                e -= 1
            rows[e] += 1
            total -= w[e]
            w[e] = 0.0
    return rows


def sum_in_order(xs):
    """std::accumulate's left-to-right double sum (math.fsum would round differently)."""
    s = 0.0
    for x in xs:
        s += x
    return s


def features_of(result, rows):
    E, k, T = result["E"], result["k"], result["tokens_per_rank"]
    mean = T * k / E
    return {"max/mean rows per expert": max(rows) / mean, "empty experts / E": rows.count(0) / E,
            "experts over 128 rows / E": sum(r > B_M for r in rows) / E,
            "blocks of the largest expert": -(-max(rows) // B_M), "128-row blocks / E": sum(-(-r // B_M) for r in rows) / E,
            "mean rows per expert (T k / E)": mean, "fp8": float(result["dtype"] == "fp8"), "h": result["h"],
            "h_inter": result["h_inter"], "E": E, "k": k, "T": T}


def load_list(bench, folder, plan_path):
    """-> (configs, log-ratio matrix [config][action], features [config][feature], the routing-blind ceiling per config)."""
    docs, measured = ev.load_bench(bench, folder)
    rows = {r["config"]: r for r in ev.evaluate(measured, ev.load_plan(plan_path))}
    order = list(dict.fromkeys(r["config"] for r in docs["bench.json"]["results"]))  # the bench's configuration index
    seed = docs["bench.json"]["seed"]
    for name, doc in docs.items():
        # Each bench draws the i-th configuration of its grid file from the seed: the same file and seed, the same rows.
        if doc and (doc["seed"] != seed or doc["config_file"] != docs["bench.json"]["config_file"]):
            sys.exit(f"{bench} {folder}/{name}: not the seed and grid of bench.json (its routing would differ)")
    configs, L, X, blind = [], [], [], []
    for i, config in enumerate(order):
        any_result = next(iter(measured[config].values()))
        seed_i = (seed + 7919 * (i + 1)) & MT19937_64.MASK
        n = expert_rows(any_result["E"], any_result["k"], any_result["tokens_per_rank"], any_result["zipf_s"], seed_i)
        if sum(n) != any_result["rows_received_max"]:
            sys.exit(f"{config}: regenerated {sum(n)} rows, the bench received {any_result['rows_received_max']}")
        r = rows[config]
        configs.append(config)
        L.append([math.log(r["ratio"])] + [math.log(r["fixed_ratios"][v]) for v in ev.VARIANTS])
        f = features_of(any_result, n)
        X.append([f[name] for name in FEATURES])
        blind.append(r["oracle_ratio"])
    return configs, np.array(L), np.array(X, dtype=float), np.array(blind)


def fit(L, X, depth, mask=None):
    """The best tree of depth <= `depth` on the configurations in mask: (score = sum of log ratios, tree), where a tree is
    ("leaf", action) or ("split", feature, threshold, tree below, tree at or above)."""
    mask = np.ones(len(L), bool) if mask is None else mask
    sums = L[mask].sum(axis=0)
    best = (sums.max(), ("leaf", int(sums.argmax())))
    if depth == 0 or mask.sum() < 2:
        return best
    for j in range(X.shape[1]):
        values = np.unique(X[mask, j])
        for t in (values[:-1] + values[1:]) / 2:
            lo, hi = mask & (X[:, j] < t), mask & (X[:, j] >= t)
            a, b = fit(L, X, depth - 1, lo), fit(L, X, depth - 1, hi)
            if a[0] + b[0] > best[0] + 1e-12:  # a split must pay on the fitted list
                best = (a[0] + b[0], ("split", j, float(t), a[1], b[1]))
    return best


def weighted(L, w):
    """Log ratios with the part below 0.95 (the bar's minimum) counted 1 + w times: a fit that trades geomean for min."""
    return L + w * np.minimum(0.0, L - math.log(0.95))


def apply(tree, x):
    while tree[0] == "split":
        tree = tree[3] if x[tree[1]] < tree[2] else tree[4]
    return tree[1]


def describe(tree, indent=""):
    if tree[0] == "leaf":
        return [f"{indent}- {ACTIONS[tree[1]]}"]
    return ([f"{indent}- {FEATURES[tree[1]]} < {tree[2]:.4g}:"] + describe(tree[3], indent + "  ") +
            [f"{indent}- {FEATURES[tree[1]]} >= {tree[2]:.4g}:"] + describe(tree[4], indent + "  "))


def features_used(tree):
    return set() if tree[0] == "leaf" else {FEATURES[tree[1]]} | features_used(tree[3]) | features_used(tree[4])


def line(name, ratios):
    ratios = np.asarray(ratios, dtype=float)
    g = ev.geomean(list(ratios))
    meets = g >= 0.99 and ratios.min() >= 0.95
    return (f"| {name} | {g:.3f} | {ratios.min():.3f} | {int((ratios >= 0.98).sum())} / {len(ratios)} | "
            f"{'yes' if meets else 'no'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench")
    ap.add_argument("--fit", nargs=2, metavar=("FOLDER", "PLAN"), required=True)
    ap.add_argument("--score", nargs=2, metavar=("FOLDER", "PLAN"), action="append", default=[])
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--miss-weight", type=float, default=10.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.depth < 0:
        sys.exit("--depth must be >= 0")
    lists = [a.fit] + a.score
    data = {folder: load_list(a.bench, folder, plan) for folder, plan in lists}
    configs, L, X, _ = data[a.fit[0]]
    fits = {f"depth <= {d}": fit(L, X, d)[1] for d in range(1, a.depth + 1)}
    fits[f"depth <= {a.depth}, misses weighted"] = fit(weighted(L, a.miss_weight), X, a.depth)[1]
    out = ["# A routing-aware schedule choice, fitted on one list and scored on the others", "",
           f"`tools/moe/routing_rule.py {a.bench} --fit {' '.join(a.fit)}" + "".join(f" --score {f} {p}" for f, p in a.score) +
           f" --depth {a.depth} --miss-weight {a.miss_weight:g}`", "",
           "ratio = best of the six measured variants / the chosen one's time (tools/moe/auto_eval.py). The bar: geomean >= 0.99 "
           "and min >= 0.95.", ""]
    for d, tree in fits.items():
        used = features_used(tree)
        out += [f"Fitted on `{a.fit[0]}`, {d} (routing features used: "
                f"{', '.join(sorted(used & set(ROUTING_FEATURES))) or 'none'}; static: {', '.join(sorted(used - set(ROUTING_FEATURES))) or 'none'}):", ""]
        out += describe(tree) + [""]
    for folder, _ in lists:
        configs, L, X, blind = data[folder]
        role = "fitted on" if folder == a.fit[0] else "held out"
        out += [f"## `{folder}` ({len(configs)} configurations, {role})", "",
                "| choice | geomean | min | >= 0.98 | the bar |", "|---|---:|---:|---:|---|",
                line("the shipped rule (routing-blind, host)", np.exp(L[:, 0]))]
        fixed = max(range(1, len(ACTIONS)), key=lambda c: L[:, c].sum())
        out.append(line(f"best fixed variant on this list: {ACTIONS[fixed]}", np.exp(L[:, fixed])))
        for d, tree in fits.items():
            chosen = [apply(tree, x) for x in X]
            out.append(line(f"routing-aware tree, {d}, fitted on `{a.fit[0]}`", np.exp(L[np.arange(len(L)), chosen])))
        for name, Lf in (("", L), (", misses weighted", weighted(L, a.miss_weight))):
            hind = fit(Lf, X, a.depth)[1]
            out.append(line(f"the same family fitted on this list itself (hindsight, depth <= {a.depth}{name})",
                            np.exp(L[np.arange(len(L)), [apply(hind, x) for x in X]])))
        out.append(line("routing-blind ceiling: best variant per (shape, tokens, dtype), knowing the measurements", blind))
        out.append(line("routing-aware ceiling: best variant per configuration", np.ones(len(L))))
        out.append("")
        if folder != a.fit[0]:
            continue
        out += ["Per configuration on the fitted list (the routing features; ratio of the shipped rule / the deepest tree):", "",
                "| config | max/mean | empty / E | > 128 rows / E | largest expert's blocks | shipped | tree | tree's choice |",
                "|---|---:|---:|---:|---:|---:|---:|---|"]
        tree = fits[f"depth <= {a.depth}"]
        for c, l, x in zip(configs, L, X):
            ch = apply(tree, x)
            out.append(f"| {c} | {x[0]:.2f} | {x[1]:.3f} | {x[2]:.3f} | {int(x[3])} | {math.exp(l[0]):.3f} | {math.exp(l[ch]):.3f} | "
                       f"{ev.short(ACTIONS[ch])} |")
        out.append("")
    text = "\n".join(out)
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
