#!/usr/bin/env python3
"""A diffusers transformer's attention on xstage: one line, model.set_attention_backend("xstage").

    python3 examples/diffusers/attention.py                                  # Flux.1 from its config, random weights
    python3 examples/diffusers/attention.py --model wan                       # any model of tools/dit/models.py
    python3 examples/diffusers/attention.py --pretrained black-forest-labs/FLUX.1-dev   # a checkpoint (downloads)

Runs one forward on diffusers' default backend (torch SDPA) and one on xstage, and prints how far apart they are.
"""

import argparse
import os
import sys

import torch

import xstage.diffusers  # noqa: F401  (registers the "xstage" attention backend with diffusers)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from dit import models as dit_models  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="flux", choices=dit_models.MODELS)
    p.add_argument("--pretrained", help="a Flux checkpoint (its transformer replaces the random one)")
    args = p.parse_args()
    model, inputs = dit_models.build(args.model, "full", "cuda")
    if args.pretrained:
        from diffusers import FluxTransformer2DModel

        model = FluxTransformer2DModel.from_pretrained(args.pretrained, subfolder="transformer", torch_dtype=torch.bfloat16).cuda()
    with torch.no_grad():
        reference = dit_models.output(model(**inputs)).float()

        model.set_attention_backend("xstage")  # the switch

        out = dit_models.output(model(**inputs)).float()
    print(f"{args.model}: rel L2 xstage vs diffusers' default attention {((out - reference).norm() / reference.norm()).item():.2e}")


if __name__ == "__main__":
    main()
