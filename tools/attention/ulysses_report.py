#!/usr/bin/env python3
"""The Ulysses results as the paper reports them: a Table 3 analog (per M: T_FA, T_A2A, T_serial, T_fused,
E_res = T_fused - T_FA, hiding = (T_serial - T_fused) / (T_serial - T_FA), speedup = T_serial / T_fused, and
the layer's second half against cuDNN SDPA + NCCL all-to-all) and a Fig. 11 analog (E_res / T_FA over M with
the X-Stage prediction and the completion-coupled counterfactual), from `xstage attention ulysses bench`'s
JSON and, optionally, tools/attention/ulysses_torch_bench.py's. Where the bench timed the whole layer by each path
(serial, fused_post, fused_both), a second table sets them beside FA-only.

    python3 tools/attention/ulysses_report.py --bench bench.json [--torch bench_torch.json] --out DIR
Writes DIR/table.md and DIR/fig11.png (the figure needs matplotlib; the table does not).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402


def us(x) -> str:
    """A time in µs, or "–" where the bench did not measure it (null in its JSON, NaN once read)."""
    return "–" if x is None or x != x else f"{x:.1f}"


def layer_table(bench) -> list:
    """The whole layer by each path beside FA-only, where the bench timed them (none: no lines)."""
    rows = [r for r in bench["results"] if "T_layer_fused_both_us" in r]
    if not rows:
        return []
    virtual = " (virtual ranks: every rank's work one after another on one GPU, every \"remote\" byte local)" if bench.get("virtual") else ""
    lines = ["", f"The whole layer by each path{virtual}, µs per call: serial (all-to-all, attention, all-to-all), fused_post "
             "(all-to-all, then attention with the post-attention all-to-all in its epilogue, copy-out), fused_both "
             "(the inputs pushed by a pusher kernel on a few SMs while the attention runs, copy-out). fused_both/FA: the median over "
             "trials of the per-trial ratio.", ""]
    head = "| d | heads/rank | M | T_FA | serial | fused_post | fused_both | fused_both/FA | fused_post ÷ fused_both | serial ÷ fused_both | chunks per source × rows |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        both = r["T_layer_fused_both_us"]
        lines.append(f"| {r['head_dim']} | {r['heads_per_rank']} | {r['seqlen']} | {r['T_FA_us']:.1f} | {r['T_layer_serial_us']:.1f} | "
                     f"{r['T_layer_fused_post_us']:.1f} | {both:.1f} | {r['layer_fused_both_over_FA_median_of_trials']:.4f} | "
                     f"{r['T_layer_fused_post_us'] / both:.3f} | {r['T_layer_serial_us'] / both:.3f} | "
                     f"{r['input_chunks_per_source']} × {r['input_chunk_rows']} |")
    return lines + parts_table(rows)


def parts_table(rows) -> list:
    """fused_both taken apart, where the bench timed its parts (older JSONs: no lines)."""
    rows = [r for r in rows if "T_copy_out_us" in r]
    if not rows:
        return []
    lines = ["", "fused_both taken apart, µs per call, each part timed on its own in the same run: the layer without its copy-out, "
             "the copy-out alone, the start of the call with every rank's head start alone (virtual ranks only), and the fused "
             "kernel over FA-only (fused_post's kernel, TMA path). The shares are of T_FA.", ""]
    head = ("| d | heads/rank | M | T_FA | fused_both/FA | without copy-out / FA | copy-out | start + head starts | "
            "fused kernel − FA | copy-out share | head-start share |")
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        fa, starts, fused = r["T_FA_us"], r.get("T_start_and_head_starts_us"), r.get("T_fused_tma_us")
        share = lambda x: "–" if x is None else f"{100 * x / fa:.2f}%"
        lines.append(f"| {r['head_dim']} | {r['heads_per_rank']} | {r['seqlen']} | {fa:.1f} | "
                     f"{r['layer_fused_both_over_FA_median_of_trials']:.4f} | "
                     f"{r['layer_fused_both_without_copy_out_over_FA_median_of_trials']:.4f} | {r['T_copy_out_us']:.1f} | "
                     f"{us(starts)} | {us(None if fused is None else fused - fa)} | {share(r['T_copy_out_us'])} | {share(starts)} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--torch", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    bench = results.load_json(args.bench)
    torch_rows = {}
    try:  # the torch bench is optional: the script names its file whether or not it ran
        for r in results.load_json(args.torch)["results"] if args.torch else []:
            torch_rows[(r["head_dim"], r["heads_per_rank"], r["seqlen"])] = r
    except FileNotFoundError:
        pass
    os.makedirs(args.out, exist_ok=True)
    P = bench["ranks"]
    lines = [f"P = {P} rank(s). Times in µs per call (median over trials of the max over ranks). "
             "E_res = T_fused − T_FA; hiding = (T_serial − T_fused) / (T_serial − T_FA); speedup = T_serial / T_fused; "
             "predicted E: the X-Stage audit (E_drain plus the last wave's drain and the completion latency) and the completion-coupled counterfactual (E_cc). "
             "cuDNN+A2A: cuDNN SDPA then NCCL all-to-all with its transposes (torch).", ""]
    head = ("| d | heads/rank | M | T_FA | T_A2A | T_serial | T_fused (TMA) | T_fused (st.global) | fused/FA (TMA, per trial) | E_res | "
            "hiding | speedup | pred. E (X-Stage) | pred. E_cc | cuDNN+A2A | fused vs cuDNN+A2A |")
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    groups = {}
    for r in bench["results"]:
        t = torch_rows.get((r["head_dim"], r["heads_per_rank"], r["seqlen"]))
        # a store path the bench was not asked for (--store-path) is null in its JSON: no time, not zero
        r = {k: float("nan") if v is None else v for k, v in r.items()}
        best = min(x for x in (r["T_fused_tma_us"], r["T_fused_st_global_us"]) if x == x)
        theirs = f"{t['T_sdpa_a2a_us']:.1f}" if t else "–"
        vs = f"{t['T_sdpa_a2a_us'] / best:.2f}×" if t else "–"
        lines.append(f"| {r['head_dim']} | {r['heads_per_rank']} | {r['seqlen']} | {us(r['T_FA_us'])} | {us(r['T_A2A_us'])} | "
                     f"{us(r['T_serial_us'])} | {us(r['T_fused_tma_us'])} | {us(r['T_fused_st_global_us'])} | "
                     f"{r.get('fused_tma_over_FA_median_of_trials', float('nan')):.4f} | {us(r['E_res_us'])} | "
                     f"{100 * r['hiding']:.1f}% | {r['speedup']:.3f} | {r['predicted'].get('E_res_us', r['predicted']['E_drain_us']):.1f} | {r['predicted']['E_cc_us']:.1f} | "
                     f"{theirs} | {vs} |")
        groups.setdefault((r["head_dim"], r["heads_per_rank"]), []).append(r)
    lines += layer_table(bench)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no figure")
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (d, h), rows in sorted(groups.items()):
        rows.sort(key=lambda r: r["seqlen"])
        M = [r["seqlen"] for r in rows]
        line, = ax.plot(M, [100 * r["E_res_us"] / r["T_FA_us"] for r in rows], "o-", label=f"measured, d={d}, {h} heads/rank")
        ax.plot(M, [100 * r["predicted"].get("E_res_us", r["predicted"]["E_drain_us"]) / r["T_FA_us"] for r in rows], "--", color=line.get_color(), alpha=0.7,
                label=f"X-Stage prediction, d={d}, {h} heads/rank")
        ax.plot(M, [100 * r["predicted"]["E_cc_us"] / r["T_FA_us"] for r in rows], ":", color=line.get_color(), alpha=0.7,
                label=f"completion-coupled, d={d}, {h} heads/rank")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length M")
    ax.set_ylabel("E_res / T_FA (%)")
    ax.set_title(f"Fused Ulysses epilogue: sender-visible residual, P = {P}")
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    results.save_png(fig, os.path.join(args.out, "fig11.png"), dpi=150)


if __name__ == "__main__":
    main()
