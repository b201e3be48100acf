#!/usr/bin/env python3
"""Times xstage's operators through PyTorch (not a test: no assertions), to set beside the C++ benchmarks of the
same shapes run in the same session:

  attention  xstage.flash_attention at M = 8192, batch 1, heads 4 and 12, head_dim 128 and 64 (the
             `xstage attention bench --seqlens 8192` points), plus the Flux DiT shape [1, 8704, 24, 128];
             xstage.ulysses_attention (each path: serial, fused_post, fused_both) at the same shapes over the job's ranks (P = 1 in a
             plain run: the layer's copies and exchanges around the same attention kernel);
  moe        xstage.moe on the DeepSeek-V3-like layer (h 7168, h_inter 2048, E 256, top-8, 4096 tokens per
             rank, bf16; balanced routing as `xstage moe bench`), EP = the job's ranks (1 in a plain run).

Protocol (tools/common/timing.py), per point: the GPU is kept busy with the op for --warmup-ms (1 s before the
first point); a timing covers back-to-back calls filling >= 2 ms (as `xstage attention bench` does), after an
untimed repeat of itself; each of --reps rounds times every mode once, the modes taking turns in a balanced order,
so that all see the same clock (this H200 is power-capped and its clock swings by 10% within seconds). The
median per call is reported; the host's per-call work hides behind the kernels as long as it is shorter. Modes:
  eager  the Python op called back to back; host_us is the host's time per call in that loop (perf_counter);
  graph  one replay of a CUDA graph holding the same calls (GPU time only);
  c_abi  the same kernel launched through the C ABI on tensors prepared once (flash_attention, moe): what
         torch's dispatch, the Python checks and the output allocation add shows as eager / c_abi.
Writes everything as JSON to --out.

    python3 tools/python/time_ops.py --out /tmp/time_ops.json
    torchrun --standalone --nproc-per-node 2 tools/python/time_ops.py --out /tmp/time_ops_p2.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common import timing  # noqa: E402
import xstage  # noqa: E402
from xstage import _capi, _tensors  # noqa: E402

BF16 = torch.bfloat16


def setup():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:
        store = os.path.join(tempfile.mkdtemp(), "store")
        dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1, device_id=torch.device("cuda", local))
    return xstage.distributed.init()


_first_point = True


def time_point(name, shape, fn, flops, args, results, c_abi=None):
    """Warm-up, then the modes eager, graph and (when c_abi, a callable launching the same kernel through the C
    ABI, is given) c_abi of fn, taking turns (tools/common/timing.py), with the same calls per timing; appends one
    point per mode."""
    global _first_point
    timing.warm_up(fn, 1000.0 if _first_point else args.warmup_ms)
    _first_point = False
    inner = timing.calls_per_timing(fn)
    graph = timing.captured(fn, inner)
    units = {"eager": timing.repeat(fn, inner), "graph": graph.replay}
    if c_abi is not None:
        units["c_abi"] = timing.repeat(c_abi, inner)
    dist.barrier()
    for mode, t in timing.time_in_turn(units, args.reps).items():
        extra = {"host_us": statistics.median(t.host_us) / inner} if mode == "eager" else {}
        results.append(point(name, shape, mode, [ms / inner for ms in t.ms], flops, calls_per_timing=inner, **extra))
        log(results[-1])
    del graph


def summary(times):
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "reps": len(times)}


def point(op, shape, mode, times, flops, **extra):
    r = {"op": op, "shape": shape, "mode": mode, **summary(times), **extra}
    r["tflops"] = flops / (r["median_ms"] * 1e-3) / 1e12
    return r


def attention_points(args, comm, results):
    P = comm.world_size
    shapes = [(1, args.seqlen, h, d) for d in (128, 64) for h in (4, 12)] + [(1, 8704, 24, 128)]
    g = torch.Generator(device="cuda").manual_seed(0)
    for b, m, h, d in shapes:
        flops = 4.0 * b * h * m * m * d
        q, k, v = ((torch.rand(b, m, h, d, device="cuda", generator=g) * 2 - 1).to(BF16) for _ in range(3))
        calls = {"flash_attention": lambda: xstage.flash_attention(q, k, v)}
        out = torch.empty_like(q)
        cq, ck, cv, co = (_tensors.c_tensor(t) for t in (q, k, v, out))
        direct = lambda: _capi.flash_attention_forward(cq, ck, cv, co, None, d**-0.5, _tensors.current_stream(q.device))  # noqa: E731
        if h % P == 0 and m % P == 0:
            ms = m // P
            qs, ks, vs = (t[:, comm.rank * ms : (comm.rank + 1) * ms].contiguous() for t in (q, k, v))
            for path in ("fused_post", "fused_both", "serial"):
                calls[f"ulysses_attention {path}"] = lambda path=path: xstage.ulysses_attention(qs, ks, vs, path=path)
        for name, fn in calls.items():
            # per rank, the Ulysses layer does 1/P of the attention FLOPs
            f = flops if name == "flash_attention" else flops / P
            shape = {"batch": b, "seqlen": m, "heads": h, "head_dim": d, "ranks": 1 if name == "flash_attention" else P}
            time_point(name, shape, fn, f, args, results, c_abi=direct if name == "flash_attention" else None)
        del q, k, v, out
        xstage.distributed.poll()


def moe_points(args, comm, results):
    P, r = comm.world_size, comm.rank
    E, K, h, inter, T = 256, 8, 7168, 2048, args.moe_tokens
    el = E // P
    g = torch.Generator(device="cuda").manual_seed(1)
    w1 = torch.empty(el, 2 * inter, h, dtype=BF16, device="cuda").normal_(0, h**-0.5, generator=g)
    w2 = torch.empty(el, h, inter, dtype=BF16, device="cuda").normal_(0, inter**-0.5, generator=g)
    x = torch.empty(T, h, dtype=BF16, device="cuda").normal_(generator=g)
    perm = torch.randperm(E, device="cuda", generator=torch.Generator(device="cuda").manual_seed(2))
    q = (r * T + torch.arange(T, device="cuda")[:, None]) * K + torch.arange(K, device="cuda")[None, :]
    ids = perm[q % E].to(torch.int32).contiguous()
    wts = torch.rand(T, K, device="cuda", generator=g).softmax(-1).contiguous()
    flops = 2.0 * T * K * 3 * h * inter  # per rank: Linear-1 (2·h_inter outputs) + Linear-2, for its tokens
    for dtype_name in args.moe_dtypes.split(","):
        dtype = {"bf16": BF16, "fp8": torch.float8_e4m3fn}[dtype_name]
        p = xstage.moe_pack_weights(w1, w2, dtype=dtype)
        for schedule in args.schedules.split(","):
            fn = lambda: xstage.moe(x, ids, wts, *p[:4], schedule=schedule, max_tokens=T)  # noqa: E731
            shape = {"E": E, "top_k": K, "hidden": h, "inter": inter, "tokens_per_rank": T, "ranks": P, "dtype": dtype_name,
                     "schedule": schedule, "tile_n": p.tile_n, "routing": "balanced"}
            fn()  # builds (and caches) the layer, whose handle the C ABI mode launches directly
            layer = [h for key, h in comm.layers() if key[0] == "moe"][-1]
            out = torch.empty_like(x)
            ct = [_tensors.c_tensor(t) for t in (x, ids, wts, *p[:2])]
            scales = [_tensors.c_tensor(t) if dtype_name == "fp8" else None for t in p[2:4]]
            direct = lambda: _capi.moe_forward(layer, *ct, *scales, _tensors.c_tensor(out), _tensors.current_stream(x.device))  # noqa: E731
            time_point("moe", shape, fn, flops, args, results, c_abi=direct)
        del p
        torch.cuda.empty_cache()
        xstage.distributed.poll()


def log(r):
    if dist.get_rank() == 0:
        host = f"  host {r['host_us']:6.1f} us/call" if "host_us" in r else ""
        print(f"{r['op']:26s} {json.dumps(r['shape'])} {r['mode']:5s} {r['median_ms']:9.4f} ms  {r['tflops']:7.1f} TFLOP/s"
              f"  ({r['calls_per_timing']} calls per timing){host}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="time_ops.json")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup-ms", type=float, default=200.0, help="warm-up per point (1 s before the first)")
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--moe-tokens", type=int, default=4096)
    ap.add_argument("--moe-dtypes", default="bf16", help="bf16 and/or fp8, comma-separated")
    ap.add_argument("--schedules", default="auto", help="comma-separated: auto, interleaved, expert_wave, pipelined_waves")
    ap.add_argument("--skip", default="", help="comma-separated: attention, moe")
    args = ap.parse_args()
    comm = setup()
    results = []
    start = time.time()
    if "attention" not in args.skip:
        attention_points(args, comm, results)
    if "moe" not in args.skip:
        moe_points(args, comm, results)
    doc = {
        "what": "xstage ops timed through PyTorch: warm-up, then the median of CUDA-event timings of back-to-back "
                "calls filling >= 2 ms, per call, each after an untimed repeat, the modes taking turns; eager = Python "
                "op calls (host_us: the host's time per call), graph = a replayed CUDA graph of the same calls, c_abi = "
                "the same kernel through the C ABI on tensors prepared once",
        "command": " ".join([sys.executable] + sys.argv),
        "rank": comm.rank,
        "world_size": comm.world_size,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "python": platform.python_version(),
        "xstage": xstage.__version__,
        "library": xstage.library_path(),
        "args": vars(args),
        "seconds": time.time() - start,
        "results": results,
    }
    out = args.out if comm.rank == 0 else f"{args.out}.rank{comm.rank}"
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    if comm.rank == 0:
        print(f"wrote {out}")
    xstage.distributed.teardown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
