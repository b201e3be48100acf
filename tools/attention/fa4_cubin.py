#!/usr/bin/env python3
"""FlashAttention-4's Hopper forward compiled to sm_90a machine code on a machine without a GPU.

FlashAttention-4 (`flash-attn-4`, CuTe-DSL kernels compiled at first call) can compile for an architecture it is
not running on: with torch's fake tensors no memory is touched and nothing is launched, and the environment names
the target. This writes one cubin (and its PTX) per shape, for comparing its loops with xstage's instruction by
instruction (`tools/kernels/sass_stats.py --loops --diff flash_fwd_sm90_kernel FlashAttentionForwardSm90
build/src/attention/.../flash_fwd_kHdim64Rows192.cu.o OUT/fa4_d64_....cubin`).

Needs torch and flash-attn-4 importable (measured with flash-attn-4 4.0.0b36, nvidia-cutlass-dsl 4.8.1):

    python3 -m venv /tmp/fa4 && /tmp/fa4/bin/pip install flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 torch
    /tmp/fa4/bin/python tools/attention/fa4_cubin.py --out out/fa4 1x16896x24x128 1x16384x12x64

Shapes are BATCHxSEQLENxHEADSxHEAD_DIM (bf16, non-causal, q/k/v [batch, seqlen, heads, head_dim]); the kernel FA4
picks depends on the head dimension (and, for its scheduler, the SM count given by --sms), not on the lengths.
"""
import argparse
import glob
import os
import shutil
import sys


def parse_shape(text):
    try:
        b, m, h, d = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape '{text}': expected BATCHxSEQLENxHEADSxHEAD_DIM, e.g. 1x16384x12x64")
    if min(b, m, h, d) <= 0:
        raise argparse.ArgumentTypeError(f"shape '{text}': every extent must be positive")
    return b, m, h, d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="+", type=parse_shape, help="BATCHxSEQLENxHEADSxHEAD_DIM")
    ap.add_argument("--out", required=True, help="directory for fa4_d<d>_<b>x<m>x<h>.cubin and .ptx")
    ap.add_argument("--arch", default="sm_90a", help="target architecture (default sm_90a)")
    ap.add_argument("--sms", type=int, default=132, help="SM count FA4 assumes when it chooses (default 132, H100/H200)")
    args = ap.parse_args()

    # FA4's documented way to compile without a GPU: the kernel family, the compile target and the SM count.
    os.environ["FLASH_ATTENTION_ARCH"] = args.arch
    os.environ["CUTE_DSL_ARCH"] = args.arch
    os.environ["FLASH_ATTENTION_NUM_SMS"] = str(args.sms)
    os.environ["CUTE_DSL_KEEP"] = "ptx,cubin"
    # The DSL reads its dump directory once, at import: one directory for every shape, emptied after each.
    dump = os.path.join(args.out, ".dump")
    shutil.rmtree(dump, ignore_errors=True)
    os.makedirs(dump)
    os.environ["CUTE_DSL_DUMP_DIR"] = dump
    try:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        from flash_attn.cute.interface import flash_attn_func
    except ImportError as e:
        sys.exit(f"fa4_cubin: {e}; install flash-attn-4 and torch first (see this script's docstring)")

    for b, m, h, d in args.shapes:
        with FakeTensorMode():
            q, k, v = (torch.empty(b, m, h, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
            flash_attn_func(q, k, v, causal=False)
        found = {}
        for ext in ("cubin", "ptx"):
            files = [f for f in glob.glob(os.path.join(dump, f"*FlashAttentionForwardSm90*.{ext}"))]
            if len(files) != 1:
                sys.exit(f"fa4_cubin: expected one forward .{ext} for {b}x{m}x{h}x{d} in {dump}, found {len(files)}")
            found[ext] = os.path.join(args.out, f"fa4_d{d}_{b}x{m}x{h}.{ext}")
            shutil.move(files[0], found[ext])
        for f in glob.glob(os.path.join(dump, "*")):
            os.remove(f)
        print(f"{b}x{m}x{h}x{d}: {found['cubin']}")
    os.rmdir(dump)


if __name__ == "__main__":
    main()
