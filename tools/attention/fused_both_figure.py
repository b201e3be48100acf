#!/usr/bin/env python3
"""The figure of docs/ATTENTION.md's fused_both section: one call of the Ulysses layer on two ranks, drawn as a
timeline of what each rank's pusher CTAs and attention SMs do. A schematic of the protocol, not a measurement: the
durations are chosen to show the order of events (arbitrary units).

Per rank, three lanes: its pusher (a few SMs of its own) pushing its own rows into rank 0's inbox and into rank
1's (chunks from the last rows of its shard to the first, every receiver in turn, each chunk's Q, K and V rows
followed by its arrival flag, a tick), and its attention SMs: the start-of-call kernel and barrier, then the attention kernel, whose tiles
walk heads fastest from the last m-block and whose key/value loops run from the last rows to the first, waiting
(hatched) where a chunk's flag has not arrived; the epilogue stores each finished tile into its owner's output
window; then the copy-out.

    python3 tools/attention/fused_both_figure.py [--out docs/figures/fused_both_timeline.png]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402

CHUNKS = 4        # per source rank (the layer: about 16 per batch in all)
T_START = 0.4     # the start-of-call kernel and barrier
T_LOCAL = 0.35    # one chunk to this GPU's own inbox
T_REMOTE = 0.8    # one chunk over NVLink
T_BLOCK = 0.45    # the first wave's key/value loop over one chunk's rows
WAVES = 3         # attention waves after the first
T_COPY_OUT = 0.6
SOURCE_COLOURS = ("#4C72B0", "#DD8452")  # rows of rank 0's shard, of rank 1's


def pushes(src: int, dst: int):
    """(start, end, chunk) of rank src's chunks into rank dst's inbox, last chunk first, after the start barrier."""
    step = T_LOCAL if src == dst else T_REMOTE
    return [(T_START + i * step, T_START + (i + 1) * step, CHUNKS - 1 - i) for i in range(CHUNKS)]


def arrivals(receiver: int):
    """When each (source, chunk) has arrived at `receiver`."""
    return {(src, c): end for src in (0, 1) for _, end, c in pushes(src, receiver)}


def first_wave(receiver: int):
    """The first wave's key/value loop at `receiver`: blocks of rows from the sequence's end (source 1's last chunk)
    to its start, each starting when the block before it is done and its chunk has arrived. (start, end, waited)."""
    arrived = arrivals(receiver)
    t, out = T_START, []
    for src in (1, 0):  # the sequence's end first: source 1's rows, then source 0's
        for c in reversed(range(CHUNKS)):
            start = max(t, arrived[(src, c)])
            out.append((t, start, start + T_BLOCK))
            t = start + T_BLOCK
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join("docs", "figures", "fused_both_timeline.png"))
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(11, 5.2))
    lanes = []
    for rank in (0, 1):
        lanes += [(rank, "ce", 0), (rank, "ce", 1), (rank, "sm", None)]
    y_of = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    end_of_call = 0.0
    for rank in (0, 1):
        for dst in (0, 1):
            y = y_of[(rank, "ce", dst)]
            for start, end, c in pushes(rank, dst):
                ax.broken_barh([(start, end - start)], (y - 0.3, 0.6), facecolors=SOURCE_COLOURS[rank], edgecolor="white")
                ax.text((start + end) / 2, y, f"c{c}", ha="center", va="center", fontsize=7, color="white")
                ax.plot([end, end], [y - 0.38, y + 0.38], color="black", lw=1.2)  # the arrival flag
        y = y_of[(rank, "sm", None)]
        ax.broken_barh([(0, T_START)], (y - 0.3, 0.6), facecolors="#999999")
        ax.text(T_START / 2, y - 0.42, "start,\nbarrier", ha="center", va="top", fontsize=7)
        blocks = first_wave(rank)
        for i, (ready, start, end) in enumerate(blocks):
            if start > ready:
                ax.broken_barh([(ready, start - ready)], (y - 0.3, 0.6), facecolors="white", edgecolor="#C44E52", hatch="///")
            src = 1 if i < CHUNKS else 0
            ax.broken_barh([(start, end - start)], (y - 0.3, 0.6), facecolors=SOURCE_COLOURS[src], alpha=0.45, edgecolor="white")
        t = blocks[-1][2]
        ax.text((blocks[0][1] + t) / 2, y + 0.36, "wave 1: K/V loops, last rows first", ha="center", va="bottom", fontsize=7)
        wave = len(blocks) * T_BLOCK
        for w in range(WAVES):
            ax.broken_barh([(t, wave)], (y - 0.3, 0.6), facecolors="#8C8C8C", alpha=0.35, edgecolor="white")
            ax.text(t + wave / 2, y, f"wave {w + 2}", ha="center", va="center", fontsize=7)
            t += wave
        ax.broken_barh([(t, T_COPY_OUT)], (y - 0.3, 0.6), facecolors="#55A868")
        ax.text(t + T_COPY_OUT / 2, y + 0.36, "copy-out", ha="center", va="bottom", fontsize=7)
        end_of_call = max(end_of_call, t + T_COPY_OUT)
    labels = {(0, "ce", 0): "rank 0 pusher -> rank 0 inbox", (0, "ce", 1): "rank 0 pusher -> rank 1 inbox",
              (0, "sm", None): "rank 0 attention SMs", (1, "ce", 0): "rank 1 pusher -> rank 0 inbox",
              (1, "ce", 1): "rank 1 pusher -> rank 1 inbox", (1, "sm", None): "rank 1 attention SMs"}
    ax.set_yticks([y_of[lane] for lane in lanes], [labels[lane] for lane in lanes], fontsize=8)
    ax.axhline(2.5, color="black", lw=0.6)
    ax.set_xlim(0, end_of_call + 0.2)
    ax.set_ylim(-0.9, len(lanes) - 0.3)
    ax.set_xlabel("time (schematic: the order of events, not measured durations)")
    ax.set_title("fused_both on two ranks: a pusher kernel pushes Q, K, V chunk by chunk while the attention kernel runs", fontsize=10)
    ax.legend(handles=[Patch(facecolor=SOURCE_COLOURS[0], label="rows of rank 0's shard"),
                       Patch(facecolor=SOURCE_COLOURS[1], label="rows of rank 1's shard"),
                       Patch(facecolor="white", edgecolor="#C44E52", hatch="///", label="producer waits for a chunk's flag"),
                       Patch(facecolor="black", label="| arrival flag (each pusher CTA adds 1)")],
              loc="upper right", fontsize=7, ncol=2, framealpha=0.9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    results.save_png(fig, args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
