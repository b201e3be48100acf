#!/usr/bin/env python3
"""Where the host time of one eager xstage.flash_attention and xstage.moe call goes, piece by piece, beside SDPA in
the same run (not a test: it judges nothing). Each piece is called back to back --calls times (median of 5 such
loops, microseconds per call), at q = k = v = [1, 128, 1, 64] bf16 and a small MoE layer so that the GPU never
holds the host back:

  python      an empty Python call (the loop itself)
  ctypes      a C ABI call that does nothing (xstage_abi_version)
  cudart ...  single CUDA runtime calls the C library makes per launch (through ctypes on torch's libcudart)
  sdpa        torch.nn.functional.scaled_dot_product_attention on the same q, k, v (as [b, h, m, d] views)
  attention / moe pieces
              the public function and the registered op (C++ kernels of libxstage_torch.so where it is loaded,
              else the Python implementations), the C ABI on prepared descriptors (`_trusted`: what the C++
              kernels call; checked: what the Python implementations call), the Python implementations called
              through torch's dispatcher (the ctypes path, registered here under another name), and the pieces
              of that path (descriptors, output allocation, checks, dispatch of ops that launch nothing).
              The C library keeps the TMA descriptors of the last few thousand argument sets (src/common/
              tma_encode.hpp): calls on the same tensors find theirs kept; the "distinct tensors" pieces take
              turns over more sets of tensors than it keeps, so that their calls encode them (the op allocates
              its output at the address it had the call before: that one is kept)
  derived     the public function less the op (its Python work), the op less the `_trusted` C ABI call (torch's
              dispatch into C++ and the output allocations, where the C++ kernels serve the op)

    python3 tools/python/host_costs.py --out host_costs.json                              # libxstage_torch.so if built
    XSTAGE_TORCH_LIBRARY=none python3 tools/python/host_costs.py --out host_costs_ctypes.json   # the ctypes path only

The MoE pieces need one GPU and run the layer on a 1-rank NCCL group (made here unless one exists); --no-moe
leaves them out.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import importlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Tuple

import torch

import xstage
from xstage import _capi, _ops, _tensors, attention

moe_module = importlib.import_module("xstage.moe")  # the module (xstage.moe is the function)
DISTINCT_SETS = 1100


def per_call_us(fn, calls):
    """Host microseconds per call of fn, back to back, median of 5 loops. Each loop starts behind a GPU sleep
    longer than the loop, so that launches queue up and the GPU never holds the host back."""
    for _ in range(min(calls, 100)):
        fn()
    torch.cuda.synchronize()
    loops = []
    for _ in range(5):
        torch.cuda._sleep(int(calls * 500e-6 * 2e9))  # cycles: ~0.5 ms per call at up to 2 GHz
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        loops.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(loops)


def cudart():
    """torch's CUDA runtime library through ctypes, or None."""
    import torch.version

    roots = [os.path.dirname(torch.__file__)] + [p for p in sys.path if p.endswith("site-packages")]
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "**", "libcudart.so*"), recursive=True)):
            try:
                return ctypes.CDLL(path), path
            except OSError:
                continue
    return None, None


def _python_op(name, impl, fake):
    """impl (an xstage op's Python implementation) registered as xstage_host_costs::<name>, the way xstage._ops
    registers the ops where libxstage_torch.so does not serve them."""
    _DEFS.define(name + _ops._infer_schema(impl, mutates_args=()))
    _DEFS.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"xstage_host_costs::{name}", fake, lib=_DEFS)
    return getattr(torch.ops.xstage_host_costs, name).default


_DEFS = None


def attention_pieces(lib):
    q, k, v = (torch.randn(1, 128, 1, 64, device="cuda").to(torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    stream = _tensors.current_stream(q.device)
    cq, ck, cv, co = (_tensors.c_tensor(t) for t in (q, k, v, out))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    xstage.flash_attention(q, k, v)  # loads libxstage_torch.so where it is used

    @torch.library.custom_op("xstage_host_costs::noop_custom_op", mutates_args=())
    def noop_custom_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: float, r: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        return q.new_empty(q.shape), q.new_empty((0,))

    _DEFS.define("noop_impl(Tensor q, Tensor k, Tensor v, float s, bool r) -> (Tensor, Tensor)")
    _DEFS.impl("noop_impl", lambda q, k, v, s, r: (q.new_empty(q.shape), q.new_empty((0,))), "CUDA")
    python_op = _python_op("flash_attention_python", attention._flash_attention_impl, attention._flash_attention_fake)
    ref = lambda t: ctypes.byref(t)  # noqa: E731
    s = ctypes.c_void_p(stream or None)
    # More sets of [q, k, v, out] than the descriptor cache keeps (4096 descriptors, four a call), taken in turn.
    sets = [[torch.randn(1, 128, 1, 64, device="cuda").to(torch.bfloat16) for _ in range(4)] for _ in range(DISTINCT_SETS)]
    keep_alive = [[_tensors.c_tensor(t) for t in group] for group in sets]  # the descriptors byref points into
    described = [[ctypes.byref(d) for d in group] for group in keep_alive]
    turn = itertools.cycle(range(DISTINCT_SETS))
    pieces = {
        "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt),
        "attention: public function": lambda: xstage.flash_attention(q, k, v),
        "attention: torch op": lambda: torch.ops.xstage.flash_attention.default(q, k, v, 0.125, False),
        "attention: C ABI, trusted (prepared descriptors)": lambda: lib.xstage_flash_attention_forward_trusted(
            ref(cq), ref(ck), ref(cv), ref(co), None, ctypes.c_float(0.125), s),
        "attention: C ABI, checked (prepared descriptors)": lambda: _capi.flash_attention_forward(cq, ck, cv, co, None, 0.125, stream),
        "attention: C ABI, trusted, distinct tensors in turn (4 TMA descriptors encoded)": lambda: (lambda d: lib.xstage_flash_attention_forward_trusted(
            d[0], d[1], d[2], d[3], None, ctypes.c_float(0.125), s))(described[next(turn)]),
        "attention: torch op, distinct q, k, v in turn (3 TMA descriptors encoded)": lambda: (lambda t: torch.ops.xstage.flash_attention.default(
            t[0], t[1], t[2], 0.125, False))(sets[next(turn)]),
        "attention: Python implementation through torch (ctypes path)": lambda: python_op(q, k, v, 0.125, False),
        "attention: dispatch, custom_op (no launch)": lambda: noop_custom_op(q, k, v, 0.125, False),
        "attention: dispatch, library impl (no launch)": lambda: torch.ops.xstage_host_costs.noop_impl(q, k, v, 0.125, False),
        "attention: python checks (attention._check_inputs)": lambda: attention._check_inputs(q, k, v, 0.125, fake=False),
        "current_stream": lambda: _tensors.current_stream(q.device),
        "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream(q.device).cuda_stream,
        "torch._C._cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(q.device.index),
        "c_tensor x4": lambda: (_tensors.c_tensor(q), _tensors.c_tensor(k), _tensors.c_tensor(v), _tensors.c_tensor(out)),
        "torch.empty (out + lse)": lambda: (torch.empty((1, 128, 1, 64), dtype=q.dtype, device=q.device),
                                            torch.empty((0,), dtype=torch.float32, device=q.device)),
    }
    return pieces, q


def moe_pieces(lib):
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl", init_method=f"file://{tempfile.mkdtemp()}/store", rank=0, world_size=1,
                                device_id=torch.device("cuda", torch.cuda.current_device()))
    comm = xstage.distributed.init()
    E, K, H, I, T = 8, 2, 1024, 512, 64
    w1 = (torch.randn(E, 2 * I, H, device="cuda") / 32).bfloat16()
    w2 = (torch.randn(E, H, I, device="cuda") / 22.6).bfloat16()
    x = torch.randn(T, H, device="cuda").bfloat16()
    ids = torch.rand(T, E, device="cuda").topk(K, -1).indices.int()
    wts = torch.rand(T, K, device="cuda").softmax(-1)
    p = xstage.moe_pack_weights(w1, w2)
    xstage.moe(x, ids, wts, p.w1, p.w2)  # builds the layer (and loads libxstage_torch.so where it is used)
    layer = next(handle for key, handle in comm.layers() if key[0] == "moe")
    out = torch.empty_like(x)
    stream = _tensors.current_stream(x.device)
    c = [_tensors.c_tensor(t) for t in (x, ids, wts, p.w1, p.w2)] + [None, None, _tensors.c_tensor(out)]
    refs = [ctypes.byref(t) if t is not None else None for t in c]
    python_op = _python_op("moe_python", moe_module._moe_impl, moe_module._moe_fake)
    op_args = (x, ids, wts, p.w1, p.w2, None, None, "", 0, 0, "auto", 0, 1, 10.0)
    pieces = {
        "moe: public function": lambda: xstage.moe(x, ids, wts, p.w1, p.w2),
        "moe: torch op": lambda: torch.ops.xstage.moe.default(*op_args),
        "moe: C ABI, trusted (prepared descriptors)": lambda: lib.xstage_moe_forward_trusted(
            ctypes.c_void_p(layer), *refs, ctypes.c_void_p(stream or None)),
        "moe: C ABI, checked (prepared descriptors)": lambda: _capi.moe_forward(layer, *c, stream),
        "moe: Python implementation through torch (ctypes path)": lambda: python_op(*op_args),
    }

    def close():
        xstage.distributed.teardown()
        dist.destroy_process_group()

    return pieces, close


def main():
    global _DEFS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=300, help="calls per loop (each may queue a launch: keep it well under ~1000)")
    ap.add_argument("--moe-calls", type=int, default=100, help="calls per loop of the MoE pieces (each queues ~5 GPU operations)")
    ap.add_argument("--no-moe", action="store_true", help="leave the MoE pieces out (they need NCCL)")
    ap.add_argument("--out", default="host_costs.json")
    args = ap.parse_args()
    torch.cuda.init()
    lib = xstage.load_library()
    _DEFS = torch.library.Library("xstage_host_costs", "FRAGMENT")

    pieces = {
        "python": lambda: None,
        "ctypes": lambda: lib.xstage_abi_version(),
    }
    rt, rt_path = cudart()
    attention, q = attention_pieces(lib)
    if rt is not None:
        i32, buf = ctypes.c_int(), ctypes.create_string_buffer(1024)  # cudaPointerAttributes, with room to spare
        pfn, status = ctypes.c_void_p(), ctypes.c_int()
        s = ctypes.c_void_p(_tensors.current_stream(q.device) or None)
        pieces.update({
            "cudart cudaGetDevice": lambda: rt.cudaGetDevice(ctypes.byref(i32)),
            "cudart cudaGetDeviceCount": lambda: rt.cudaGetDeviceCount(ctypes.byref(i32)),
            "cudart cudaDeviceGetAttribute": lambda: rt.cudaDeviceGetAttribute(ctypes.byref(i32), 16, 0),
            "cudart cudaPointerGetAttributes": lambda: rt.cudaPointerGetAttributes(buf, ctypes.c_void_p(q.data_ptr())),
            "cudart cudaStreamIsCapturing": lambda: rt.cudaStreamIsCapturing(s, ctypes.byref(i32)),
            "cudart cudaStreamGetDevice": lambda: rt.cudaStreamGetDevice(s, ctypes.byref(i32)),
            "cudart cudaGetDriverEntryPointByVersion": lambda: rt.cudaGetDriverEntryPointByVersion(
                b"cuTensorMapEncodeTiled", ctypes.byref(pfn), 12000, 0, ctypes.byref(status)),
        })
    pieces["xstage_check_device"] = lambda: lib.xstage_check_device(0)
    pieces.update(attention)
    results = {}

    def measure(table, calls):
        for name, fn in table.items():
            results[name] = per_call_us(fn, calls)
            print(f"{name:62s} {results[name]:8.2f} us/call", flush=True)

    measure(pieces, args.calls)
    if not args.no_moe:
        moe_table, close = moe_pieces(lib)
        measure(moe_table, args.moe_calls)
        close()
    derived = {}
    for op in ("attention", "moe"):
        if f"{op}: public function" not in results:
            continue
        derived[f"{op}: public function less the op (its Python work)"] = results[f"{op}: public function"] - results[f"{op}: torch op"]
        if _ops.torch_library() is not None:
            derived[f"{op}: the op less the trusted C ABI call (dispatch into C++, output allocation)"] = (
                results[f"{op}: torch op"] - results[f"{op}: C ABI, trusted (prepared descriptors)"])
    for name, value in derived.items():
        print(f"derived: {name:53s} {value:8.2f} us/call")
    doc = {"what": "host microseconds per call, back to back, median of 5 loops", "command": " ".join([sys.executable] + sys.argv),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "python": sys.version.split()[0],
           "cpu_count": os.cpu_count(), "cudart": rt_path, "xstage_library": xstage.library_path(),
           "torch_library": _ops.torch_library(), "us_per_call": results, "derived_us": derived}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
