#!/usr/bin/env python3
"""Plots of `xstage calibrate` artefacts, equivalent to Fig. 3 (a-d) of the X-Stage paper.

    python3 tools/calibration/plot.py --samples samples.csv --platform platform.json --out DIR
    python3 tools/calibration/plot.py --samples samples.csv --platform platform.json --summary

Per store path in the platform file, writes DIR/fig3_<path>.png (the four panels) and one PNG per panel:
  (a) fig3a_<path>.png  issue time vs gap, one fit K and one held-out K, remote and local control,
                        model T_iss = max(T_iss0, V/R - G)                               (paper eq. 3)
  (b) fig3b_<path>.png  period vs gap, model max(T_iss0 + G, V/R) against the completion-coupled
                        G + V/R                                                          (eq. 4)
  (c) fig3c_<path>.png  isolated issue time vs V per K, model max(T_iss0, (V - Q)/R) and its knee (eq. 6)
  (d) fig3d_<path>.png  zero-gap period vs V for every K, with V/R                       (eq. 2)
Model lines use the platform file alone (no refit). T_iss0(K, B) is interpolated exactly as
xstage::calibration::interpolate_T_iss0_ns does (src/calibration/fit.cpp): linear in B per grid K,
end segment extended outside, then linear in K, clamped outside the grid K.
Inputs (plain or xz-compressed, as results/ keeps them): the samples CSV written by write_samples_csv
(src/calibration/measurement.cpp) and the
"xstage.platform/1" JSON described in src/model/platform.hpp.
"""
import argparse
import csv
import io
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402

MIB = 1024.0 * 1024.0
US = 1000.0  # ns per microsecond

INT_COLUMNS = ("K", "B_bytes", "n_bursts", "rank")
FLOAT_COLUMNS = ("gap_ns_requested", "gap_ns", "T_iss_ns", "T_iss_p10_ns", "T_iss_p90_ns", "T_period_ns",
                 "wall_bytes_per_ns", "sm_clock_mhz")
WORD_COLUMNS = {"sweep": ("zero_gap", "plateau", "gap", "isolated", "unset"), "mode": ("periodic", "isolated"),
                "path": ("st_global_16B", "tma_bulk"), "dest": ("remote", "local")}


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


# ---------------------------------------------------------------------------------------------
# Reading the artefacts
# ---------------------------------------------------------------------------------------------

def read_samples(path):
    try:
        text = results.read_text(path)
    except FileNotFoundError:
        raise UsageError(f"samples CSV '{path}' does not exist") from None
    with io.StringIO(text, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in (*INT_COLUMNS, *FLOAT_COLUMNS, *WORD_COLUMNS) if c not in (reader.fieldnames or [])]
        if missing:
            raise UsageError(f"samples CSV '{path}' lacks column(s) {', '.join(missing)}")
        samples = []
        for row in reader:
            where = f"samples CSV '{path}' line {reader.line_num}"
            try:
                s = {c: int(row[c]) for c in INT_COLUMNS}
                s.update({c: float(row[c]) for c in FLOAT_COLUMNS})
            except (TypeError, ValueError) as e:
                raise UsageError(f"{where}: {e}") from None
            for c, words in WORD_COLUMNS.items():
                if row[c] not in words:
                    raise UsageError(f"{where}: column '{c}' has invalid value '{row[c]}'")
                s[c] = row[c]
            s["V_bytes"] = s["K"] * s["B_bytes"]
            samples.append(s)
    if not samples:
        raise UsageError(f"samples CSV '{path}' has no samples")
    return samples


class Triple:
    """M_X for one store path, with the same interpolation as src/calibration/fit.cpp."""

    def __init__(self, name, doc, source):
        where = f"platform file '{source}' store_paths.{name}"
        try:
            self.R = float(doc["R_bytes_per_ns"])
            rows = {}
            for p in doc["T_iss0"]:
                rows.setdefault(int(p["K"]), {}).setdefault(int(p["B_bytes"]), []).append(float(p["T_iss0_ns"]))
            self.Q = {int(q["K"]): float(q["Q_bytes"]) for q in doc.get("Q", [])}
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"{where}: missing or invalid field ({e})") from None
        if not self.R > 0 or not rows:
            raise UsageError(f"{where}: needs R_bytes_per_ns > 0 and a non-empty T_iss0 grid")
        self.rows = {K: sorted((B, sum(v) / len(v)) for B, v in row.items()) for K, row in rows.items()}
        self.fit = doc.get("fit", {}) or {}

    @staticmethod
    def _along_B(row, B):
        if len(row) == 1:
            return row[0][1]
        for (b0, t0), (b1, t1) in zip(row, row[1:]):
            if b0 <= B <= b1:
                return t0 + (t1 - t0) * (B - b0) / (b1 - b0)
        below = B < row[0][0]
        (b0, t0), (b1, t1) = (row[0], row[1]) if below else (row[-2], row[-1])
        slope = max(0.0, (t1 - t0) / (b1 - b0))
        if not below:
            return t1 + slope * (B - b1)
        return max(t0 + slope * (B - b0), t0 * B / b0)

    def T_iss0(self, K, B):
        Ks = sorted(self.rows)
        if K <= Ks[0]:
            return self._along_B(self.rows[Ks[0]], B)
        if K >= Ks[-1]:
            return self._along_B(self.rows[Ks[-1]], B)
        hi = next(k for k in Ks if k >= K)
        lo = max(k for k in Ks if k < K)
        if hi == K:
            return self._along_B(self.rows[K], B)
        w = (K - lo) / (hi - lo)
        return (1 - w) * self._along_B(self.rows[lo], B) + w * self._along_B(self.rows[hi], B)

    def Q_at(self, K):
        """Q(K) measured at K, or None (no knee measured there: the plot shows no capacity branch)."""
        return self.Q.get(K)


def read_platform(path):
    try:
        doc = results.load_json(path)
    except FileNotFoundError:
        raise UsageError(f"platform file '{path}' does not exist") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"platform file '{path}' is not valid JSON: {e}") from None
    if doc.get("schema") != "xstage.platform/1":
        raise UsageError(f"platform file '{path}': schema is {doc.get('schema')!r}, expected 'xstage.platform/1'")
    paths = doc.get("store_paths")
    if not isinstance(paths, dict) or not paths:
        raise UsageError(f"platform file '{path}' has no store_paths")
    return {name: Triple(name, t, path) for name, t in paths.items()}


def held_out_K(triple, samples):
    """Held-out K as recorded by the fit; otherwise gap-sweep K that are not on the T_iss0 grid."""
    recorded = triple.fit.get("held_out_K")
    if isinstance(recorded, list) and recorded:
        return sorted(int(k) for k in recorded)
    return sorted({s["K"] for s in samples if s["sweep"] == "gap"} - set(triple.rows))


# ---------------------------------------------------------------------------------------------
# Panels
# ---------------------------------------------------------------------------------------------

def geomspace(lo, hi, n=200):
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]


def linspace(lo, hi, n=200):
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def no_data(ax, what):
    ax.text(0.5, 0.5, f"no {what} samples", ha="center", va="center", transform=ax.transAxes, color="gray")


def gap_series(samples, K, dest):
    """Gap-sweep samples at K (the most common B there), sorted by measured gap."""
    at_K = [s for s in samples if s["sweep"] == "gap" and s["K"] == K]
    if not at_K:
        return None, []
    Bs = [s["B_bytes"] for s in at_K]
    B = max(set(Bs), key=Bs.count)
    return B, sorted((s for s in at_K if s["B_bytes"] == B and s["dest"] == dest), key=lambda s: s["gap_ns"])


def pick_gap_K(triple, samples, args):
    """One fit K and one held-out K for panels (a) and (b): the largest of each unless asked."""
    gap_K = {s["K"] for s in samples if s["sweep"] == "gap"}
    held = [k for k in held_out_K(triple, samples) if k in gap_K]
    fit = sorted(gap_K - set(held))
    chosen = []
    if args.fit_K is not None or fit:
        chosen.append((args.fit_K if args.fit_K is not None else fit[-1], "fit"))
    if args.held_out_K is not None or held:
        chosen.append((args.held_out_K if args.held_out_K is not None else held[-1], "held-out"))
    return chosen


def panel_gap(ax, triple, samples, args, quantity):
    """(a) quantity='issue' or (b) quantity='period' against the measured gap."""
    chosen = pick_gap_K(triple, samples, args)
    if not chosen:
        return no_data(ax, "gap-sweep")
    for color, (K, role) in zip(("C0", "C3", "C2", "C1"), chosen):
        B, remote = gap_series(samples, K, "remote")
        _, local = gap_series(samples, K, "local")
        if not remote:
            continue
        V = K * B
        T0, V_over_R = triple.T_iss0(K, B), V / triple.R
        label = f"K={K} ({role}), B={B // 1024} KiB"
        G = [s["gap_ns"] for s in remote]
        if quantity == "issue":
            y = [s["T_iss_ns"] for s in remote]
            err = [[max(0.0, s["T_iss_ns"] - s["T_iss_p10_ns"]) / US for s in remote],
                   [max(0.0, s["T_iss_p90_ns"] - s["T_iss_ns"]) / US for s in remote]]
            ax.errorbar([g / US for g in G], [t / US for t in y], yerr=err, fmt="o", ms=4, color=color,
                        capsize=2, label=f"{label}, remote")
            if local:
                ax.plot([s["gap_ns"] / US for s in local], [s["T_iss_ns"] / US for s in local], "s", ms=4,
                        mfc="none", color=color, label=f"K={K}, local control")
        else:
            ax.plot([g / US for g in G], [s["T_period_ns"] / US for s in remote], "o", ms=4, color=color,
                    label=f"{label}, measured")
        G_line = linspace(0.0, max(G) * 1.02 if max(G) > 0 else 3 * V_over_R)
        if quantity == "issue":
            model = [max(T0, V_over_R - g) for g in G_line]
            ax.plot([g / US for g in G_line], [t / US for t in model], "-", color=color, lw=1.2,
                    label="max(T_iss0, V/R - G)" if color == "C0" else None)
        else:
            model = [max(T0 + g, V_over_R) for g in G_line]
            cc = [g + V_over_R for g in G_line]
            ax.plot([g / US for g in G_line], [t / US for t in model], "-", color=color, lw=1.2,
                    label="max(T_iss0 + G, V/R)" if color == "C0" else None)
            ax.plot([g / US for g in G_line], [t / US for t in cc], "--", color=color, lw=1.0, alpha=0.6,
                    label="completion-coupled G + V/R" if color == "C0" else None)
        G_star = max(0.0, V_over_R - T0)
        if G_star > 0:
            ax.axvline(G_star / US, color=color, ls=":", lw=0.8)
    ax.set_xlabel("gap G (µs)")
    ax.set_ylabel("issue time T_iss (µs)" if quantity == "issue" else "period T_period (µs)")
    ax.set_title("(a) issue time vs gap" if quantity == "issue" else "(b) period vs gap")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=6)


def panel_isolated(ax, triple, samples):
    """(c) isolated issue time vs V for each K, with max(T_iss0, (V - Q)/R) and its knee."""
    iso = [s for s in samples if s["sweep"] == "isolated"]
    if not iso:
        return no_data(ax, "isolated")
    for i, K in enumerate(sorted({s["K"] for s in iso})):
        color = f"C{i % 10}"
        remote = sorted((s for s in iso if s["K"] == K and s["dest"] == "remote"), key=lambda s: s["V_bytes"])
        local = sorted((s for s in iso if s["K"] == K and s["dest"] == "local"), key=lambda s: s["V_bytes"])
        Q = triple.Q_at(K)
        tag = f"K={K}" + (f", Q={Q / MIB:.2f} MiB" if Q else ", no knee")
        ax.plot([s["V_bytes"] / MIB for s in remote], [s["T_iss_ns"] / US for s in remote], "o", ms=4,
                color=color, label=tag)
        ax.plot([s["V_bytes"] / MIB for s in local], [s["T_iss_ns"] / US for s in local], "s", ms=3,
                mfc="none", color=color, alpha=0.6)
        pts = remote or local
        B_line = geomspace(min(s["B_bytes"] for s in pts), max(s["B_bytes"] for s in pts))
        model = [max(triple.T_iss0(K, B), (K * B - Q) / triple.R) if Q else triple.T_iss0(K, B) for B in B_line]
        ax.plot([K * B / MIB for B in B_line], [t / US for t in model], "-", color=color, lw=1.2)
        if Q:  # knee: first V where the capacity branch (V - Q)/R rises above T_iss0
            knee = next((K * B for B in B_line if (K * B - Q) / triple.R > triple.T_iss0(K, B)), None)
            if knee:
                ax.axvline(knee / MIB, color=color, ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("burst volume V (MiB)")
    ax.set_ylabel("isolated issue time T_iso (µs)")
    ax.set_title("(c) isolated bursts: max(T_iss0, (V - Q)/R)")
    ax.legend(fontsize=6, title="filled: remote, hollow: local", title_fontsize=6)


def panel_zero_gap(ax, triple, samples):
    """(d) zero-gap period vs V for every K, with the drain line V/R."""
    zg = [s for s in samples if s["sweep"] == "zero_gap"]
    if not zg:
        return no_data(ax, "zero-gap")
    for i, K in enumerate(sorted({s["K"] for s in zg})):
        color = f"C{i % 10}"
        for dest, mfc in (("remote", color), ("local", "none")):
            pts = sorted((s for s in zg if s["K"] == K and s["dest"] == dest), key=lambda s: s["V_bytes"])
            ax.plot([s["V_bytes"] / MIB for s in pts], [s["T_period_ns"] / US for s in pts], "os"[dest == "local"],
                    ms=4 if dest == "remote" else 3, color=color, mfc=mfc,
                    label=f"K={K}" if dest == "remote" else None)
    V_line = geomspace(min(s["V_bytes"] for s in zg), max(s["V_bytes"] for s in zg))
    ax.plot([v / MIB for v in V_line], [v / triple.R / US for v in V_line], "k-", lw=1.2,
            label=f"V/R, R = {triple.R:.0f} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("burst volume V (MiB)")
    ax.set_ylabel("zero-gap period T_period (µs)")
    ax.set_title("(d) zero-gap period vs V")
    ax.legend(fontsize=6, title="filled: remote, hollow: local", title_fontsize=6)


def plot_path(name, triple, samples, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {
        "a": lambda ax: panel_gap(ax, triple, samples, args, "issue"),
        "b": lambda ax: panel_gap(ax, triple, samples, args, "period"),
        "c": lambda ax: panel_isolated(ax, triple, samples),
        "d": lambda ax: panel_zero_gap(ax, triple, samples),
    }
    written = []
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    for ax, draw in zip(axes.flat, panels.values()):
        draw(ax)
    fig.suptitle(f"X-Stage calibration, {name}: R = {triple.R:.0f} GB/s")
    fig.tight_layout()
    out = os.path.join(args.out, f"fig3_{name}.png")
    results.save_png(fig, out, dpi=130)
    plt.close(fig)
    written.append(out)
    for letter, draw in panels.items():
        fig, ax = plt.subplots(figsize=(6, 4.5))
        draw(ax)
        fig.tight_layout()
        out = os.path.join(args.out, f"fig3{letter}_{name}.png")
        results.save_png(fig, out, dpi=130)
        plt.close(fig)
        written.append(out)
    return written


# ---------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------

def fmt(x, spec, unit=""):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:{spec}}{unit}"


def summary(name, triple, samples):
    print(f"[{name}]")
    counts = {}
    for s in samples:
        counts[(s["sweep"], s["dest"])] = counts.get((s["sweep"], s["dest"]), 0) + 1
    print("  samples: " + ", ".join(f"{sw}/{d}={n}" for (sw, d), n in sorted(counts.items())))
    print(f"  R = {triple.R:.1f} bytes/ns (GB/s)")
    fit_R = triple.fit.get("R", {})
    for r in fit_R.get("per_rank", []):
        print(f"    rank {r.get('rank')}: R = {fmt(r.get('R_bytes_per_ns'), '.1f')}, "
              f"relative-LSQ {fmt(r.get('R_lsq_rel_bytes_per_ns'), '.1f')}, {r.get('n_points')} drain points")
    if "R_over_wall_median" in fit_R:
        print(f"    R / wall-clock rate (median) = {fmt(fit_R.get('R_over_wall_median'), '.3f')}")
    for K in sorted(triple.rows):
        row = triple.rows[K]
        print(f"  T_iss0 K={K}: " + ", ".join(f"{B // 1024}K:{T / US:.2f}us" for B, T in row))
    for K in sorted(triple.Q):
        print(f"  Q(K={K}) = {triple.Q[K] / MIB:.2f} MiB")
    v = triple.fit.get("validation", {})
    if v:
        print(f"  held-out K {triple.fit.get('held_out_K')}: period err {fmt(v.get('period_err_heldout_median'), '.1%')}, "
              f"issue err {fmt(v.get('issue_err_heldout_median'), '.1%')}, completion-coupled "
              f"{fmt(v.get('period_err_completion_coupled_median'), '.1%')}")
        print(f"  fit K: period err {fmt(v.get('period_err_fit_median'), '.1%')}, "
              f"issue err {fmt(v.get('issue_err_fit_median'), '.1%')}")
        print(f"  local control flatness (max/min - 1) {fmt(v.get('local_control_flatness'), '.1%')}")
    for w in triple.fit.get("warnings", []):
        print(f"  warning: {w}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", required=True, help="samples CSV written by `xstage calibrate`")
    p.add_argument("--platform", required=True, help="platform JSON (xstage.platform/1)")
    p.add_argument("--out", help="folder for the PNGs (created if missing)")
    p.add_argument("--summary", action="store_true", help="print a plain-text summary of the fit")
    p.add_argument("--fit-K", type=int, help="fit K for panels a/b (default: the largest gap-sweep fit K)")
    p.add_argument("--held-out-K", type=int, help="held-out K for panels a/b (default: the largest held-out K)")
    args = p.parse_args(argv)
    if not args.out and not args.summary:
        p.error("give --out DIR, --summary, or both")
    try:
        samples = read_samples(args.samples)
        platform = read_platform(args.platform)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
        for name, triple in platform.items():
            mine = [s for s in samples if s["path"] == name]
            if not mine:
                print(f"calibration/plot.py: no samples for store path {name}; skipped", file=sys.stderr)
                continue
            if args.summary:
                summary(name, triple, mine)
            if args.out:
                for f in plot_path(name, triple, mine, args):
                    print(f)
    except UsageError as e:
        print(f"calibration/plot.py: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"calibration/plot.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
