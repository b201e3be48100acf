#!/usr/bin/env python3
"""A table of the MoE audit's predictions and the schedule rule's choices from `xstage plan moe --grid ... --choose
--json` (plain or .xz): per configuration the choice with its predicted tile phase, and per schedule the audit from
the kernel's injection (K_act, phase spread, T_RS, T_cover, the stall per tile, what binds) beside the aligned
closed form's verdict at K_SM and at the predicted K_act.

Usage: tools/moe/predictions.py PLAN [--out FILE]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402


def us(ns):
    return f"{ns / 1e3:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan")
    ap.add_argument("--out")
    a = ap.parse_args()
    doc = results.load_json(a.plan)
    out = [f"# Predictions: {doc.get('grid', '')}", "",
           f"From `{a.plan}` (platform {doc['platform']['file'].split('/')[-1]}, store path {doc['platform']['store_path']}).",
           "Balanced load; the audit's lockstep without tile-time jitter. Per schedule: K_act mean/max (CTAs draining a",
           "Linear-2 tile when one starts), the phase spread of those (mean), T_RS = staged -> slot free (mean/p90), T_cover",
           "min, the predicted MMA stall dt per tile (mean) and the share of tiles that stall, Σ dt over the consumers' busy",
           "time, what binds, and the aligned closed form's verdict at K_act = K_SM and at the predicted K_act.", "",
           "## The rule's choices", "",
           "| config | rows/expert | choice | predicted ms | runner-up | predicted ms |", "|---|---:|---|---:|---|---:|"]
    for c in doc["configs"]:
        ch = c["choice"]
        out.append(f"| {c['config']} | {ch['rows_per_expert']} | **{ch['name']}** | {ch['predicted_ns'] / 1e6:.3f} | "
                   f"{ch['runner_up']} | {ch['runner_up_predicted_ns'] / 1e6:.3f} |")
    out += ["", "## The audit per schedule", "",
            "| config | schedule | tile phase ms | K_act | spread us | T_RS us | T_cover min us | dt/tile us | stalled | stall/busy | binds | verdict K_SM | verdict K_act |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for c in doc["configs"]:
        for s in c["schedules"]:
            cb = s["combine"]
            al = s.get("aligned_closed_form") or {}
            at = s.get("closed_form_at_predicted_K_act") or {}
            out.append(
                f"| {c['config']} | {s['variant']['name']} | {s['lockstep']['tile_phase_ns'] / 1e6:.3f} | "
                f"{cb['K_act']['mean']:.0f}/{cb['K_act']['max']:.0f} | {us(cb['phase_spread_ns']['mean'])} | "
                f"{us(cb['T_RS_ns']['mean'])}/{us(cb['T_RS_ns']['p90'])} | {us(cb['T_cover_ns']['min'])} | {us(cb['stall_ns']['mean'])} | "
                f"{100 * cb['stalled_fraction']:.1f}% | {100 * cb['stall_fraction_of_busy']:.2f}% | {cb['binds']} | "
                f"{al.get('verdict', '–')} | {at.get('verdict', '–')} ({at.get('K_act', '–')}) |")
    text = "\n".join(out) + "\n"
    if a.out:
        open(a.out, "w").write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
