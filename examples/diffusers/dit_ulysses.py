#!/usr/bin/env python3
"""A diffusers DiT sequence-parallel over P GPUs with xstage.ulysses_attention, against the same model on one GPU
and against diffusers' own context-parallel Ulysses.

The model is dit_attention.py's FluxTransformer2DModel (random weights from a config, no download; Flux's real
widths, 2 + 4 blocks, 1024 x 2048 pixels: 8192 image + 512 text tokens, attention [1, 8704, 24, 128]), built
identically on every rank. Run with torchrun, one process per GPU (any P that divides 24 heads and both token
counts), or as a plain script (P = 1). Paths, all on the same bf16 model and inputs:

  reference        the whole model on one GPU (every rank computes it), diffusers' FluxAttnProcessor on SDPA
  xstage           sequence-parallel: each rank runs the model on its 1/P of the image and text tokens (and
                   their position ids), every attention is xstage.ulysses_attention over the P ranks (fused
                   all-to-all epilogue), the output is all-gathered; XstageFluxAttnProcessor from
                   dit_attention.py with the attention call replaced
  xstage-serial    the same with the serial Ulysses path (NCCL all-to-all, attention, NCCL all-to-all)
  torch-a2a        the same sharding, the same processor, attention = torch.distributed.all_to_all_single +
                   SDPA + all_to_all_single (what a hand-written Ulysses in PyTorch does)
  diffusers        diffusers 0.42.1's own context parallelism: model.enable_parallelism(config=
                   ContextParallelConfig(ulysses_degree=P)) with the native (SDPA) backend: its hooks shard the
                   inputs by the model's _cp_plan and gather the output, its TemplatedUlyssesAttention runs the
                   all-to-alls over a device mesh (P > 1 only; it changes the model, so it runs last)

For each: rel L2 of the output against the reference (the largest over ranks) and the median time per forward
(CUDA events; the largest median over ranks; the backends take turns, except diffusers' own, whose
enable_parallelism cannot be undone and which is timed after them), as JSON (rank 0 writes --out).

    python3 examples/diffusers/dit_ulysses.py --out /tmp/dit_ulysses_p1.json                      # one GPU
    torchrun --standalone --nproc-per-node 2 examples/diffusers/dit_ulysses.py --out /tmp/dit_ulysses_p2.json
    torchrun --standalone --nproc-per-node 2 examples/diffusers/dit_ulysses.py --device cpu --tiny \\
        --out /tmp/t.json                 # CPU check (gloo): the reference and torch-a2a paths only
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import diffusers  # noqa: E402
from diffusers import FluxTransformer2DModel  # noqa: E402
from diffusers.models.transformers.transformer_flux import FluxAttnProcessor  # noqa: E402

from dit_attention import TESTED_DIFFUSERS, XstageFluxAttnProcessor, cast_inputs, make_inputs, rel_l2, rope_axes  # noqa: E402
from common.timing import time_in_turn  # noqa: E402  (tools/common/timing.py, shared with the tools)

BACKENDS = ("reference", "xstage", "xstage-serial", "torch-a2a", "diffusers")


def setup(device_type):
    """The process group: torchrun's (NCCL on GPUs, gloo on the CPU), or a world of one."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    backend = "nccl" if device_type == "cuda" else "gloo"
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group(backend, device_id=device if device_type == "cuda" else None)
    else:
        store = os.path.join(tempfile.mkdtemp(), "store")
        dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    return device, dist.get_world_size(), dist.get_rank()


def ulysses_torch(query, key, value):
    """Ulysses with torch: [B, S/P, H, D] per rank -> all-to-all to [B, S, H/P, D], SDPA, all-to-all back."""
    P = dist.get_world_size()
    b, s, h, d = query.shape
    hp = h // P

    def to_heads(x):  # [B, S/P, P, H/P, D] -> chunk j to rank j -> [P (source), B, S/P, H/P, D] -> [B, S, H/P, D]
        x = x.reshape(b, s, P, hp, d).permute(2, 0, 1, 3, 4).contiguous()
        y = torch.empty_like(x)
        dist.all_to_all_single(y, x)
        return y.permute(1, 0, 2, 3, 4).reshape(b, P * s, hp, d)

    q, k, v = (to_heads(t) for t in (query, key, value))
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    x = out.reshape(b, P, s, hp, d).permute(1, 0, 2, 3, 4).contiguous()  # chunk j (rows of rank j) to rank j
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x)
    return y.permute(1, 2, 0, 3, 4).reshape(b, s, h, d)  # [source = head block, B, S/P, H/P, D] -> [B, S/P, H, D]


def ulysses_xstage(fused):
    import xstage

    def attention(query, key, value):
        return xstage.ulysses_attention(query.contiguous(), key.contiguous(), value.contiguous(), fused=fused)

    return attention


def sharded_forward(model, inputs, P, r):
    """The model on this rank's 1/P of the image and text tokens; the image output all-gathered: what the
    model's _cp_plan does (hidden_states, encoder_hidden_states, img_ids, txt_ids split along the sequence)."""
    si = inputs["hidden_states"].shape[1] // P
    st = inputs["encoder_hidden_states"].shape[1] // P
    local = dict(inputs)
    local["hidden_states"] = inputs["hidden_states"][:, r * si : (r + 1) * si]
    local["encoder_hidden_states"] = inputs["encoder_hidden_states"][:, r * st : (r + 1) * st]
    local["img_ids"] = inputs["img_ids"][r * si : (r + 1) * si]
    local["txt_ids"] = inputs["txt_ids"][r * st : (r + 1) * st]
    out = model(**local)[0].contiguous()
    if P == 1:
        return out
    parts = [torch.empty_like(out) for _ in range(P)]
    dist.all_gather(parts, out)
    return torch.cat(parts, dim=1)


def global_max(x, device):
    t = torch.tensor([x], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON result file (rank 0)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--height", type=int, default=1024)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--text-tokens", type=int, default=512)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--single-layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=24)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--joint-dim", type=int, default=4096)
    p.add_argument("--pooled-dim", type=int, default=768)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: " + ", ".join(BACKENDS))
    p.add_argument("--tiny", action="store_true", help="1+1 blocks, 2 heads x 64, 128x128 pixels, 16 text tokens")
    args = p.parse_args(argv)
    if args.tiny:
        args.layers, args.single_layers, args.heads, args.head_dim = 1, 1, 2, 64
        args.joint_dim, args.pooled_dim, args.text_tokens = 64, 32, 16
        args.height = args.width = 128
        args.warmup, args.iters = 1, 2
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in BACKENDS:
            p.error(f"unknown backend {b!r} ({', '.join(BACKENDS)})")
    if "reference" not in backends:
        backends.insert(0, "reference")
    device, P, r = setup(torch.device(args.device).type)
    say = print if r == 0 else (lambda *a, **k: None)
    if device.type != "cuda":
        dropped = [b for b in backends if b.startswith("xstage")]
        if dropped:
            say(f"dit_ulysses: {', '.join(dropped)} need CUDA GPUs; skipped on the CPU", file=sys.stderr)
            backends = [b for b in backends if b not in dropped]
    if device.type != "cuda" and "diffusers" in backends:
        say("dit_ulysses: diffusers' context parallelism needs an accelerator (its mesh is placed on "
            "torch.accelerator devices); skipped on the CPU", file=sys.stderr)
        backends.remove("diffusers")
    if P == 1 and "diffusers" in backends:
        say("dit_ulysses: diffusers' context parallelism needs P > 1; skipped", file=sys.stderr)
        backends.remove("diffusers")
    image_tokens = (args.height // 16) * (args.width // 16)
    if args.heads % P or image_tokens % P or args.text_tokens % P:
        p.error(f"P = {P} must divide the heads ({args.heads}), image tokens ({image_tokens}) and text tokens ({args.text_tokens})")
    if diffusers.__version__ != TESTED_DIFFUSERS:
        say(f"dit_ulysses: warning: diffusers {diffusers.__version__}; written for {TESTED_DIFFUSERS}", file=sys.stderr)

    torch.manual_seed(args.seed)  # the same weights and inputs on every rank
    config = dict(patch_size=1, in_channels=64, num_layers=args.layers, num_single_layers=args.single_layers,
                  attention_head_dim=args.head_dim, num_attention_heads=args.heads, joint_attention_dim=args.joint_dim,
                  pooled_projection_dim=args.pooled_dim, guidance_embeds=True, axes_dims_rope=rope_axes(args.head_dim))
    t0 = time.perf_counter()
    with torch.device(device):
        model = FluxTransformer2DModel(**config)
    model.eval().requires_grad_(False).to(torch.bfloat16)
    inputs, _ = make_inputs(args, device, torch.float32, torch.Generator().manual_seed(args.seed))
    inputs = cast_inputs(inputs, torch.bfloat16)
    seq = image_tokens + args.text_tokens
    say(f"FluxTransformer2DModel {args.layers} + {args.single_layers} blocks, attention [{args.batch}, {seq}, {args.heads}, "
        f"{args.head_dim}] ({image_tokens} image + {args.text_tokens} text tokens), built in {time.perf_counter() - t0:.1f} s; "
        f"P = {P} ({dist.get_backend()})")

    if any(b.startswith("xstage") for b in backends):
        import xstage

        xstage.distributed.init()

    outputs, runs, prepare = {}, {}, {}
    with torch.inference_mode():
        for name in backends:
            if name == "reference":
                processor = FluxAttnProcessor()
                run = lambda: model(**inputs)[0]  # noqa: E731
            elif name == "diffusers":
                continue  # enable_parallelism cannot be undone: timed alone, after the others
            else:
                attention = {"xstage": ulysses_xstage(True), "xstage-serial": ulysses_xstage(False), "torch-a2a": ulysses_torch}[name]
                processor = XstageFluxAttnProcessor(attention=attention)
                run = lambda: sharded_forward(model, inputs, P, r)  # noqa: E731
            prepare[name] = lambda p=processor: model.set_attn_processor(p)
            prepare[name]()
            outputs[name], runs[name] = run().float(), run
        timed = time_in_turn(runs, args.iters, start="idle", warmup=args.warmup, prepare=prepare, device=device)
        if "diffusers" in backends:
            from diffusers import ContextParallelConfig

            model.set_attn_processor(FluxAttnProcessor())
            model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=P))
            run = lambda: model(**inputs)[0]  # noqa: E731
            outputs["diffusers"] = run().float()
            timed.update(time_in_turn({"diffusers": run}, args.iters, start="idle", warmup=args.warmup, device=device))
        forward_ms = {}
        for name in backends:
            median, samples = statistics.median(timed[name].ms), timed[name].ms
            forward_ms[name] = {"median": median, "median_max_over_ranks": global_max(median, device), "samples": samples}
            say(f"{name:>14}: forward {median:.2f} ms (median of {args.iters}, rank 0)")

    errors = {}
    for name, out in outputs.items():
        if name != "reference":
            errors[f"{name}_vs_reference"] = global_max(rel_l2(out, outputs["reference"]), device)
        if not torch.isfinite(out).all():
            errors[f"{name}_nonfinite"] = True
    if "xstage" in outputs and "diffusers" in outputs:
        errors["xstage_vs_diffusers"] = global_max(rel_l2(outputs["xstage"], outputs["diffusers"]), device)
    if "xstage" in outputs and "xstage-serial" in outputs:
        errors["xstage_fused_equals_serial"] = bool(torch.equal(outputs["xstage"], outputs["xstage-serial"]))
    speedups = {}
    ref = forward_ms["reference"]["median_max_over_ranks"]
    for name, t in forward_ms.items():
        if name != "reference":
            speedups[f"{name}_over_one_gpu"] = ref / t["median_max_over_ranks"]
    if "diffusers" in forward_ms:
        for name in ("xstage", "xstage-serial", "torch-a2a"):
            if name in forward_ms:
                speedups[f"{name}_over_diffusers"] = forward_ms["diffusers"]["median_max_over_ranks"] / forward_ms[name]["median_max_over_ranks"]
    result = {
        "model": "FluxTransformer2DModel",
        "config": config,
        "ranks": P,
        "process_group_backend": dist.get_backend(),
        "batch": args.batch,
        "image_tokens": image_tokens,
        "text_tokens": args.text_tokens,
        "attention_shape_bshd_whole": [args.batch, seq, args.heads, args.head_dim],
        "attention_shape_bshd_per_rank": [args.batch, seq // P, args.heads, args.head_dim],
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__,
                     "nccl": ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None},
        "timing": {"warmup": args.warmup, "iters": args.iters, "method": "CUDA events" if device.type == "cuda" else "perf_counter"},
        "rel_l2": errors,
        "forward_ms": forward_ms,
        "speedup": speedups,
        "command": " ".join([sys.executable] + sys.argv),
    }
    for key, value in {**errors, **speedups}.items():
        say(f"{key}: {value}")
    if r == 0:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"wrote {args.out}")
    if any(b.startswith("xstage") for b in backends):
        import xstage

        xstage.distributed.teardown()
    dist.destroy_process_group()
    bad = [k for k, v in errors.items() if k.endswith("_nonfinite")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
