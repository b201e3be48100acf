#!/usr/bin/env python3
"""An MoE DiT from diffusers with its routed experts on xstage.nn.MoE, against the plain PyTorch path.

diffusers 0.42.1's HiDreamImageTransformer2DModel (HiDream-I1) has an MoE feed-forward in every block
(MOEFeedForwardSwiGLU: a softmax top-2 router over 4 SwiGLU experts, plus a shared expert). The model is
built from a config with random weights (no download) at HiDream-I1's real widths (20 heads x 128 = 2560,
expert inter 6912, T5 and Llama widths 4096) and a small depth (1 double-stream + 2 single-stream blocks), at
1024 x 1024 pixels: 4096 image tokens (+ 128 T5 + 2 x 128 Llama tokens in the single-stream blocks). Paths,
on the same inputs:

  torch       diffusers' own module (moe_infer: a loop over the experts, with a host synchronisation)
  xstage      every MOEFeedForwardSwiGLU replaced by XstageMoEFeedForward (below): the same router and shared
              expert, the routed experts one xstage.nn.MoE call (bf16)
  xstage-fp8  the same with the experts quantized once to fp8 W8A8 (e4m3, 128x128 weight scales)
  fp32        the torch path in float32: the yardstick for the errors of the bf16 paths

Under torchrun every rank runs the model on its own inputs (data parallel over images) with the routed experts
expert-parallel: rank r holds experts [r*E/P, (r+1)*E/P) (--experts must divide by P; HiDream-I1 has 4).
Reports the rel L2 of each path against fp32 and xstage against torch (largest over ranks), the median time
per forward (CUDA events, the paths taking turns; largest over ranks), as JSON (rank 0 writes --out).

    python3 examples/diffusers/dit_moe.py --out /tmp/dit_moe_ep1.json                            # EP = 1
    torchrun --standalone --nproc-per-node 2 examples/diffusers/dit_moe.py --out /tmp/dit_moe_ep2.json
    python3 examples/diffusers/dit_moe.py --device cpu --tiny --out /tmp/t.json   # CPU: torch paths and the swap check
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import diffusers
from diffusers import HiDreamImageTransformer2DModel
from diffusers.models.transformers.transformer_hidream_image import MOEFeedForwardSwiGLU

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from common.timing import time_in_turn  # noqa: E402  (tools/common/timing.py, shared with the tools)

TESTED_DIFFUSERS = "0.42.1"
PATHS = ("torch", "xstage", "xstage-fp8")


def moe_torch(x, ids, wts, w1, w2):
    """What xstage.moe computes, in plain torch (fp32 accumulation): the CPU check of XstageMoEFeedForward's
    weight layout. x [T, h]; ids [T, k] int32; wts [T, k] fp32; w1 [E, 2*inter, h] (gate rows, then up rows);
    w2 [E, h, inter]."""
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        y = x[t].float() @ w1[e].float().T
        out.index_add_(0, t, ((F.silu(y[:, :inter]) * y[:, inter:]) @ w2[e].float().T) * wts[t, j, None])
    return out.to(x.dtype)


class XstageMoEFeedForward(torch.nn.Module):
    """diffusers' MOEFeedForwardSwiGLU with its routed experts as one xstage.nn.MoE: the module's own router
    (gate) and shared expert; expert i's w1 (gate_proj) and w3 (up_proj) stacked as [w1; w3], w2 (down_proj)
    as it is. With P ranks this rank keeps experts [r*E/P, (r+1)*E/P)."""

    def __init__(self, ff: MOEFeedForwardSwiGLU, dtype, max_tokens, schedule, ranks=1, rank=0, impl="xstage"):
        super().__init__()
        self.gate, self.shared_experts, self.top_k = ff.gate, ff.shared_experts, ff.num_activated_experts
        experts = list(ff.experts)
        el = len(experts) // ranks
        mine = experts[rank * el : (rank + 1) * el]
        w1 = torch.stack([torch.cat([e.w1.weight, e.w3.weight], dim=0) for e in mine])
        w2 = torch.stack([e.w2.weight for e in mine])
        self.hidden = w2.shape[1]
        if impl == "xstage":
            import xstage

            self.moe = xstage.nn.MoE.from_weights(w1, w2, top_k=self.top_k, dtype=dtype, max_tokens=max_tokens, schedule=schedule)
        else:  # "torch": the same contract in plain torch (CPU check, one rank)
            self.register_buffer("w1", w1.clone())
            self.register_buffer("w2", w2.clone())
            self.moe = lambda x, ids, wts: moe_torch(x, ids, wts, self.w1, self.w2)

    def forward(self, x):
        topk_idx, topk_weight, _ = self.gate(x)
        y = self.moe(x.reshape(-1, self.hidden), topk_idx.to(torch.int32), topk_weight.float())
        return y.view(x.shape) + self.shared_experts(x)


def swap_moe(model, **kwargs):
    """Replaces every block's MOEFeedForwardSwiGLU; returns how many."""
    n = 0
    for stack in (model.double_stream_blocks, model.single_stream_blocks):
        for wrapper in stack:
            block = wrapper.block
            if isinstance(block.ff_i, MOEFeedForwardSwiGLU):
                block.ff_i = XstageMoEFeedForward(block.ff_i, **kwargs)
                n += 1
    return n


def setup(device_type):
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if device_type == "cuda" else torch.device("cpu")
    if device_type == "cuda":
        torch.cuda.set_device(local)
    backend = "nccl" if device_type == "cuda" else "gloo"
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group(backend, device_id=device if device_type == "cuda" else None)
    else:
        dist.init_process_group(backend, init_method=f"file://{tempfile.mkdtemp()}/store", rank=0, world_size=1)
    return device, dist.get_world_size(), dist.get_rank()


def rel_l2(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item()


def global_max(x, device):
    t = torch.tensor([x], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def make_inputs(args, device, dtype, seed):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    lat = args.resolution // 8
    return dict(
        hidden_states=randn(args.batch, 16, lat, lat),
        timesteps=torch.full((args.batch,), 500, device=device, dtype=torch.long),
        encoder_hidden_states_t5=randn(args.batch, args.t5_tokens, args.text_dim),
        encoder_hidden_states_llama3=randn(args.layers + args.single_layers, args.batch, args.llama_tokens, args.text_dim),
        pooled_embeds=randn(args.batch, 2048),
        return_dict=False,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--resolution", type=int, default=1024, help="square image, pixels (multiple of 16)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--layers", type=int, default=1, help="double-stream blocks (HiDream-I1: 16)")
    p.add_argument("--single-layers", type=int, default=2, help="single-stream blocks (HiDream-I1: 32)")
    p.add_argument("--heads", type=int, default=20)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--t5-tokens", type=int, default=128)
    p.add_argument("--llama-tokens", type=int, default=128)
    p.add_argument("--text-dim", type=int, default=4096)
    p.add_argument("--schedule", default="auto")
    p.add_argument("--paths", default=",".join(PATHS), help="comma-separated: " + ", ".join(PATHS))
    p.add_argument("--no-fp32-reference", action="store_true")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tiny", action="store_true", help="2 heads x 64 (inter 512), 1+1 blocks, 128 px, 8+8 text tokens")
    args = p.parse_args(argv)
    if args.tiny:
        args.heads, args.head_dim, args.layers, args.single_layers = 2, 64, 1, 1
        args.resolution, args.t5_tokens, args.llama_tokens, args.text_dim = 128, 8, 8, 64
        args.warmup, args.iters = 1, 2
    paths = [s.strip() for s in args.paths.split(",") if s.strip()]
    for s in paths:
        if s not in PATHS:
            p.error(f"unknown path {s!r} ({', '.join(PATHS)})")
    device, P, r = setup(torch.device(args.device).type)
    say = print if r == 0 else (lambda *a, **k: None)
    if args.experts % P:
        p.error(f"--experts {args.experts} must be a multiple of the {P} ranks")
    if device.type != "cuda" and any(s.startswith("xstage") for s in paths):
        say("dit_moe: the xstage paths need CUDA GPUs; on the CPU the swap runs with a plain-torch expert layer "
            "instead (a check of XstageMoEFeedForward's weights, router and shared expert)", file=sys.stderr)
        paths = [s for s in paths if not s.startswith("xstage")]
    if diffusers.__version__ != TESTED_DIFFUSERS:
        say(f"dit_moe: warning: diffusers {diffusers.__version__}; written for {TESTED_DIFFUSERS}", file=sys.stderr)

    torch.manual_seed(args.seed)  # the same weights on every rank
    rope = (args.head_dim // 2, args.head_dim // 4, args.head_dim // 4)  # HiDream-I1: (64, 32, 32)
    config = dict(patch_size=2, in_channels=16, num_layers=args.layers, num_single_layers=args.single_layers,
                  attention_head_dim=args.head_dim, num_attention_heads=args.heads, caption_channels=[args.text_dim] * 2,
                  text_emb_dim=2048, num_routed_experts=args.experts, num_activated_experts=args.top_k,
                  axes_dims_rope=rope, max_resolution=(128, 128), llama_layers=list(range(args.layers + args.single_layers)))
    t0 = time.perf_counter()
    with torch.device(device):
        model = HiDreamImageTransformer2DModel(**config)
    model.eval().requires_grad_(False)
    build_s = time.perf_counter() - t0
    image_tokens = (args.resolution // 16) ** 2
    single_tokens = image_tokens + args.t5_tokens + 2 * args.llama_tokens
    max_tokens = args.batch * single_tokens  # the most tokens one MoE call sees (single-stream blocks)
    ff = model.double_stream_blocks[0].block.ff_i
    inter = ff.experts[0].w1.weight.shape[0]
    say(f"HiDreamImageTransformer2DModel: {args.layers} + {args.single_layers} blocks, width {model.inner_dim}, "
        f"{args.experts} experts (top-{args.top_k}, inter {inter}) per block, {sum(t.numel() for t in model.parameters()) / 1e9:.2f} B "
        f"parameters (built in {build_s:.1f} s); MoE calls of {args.batch * image_tokens} and {max_tokens} tokens; EP = {P}")

    inputs = make_inputs(args, device, torch.float32, args.seed + 1 + r)  # every rank its own images
    to_bf16 = {k: (v.to(torch.bfloat16) if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in inputs.items()}
    outputs, forward_ms = {}, {}
    result = {"model": "HiDreamImageTransformer2DModel", "config": config, "expert_inter": inter, "ranks": P,
              "experts_per_rank": args.experts // P, "image_tokens": image_tokens, "moe_tokens_per_call": [args.batch * image_tokens, max_tokens],
              "schedule": args.schedule, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__},
              "timing": {"warmup": args.warmup, "iters": args.iters}, "command": " ".join([sys.executable] + sys.argv)}
    with torch.inference_mode():
        if not args.no_fp32_reference:
            outputs["fp32"] = model(**inputs)[0].float()
        if device.type == "cpu":
            # The swap with a plain-torch expert layer must reproduce diffusers' module (fp32, one rank's view).
            base = model(**inputs)[0].float()
            check = HiDreamImageTransformer2DModel(**config)
            check.load_state_dict(model.state_dict())
            check.eval().requires_grad_(False)
            swap_moe(check, dtype=None, max_tokens=max_tokens, schedule=args.schedule, impl="torch")
            result["swap_self_check_rel_l2"] = rel_l2(check(**inputs)[0].float(), base)
            say(f"XstageMoEFeedForward (plain-torch experts) vs diffusers' MOEFeedForwardSwiGLU: rel L2 {result['swap_self_check_rel_l2']:.2e}")
        model.to(torch.bfloat16)
        runs = {}
        if "torch" in paths:
            runs["torch"] = lambda: model(**to_bf16)
        for path in [s for s in paths if s.startswith("xstage")]:
            import xstage

            if not xstage.distributed.is_initialized():
                xstage.distributed.init()
            with torch.device(device):
                swapped = HiDreamImageTransformer2DModel(**config)  # same structure; the weights from model
            swapped.load_state_dict(model.state_dict())
            swapped.eval().requires_grad_(False).to(torch.bfloat16)
            dtype = torch.float8_e4m3fn if path == "xstage-fp8" else torch.bfloat16
            n = swap_moe(swapped, dtype=dtype, max_tokens=max_tokens, schedule=args.schedule, ranks=P, rank=r)
            say(f"{path}: {n} MoE feed-forwards on xstage.nn.MoE")
            runs[path] = lambda m=swapped: m(**to_bf16)
        for name, run in runs.items():
            outputs[name] = run()[0].float()
        forward_ms = time_in_turn(runs, args.iters, start="idle", warmup=args.warmup, device=device)

    errors = {}
    for name, out in outputs.items():
        if name != "fp32" and "fp32" in outputs:
            errors[f"{name}_vs_fp32"] = global_max(rel_l2(out, outputs["fp32"]), device)
        if not torch.isfinite(out).all():
            errors[f"{name}_nonfinite"] = True
    for name in ("xstage", "xstage-fp8"):
        if name in outputs and "torch" in outputs:
            errors[f"{name}_vs_torch"] = global_max(rel_l2(outputs[name], outputs["torch"]), device)
    times = {k: {"median": statistics.median(t.ms), "median_max_over_ranks": global_max(statistics.median(t.ms), device),
                 "samples": t.ms} for k, t in forward_ms.items()}
    speedup = {}
    if "torch" in times:
        for name in ("xstage", "xstage-fp8"):
            if name in times:
                speedup[f"{name}_over_torch"] = times["torch"]["median_max_over_ranks"] / times[name]["median_max_over_ranks"]
    result.update(rel_l2=errors, forward_ms=times, speedup=speedup)
    for name, t in times.items():
        say(f"{name:>11}: forward {t['median']:.2f} ms (median of {args.iters}; largest over ranks {t['median_max_over_ranks']:.2f})")
    for key, value in {**errors, **speedup}.items():
        say(f"{key}: {value}")
    if r == 0:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"wrote {args.out}")
    if any(s.startswith("xstage") for s in paths):
        import xstage

        xstage.distributed.teardown()
    dist.destroy_process_group()
    return 1 if any(k.endswith("_nonfinite") for k in errors) else 0


if __name__ == "__main__":
    sys.exit(main())
