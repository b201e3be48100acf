#!/usr/bin/env python3
"""The figure of docs/ATTENTION.md's fused_both section: one call of the Ulysses layer on two ranks, drawn as a
timeline of what each rank's pusher and attention SMs do. A schematic of the protocol, not a measurement: the
durations are chosen to show the order of events (arbitrary units).

Per rank, three lanes: its pushes into rank 0's inbox and into rank 1's, and its attention SMs. After the start-of-call
kernel and barrier, the head start: the pusher kernel on every SM pushes the first wave's head (head 0) of the rank's
rows into both inboxes; then the attention kernel, one wave per head, whose tiles walk a head's m-blocks from the last
and whose key/value loops run from the last rows to the first, waiting (hatched) where a chunk's flag has not arrived,
while the pusher on a few SMs of its own pushes the next heads (chunks from the last rows of the rank's shard to the
first, every receiver in turn, each chunk's Q, K and V rows of one head followed by its arrival flag, a tick); the
epilogue stores each finished tile into its owner's output window; then the copy-out.

    python3 tools/attention/fused_both_figure.py [--out docs/figures/fused_both_timeline.png]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import results  # noqa: E402

HEADS = 3         # per rank; the first wave holds head 0
CHUNKS = 3        # per source rank (the layer: about 64 per batch in all)
T_START = 0.4     # the start-of-call kernel and barrier
T_HEAD_START = 0.5  # head 0 of the rank's rows into both inboxes, on every SM
T_LOCAL = 0.35    # one chunk of one head to this GPU's own inbox, by the pusher beside the attention kernel
T_REMOTE = 1.0    # one chunk of one head over NVLink
T_BLOCK = 0.45    # a wave's key/value loop over one chunk's rows
T_COPY_OUT = 0.6
SOURCE_COLOURS = ("#4C72B0", "#DD8452")  # rows of rank 0's shard, of rank 1's
HEAD_START_END = T_START + T_HEAD_START


def pushes(src: int, dst: int):
    """(start, end, head, chunk) of rank src's chunks into rank dst's inbox by the pusher beside the attention kernel:
    head by head from head 1, each from the last chunk of the shard, after the head start."""
    step = T_LOCAL if src == dst else T_REMOTE
    order = [(h, c) for h in range(1, HEADS) for c in reversed(range(CHUNKS))]
    return [(HEAD_START_END + i * step, HEAD_START_END + (i + 1) * step, h, c) for i, (h, c) in enumerate(order)]


def arrivals(receiver: int):
    """When each (head, source, chunk) has arrived at `receiver`: head 0 with the head start, the others pushed."""
    out = {(0, src, c): HEAD_START_END for src in (0, 1) for c in range(CHUNKS)}
    out.update({(h, src, c): end for src in (0, 1) for _, end, h, c in pushes(src, receiver)})
    return out


def waves(receiver: int):
    """The attention kernel at `receiver`, one wave per head: its key/value loop in blocks of rows from the sequence's
    end (source 1's last chunk) to its start, each block starting when the one before is done and its chunk has
    arrived. Per wave: [(ready, start, end, source)]."""
    arrived = arrivals(receiver)
    t, out = HEAD_START_END, []
    for h in range(HEADS):
        blocks = []
        for src in (1, 0):
            for c in reversed(range(CHUNKS)):
                start = max(t, arrived[(h, src, c)])
                blocks.append((t, start, start + T_BLOCK, src))
                t = start + T_BLOCK
        out.append(blocks)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join("docs", "figures", "fused_both_timeline.png"))
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(12, 5.2))
    lanes = []
    for rank in (0, 1):
        lanes += [(rank, "ce", 0), (rank, "ce", 1), (rank, "sm", None)]
    y_of = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    end_of_call, waited = 0.0, False
    for rank in (0, 1):
        for dst in (0, 1):
            y = y_of[(rank, "ce", dst)]
            ax.broken_barh([(T_START, T_HEAD_START)], (y - 0.3, 0.6), facecolors=SOURCE_COLOURS[rank], alpha=0.6, edgecolor="white",
                           hatch="..")
            ax.text(T_START + T_HEAD_START / 2, y, "h0", ha="center", va="center", fontsize=7, color="white")
            ax.plot([HEAD_START_END] * 2, [y - 0.38, y + 0.38], color="black", lw=1.2)
            for start, end, h, c in pushes(rank, dst):
                ax.broken_barh([(start, end - start)], (y - 0.3, 0.6), facecolors=SOURCE_COLOURS[rank], edgecolor="white")
                ax.text((start + end) / 2, y, f"h{h}c{c}", ha="center", va="center", fontsize=6, color="white")
                ax.plot([end, end], [y - 0.38, y + 0.38], color="black", lw=1.2)  # the arrival flag
        y = y_of[(rank, "sm", None)]
        ax.broken_barh([(0, T_START)], (y - 0.3, 0.6), facecolors="#999999")
        ax.text(T_START / 2, y - 0.42, "start,\nbarrier", ha="center", va="top", fontsize=7)
        ax.broken_barh([(T_START, T_HEAD_START)], (y - 0.3, 0.6), facecolors="#BBBBBB", hatch="..", edgecolor="white")
        ax.text(T_START + T_HEAD_START / 2, y - 0.42, "head\nstart", ha="center", va="top", fontsize=7)
        t = HEAD_START_END
        for h, blocks in enumerate(waves(rank)):
            for ready, start, end, src in blocks:
                if start > ready:
                    waited = True
                    ax.broken_barh([(ready, start - ready)], (y - 0.3, 0.6), facecolors="white", edgecolor="#C44E52", hatch="///")
                ax.broken_barh([(start, end - start)], (y - 0.3, 0.6), facecolors=SOURCE_COLOURS[src], alpha=0.45, edgecolor="white")
            ax.text((blocks[0][1] + blocks[-1][2]) / 2, y + 0.36, f"wave {h + 1}: head {h}", ha="center", va="bottom", fontsize=7)
            t = blocks[-1][2]
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
    ax.set_title("fused_both on two ranks: the first wave's head pushed on every SM, then the next heads pushed chunk by chunk "
                 "while the attention kernel runs", fontsize=10)
    handles = [Patch(facecolor=SOURCE_COLOURS[0], label="rows of rank 0's shard"),
               Patch(facecolor=SOURCE_COLOURS[1], label="rows of rank 1's shard"),
               Patch(facecolor="#BBBBBB", hatch="..", label="head start (every SM)"), Patch(facecolor="black", label="| arrival flag")]
    if waited:
        handles.append(Patch(facecolor="white", edgecolor="#C44E52", hatch="///", label="producer waits for a chunk's flag"))
    ax.legend(handles=handles, loc="upper right", fontsize=7, ncol=2, framealpha=0.9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    results.save_png(fig, args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
