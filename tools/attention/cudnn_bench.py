#!/usr/bin/env python3
"""cuDNN SDPA baseline for `xstage attention bench`: same shapes, bf16, non-causal, timed in turn with xstage.

Backends: torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION) and,
for context, FLASH_ATTENTION, on [batch, heads, M, d] contiguous inputs as torch expects; and xstage's kernel
through its C ABI (the xstage package: PYTHONPATH=python, XSTAGE_C_LIBRARY=<build>/libxstage_c.so) on the
same values laid out [batch, M, heads, d], its native layout. Per point, after a warm-up of each, the backends
take turns rep by rep in a balanced order (tools/common/timing.py: the H200's power-capped clock follows its recent
load, so backends timed one after the other would differ by the clock too, and each must follow every other equally
often), each timing one replay of a CUDA
graph of back-to-back calls filling >= 2 ms after an untimed replay (GPU time: torch's SDPA dispatch takes more
host time than the smallest kernels here). CUDA-event medians; TFLOP/s = 4 * M^2 * d * heads * batch / t.
A backend that refuses a shape (or, for xstage, cannot be loaded) is recorded with its error. Each backend's output is
compared with the first backend's (rel L2, `rel_l2_vs_first`: a build that computes something else shows). Writes JSON.

More backends: `fa4` (FlashAttention-4's CuTe-DSL kernels, `flash_attn.cute.interface.flash_attn_func`, where
importable; JIT-compiled per shape during the warm-up, on [batch, M, heads, d] like xstage), and `xstage:NAME` for
every `--xstage-lib NAME=PATH`: another build of libxstage_c.so loaded beside the package's, so that two builds of
the kernel are compared in one process, in turn (an A/B that separate processes could not make: see above), all of
them on the same [batch, M, heads, d] copies of the inputs and the same output (poisoned before each build's first
call), so that builds differ by their code only and not by where their buffers landed. Graph
replays of xstage's calls used to crash (an illegal address) when another backend's graph was captured after
xstage's: the call, holding the copies of q, k, v it had prepared, was dropped once its graph was captured, and
the next capture's torch.cuda.empty_cache() freed that memory under the graph
(results/h200/attention/2026-12-01-fa4-in-turn/README.md). Each call now lives as long as its graph: five builds,
cuDNN and FA4 replayed in turn since (results/h200/attention/2026-12-01-fa4-gap/). `--timing eager`: each timing is back-to-back eager calls filling >= 2 ms,
which matches the graph replay for kernels of >= 0.1 ms (the C ABI's host time per call is ~13 us).
Shapes: the grid (--head-dims x --heads x --seqlens, batch --batch) or `--shapes B,M,H,d;...`, `--shapes dit` for
the DiT shapes of docs/ATTENTION.md; `B,M,H,d,N` gives the keys their own length N (M queries against N keys, FLOPs
4·M·N·d·H·B), so that one shape timed at several N splits a backend's time into a part per key block and a part per
tile.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common.timing import (calls_per_timing, captured, repeat, time_in_turn, turn_order,  # noqa: E402
                           turn_period, warm_up)

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
# [batch, M, heads, d] of DiT attention layers at their usual resolutions (video shapes: one 480p / 720p clip).
DIT_SHAPES = {
    "flux-1024": (1, 4608, 24, 128),
    "flux-2048": (1, 16896, 24, 128),
    "sd3-1024": (2, 4250, 24, 64),
    "wan14b-480p": (1, 32760, 40, 128),
    "hunyuan-720p": (1, 75600, 24, 128),
    "synthetic-32k-12-128": (1, 32768, 12, 128),
    "synthetic-16k-12-64": (1, 16384, 12, 64),
    "synthetic-8k-4-128": (1, 8192, 4, 128),
    "synthetic-8k-4-64": (1, 8192, 4, 64),
}


def ints(text):
    return [int(x) for x in text.split(",") if x]


def sdpa_call(backend, q, k, v):
    def fn():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=False)

    return fn


def load_xstage_library(path):
    """Another build of libxstage_c.so, loaded beside the package's (its own copy of every symbol). Only the
    functions this tool calls are declared, so that a build older than the package compares too."""
    from xstage import _capi

    _capi._preload_nccl()
    lib = ctypes.CDLL(path)
    tp = ctypes.POINTER(_capi.Tensor)
    lib.xstage_abi_version.restype = ctypes.c_int32
    lib.xstage_last_error.restype = ctypes.c_char_p
    lib.xstage_flash_attention_forward.argtypes = [tp, tp, tp, tp, tp, ctypes.c_float, ctypes.c_void_p]
    lib.xstage_flash_attention_forward.restype = ctypes.c_int
    if lib.xstage_abi_version() != _capi.ABI_VERSION:
        raise SystemExit(f"--xstage-lib {path}: C ABI version {lib.xstage_abi_version()}, the package's is {_capi.ABI_VERSION}")
    return lib


def xstage_tensors(q, k, v):
    """[batch, M, heads, d] copies of q, k, v and an output, made once per shape and shared by every xstage backend:
    builds compared in turn then read and write the same memory, so that an A/B of two builds compares their code,
    not where each one's copies landed."""
    qb, kb, vb = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    return qb, kb, vb, torch.empty_like(qb)


def xstage_call(keep, lib=None):
    """xstage's kernel through the C ABI (the package's library, or `lib`) on the tensors of xstage_tensors."""
    from xstage import _capi, _tensors

    q = keep[0]
    c = [_tensors.c_tensor(t) for t in keep]
    scale = q.shape[-1] ** -0.5
    # the current stream is asked at every call: under graph capture it is the capture stream
    if lib is None:
        return lambda: (_capi.flash_attention_forward(*c, None, scale, _tensors.current_stream(q.device)), keep)[1]
    refs = [ctypes.byref(t) for t in c]

    def call():
        status = lib.xstage_flash_attention_forward(*refs, None, ctypes.c_float(scale),
                                                    ctypes.c_void_p(_tensors.current_stream(q.device) or None))
        if status != _capi.OK:
            raise RuntimeError((lib.xstage_last_error() or b"").decode())
        return keep

    return call


def fa4_call(q, k, v):
    """FlashAttention-4 (flash_attn.cute) on [batch, M, heads, d] copies of q, k, v."""
    from flash_attn.cute.interface import flash_attn_func

    qb, kb, vb = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    return lambda: flash_attn_func(qb, kb, vb, causal=False)


def output_bhmd(name, result):
    """A call's output as [batch, heads, M, d]: SDPA returns it so; xstage's calls return (q, k, v, out) and FA4
    (out, lse), both [batch, M, heads, d]."""
    if name.startswith("xstage"):
        return result[3].transpose(1, 2)
    if name == "fa4":
        return (result[0] if isinstance(result, tuple) else result).transpose(1, 2)
    return result


def parse_shapes(text):
    """`dit` or `B,M,H,d[,N];...` -> [(name, (B, M, H, d, N))]: N, the key length, is M unless given."""
    if text == "dit":
        return [(name, (*dims, dims[1])) for name, dims in DIT_SHAPES.items()]
    shapes = []
    for item in text.split(";"):
        dims = ints(item)
        if len(dims) not in (4, 5) or min(dims) < 1:
            raise argparse.ArgumentTypeError(f"--shapes: '{item}' is not B,M,H,d or B,M,H,d,N with positive sizes")
        shapes.append(("x".join(map(str, dims)), tuple(dims) if len(dims) == 5 else (*dims, dims[1])))
    return shapes


def markdown_table(points, backends):
    """TFLOP/s per shape (rows) and backend (columns, in the order run), each with its ratio to the first backend
    timed in the same turns, and the geometric mean of those ratios."""
    shapes = list(dict.fromkeys(p["shape"] for p in points))
    tflops = {(p["shape"], p["backend"]): p.get("tflops") for p in points}
    base = backends[0]
    lines = [f"TFLOP/s, timed in turn (ratio to {base} in the same turns)", "",
             "| shape [B, M, H, d] | " + " | ".join(backends) + " |", "|---|" + "---:|" * len(backends)]
    logs = {b: [] for b in backends}
    for shape in shapes:
        t0 = tflops.get((shape, base))
        cells = []
        for b in backends:
            t = tflops.get((shape, b))
            if t is None:
                cells.append("error")
                continue
            cells.append(f"{t:.0f}" + (f" ({t / t0:.3f})" if b != base and t0 else ""))
            if t0:
                logs[b].append(math.log(t / t0))
        dims = next(p for p in points if p["shape"] == shape)
        keys = f", N = {dims['seqlen_k']}" if dims.get("seqlen_k", dims["seqlen"]) != dims["seqlen"] else ""
        label = f"{shape} [{dims['batch']}, {dims['seqlen']}, {dims['heads']}, {dims['head_dim']}]{keys}"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(f"| geomean vs {base} | " + " | ".join(f"{math.exp(sum(v) / len(v)):.3f}" if v else "" for v in logs.values()) + " |")
    worst = {b: max((p["rel_l2_vs_first"] for p in points if p["backend"] == b and "rel_l2_vs_first" in p), default=None)
             for b in backends}
    lines.append(f"| max rel L2 vs {base} | " + " | ".join(f"{e:.1e}" if e is not None else "" for e in worst.values()) + " |")
    return "\n".join(lines) + "\n"


def measure_energy(nvml, units, records, timed, flops, seconds, rounds):
    """Per backend: `rounds` windows of >= `seconds` of its timing unit back to back (backends in turn_order),
    NVML's energy and SM clock over each (common.energy.measure); the medians go into records[name]["energy"]."""
    from common.energy import measure

    names = list(units)
    per = {name: [] for name in names}
    for r in range(rounds):
        for name in (names[i] for i in turn_order(len(names), r)):
            unit, inner = units[name]
            unit_ms = statistics.median(timed[name].ms)
            per[name].append(measure(nvml, unit, max(1, math.ceil(seconds * 1e3 / unit_ms)), calls_per_unit=inner))
    for name, windows in per.items():
        med = {key: statistics.median(w[key] for w in windows)
               for key in ("joules_per_call", "watts", "sm_clock_mhz_median")}
        ms_per_call = statistics.median(w["gpu_ms"] / w["calls"] for w in windows)
        tflops = flops / (ms_per_call * 1e-3) / 1e12
        records[name]["energy"] = {
            "windows": windows, "joules_per_call": med["joules_per_call"], "watts": med["watts"],
            "sm_clock_mhz": med["sm_clock_mhz_median"], "tflops": tflops,
            "tflop_per_joule": flops / 1e12 / med["joules_per_call"],
            "tflop_per_sm_ghz_s": tflops / (med["sm_clock_mhz_median"] / 1e3),
        }
        e = records[name]["energy"]
        print(f"{name:>14} {records[name]['shape']:>22}  energy: {e['tflops']:.1f} TFLOP/s at {e['watts']:.0f} W, "
              f"SM {e['sm_clock_mhz']:.0f} MHz, {e['joules_per_call'] * 1e3:.2f} mJ/call, {e['tflop_per_joule']:.3f} TFLOP/J, "
              f"{e['tflop_per_sm_ghz_s']:.1f} TFLOP/s per SM GHz", flush=True)


def energy_table(points):
    """Per shape and backend, from the --energy-s windows: speed, mean power, SM clock, energy per call, and the
    speed split into work per joule and work per SM cycle (TFLOP/s per GHz)."""
    lines = ["Energy windows (NVML; medians over rounds)", "",
             "| shape | backend | TFLOP/s | W | SM MHz | mJ/call | TFLOP/J | TFLOP/s per SM GHz |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        e = p.get("energy")
        if e:
            lines.append(f"| {p['shape']} | {p['backend']} | {e['tflops']:.0f} | {e['watts']:.0f} | {e['sm_clock_mhz']:.0f} | "
                         f"{e['joules_per_call'] * 1e3:.1f} | {e['tflop_per_joule']:.3f} | {e['tflop_per_sm_ghz_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--head-dims", type=ints, default=[128, 64])
    ap.add_argument("--heads", type=ints, default=[4, 12])
    ap.add_argument("--seqlens", type=ints, default=[4096, 8192, 16384, 32768, 65536])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20,
                    help="timings per backend and shape, rounded up to whole periods of the turn order (every backend "
                         "then follows every other equally often)")
    ap.add_argument("--warmup-ms", type=float, default=200.0)
    ap.add_argument("--shapes", type=parse_shapes, default=None,
                    help="'dit' or 'B,M,H,d[,N];...' (N: the key length, M unless given) instead of the grid of --head-dims, --heads, "
                         "--seqlens, --batch")
    ap.add_argument("--backends", default="cudnn,xstage",
                    help="comma-separated: cudnn, flash, fa4, xstage, xstage:NAME (a --xstage-lib), taking turns")
    ap.add_argument("--xstage-lib", action="append", default=[], metavar="NAME=PATH",
                    help="another build of libxstage_c.so, timed as backend xstage:NAME (repeatable)")
    ap.add_argument("--timing", choices=("graph", "eager"), default="graph",
                    help="graph: each timing replays a CUDA graph of the calls; eager: back-to-back eager calls")
    ap.add_argument("--energy-s", type=float, default=0.0,
                    help="after the timings of each shape, run each backend back to back for this many seconds per round "
                         "and read NVML's energy counter and SM clock (tools/common/energy.py); 0: off")
    ap.add_argument("--energy-rounds", type=int, default=3, help="rounds of --energy-s windows, backends in turn_order")
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="", help="also write the table of markdown_table() here")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error(f"--reps: {args.reps}; at least 1 timing per backend is needed")
    if args.energy_s > 0 and args.energy_rounds < 1:
        ap.error(f"--energy-rounds: {args.energy_rounds}; at least 1 window per backend is needed with --energy-s")
    libs = {}
    for item in args.xstage_lib:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            ap.error(f"--xstage-lib: '{item}' is not NAME=PATH")
        libs[f"xstage:{name}"] = path
    known = (*BACKENDS, "fa4", "xstage", *libs)
    unknown = [b for b in args.backends.split(",") if b not in known]
    if unknown:
        ap.error(f"--backends: unknown {', '.join(unknown)} (choose from {', '.join(known)})")
    libs = {name: load_xstage_library(path) for name, path in libs.items()}
    if args.shapes is None:
        args.shapes = [(f"{args.batch}x{m}x{h}x{d}", (args.batch, m, h, d, m))
                       for d in args.head_dims for h in args.heads for m in args.seqlens]

    def make_call(name, q, k, v, shared):
        if name == "xstage" or name in libs:
            if "xstage" not in shared:
                shared["xstage"] = xstage_tensors(q, k, v)
            return xstage_call(shared["xstage"], libs.get(name))
        if name == "fa4":
            return fa4_call(q, k, v)
        return sdpa_call(BACKENDS[name], q, k, v)

    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(dev)
    nvml = None
    if args.energy_s > 0:
        from common.energy import Nvml, NvmlUnavailable

        try:
            nvml = Nvml(dev)
        except NvmlUnavailable as e:
            raise SystemExit(f"--energy-s: {e}")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {props.name}")
    print(f"{'backend':>14} {'shape':>22} {'time_ms':>12} {'TFLOP/s':>10}")
    points = []
    first = True
    for label, (b, m, h, d, n) in args.shapes:
        gen = torch.Generator(device=dev).manual_seed(1234)
        q, k, v = (torch.rand(shape, device=dev, generator=gen, dtype=torch.float32).mul_(2).sub_(1)
                   .to(torch.bfloat16) for shape in ((b, h, m, d), (b, h, n, d), (b, h, n, d)))
        flops = 4.0 * m * n * d * h * b
        # Each backend's call (and the tensors it prepared) lives as long as its graph: every capture begins with
        # torch.cuda.empty_cache(), which would return a dropped call's memory to the driver under its graph.
        units, records, calls, shared = {}, {}, {}, {}
        reference = None  # the first backend's output: every other one is compared with it
        for name in args.backends.split(","):
            rec = {"backend": name, "shape": label, "head_dim": d, "heads": h, "seqlen": m, "seqlen_k": n, "batch": b}
            records[name] = rec
            try:
                fn = calls[name] = make_call(name, q, k, v, shared)
                if name.startswith("xstage"):  # the shared output poisoned: a build that writes nothing shows
                    shared["xstage"][3].fill_(float("nan"))
                out = output_bhmd(name, fn()).float()
                if reference is None:
                    reference = out
                rec["rel_l2_vs_first"] = ((out - reference).norm() / reference.norm()).item()
                del out
                warm_up(fn, 1000.0 if first else args.warmup_ms)
                first = False
                inner = calls_per_timing(fn)
                units[name] = (captured(fn, inner).replay if args.timing == "graph" else repeat(fn, inner), inner)
            except Exception as e:  # a backend that refuses a shape is recorded, not fatal
                rec["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
                print(f"{name:>14} {label:>22}  error: {rec['error']}", flush=True)
        period = turn_period(len(units)) if units else 1
        timed = time_in_turn({name: unit for name, (unit, _) in units.items()}, -(-args.reps // period) * period)
        for name, timings in timed.items():
            times = [t / units[name][1] for t in timings.ms]
            t = statistics.median(times)
            records[name].update(time_ms=t, tflops=flops / (t * 1e-3) / 1e12, launches_per_timing=units[name][1],
                                 times_ms=times)
            print(f"{name:>14} {label:>22} {t:>12.4f} {records[name]['tflops']:>10.1f}  rel L2 vs first "
                  f"{records[name]['rel_l2_vs_first']:.2e}", flush=True)
        if nvml is not None:
            measure_energy(nvml, units, records, timed, flops, args.energy_s, args.energy_rounds)
        points.extend(records.values())
        del q, k, v, units, shared
        torch.cuda.empty_cache()
    doc = {
        "command": " ".join(sys.argv),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": {"name": props.name, "sm_count": props.multi_processor_count},
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "xstage_libs": dict(item.partition("=")[::2] for item in args.xstage_lib),
        "layout": "[batch, heads, M, d] bf16 contiguous (xstage: the same values as [batch, M, heads, d]), non-causal",
        "protocol": "per point the backends take turns rep by rep (common.timing.turn_order); each timing one "
                    "replay of a CUDA graph of back-to-back calls filling >= 2 ms, after an untimed replay; "
                    "median per call"
                    if args.timing == "graph" else
                    "per point the backends take turns rep by rep (common.timing.turn_order); each timing back-to-back "
                    "eager calls filling >= 2 ms, after an untimed repeat; median per call",
        "flops_formula": "4 * M^2 * d * heads * batch",
        "energy_protocol": None if nvml is None else
        f"after each shape's timings, {args.energy_rounds} rounds, backends in turn_order: from an idle GPU, each "
        f"backend's timing unit back to back for >= {args.energy_s} s; NVML total energy before and after (joules per "
        "call, mean watts over the interval), the SM clock sampled every 5 ms; per backend the median over rounds",
        "points": points,
    }
    table = markdown_table(points, args.backends.split(","))
    if nvml is not None:
        table += "\n" + energy_table(points)
    print("\n" + table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
