#!/usr/bin/env python3
"""A diffusers transformer sequence-parallel over P GPUs on xstage's fused Ulysses attention: diffusers' own
context parallelism, model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=P)), with the "xstage"
backend. diffusers shards the inputs by the model's _cp_plan and gathers the output; each attention runs
xstage.ulysses_attention on the parallel config's process group, by the path xstage.diffusers.set_ulysses_path
chose (--path; default xstage.ulysses.DEFAULT_ULYSSES_PATH).

    torchrun --standalone --nproc-per-node 2 examples/diffusers/ulysses.py                # Flux.1, random weights
    torchrun --standalone --nproc-per-node 4 examples/diffusers/ulysses.py --model wan --path fused_both

Prints how far the P-GPU output is from the one-GPU output (diffusers' default attention).
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from diffusers import ContextParallelConfig

import xstage.diffusers  # noqa: F401  (registers the "xstage" attention backend with diffusers)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from dit import models as dit_models  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="flux", choices=["flux", "wan"])
    p.add_argument("--path", default=None, help="the Ulysses path: serial, fused_post or fused_both (default: xstage's)")
    args = p.parse_args()
    xstage.diffusers.set_ulysses_path(args.path)
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    dit_models.allow_context_parallel_warnings()
    model, inputs = dit_models.build(args.model, "full", "cuda")  # the same weights and inputs on every rank
    with torch.no_grad():
        reference = dit_models.output(model(**inputs)).float()

        model.set_attention_backend("xstage")
        model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=dist.get_world_size()))  # the switch

        out = dit_models.output(model(**inputs)).float()
    error = ((out - reference).norm() / reference.norm()).item()
    print(f"rank {dist.get_rank()}: {args.model} over {dist.get_world_size()} GPUs ({xstage.diffusers.ulysses_path()}), "
          f"rel L2 vs one GPU {error:.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
