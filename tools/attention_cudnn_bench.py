#!/usr/bin/env python3
"""cuDNN SDPA baseline for `xstage attention bench`: same shapes, bf16, non-causal.

torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION) (and,
for context, the FLASH_ATTENTION backend), inputs [batch, heads, M, d] contiguous as torch expects,
CUDA-event medians after warm-up; TFLOP/s = 4 * M^2 * d * heads * batch / t. Writes JSON.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def ints(text):
    return [int(x) for x in text.split(",") if x]


def time_ms(fn, reps, inner):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        start.record()
        for _ in range(inner):
            fn()
        stop.record()
        stop.synchronize()
        out.append(start.elapsed_time(stop) / inner)
    return out


def warm_up(fn, ms):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spent = 0.0
    while spent < ms:
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        spent += start.elapsed_time(stop)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--head-dims", type=ints, default=[128, 64])
    ap.add_argument("--heads", type=ints, default=[4, 12])
    ap.add_argument("--seqlens", type=ints, default=[4096, 8192, 16384, 32768, 65536])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup-ms", type=float, default=200.0)
    ap.add_argument("--backends", default="cudnn,flash")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(dev)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {props.name}")
    print(f"{'backend':>7} {'d':>5} {'heads':>6} {'M':>7} {'time_ms':>12} {'TFLOP/s':>10}")
    points = []
    first = True
    for d in args.head_dims:
        for h in args.heads:
            for m in args.seqlens:
                gen = torch.Generator(device=dev).manual_seed(1234)
                shape = (args.batch, h, m, d)
                q, k, v = (torch.rand(shape, device=dev, generator=gen, dtype=torch.float32).mul_(2).sub_(1)
                           .to(torch.bfloat16) for _ in range(3))
                flops = 4.0 * m * m * d * h * args.batch
                for name in args.backends.split(","):
                    rec = {"backend": name, "head_dim": d, "heads": h, "seqlen": m, "batch": args.batch}
                    try:
                        with sdpa_kernel(BACKENDS[name]):
                            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=False)
                            warm_up(fn, 1000.0 if first else args.warmup_ms)
                            first = False
                            est = statistics.median(time_ms(fn, 3, 1))
                            inner = max(1, math.ceil(2.0 / max(est, 1e-3)))
                            times = time_ms(fn, args.reps, inner)
                        t = statistics.median(times)
                        rec.update(time_ms=t, tflops=flops / (t * 1e-3) / 1e12, launches_per_timing=inner,
                                   times_ms=times)
                        print(f"{name:>7} {d:>5} {h:>6} {m:>7} {t:>12.4f} {rec['tflops']:>10.1f}", flush=True)
                    except Exception as e:  # a backend that refuses a shape is recorded, not fatal
                        rec["error"] = str(e).splitlines()[0][:300]
                        print(f"{name:>7} {d:>5} {h:>6} {m:>7}  error: {rec['error']}", flush=True)
                    points.append(rec)
                del q, k, v
                torch.cuda.empty_cache()
    doc = {
        "command": " ".join(sys.argv),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": {"name": props.name, "sm_count": props.multi_processor_count},
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "layout": "[batch, heads, M, d] bf16 contiguous, non-causal",
        "flops_formula": "4 * M^2 * d * heads * batch",
        "points": points,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
