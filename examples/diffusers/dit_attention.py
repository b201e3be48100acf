#!/usr/bin/env python3
"""A diffusers DiT with its attention computed by xstage.flash_attention, against PyTorch SDPA.

Builds diffusers' FluxTransformer2DModel from a config with random weights (no download): Flux's real widths
(24 heads x head_dim 128, 3072 wide, T5 width 4096) at a small depth (2 double-stream + 4 single-stream
blocks by default), at a resolution whose image sequence is >= 8192 tokens (1024 x 2048 pixels: 8192 image
tokens, plus 512 text tokens: every attention is [1, 8704, 24, 128]). Then, on the same inputs:

  sdpa    diffusers' own FluxAttnProcessor with the default attention backend ("native":
          torch.nn.functional.scaled_dot_product_attention)
  xstage  XstageFluxAttnProcessor (below), set with diffusers' set_attn_processor: the same processor with
          the attention call replaced by xstage.flash_attention, which takes diffusers' [batch, seq, heads,
          head_dim] tensors as they are (no transposes)

and reports the relative L2 error between the two outputs (and of each against an fp32 model with fp32
SDPA), the median time per forward (CUDA events, after warm-up, the backends taking turns so that both see the
same GPU clock), the same for one attention call alone, and writes everything as JSON to --out.

    python3 examples/diffusers/dit_attention.py --out dit_attention.json              # GPU machine
    python3 examples/diffusers/dit_attention.py --tiny --device cpu --out /tmp/t.json  # CPU: SDPA path only

diffusers 0.42.1 (the processor follows its FluxAttnProcessor). The attention backend registry of
diffusers.models.attention_dispatch keys backends by the closed enum AttentionBackendName, so a new backend
cannot be registered without patching diffusers; the attention-processor mechanism is the public one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import diffusers
from diffusers import FluxTransformer2DModel
from diffusers.models.attention_dispatch import _AttentionBackendRegistry
from diffusers.models.embeddings import apply_rotary_emb
from diffusers.models.transformers.transformer_flux import FluxAttnProcessor, _get_qkv_projections

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from common.timing import time_in_turn  # noqa: E402  (tools/common/timing.py, shared with the tools)

TESTED_DIFFUSERS = "0.42.1"


def xstage_attention(query, key, value):
    import xstage

    return xstage.flash_attention(query, key, value)


class XstageFluxAttnProcessor(FluxAttnProcessor):
    """diffusers 0.42.1's FluxAttnProcessor with the attention computed by xstage.flash_attention.

    `attention` takes and returns [batch, seq, heads, head_dim]; it is xstage.flash_attention unless another
    function is given (the CPU self-check gives SDPA, to show that this processor and diffusers' agree)."""

    def __init__(self, attention=xstage_attention):
        super().__init__()
        self.attention = attention

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None):
        if attention_mask is not None:
            raise ValueError("XstageFluxAttnProcessor: xstage.flash_attention takes no attention mask")
        query, key, value, encoder_query, encoder_key, encoder_value = _get_qkv_projections(
            attn, hidden_states, encoder_hidden_states
        )
        query = query.unflatten(-1, (-1, attn.head_dim))
        key = key.unflatten(-1, (-1, attn.head_dim))
        value = value.unflatten(-1, (-1, attn.head_dim))
        query = attn.norm_q(query)
        key = attn.norm_k(key)
        if attn.added_kv_proj_dim is not None:
            encoder_query = attn.norm_added_q(encoder_query.unflatten(-1, (-1, attn.head_dim)))
            encoder_key = attn.norm_added_k(encoder_key.unflatten(-1, (-1, attn.head_dim)))
            encoder_value = encoder_value.unflatten(-1, (-1, attn.head_dim))
            query = torch.cat([encoder_query, query], dim=1)
            key = torch.cat([encoder_key, key], dim=1)
            value = torch.cat([encoder_value, value], dim=1)
        if image_rotary_emb is not None:
            query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
            key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)

        hidden_states = self.attention(query, key, value)  # [batch, seq, heads, head_dim]
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)

        if encoder_hidden_states is not None:
            encoder_hidden_states, hidden_states = hidden_states.split_with_sizes(
                [encoder_hidden_states.shape[1], hidden_states.shape[1] - encoder_hidden_states.shape[1]], dim=1
            )
            hidden_states = attn.to_out[0](hidden_states.contiguous())
            hidden_states = attn.to_out[1](hidden_states)
            encoder_hidden_states = attn.to_add_out(encoder_hidden_states.contiguous())
            return hidden_states, encoder_hidden_states
        return hidden_states


def sdpa_bshd(query, key, value):
    """SDPA on [batch, seq, heads, head_dim] (as diffusers' native backend does it)."""
    out = F.scaled_dot_product_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))
    return out.transpose(1, 2)


def rope_axes(head_dim):
    """Flux's rotary split of head_dim over (text/index, row, column): (16, 56, 56) for 128."""
    first = head_dim // 8
    rest = (head_dim - first) // 2
    return (first, rest, head_dim - first - rest)


def make_inputs(args, device, dtype, generator):
    lat_h, lat_w = args.height // 16, args.width // 16  # VAE /8, then Flux packs 2x2 latent patches
    image_tokens = lat_h * lat_w
    ids = torch.zeros(lat_h, lat_w, 3)
    ids[..., 1] = torch.arange(lat_h)[:, None]
    ids[..., 2] = torch.arange(lat_w)[None, :]

    def randn(*shape):
        return torch.randn(*shape, generator=generator, device="cpu").to(device=device, dtype=dtype)

    inputs = dict(
        hidden_states=randn(args.batch, image_tokens, 64),
        encoder_hidden_states=randn(args.batch, args.text_tokens, args.joint_dim),
        pooled_projections=randn(args.batch, args.pooled_dim),
        timestep=torch.full((args.batch,), 0.5, device=device, dtype=dtype),
        guidance=torch.full((args.batch,), 3.5, device=device, dtype=dtype),
        img_ids=ids.reshape(image_tokens, 3).to(device=device, dtype=dtype),
        txt_ids=torch.zeros(args.text_tokens, 3, device=device, dtype=dtype),
        return_dict=False,
    )
    return inputs, image_tokens


def cast_inputs(inputs, dtype):
    return {k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in inputs.items()}


def rel_l2(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON result file")
    p.add_argument("--device", default="cuda")
    p.add_argument("--height", type=int, default=1024, help="image height in pixels (multiple of 16)")
    p.add_argument("--width", type=int, default=2048, help="image width in pixels (multiple of 16)")
    p.add_argument("--text-tokens", type=int, default=512)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--layers", type=int, default=2, help="double-stream (MMDiT) blocks")
    p.add_argument("--single-layers", type=int, default=4, help="single-stream blocks")
    p.add_argument("--heads", type=int, default=24)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--joint-dim", type=int, default=4096, help="text encoder width (T5-XXL: 4096)")
    p.add_argument("--pooled-dim", type=int, default=768)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backends", default="sdpa,xstage", help="comma-separated: sdpa, xstage")
    p.add_argument("--no-fp32-reference", action="store_true", help="skip the fp32 model (saves memory and time)")
    p.add_argument("--tiny", action="store_true",
                   help="a small config for a CPU check: 1+1 blocks, 2 heads, 128x128 pixels, 8 text tokens")
    args = p.parse_args(argv)
    if args.tiny:
        args.layers, args.single_layers, args.heads = 1, 1, 2
        args.joint_dim, args.pooled_dim, args.text_tokens = 64, 32, 8
        args.height = args.width = 128
        args.warmup, args.iters = 1, 2
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in ("sdpa", "xstage"):
            p.error(f"unknown backend {b!r} (sdpa, xstage)")
    if args.height % 16 or args.width % 16:
        p.error("--height and --width must be multiples of 16")
    device = torch.device(args.device)
    if device.type != "cuda" and "xstage" in backends:
        print("dit_attention: xstage needs a CUDA GPU; running the SDPA path only", file=sys.stderr)
        backends.remove("xstage")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("dit_attention: no CUDA GPU (use --device cpu --tiny for the CPU check)")
    if diffusers.__version__ != TESTED_DIFFUSERS:
        print(f"dit_attention: warning: diffusers {diffusers.__version__}; the processor follows {TESTED_DIFFUSERS}",
              file=sys.stderr)

    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    config = dict(
        patch_size=1,
        in_channels=64,
        num_layers=args.layers,
        num_single_layers=args.single_layers,
        attention_head_dim=args.head_dim,
        num_attention_heads=args.heads,
        joint_attention_dim=args.joint_dim,
        pooled_projection_dim=args.pooled_dim,
        guidance_embeds=True,
        axes_dims_rope=rope_axes(args.head_dim),
    )
    t0 = time.perf_counter()
    with torch.device(device):
        model = FluxTransformer2DModel(**config)  # random weights, initialised on the device
    model.eval().requires_grad_(False)
    build_s = time.perf_counter() - t0
    params = sum(t.numel() for t in model.parameters())
    inputs, image_tokens = make_inputs(args, device, torch.float32, generator)
    seq = image_tokens + args.text_tokens
    print(f"FluxTransformer2DModel: {args.layers} + {args.single_layers} blocks, {args.heads} x {args.head_dim} heads, "
          f"{params / 1e9:.2f} B parameters (built in {build_s:.1f} s); attention [{args.batch}, {seq}, {args.heads}, "
          f"{args.head_dim}] ({image_tokens} image + {args.text_tokens} text tokens)")

    result = {
        "model": "FluxTransformer2DModel",
        "config": config,
        "parameters": params,
        "batch": args.batch,
        "image_pixels": [args.height, args.width],
        "image_tokens": image_tokens,
        "text_tokens": args.text_tokens,
        "attention_shape_bshd": [args.batch, seq, args.heads, args.head_dim],
        "attention_calls_per_forward": args.layers + args.single_layers,
        "dtype": "bfloat16",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "diffusers": diffusers.__version__},
        "sdpa_backend": str(_AttentionBackendRegistry.get_active_backend()[0].value),
        "timing": {"warmup": args.warmup, "iters": args.iters, "method": ("CUDA events" if device.type == "cuda" else "perf_counter") + ", backends in turn per iteration"},
        "command": " ".join([sys.executable] + sys.argv),
    }
    if "xstage" in backends:
        import xstage

        result["versions"]["xstage"] = xstage.__version__
        result["versions"]["xstage_library"] = xstage.library_path()

    outputs = {}
    with torch.inference_mode():
        if not args.no_fp32_reference:
            model.set_attn_processor(FluxAttnProcessor())
            outputs["fp32"] = model(**inputs)[0].float()
        model.to(torch.bfloat16)
        inputs_bf16 = cast_inputs(inputs, torch.bfloat16)
        processors = {name: FluxAttnProcessor() if name == "sdpa" else XstageFluxAttnProcessor() for name in backends}
        for name in backends:
            model.set_attn_processor(processors[name])
            outputs[name] = model(**inputs_bf16)[0].float()
        timed = time_in_turn({name: lambda: model(**inputs_bf16) for name in backends}, args.iters, start="idle",
                             warmup=args.warmup, device=device,
                             prepare={name: (lambda p=processors[name]: model.set_attn_processor(p)) for name in backends})
        forward_ms = {name: {"median": statistics.median(t.ms), "samples": t.ms} for name, t in timed.items()}
        for name, t in forward_ms.items():
            print(f"{name:>6}: forward {t['median']:.2f} ms (median of {args.iters}, backends in turn)")
        if device.type == "cpu":
            # The processor against diffusers' own, both on SDPA: they must agree (no GPU needed).
            model.set_attn_processor(XstageFluxAttnProcessor(attention=sdpa_bshd))
            check = model(**inputs_bf16)[0].float()
            model.set_attn_processor(FluxAttnProcessor())
            base = model(**inputs_bf16)[0].float()
            result["processor_self_check_rel_l2"] = rel_l2(check, base)
            print(f"XstageFluxAttnProcessor with SDPA vs FluxAttnProcessor: rel L2 {result['processor_self_check_rel_l2']:.2e}")

        # One attention call of the model's shape, alone.
        g = torch.Generator(device="cpu").manual_seed(args.seed + 1)
        q, k, v = (torch.randn(args.batch, seq, args.heads, args.head_dim, generator=g).to(device, torch.bfloat16)
                   for _ in range(3))
        calls = {"sdpa": lambda: sdpa_bshd(q, k, v), "xstage": lambda: xstage_attention(q, k, v)}
        timed = time_in_turn({name: calls[name] for name in backends}, max(args.iters, 20), start="idle", warmup=args.warmup,
                             device=device)
        flops = 4 * args.batch * args.heads * seq * seq * args.head_dim
        attention_ms = {}
        for name, t in timed.items():
            median = statistics.median(t.ms)
            attention_ms[name] = {"median": median, "samples": t.ms, "tflops": flops / (median * 1e-3) / 1e12}
            print(f"{name:>6}: one attention {median:.3f} ms ({attention_ms[name]['tflops']:.0f} TFLOP/s)")

    errors = {}
    if "sdpa" in outputs and "xstage" in outputs:
        errors["xstage_vs_sdpa"] = rel_l2(outputs["xstage"], outputs["sdpa"])
    for name in backends:
        if "fp32" in outputs:
            errors[f"{name}_vs_fp32"] = rel_l2(outputs[name], outputs["fp32"])
    for name, out in outputs.items():
        if not torch.isfinite(out).all():
            errors[f"{name}_nonfinite"] = True
    result.update(rel_l2=errors, forward_ms=forward_ms, attention_ms=attention_ms)
    if "sdpa" in forward_ms and "xstage" in forward_ms:
        result["forward_speedup_xstage_over_sdpa"] = forward_ms["sdpa"]["median"] / forward_ms["xstage"]["median"]
        result["attention_speedup_xstage_over_sdpa"] = attention_ms["sdpa"]["median"] / attention_ms["xstage"]["median"]
    for key, value in errors.items():
        print(f"rel L2 {key}: {value}")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}")
    bad = [k for k, v in errors.items() if v is True or (isinstance(v, float) and not math.isfinite(v))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
