"""diffusers transformers built from configs in code (random weights, nothing downloaded) and inputs for one
forward: what tools/dit/bench.py times, examples/diffusers/ run and tests/python/test_diffusers*.py trace on
meta tensors.

Each model has two sizes: "full" (the published model's widths and depth at a generation shape: the
measurements) and "tiny" (the same architecture, a few blocks and narrow widths, 4 heads for the models run
sequence-parallel over 4 ranks: the CPU tests). Every builder
returns (model, inputs) with the model in eval mode, no gradients, in `dtype` on `device` ("meta": no memory).

    flux         Flux.1 [dev]: 19 + 38 blocks, 24 heads x 128, 1024 x 1024 px (4096 image + 512 text tokens)
    wan          Wan 2.1 T2V 1.3B: 30 blocks, 12 heads x 128, self-attention over 480p x 81 frames (32760
                 tokens) and cross-attention to 512 text tokens
    qwenimage    Qwen-Image: 60 blocks, 24 heads x 128, 1024 x 1024 px, text padded (mask: 180 of 256 tokens
                 kept in one sequence, 256 in the other of a batch of 2)
    ltx          LTX-Video: 28 blocks, 32 heads x 64 (head_dim 64), 768 x 512 px x 121 frames (6144 tokens),
                 cross-attention to 128 text tokens with a padding mask
    hunyuanvideo HunyuanVideo: 20 + 40 blocks, 24 heads x 128, 544 x 960 px x 61 frames (32640 tokens) + 256
                 text tokens (mask: 200 kept)
    sd3          Stable Diffusion 3 medium: 24 blocks, 24 heads x 64, 1024 x 1024 px (its JointAttnProcessor2_0
                 calls SDPA itself: set_attention_backend does not reach it in diffusers 0.42)
    hidream      HiDream-I1: 16 + 32 blocks, 20 heads x 128, MoE feed-forwards (4 experts, top-2), 1024 x 1024 px
"""

from __future__ import annotations

import contextlib

import torch

MODELS = ("flux", "wan", "qwenimage", "ltx", "hunyuanvideo", "sd3", "hidream")


@contextlib.contextmanager
def _building(device, dtype):
    """Parameters made directly in dtype on device (a 20 B-parameter model never exists in fp32)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


def _finish(model, device, dtype):
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def _randn(g, shape, device, dtype):
    return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)


def _flux_ids(h, w, txt, device):
    img = torch.zeros(h, w, 3)
    img[..., 1] = torch.arange(h)[:, None]
    img[..., 2] = torch.arange(w)[None, :]
    return img.reshape(h * w, 3).to(device), torch.zeros(txt, 3, device=device)


def flux(size, device, dtype, seed=0):
    from diffusers import FluxTransformer2DModel

    full = size == "full"
    cfg = dict(patch_size=1, in_channels=64, num_layers=19 if full else 1, num_single_layers=38 if full else 1,
               attention_head_dim=128, num_attention_heads=24 if full else 4, joint_attention_dim=4096 if full else 64,
               pooled_projection_dim=768 if full else 32, guidance_embeds=True, axes_dims_rope=(16, 56, 56))
    with _building(device, dtype):
        model = _finish(FluxTransformer2DModel(**cfg), device, dtype)
    side, txt = (64, 512) if full else (8, 16)  # latent 2x2 patches per side: 1024 px -> 64
    g = torch.Generator().manual_seed(seed)
    img_ids, txt_ids = _flux_ids(side, side, txt, device)
    inputs = dict(hidden_states=_randn(g, (1, side * side, 64), device, dtype),
                  encoder_hidden_states=_randn(g, (1, txt, cfg["joint_attention_dim"]), device, dtype),
                  pooled_projections=_randn(g, (1, cfg["pooled_projection_dim"]), device, dtype),
                  timestep=torch.full((1,), 0.5, device=device, dtype=dtype), img_ids=img_ids, txt_ids=txt_ids,
                  guidance=torch.full((1,), 3.5, device=device, dtype=dtype))
    return model, inputs


def wan(size, device, dtype, seed=0):
    from diffusers import WanTransformer3DModel

    full = size == "full"
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=12 if full else 4, attention_head_dim=128, in_channels=16,
               out_channels=16, text_dim=4096 if full else 64, freq_dim=256, ffn_dim=8960 if full else 256,
               num_layers=30 if full else 1, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
               rope_max_seq_len=1024)
    with _building(device, dtype):
        model = _finish(WanTransformer3DModel(**cfg), device, dtype)
    frames, h, w, txt = (21, 60, 104, 512) if full else (2, 8, 8, 16)  # 480 x 832 px, 81 frames: 21 x 30 x 52 tokens
    g = torch.Generator().manual_seed(seed)
    inputs = dict(hidden_states=_randn(g, (1, 16, frames, h, w), device, dtype),
                  timestep=torch.full((1,), 500, device=device, dtype=torch.long),
                  encoder_hidden_states=_randn(g, (1, txt, cfg["text_dim"]), device, dtype))
    return model, inputs


def qwenimage(size, device, dtype, seed=0):
    from diffusers import QwenImageTransformer2DModel

    full = size == "full"
    cfg = dict(patch_size=2, in_channels=64, out_channels=16, num_layers=60 if full else 1, attention_head_dim=128,
               num_attention_heads=24 if full else 2, joint_attention_dim=3584 if full else 64, axes_dims_rope=(16, 56, 56))
    with _building(device, dtype):
        model = _finish(QwenImageTransformer2DModel(**cfg), device, dtype)
    side, txt, kept = (64, 256, 180) if full else (8, 16, 11)
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(2, txt, dtype=torch.bool)
    mask[0, kept:] = False  # the first prompt is shorter: its text is padded
    inputs = dict(hidden_states=_randn(g, (2, side * side, 64), device, dtype),
                  encoder_hidden_states=_randn(g, (2, txt, cfg["joint_attention_dim"]), device, dtype),
                  encoder_hidden_states_mask=mask.to(device),
                  timestep=torch.full((2,), 0.5, device=device, dtype=dtype), img_shapes=[[(1, side, side)]] * 2)
    return model, inputs


def ltx(size, device, dtype, seed=0):
    from diffusers import LTXVideoTransformer3DModel

    full = size == "full"
    cfg = dict(in_channels=128, out_channels=128, patch_size=1, patch_size_t=1, num_attention_heads=32 if full else 2,
               attention_head_dim=64, cross_attention_dim=2048 if full else 128, num_layers=28 if full else 1,
               caption_channels=4096 if full else 64, qk_norm="rms_norm_across_heads")
    with _building(device, dtype):
        model = _finish(LTXVideoTransformer3DModel(**cfg), device, dtype)
    frames, h, w, txt, kept = (16, 16, 24, 128, 90) if full else (2, 4, 4, 16, 9)
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(1, txt, dtype=torch.long)
    mask[0, kept:] = 0
    inputs = dict(hidden_states=_randn(g, (1, frames * h * w, 128), device, dtype),
                  encoder_hidden_states=_randn(g, (1, txt, cfg["caption_channels"]), device, dtype),
                  timestep=torch.full((1,), 500, device=device, dtype=torch.long), encoder_attention_mask=mask.to(device),
                  num_frames=frames, height=h, width=w, rope_interpolation_scale=(20 / 25, 32, 32))
    return model, inputs


def hunyuanvideo(size, device, dtype, seed=0):
    from diffusers import HunyuanVideoTransformer3DModel

    full = size == "full"
    cfg = dict(in_channels=16, out_channels=16, num_attention_heads=24 if full else 2, attention_head_dim=128,
               num_layers=20 if full else 1, num_single_layers=40 if full else 1, num_refiner_layers=2 if full else 1,
               mlp_ratio=4.0, patch_size=2, patch_size_t=1, qk_norm="rms_norm", guidance_embeds=True,
               text_embed_dim=4096 if full else 64, pooled_projection_dim=768 if full else 32, rope_theta=256.0,
               rope_axes_dim=(16, 56, 56))
    with _building(device, dtype):
        model = _finish(HunyuanVideoTransformer3DModel(**cfg), device, dtype)
    frames, h, w, txt, kept = (16, 68, 120, 256, 200) if full else (2, 8, 8, 16, 11)
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(1, txt, dtype=torch.long)
    mask[0, kept:] = 0
    inputs = dict(hidden_states=_randn(g, (1, 16, frames, h, w), device, dtype),
                  timestep=torch.full((1,), 500, device=device, dtype=torch.long),
                  encoder_hidden_states=_randn(g, (1, txt, cfg["text_embed_dim"]), device, dtype),
                  encoder_attention_mask=mask.to(device),
                  pooled_projections=_randn(g, (1, cfg["pooled_projection_dim"]), device, dtype),
                  guidance=torch.full((1,), 6000.0, device=device, dtype=dtype))
    return model, inputs


def sd3(size, device, dtype, seed=0):
    from diffusers import SD3Transformer2DModel

    full = size == "full"
    cfg = dict(sample_size=128, patch_size=2, in_channels=16, num_layers=24 if full else 1, attention_head_dim=64,
               num_attention_heads=24 if full else 2, joint_attention_dim=4096 if full else 64,
               caption_projection_dim=1536 if full else 128, pooled_projection_dim=2048 if full else 32, out_channels=16,
               pos_embed_max_size=192 if full else 16)
    with _building(device, dtype):
        model = _finish(SD3Transformer2DModel(**cfg), device, dtype)
    side, txt = (128, 333) if full else (16, 16)
    g = torch.Generator().manual_seed(seed)
    inputs = dict(hidden_states=_randn(g, (1, 16, side, side), device, dtype),
                  encoder_hidden_states=_randn(g, (1, txt, cfg["joint_attention_dim"]), device, dtype),
                  pooled_projections=_randn(g, (1, cfg["pooled_projection_dim"]), device, dtype),
                  timestep=torch.full((1,), 500, device=device, dtype=torch.long))
    return model, inputs


def hidream(size, device, dtype, seed=0):
    from diffusers import HiDreamImageTransformer2DModel

    full = size == "full"
    layers, single = (16, 32) if full else (1, 1)
    heads, text = (20, 4096) if full else (2, 64)
    cfg = dict(patch_size=2, in_channels=16, num_layers=layers, num_single_layers=single, attention_head_dim=128 if full else 64,
               num_attention_heads=heads, caption_channels=[text, text], text_emb_dim=2048 if full else 64,
               num_routed_experts=4, num_activated_experts=2, axes_dims_rope=(64, 32, 32) if full else (32, 16, 16),
               max_resolution=(128, 128), llama_layers=list(range(layers + single)))
    with _building(device, dtype):
        model = _finish(HiDreamImageTransformer2DModel(**cfg), device, dtype)
    lat, t5, llama = (128, 128, 128) if full else (16, 8, 8)
    g = torch.Generator().manual_seed(seed)
    inputs = dict(hidden_states=_randn(g, (1, 16, lat, lat), device, dtype),
                  timesteps=torch.full((1,), 500, device=device, dtype=torch.long),
                  encoder_hidden_states_t5=_randn(g, (1, t5, text), device, dtype),
                  encoder_hidden_states_llama3=_randn(g, (layers + single, 1, llama, text), device, dtype),
                  pooled_embeds=_randn(g, (1, cfg["text_emb_dim"]), device, dtype))
    return model, inputs


def allow_context_parallel_warnings():
    """diffusers 0.42.1's context-parallel hook logs an input it leaves unsplit (Wan 2.1's one timestep per
    sample) with logger.warning_once, which its logger lacks: the call raises AttributeError instead of warning.
    This gives the logger that method (a plain warning), so the hook does what it means to."""
    from diffusers.hooks import context_parallel

    logger = context_parallel.logger
    if not hasattr(logger, "warning_once"):
        logger.warning_once = logger.warning


def build(name, size="full", device="cuda", dtype=torch.bfloat16, seed=0):
    """(model, inputs) of MODELS' `name`; the same seed gives the same weights and inputs."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; one of {', '.join(MODELS)}")
    torch.manual_seed(seed)
    return globals()[name](size, torch.device(device), dtype, seed)


def output(result) -> torch.Tensor:
    """The sample tensor of a diffusers transformer's return value."""
    return result.sample if hasattr(result, "sample") else result[0]


def dispatches(model) -> tuple:
    """(attention modules whose processor goes through diffusers' backend registry, attention modules): a
    dispatching processor carries _attention_backend, what set_attention_backend sets."""
    from diffusers.models.attention import AttentionModuleMixin
    from diffusers.models.attention_processor import Attention

    processors = [m.processor for m in model.modules() if isinstance(m, (Attention, AttentionModuleMixin))]
    return sum(hasattr(p, "_attention_backend") for p in processors), len(processors)
