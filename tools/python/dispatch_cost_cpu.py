#!/usr/bin/env python3
"""What torch's dispatch costs an op of xstage's schemas on this machine's CPU, without a GPU: a C++ kernel
registered through the stable ABI (as libxstage_torch.so's are) against a Python kernel (as the ctypes path's
are), each only allocating its outputs the way the real ones do (two for flash_attention's schema, one for
moe's), on host tensors. Not a test: it judges nothing.

What this leaves out, and why it is not the GPU machine's number: no kernel launch and no C library (the real
kernels add the C ABI call: tools/python/host_costs.py measures it on a GPU), the CPU allocator instead of torch's CUDA
caching allocator, and the Python implementations' own work (checks, ctypes descriptors). It measures the part
that moves from Python to C++: the dispatcher's boxing into a kernel, the output allocations, the return.

    python3 tools/python/dispatch_cost_cpu.py --out dispatch_cost_cpu.json

It compiles the stub kernels (a few seconds with g++) against the running torch, which must have the stable ABI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import xstage  # noqa: F401 - defines torch.ops.xstage.*, whose schemas the stubs take

STUB = r"""
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

using torch::stable::Tensor;

static Tensor empty(std::initializer_list<int64_t> shape, int32_t dtype, const Tensor& like) {
  int64_t sizes[4], strides[4], n = 0;
  for (int64_t s : shape) sizes[n++] = s;
  for (int64_t j = n - 1, stride = 1; j >= 0; --j) { strides[j] = stride; stride *= sizes[j] > 1 ? sizes[j] : 1; }
  int32_t device_type = 0;
  AtenTensorHandle h = nullptr;
  if (aoti_torch_get_device_type(like.get(), &device_type) ||
      aoti_torch_empty_strided(n, sizes, strides, dtype, device_type, like.get_device_index(), &h))
    throw std::runtime_error("allocation failed");
  return Tensor(h);
}

static std::tuple<Tensor, Tensor> attention(Tensor q, Tensor k, Tensor v, double scale, bool return_lse,
                                            std::optional<Tensor> key_lengths) {
  const auto s = q.sizes();
  Tensor out = empty({s[0], s[1], s[2], s[3]}, aoti_torch_dtype_bfloat16(), q);
  Tensor lse = return_lse ? empty({s[0], s[2], s[1]}, aoti_torch_dtype_float32(), q) : empty({0}, aoti_torch_dtype_float32(), q);
  return {out, lse};
}

static Tensor moe(Tensor x, Tensor ids, Tensor wts, Tensor w1, Tensor w2, std::optional<Tensor> s1, std::optional<Tensor> s2,
                  std::string group, int64_t max_tokens, int64_t tile_n, std::string schedule, int64_t cluster_n,
                  int64_t cluster_m, double timeout_s) {
  const auto s = x.sizes();
  return empty({s[0], s[1]}, aoti_torch_dtype_bfloat16(), x);
}

STABLE_TORCH_LIBRARY_IMPL(xstage_dispatch_stub, CPU, m) {
  m.impl("flash_attention_cpp", TORCH_BOX(&attention));
  m.impl("moe_cpp", TORCH_BOX(&moe));
}
"""


def build_stub(folder: str) -> str:
    torch_dir = os.path.dirname(torch.__file__)
    src, lib = os.path.join(folder, "stub.cpp"), os.path.join(folder, "libstub.so")
    with open(src, "w") as f:
        f.write(STUB)
    cmd = [os.environ.get("CXX", "g++"), "-std=c++20", "-O2", "-shared", "-fPIC", "-DTORCH_TARGET_VERSION=0x20a000000000000",
           "-isystem", os.path.join(torch_dir, "include"), src, "-o", lib, os.path.join(torch_dir, "lib", "libtorch_cpu.so"),
           "-Wl,--no-undefined"]
    subprocess.run(cmd, check=True)
    return lib


def per_call_us(fn, calls, loops=7):
    """Microseconds per call, back to back, median of `loops` loops after a warm-up."""
    for _ in range(calls // 10):
        fn()
    times = []
    for _ in range(loops):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000, help="calls per loop")
    ap.add_argument("--rounds", type=int, default=3, help="the pieces take turns, this many rounds (the machine is shared)")
    ap.add_argument("--out", default="dispatch_cost_cpu.json")
    args = ap.parse_args()

    lib = torch.library.Library("xstage_dispatch_stub", "DEF")
    for name, op in (("flash_attention", torch.ops.xstage.flash_attention.default),
                     ("moe", torch.ops.xstage.moe.default)):
        schema = str(op._schema).split("(", 1)[1]
        for suffix in ("cpp", "python"):
            lib.define(f"{name}_{suffix}({schema}")
    lib.impl("flash_attention_python", lambda q, k, v, s, r, n=None: (
        torch.empty((q.shape[0], q.shape[1], q.shape[2], q.shape[3]), dtype=torch.bfloat16, device=q.device),
        torch.empty((q.shape[0], q.shape[2], q.shape[1]) if r else (0,), dtype=torch.float32, device=q.device)), "CPU")
    lib.impl("moe_python", lambda x, *rest: torch.empty((x.shape[0], x.shape[1]), dtype=torch.bfloat16, device=x.device), "CPU")
    with tempfile.TemporaryDirectory() as folder:
        torch.ops.load_library(build_stub(folder))

    q = torch.zeros(1, 128, 1, 64, dtype=torch.bfloat16)
    x, ids, wts = torch.zeros(64, 1024, dtype=torch.bfloat16), torch.zeros(64, 2, dtype=torch.int32), torch.zeros(64, 2)
    w1, w2 = torch.zeros(8, 1024, 1024, dtype=torch.bfloat16), torch.zeros(8, 1024, 512, dtype=torch.bfloat16)
    ops = torch.ops.xstage_dispatch_stub
    moe_args = (x, ids, wts, w1, w2, None, None, "", 0, 0, "auto", 0, 1, 10.0)
    pieces = {
        "python": lambda: None,
        "torch.add (reference: an ATen op through torch's Python bindings)": lambda: torch.add(q, q),
        "torch.empty x2 (from Python)": lambda: (torch.empty((1, 128, 1, 64), dtype=torch.bfloat16),
                                                 torch.empty((0,), dtype=torch.float32)),
        "flash_attention schema: C++ kernel (stable ABI), allocates out + lse": lambda: ops.flash_attention_cpp.default(q, q, q, 0.125, False),
        "flash_attention schema: Python kernel, allocates out + lse": lambda: ops.flash_attention_python.default(q, q, q, 0.125, False),
        "moe schema: C++ kernel (stable ABI), allocates out": lambda: ops.moe_cpp.default(*moe_args),
        "moe schema: Python kernel, allocates out": lambda: ops.moe_python.default(*moe_args),
    }
    rounds = {name: [] for name in pieces}
    for r in range(args.rounds):
        for name, fn in pieces.items():
            rounds[name].append(per_call_us(fn, args.calls))
            print(f"round {r + 1}: {name:70s} {rounds[name][-1]:7.2f} us/call", flush=True)
    results = {name: statistics.median(v) for name, v in rounds.items()}
    doc = {"what": "host microseconds per call on this CPU, back to back; median over rounds of the median of 7 loops",
           "command": " ".join([sys.executable] + sys.argv), "torch": torch.__version__, "python": platform.python_version(),
           "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
           "load_average_at_end": os.getloadavg(), "us_per_call": results, "us_per_call_rounds": rounds}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
