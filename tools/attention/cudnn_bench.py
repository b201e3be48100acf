#!/usr/bin/env python3
"""cuDNN SDPA baseline for `xstage attention bench`: same shapes, bf16, non-causal, timed in turn with xstage.

Backends: torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION) and,
for context, FLASH_ATTENTION, on [batch, heads, M, d] contiguous inputs as torch expects; and xstage's kernel
through its C ABI (the xstage package: PYTHONPATH=python, XSTAGE_C_LIBRARY=<build>/libxstage_c.so) on the
same values laid out [batch, M, heads, d], its native layout. Per point, after a warm-up of each, the backends
take turns rep by rep in a rotated order (tools/common/timing.py: the H200's power-capped clock follows its recent
load, so backends timed one after the other would differ by the clock too), each timing one replay of a CUDA
graph of back-to-back calls filling >= 2 ms after an untimed replay (GPU time: torch's SDPA dispatch takes more
host time than the smallest kernels here). CUDA-event medians; TFLOP/s = 4 * M^2 * d * heads * batch / t.
A backend that refuses a shape (or, for xstage, cannot be loaded) is recorded with its error. Writes JSON.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common.timing import calls_per_timing, captured, time_in_turn, warm_up  # noqa: E402

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def ints(text):
    return [int(x) for x in text.split(",") if x]


def sdpa_call(backend, q, k, v):
    def fn():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=False)

    return fn


def xstage_call(q, k, v):
    """xstage's kernel through the C ABI on [batch, M, heads, d] copies of q, k, v, prepared once."""
    from xstage import _capi, _tensors

    qb, kb, vb = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = torch.empty_like(qb)
    c = [_tensors.c_tensor(t) for t in (qb, kb, vb, out)]
    scale = q.shape[-1] ** -0.5
    keep = (qb, kb, vb, out)  # the memory the descriptors point at
    # the current stream is asked at every call: under graph capture it is the capture stream
    return lambda: (_capi.flash_attention_forward(*c, None, scale, _tensors.current_stream(q.device)), keep)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--head-dims", type=ints, default=[128, 64])
    ap.add_argument("--heads", type=ints, default=[4, 12])
    ap.add_argument("--seqlens", type=ints, default=[4096, 8192, 16384, 32768, 65536])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup-ms", type=float, default=200.0)
    ap.add_argument("--backends", default="cudnn,xstage", help="comma-separated: cudnn, flash, xstage (in turn: compare two at a time)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    unknown = [b for b in args.backends.split(",") if b not in (*BACKENDS, "xstage")]
    if unknown:
        ap.error(f"--backends: unknown {', '.join(unknown)} (choose from cudnn, flash, xstage)")

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
                units, records = {}, {}
                for name in args.backends.split(","):
                    rec = {"backend": name, "head_dim": d, "heads": h, "seqlen": m, "batch": args.batch}
                    records[name] = rec
                    try:
                        fn = xstage_call(q, k, v) if name == "xstage" else sdpa_call(BACKENDS[name], q, k, v)
                        warm_up(fn, 1000.0 if first else args.warmup_ms)
                        first = False
                        inner = calls_per_timing(fn)
                        units[name] = (captured(fn, inner), inner)
                    except Exception as e:  # a backend that refuses a shape is recorded, not fatal
                        rec["error"] = str(e).splitlines()[0][:300]
                        print(f"{name:>7} {d:>5} {h:>6} {m:>7}  error: {rec['error']}", flush=True)
                timed = time_in_turn({name: graph.replay for name, (graph, _) in units.items()}, args.reps)
                for name, timings in timed.items():
                    times = [t / units[name][1] for t in timings.ms]
                    t = statistics.median(times)
                    records[name].update(time_ms=t, tflops=flops / (t * 1e-3) / 1e12, launches_per_timing=units[name][1],
                                         times_ms=times)
                    print(f"{name:>7} {d:>5} {h:>6} {m:>7} {t:>12.4f} {records[name]['tflops']:>10.1f}", flush=True)
                points.extend(records.values())
                del q, k, v
                torch.cuda.empty_cache()
    doc = {
        "command": " ".join(sys.argv),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": {"name": props.name, "sm_count": props.multi_processor_count},
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "layout": "[batch, heads, M, d] bf16 contiguous (xstage: the same values as [batch, M, heads, d]), non-causal",
        "protocol": "per point the backends take turns rep by rep (order rotated); each timing one replay of a CUDA "
                    "graph of back-to-back calls filling >= 2 ms, after an untimed replay; median per call",
        "flops_formula": "4 * M^2 * d * heads * batch",
        "points": points,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
