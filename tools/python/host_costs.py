#!/usr/bin/env python3
"""Where the host time of one eager xstage.flash_attention call goes, piece by piece (not a test: it judges
nothing). Each piece is called back to back --calls times (median of 5 such loops, microseconds per call), at
q = k = v = [1, 128, 1, 64] bf16 so that the GPU never holds the host back:

  python      an empty Python call (the loop itself)
  ctypes      a C ABI call that does nothing (xstage_abi_version)
  cudart ...  single CUDA runtime calls the C library makes per launch (through ctypes on torch's libcudart)
  op layers   torch dispatch of an op that launches nothing (custom_op and a plain torch.library impl), the
              pieces of xstage's op body (tensor descriptors, output allocation), the C ABI on prepared tensors,
              the registered op and the public function

    python3 tools/python/host_costs.py --out host_costs.json
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import statistics
import sys
import time
from typing import Tuple

import torch

import xstage
from xstage import _capi, _tensors, attention


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=300, help="calls per loop (each may queue a launch: keep it well under ~1000)")
    ap.add_argument("--out", default="host_costs.json")
    args = ap.parse_args()
    torch.cuda.init()
    q, k, v = (torch.randn(1, 128, 1, 64, device="cuda").to(torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    stream = _tensors.current_stream(q.device)
    cq, ck, cv, co = (_tensors.c_tensor(t) for t in (q, k, v, out))
    lib = xstage.load_library()

    @torch.library.custom_op("xstage_host_costs::noop_custom_op", mutates_args=())
    def noop_custom_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: float, r: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        return q.new_empty(q.shape), q.new_empty((0,))

    defs = torch.library.Library("xstage_host_costs", "FRAGMENT")
    defs.define("noop_impl(Tensor q, Tensor k, Tensor v, float s, bool r) -> (Tensor, Tensor)")
    defs.impl("noop_impl", lambda q, k, v, s, r: (q.new_empty(q.shape), q.new_empty((0,))), "CUDA")

    pieces = {
        "python": lambda: None,
        "ctypes": lambda: lib.xstage_abi_version(),
    }
    rt, rt_path = cudart()
    if rt is not None:
        i32, buf = ctypes.c_int(), ctypes.create_string_buffer(1024)  # cudaPointerAttributes, with room to spare
        pfn, status = ctypes.c_void_p(), ctypes.c_int()
        s = ctypes.c_void_p(stream or None)
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
    pieces.update({
        "xstage_check_device": lambda: lib.xstage_check_device(0),
        "dispatch custom_op (no launch)": lambda: noop_custom_op(q, k, v, 0.125, False),
        "dispatch library impl (no launch)": lambda: torch.ops.xstage_host_costs.noop_impl(q, k, v, 0.125, False),
        "python checks (attention._check_inputs)": lambda: attention._check_inputs(q, k, v, 0.125, fake=False),
        "current_stream": lambda: _tensors.current_stream(q.device),
        "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream(q.device).cuda_stream,
        "torch._C._cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(q.device.index),
        "c_tensor x4": lambda: (_tensors.c_tensor(q), _tensors.c_tensor(k), _tensors.c_tensor(v), _tensors.c_tensor(out)),
        "torch.empty (out + lse)": lambda: (torch.empty((1, 128, 1, 64), dtype=q.dtype, device=q.device),
                                            torch.empty((0,), dtype=torch.float32, device=q.device)),
        "c_abi (prepared tensors)": lambda: _capi.flash_attention_forward(cq, ck, cv, co, None, 0.125, stream),
        "torch op": lambda: torch.ops.xstage.flash_attention(q, k, v, 0.125, False),
        "public function": lambda: xstage.flash_attention(q, k, v),
    })
    results = {}
    for name, fn in pieces.items():
        results[name] = per_call_us(fn, args.calls)
        print(f"{name:42s} {results[name]:8.2f} us/call", flush=True)
    doc = {"what": "host microseconds per call, back to back, median of 5 loops", "command": " ".join([sys.executable] + sys.argv),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "python": sys.version.split()[0],
           "cpu_count": os.cpu_count(), "cudart": rt_path, "xstage_library": xstage.library_path(), "us_per_call": results}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
