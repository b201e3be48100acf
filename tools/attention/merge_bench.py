#!/usr/bin/env python3
"""Joins `xstage attention bench` JSON with tools/attention/cudnn_bench.py JSON (plain or .xz) into one table: TFLOP/s of xstage
(the CLI's), cuDNN (and torch's flash backend), and per point the ratio xstage / cuDNN two ways: the CLI's time
against cuDNN's from the other process, and (where the torch JSON has an xstage backend) xstage's kernel timed in
turn with cuDNN in one process, which the GPU's clock cannot bias."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("xstage_json")
    ap.add_argument("torch_json")
    ap.add_argument("--markdown", default="")
    a = ap.parse_args()
    ours = results.load_json(a.xstage_json)
    theirs = results.load_json(a.torch_json)
    base = {}
    for p in theirs["points"]:
        base[(p["backend"], p["head_dim"], p["heads"], p["seqlen"])] = p.get("tflops")
    flash = any(k[0] == "flash" for k in base)
    lines = ["| d | heads | M | xstage TFLOP/s | cuDNN TFLOP/s | xstage/cuDNN | xstage in turn TFLOP/s | xstage/cuDNN in turn |"
             + (" torch-flash TFLOP/s |" if flash else ""),
             "|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if flash else "")]
    for p in ours["points"]:
        key = (p["head_dim"], p["heads"], p["seqlen"])
        cud = base.get(("cudnn",) + key)
        fl = base.get(("flash",) + key)
        mine = base.get(("xstage",) + key)
        ratio = p["tflops"] / cud if cud else None
        in_turn = mine / cud if mine and cud else None
        f = lambda x, fmt="{:.1f}": fmt.format(x) if x is not None else "n/a"
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {p['tflops']:.1f} | {f(cud)} | {f(ratio, '{:.3f}')} | {f(mine)} | "
                     f"{f(in_turn, '{:.3f}')} |" + (f" {f(fl)} |" if flash else ""))
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as fh:
            fh.write(f"GPU: {ours['gpu']['name']}; SM clock measured {ours.get('sm_clock_mhz_measured', 0):.0f} MHz; "
                     f"torch {theirs['torch']}, cuDNN {theirs['cudnn']}\n\n{text}\n")


if __name__ == "__main__":
    main()
