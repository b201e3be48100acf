#!/usr/bin/env python3
"""A diffusers MoE transformer's routed experts on xstage's fused MoE layer: one line,
xstage.diffusers.swap_moe(model, dtype=...). HiDream-I1's MOEFeedForwardSwiGLU modules keep their router and
shared expert; their experts become one xstage.nn.MoE each (bf16, or fp8 W8A8 quantized once). One GPU needs no
process group.

    python3 examples/diffusers/moe.py                     # HiDream-I1 from its config, random weights, bf16
    python3 examples/diffusers/moe.py --dtype fp8

Prints how far the output is from diffusers' own module.
"""

import argparse
import os
import sys

import torch

import xstage.diffusers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from dit import models as dit_models  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp8"])
    args = p.parse_args()
    model, inputs = dit_models.build("hidream", "full", "cuda")
    with torch.no_grad():
        reference = dit_models.output(model(**inputs)).float()

        dtype = torch.float8_e4m3fn if args.dtype == "fp8" else torch.bfloat16
        swapped = xstage.diffusers.swap_moe(model, dtype=dtype)  # the switch

        out = dit_models.output(model(**inputs)).float()
    error = ((out - reference).norm() / reference.norm()).item()
    print(f"hidream: {swapped} MoE feed-forwards on xstage ({args.dtype}), rel L2 vs diffusers' module {error:.2e}")


if __name__ == "__main__":
    main()
