#!/usr/bin/env python3
"""Scores the MegaMoE schedule rule (moe::choose_schedule) against a measured grid, and the MoE audit's
predictions against the kernel's own counters.

Usage:
  tools/moe/auto_eval.py BENCH PLAN [--folder NAME] [--out DIR]

  BENCH    a run (its folder or its archive, moe.tar.xz or moe_schedules.tar.xz) holding bench.json and
           bench-m-pairs.json (`xstage moe bench`, the second with --cluster-m 2)
  PLAN     `xstage plan moe --grid <the grid> --choose --json` for the same grid (plain or .xz)
  --folder the folder inside the run that holds them (scripts/gpu/moe_schedules.sh writes one per grid:
           moe_grid, moe_heldout, ...; default: the run's top)
  --out    write evaluation.md and audit-vs-measured.md there (default: print evaluation.md)

The rule decides before routing is known, so one choice per (shape, tokens, dtype) is scored on both routings.
Per measured configuration: the measured time of the chosen variant against the best of the six variants the
two benches measured (expert-wave, pipelined waves, interleaved — CTA pairs where the tiles pair up — on single
CTAs / N-pairs, and the same three on M-pairs), ratio = best / chosen (1 = the rule found the best). Beside it
every fixed choice (each of the six everywhere; a fixed M-pairs choice runs its single-CTA twin where the kernel
does not build M-pairs for the shape), the best of them, and the best fixed choice per (shape, tokens, dtype)
knowing the measurements (the most a routing-blind rule can reach on this grid).
"""
import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402
from common.moe_names import schedule_of  # noqa: E402

VARIANTS = ["expert-wave", "pipelined waves", "interleaved", "expert-wave m-pairs", "pipelined waves m-pairs",
            "interleaved m-pairs"]


def variant_of(impl):
    """The rule's variant name of a bench implementation string (N-pairs fold into 'interleaved'; `megamoe-auto`
    is read as the variant it ran)."""
    if impl.startswith("unfused"):
        return None
    base = {"wave": "expert-wave", "pipelined": "pipelined waves", "interleaved": "interleaved"}[schedule_of(impl)]
    return base + (" m-pairs" if impl.endswith(" m-pairs") else "")


def load_bench(path, folder=""):
    run = results.Run(path)
    docs = {name: run.json(os.path.join(folder, name)) for name in ("bench.json", "bench-m-pairs.json")}
    if docs["bench.json"] is None:
        sys.exit(f"{path}: no {os.path.join(folder, 'bench.json')}")
    measured = {}  # config -> variant -> result
    for name, doc in docs.items():
        for r in (doc or {}).get("results", []):
            if r.get("median_ms") is None:
                continue
            # megamoe-auto runs one of the variants again (the choice of the rule the run was built with): the
            # variants are scored on their own measurements.
            v = None if r["impl"].startswith("megamoe-auto") else variant_of(r["impl"])
            if v:
                measured.setdefault(r["config"], {})[v] = r
    return docs, measured


def load_plan(path):
    return {c["config"]: c for c in results.load_json(path)["configs"]}


def rule_plan(xstage, grid, ranks, overrides=()):
    """The rule's choices for a grid, keyed like load_plan's: `xstage plan moe --grid GRID --ranks P --choose --json`
    (CPU only), with each NAME=VALUE of `overrides` passed as --rule."""
    cmd = [xstage, "plan", "moe", "--grid", grid, "--ranks", str(ranks), "--choose", "--json"] + sum((["--rule", o] for o in overrides), [])
    doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {c["config"]: c for c in doc["configs"]}


def plan_key(config):
    """bench config 'name:hH-iI-eE-kK/tT/routing/dtype' -> plan config 'name:hH-iI-eE-kK/tT/dtype'."""
    parts = config.split("/")
    return "/".join(parts[:2] + parts[3:]), parts[2]


def short(name):
    return (name.replace("expert-wave", "wave").replace("pipelined waves", "pipelined").replace("interleaved", "inter")
            .replace(" pairs", "").replace(" m-pairs", "+M"))


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def rule_name(choice):
    n = choice["name"]
    return n.replace(" pairs", "") if n.endswith(" pairs") and "m-pairs" not in n else n


def evaluate(measured, plan):
    rows, group_best = [], {}
    # The best fixed choice per (shape, tokens, dtype) knowing both routings' measurements (minimax ratio).
    for config, by in measured.items():
        key, _ = plan_key(config)
        best = min(r["median_ms"] for r in by.values())
        for v, r in by.items():
            group_best.setdefault(key, {}).setdefault(v, []).append(best / r["median_ms"])
    oracle = {k: max(vs, key=lambda v: (len(vs[v]) == max(len(x) for x in vs.values()), min(vs[v]))) for k, vs in group_best.items()}
    for config, by in measured.items():
        key, routing = plan_key(config)
        if key not in plan:
            sys.exit(f"no prediction for {key} in the plan")
        p = plan[key]
        chosen = rule_name(p["choice"])
        best_v = min(by, key=lambda v: by[v]["median_ms"])
        best = by[best_v]["median_ms"]
        t = by.get(chosen)
        if t is None:
            sys.exit(f"{config}: the rule chose {chosen}, which the benches did not measure")
        twin = config.replace("/skewed/", "/balanced/") if routing == "skewed" else config.replace("/balanced/", "/skewed/")
        twin_best = min(measured[twin], key=lambda v: measured[twin][v]["median_ms"]) if twin in measured else None
        pred = {rule_name({"name": c["variant"]["name"]}): c.get("predicted_ns") for c in p["choice"]["candidates"] if c["applies"]}
        rows.append({
            "config": config, "routing": routing, "chosen": chosen, "chosen_ms": t["median_ms"], "best": best_v, "best_ms": best,
            "ratio": best / t["median_ms"],
            "default_ratio": best / by["interleaved"]["median_ms"],
            "fixed_ratios": {v: best / by[fixed_variant(v, by)]["median_ms"] for v in VARIANTS},
            "m_pairs_considered": m_pairs_considered(p),
            "oracle": oracle[key], "oracle_ratio": best / by[oracle[key]]["median_ms"],
            "twin_best": twin_best,
            "pred_chosen_ms": pred.get(chosen, float("nan")) / 1e6,
            "pred_best_ms": (pred.get(best_v) or float("nan")) / 1e6,
            "rows_per_expert": p["choice"]["rows_per_expert"],
        })
    return rows


def fixed_variant(v, by):
    """What a fixed choice of v runs on a configuration: v, or its single-CTA twin where M-pairs are not built."""
    return v if v in by else v.replace(" m-pairs", "")


def why(r):
    if r["ratio"] >= 0.98:
        return ""
    if r["best"].endswith("m-pairs") and not r["m_pairs_considered"]:
        return f"M-pairs left out (the row test: {r['rows_per_expert']} rows per expert, routing unknown)"
    if r["routing"] == "skewed" and r["twin_best"] == r["chosen"]:
        return "skewed routing: the choice is the balanced twin's best"
    if r["routing"] == "skewed":
        return f"skewed routing changes the winner (balanced best: {r['twin_best']})"
    if math.isnan(r["pred_best_ms"]):
        return "the best variant was not a candidate"
    return (f"model: predicted {r['pred_chosen_ms']:.2f} ms ({short(r['chosen'])}) vs {r['pred_best_ms']:.2f} ms "
            f"({short(r['best'])}), measured {r['chosen_ms']:.2f} vs {r['best_ms']:.2f}")


def skew_sensitivity(measured, plan):
    """What Zipf skew costs the waves against interleaved, and each M-pairs variant against its single-CTA twin where
    the rule considers M-pairs: the geometric mean over balanced/skewed pairs of (ratio skewed) / (ratio balanced).
    The rule's hedges are half of these."""
    waves, mpairs = [], []
    for config, by in measured.items():
        if "/balanced/" not in config:
            continue
        sk = measured.get(config.replace("/balanced/", "/skewed/"))
        if not sk:
            continue
        waves.append((sk["expert-wave"]["median_ms"] / sk["interleaved"]["median_ms"]) /
                     (by["expert-wave"]["median_ms"] / by["interleaved"]["median_ms"]))
        if not m_pairs_considered(plan[plan_key(config)[0]]):
            continue
        for v in VARIANTS[:3]:
            m = v + " m-pairs"
            if m in by and m in sk:
                mpairs.append((sk[m]["median_ms"] / sk[v]["median_ms"]) / (by[m]["median_ms"] / by[v]["median_ms"]))
    return geomean(waves), len(waves), geomean(mpairs), len(mpairs)


def m_pairs_considered(p):
    return any(c["applies"] for c in p["choice"]["candidates"] if c["variant"]["cluster_m"] == 2)


def mainloop_factors(measured, plan):
    """The rule's mainloop factors as measured: per balanced configuration (measured / lockstep) of a variant over the
    same for its reference, geomean over the configurations; interleaved and pipelined waves against expert-wave on
    single CTAs where the pass model predicts the same HBM bytes for both, M-pairs against each single-CTA twin where
    the rule considers M-pairs. -> {name: (factor, count)}"""
    xs = {}
    for config, by in measured.items():
        if "/balanced/" not in config:
            continue
        key, _ = plan_key(config)
        cand = {rule_name({"name": c["variant"]["name"]}): c for c in plan[key]["choice"]["candidates"] if c["applies"]}
        dtype = config.rsplit("/", 1)[1]

        def rel(v, ref):
            return (by[v]["median_ms"] / cand[v]["lockstep_ns"]) / (by[ref]["median_ms"] / cand[ref]["lockstep_ns"])
        for v, name in (("interleaved", f"interleaved {dtype}"), ("pipelined waves", "pipelined waves")):
            if cand[v]["hbm_weight_bytes"] == cand["expert-wave"]["hbm_weight_bytes"]:
                xs.setdefault(name, []).append(rel(v, "expert-wave"))
        for v in VARIANTS[:3]:
            if v + " m-pairs" in cand and v + " m-pairs" in by:
                xs.setdefault("M-pairs", []).append(rel(v + " m-pairs", v))
    return {k: (geomean(v), len(v)) for k, v in xs.items()}


def auto_spread(docs, measured):
    """megamoe-auto's time against the same variant measured on its own in the run (run-to-run spread)."""
    ratios = []
    for name, doc in docs.items():
        for r in (doc or {}).get("results", []):
            if r["impl"].startswith("megamoe-auto") and r.get("median_ms") is not None:
                twin = measured.get(r["config"], {}).get(variant_of(r["impl"]))
                if twin:
                    ratios.append(r["median_ms"] / twin["median_ms"])
    return ratios


def summary_line(name, ratios):
    return (f"| {name} | {geomean(ratios):.3f} | {sorted(ratios)[len(ratios) // 2]:.3f} | {min(ratios):.3f} | "
            f"{sum(r >= 0.98 for r in ratios)} / {len(ratios)} | {sum(r >= 0.95 for r in ratios)} / {len(ratios)} |")


def evaluation_md(rows, measured, plan, docs, args):
    out = ["# The schedule rule against the measured grid", "",
           f"`tools/moe/auto_eval.py {args}`", "",
           "ratio = best measured of the six variants / measured time of the variant chosen (1.000: the rule found the best).",
           "The rule chooses before routing is known (balanced load), so both routings of a shape get the same choice.", "",
           "| choice | geomean | median | min | >= 0.98 | >= 0.95 |", "|---|---:|---:|---:|---:|---:|",
           summary_line("the rule (moe::choose_schedule)", [r["ratio"] for r in rows])]
    fixed = {v: [r["fixed_ratios"][v] for r in rows] for v in VARIANTS}
    for v in VARIANTS:
        out.append(summary_line(f"fixed: {v}" + (" (the kernel's default)" if v == "interleaved" else ""), fixed[v]))
    best_fixed = max(VARIANTS, key=lambda v: geomean(fixed[v]))
    out += [summary_line("best fixed choice per (shape, tokens, dtype), knowing the measurements", [r["oracle_ratio"] for r in rows]),
            "", f"The best single fixed schedule: {best_fixed} (geomean {geomean(fixed[best_fixed]):.3f}). A fixed M-pairs choice "
            "runs its single-CTA twin where the kernel does not build M-pairs for the shape.",
            "", "| config | rows/expert | chosen | ms | best | ms | ratio | interleaved ratio | why it misses 0.98 |",
           "|---|---:|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['config']} | {r['rows_per_expert']} | {short(r['chosen'])} | {r['chosen_ms']:.2f} | {short(r['best'])} | "
                   f"{r['best_ms']:.2f} | {r['ratio']:.3f} | {r['default_ratio']:.3f} | {why(r)} |")
    misses = [r for r in rows if r["ratio"] < 0.98]
    kinds = {}
    for r in misses:
        k = why(r).split(" (")[0].split(":")[0]
        kinds[k] = kinds.get(k, 0) + 1
    out += ["", f"Below 0.98: {len(misses)} of {len(rows)}: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda x: -x[1])) + "."]
    w, nw, m, nm = skew_sensitivity(measured, plan)
    out += ["", "Routing skew (Zipf 1.2) against balanced, geomean over the grid's balanced/skewed pairs (the rule's hedges are half of these):",
            f"- expert-wave / interleaved: {w:.3f} over {nw} pairs",
            f"- each M-pairs variant / its single-CTA twin, where the rule considers M-pairs: {m:.3f} over {nm} pairs"]
    f = mainloop_factors(measured, plan)
    out += ["", "Mainloop factors as measured (balanced; (measured / the plan's lockstep) over the same for the reference, geomean):"]
    out += [f"- {k}: {x:.3f} over {n}" for k, (x, n) in sorted(f.items())]
    spread = auto_spread(docs, measured)
    if spread:
        out += ["", f"megamoe-auto against the same variant measured on its own in this run (run-to-run spread): geomean "
                f"{geomean(spread):.3f}, {min(spread):.3f}-{max(spread):.3f} over {len(spread)}"]
    return "\n".join(out) + "\n"


def audit_md(measured, plan):
    """The audit's predictions (balanced load, aligned lockstep) beside the kernel's counters (rank 0, last trial)."""
    out = ["# The MoE audit's predictions against the kernel's counters", "",
           "Predicted: `xstage plan moe --grid ... --json` (balanced load, lockstep without jitter, M_X of the platform file at K_SM,",
           "T_lat = 1 us); measured: `kernel_stats_rank0_last_trial` of the balanced configurations. K_act: CTAs draining a",
           "Linear-2 tile (staged -> fence) when one starts, mean; fence: issued -> drained per tile (measured: storer_drain_us_per_cta /",
           "L2 tiles per CTA); stall: staging-slot wait as a share of the consumers' busy time (measured: staging_wait_fraction);",
           "dep. wait: predicted from the rule's jittered lockstep (±10% tile times), measured: producer_wait_us_per_cta.", "",
           "| config | variant | K_act pred / meas | fence us pred / meas | stall % pred / meas | dep. wait us pred / meas |",
           "|---|---|---:|---:|---:|---:|"]
    pairs = {"kact": [], "fence": [], "wait": [], "stall": []}
    waits_by = {}
    for config, by in measured.items():
        if "/balanced/" not in config:
            continue
        key, _ = plan_key(config)
        p = plan[key]
        waits = {rule_name({"name": c["variant"]["name"]}): c.get("dependency_wait_ns_per_cta") for c in p["choice"]["candidates"] if c["applies"]}
        for s in p["schedules"]:
            v = rule_name({"name": s["variant"]["name"]})
            r = by.get(v)
            if not r or not r.get("kernel_stats_rank0_last_trial"):
                continue
            k = r["kernel_stats_rank0_last_trial"]
            c = s["combine"]
            fence_pred = (c["T_fence_ns"]["mean"] - c["T_RS_ns"]["mean"]) / 1e3
            fence_meas = k["storer_drain_us_per_cta"] / (k["l2_tiles"] / k["ctas"])
            wait_pred = waits.get(v)
            pairs["kact"].append((c["K_act"]["mean"], k["K_act_mean"]))
            pairs["fence"].append((fence_pred, fence_meas))
            pairs["stall"].append((c["stall_fraction_of_busy"], k["staging_wait_fraction"]))
            if wait_pred is not None:
                pairs["wait"].append((wait_pred / 1e3, k["producer_wait_us_per_cta"]))
                waits_by.setdefault(v, []).append((wait_pred / 1e3, k["producer_wait_us_per_cta"]))
            out.append(f"| {config} | {short(v)} | {c['K_act']['mean']:.0f} / {k['K_act_mean']:.0f} | {fence_pred:.1f} / {fence_meas:.1f} | "
                       f"{100 * c['stall_fraction_of_busy']:.2f} / {100 * k['staging_wait_fraction']:.2f} | "
                       f"{(wait_pred if wait_pred is not None else float('nan')) / 1e3:.0f} / {k['producer_wait_us_per_cta']:.0f} |")
    if not pairs["kact"]:
        return "\n".join(out + ["", "No balanced configuration carries the kernel's counters: the bench ran on a build without "
                                 "them (CMake -DXSTAGE_MOE_STATS=ON adds them)."]) + "\n"

    def stats(ps):
        ratios = [a / b for a, b in ps if a > 0 and b > 0]
        return f"geomean pred/meas {geomean(ratios):.2f} over {len(ratios)}, range {min(ratios):.2f}-{max(ratios):.2f}"
    sp = sorted(p for p, _ in pairs["stall"])
    sm = sorted(m for _, m in pairs["stall"])
    out += ["", f"- K_act: {stats(pairs['kact'])}", f"- fence per tile: {stats(pairs['fence'])}",
            f"- stall: predicted {100 * sp[0]:.2f}-{100 * sp[-1]:.2f}% of the busy time ({sum(p == 0 for p in sp)} of {len(sp)} exactly 0), "
            f"measured staging waits {100 * sm[0]:.2f}-{100 * sm[-1]:.2f}% (median {100 * sm[len(sm) // 2]:.2f}%)",
            f"- dependency waits: {stats(pairs['wait'])}"] + [f"  - {v}: {stats(ps)}" for v, ps in waits_by.items()]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench")
    ap.add_argument("plan")
    ap.add_argument("--folder", default="")
    ap.add_argument("--out")
    a = ap.parse_args()
    docs, measured = load_bench(a.bench, a.folder)
    plan = load_plan(a.plan)
    rows = evaluate(measured, plan)
    ev = evaluation_md(rows, measured, plan, docs, a.bench + (f" {a.plan} --folder {a.folder}" if a.folder else f" {a.plan}"))
    if not a.out:
        print(ev)
        return
    os.makedirs(a.out, exist_ok=True)
    open(os.path.join(a.out, "evaluation.md"), "w").write(ev)
    open(os.path.join(a.out, "audit-vs-measured.md"), "w").write(audit_md(measured, plan))
    json.dump([{k: v for k, v in r.items()} for r in rows], open(os.path.join(a.out, "evaluation.json"), "w"), indent=1)
    print(ev)


if __name__ == "__main__":
    main()
