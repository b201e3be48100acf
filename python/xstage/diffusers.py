"""xstage inside diffusers: an attention backend, the same under diffusers' context parallelism, and an MoE swap.

    import xstage.diffusers                                    # registers the "xstage" attention backend
    transformer.set_attention_backend("xstage")                # or: with attention_backend("xstage"): ...
    transformer.enable_parallelism(config=ContextParallelConfig(ulysses_degree=P))   # under torchrun
    xstage.diffusers.set_ulysses_path("fused_both")            # optional: the Ulysses path it runs (below)
    xstage.diffusers.swap_moe(transformer, dtype=torch.float8_e4m3fn)               # HiDream's routed experts

The backend serves every model whose attention processors call diffusers' dispatch_attention_fn (Flux, Flux2,
Wan, HunyuanVideo, QwenImage, LTX, ...): bf16 [batch, seq, heads, head_dim] with head_dim 64 or 128, self-
and cross-attention (key length other than the query's), `scale`, `return_lse` (lse [batch, seq, heads] fp32,
as diffusers' own backends return it) and key-padding masks: [seq_k], [batch, seq_k], [batch, seq_q, seq_k] or
[batch, heads, seq_q, seq_k] whose values are the same for every query and head of a sequence; boolean (True:
attend) or additive (0: attend; -inf or <= -1e4: masked). Everything else raises an error naming it: causal
attention, dropout, grouped-query attention, masks of other shapes or dtypes, other dtypes and head dims (the last
from xstage.flash_attention); masks whose values differ per query or head or carry a bias fail a device-side
assertion (below).

A key-padding mask never reaches the host: on the GPU, each sequence's kept keys are moved first (a stable sort of
the mask and one gather of key and value) and counted, and the kernel attends to that many keys per sequence
(xstage.flash_attention's key_lengths). No synchronisation, one kernel call, and a masked call stays inside a
torch.compile graph. The mask's values are checked on the device too (torch._assert_async): a mask that is not
a key-padding mask, or one that masks every key of a sequence, fails a device-side assertion.

Under enable_parallelism(config=ContextParallelConfig(ulysses_degree=P)) diffusers shards the model's inputs by
its _cp_plan and hands the backend its parallel config; the backend runs xstage's Ulysses layer (xstage.ulysses_attention) on
the config's Ulysses process group, whose xstage communicator it builds on the first eager call (collective, as
the call is), by the path set_ulysses_path chose: xstage.ulysses.DEFAULT_ULYSSES_PATH unless it was called
("fused_post": the post-attention all-to-all inside the attention kernel's epilogue; "fused_both": the
pre-attention all-to-all hidden too; "serial"). Calls the fused layer cannot take (key length other than the query's, a mask, a scale other than
1/sqrt(head_dim), return_lse) run as all-to-all, xstage.flash_attention, all-to-all (torch's functional
collectives). Ring attention and ulysses_anything raise.

The diffusers version is checked at import: this module is tested with the versions in TESTED_VERSIONS and
raises on any other unless XSTAGE_DIFFUSERS_UNTESTED=1 is set (then it warns). diffusers keys its backends
by the closed enum AttentionBackendName; registering adds one member, "xstage", to it (the narrowest change
that lets set_attention_backend("xstage") and attention_backend("xstage") accept the name).
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Callable, Dict, Optional

import torch

from . import distributed as _distributed
from .attention import flash_attention
from .nn import MoE
from . import ulysses as _ulysses_module
from .ulysses import ulysses_attention

__all__ = ["BACKEND", "TESTED_VERSIONS", "HiDreamMoE", "register_moe", "set_ulysses_path", "swap_moe", "ulysses_path"]

BACKEND = "xstage"
TESTED_VERSIONS = ("0.42.1",)
UNTESTED_ENV = "XSTAGE_DIFFUSERS_UNTESTED"
_WHO = "xstage attention backend"
# An additive mask value at or below this masks the key: it scales the key's softmax weight by exp(-1e4), zero in
# fp32, for any scores below 1e4 in magnitude (diffusers' models mask with -inf, or -10000 as LTX-Video does). A
# model's -10000 rounds in its mask's dtype (bf16: -9984), so the threshold is taken rounded to that dtype too: the
# comparison then holds however it is computed (eager compares in bf16; Inductor upcasts to fp32).
_MASKED_BIAS = -1e4
_MASKED_BIAS_IN = {t: float(torch.tensor(_MASKED_BIAS, dtype=t)) for t in (torch.bfloat16, torch.float16, torch.float32, torch.float64)}
# The Ulysses path under enable_parallelism: set_ulysses_path's choice; None: the package's default.
_ulysses_path: Optional[str] = None


def _check_version(version: str) -> None:
    if version in TESTED_VERSIONS:
        return
    message = (
        f"xstage.diffusers: diffusers {version} is installed; the xstage backend is tested with diffusers "
        f"{', '.join(TESTED_VERSIONS)} (it registers itself in diffusers' attention-backend registry, whose "
        f"internals change between versions)"
    )
    if os.environ.get(UNTESTED_ENV) == "1":
        warnings.warn(message + f"; {UNTESTED_ENV}=1: trying anyway", stacklevel=3)
        return
    raise ImportError(message + f": install diffusers=={TESTED_VERSIONS[-1]}, or set {UNTESTED_ENV}=1 to try it")


def _enum_member(names):
    """The "xstage" member of diffusers' AttentionBackendName, added on first use. The enum is closed, so the
    member is made as Enum makes its own (a str subclass instance with _name_ and _value_) and entered in the
    three tables Enum looks members up in: by name, by value, and the ordered names that iteration follows."""
    member = names._value2member_map_.get(BACKEND)
    if member is not None:
        return member
    member = str.__new__(names, BACKEND)
    member._name_, member._value_ = BACKEND.upper(), BACKEND
    member._sort_order_ = len(names._member_names_)
    names._member_names_.append(member._name_)
    names._member_map_[member._name_] = member
    names._value2member_map_[BACKEND] = member
    type.__setattr__(names, member._name_, member)
    if names(BACKEND) is not member or names[member._name_] is not member or member not in list(names):
        raise ImportError("xstage.diffusers: could not add 'xstage' to diffusers' AttentionBackendName")
    return member


def _register() -> None:
    try:
        import diffusers
    except ImportError as e:
        raise ImportError(f"xstage.diffusers needs diffusers (pip install diffusers=={TESTED_VERSIONS[-1]}): {e}") from None

    _check_version(diffusers.__version__)
    try:
        from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry
    except ImportError as e:
        raise ImportError(f"xstage.diffusers: diffusers {diffusers.__version__} has no attention-backend registry: {e}") from None
    member = _enum_member(AttentionBackendName)
    _AttentionBackendRegistry.register(member, constraints=[], supports_context_parallel=True)(_xstage_attention)


# --- the attention backend --------------------------------------------------------------------------------


def _xstage_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
    _parallel_config=None,
):
    """diffusers' backend signature: query, key, value [batch, seq, heads, head_dim]; returns out of the same
    layout (and lse [batch, seq, heads] fp32 with return_lse)."""
    _check_supported(query, key, value, dropout_p, is_causal, enable_gqa)
    cp = getattr(_parallel_config, "context_parallel_config", None)
    if cp is None:
        return _attention(query, key, value, attn_mask, scale, return_lse)
    return _ulysses(query, key, value, attn_mask, scale, return_lse, cp)


def _check_supported(query, key, value, dropout_p, is_causal, enable_gqa) -> None:
    if is_causal:
        raise ValueError(f"{_WHO}: is_causal=True: causal attention is not supported (xstage's kernels compute full attention)")
    if dropout_p != 0.0:
        raise ValueError(f"{_WHO}: dropout_p={dropout_p}: attention dropout is not supported (inference only)")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dtype != torch.bfloat16:
            raise TypeError(
                f"{_WHO}: {name} has dtype {t.dtype}; the backend runs torch.bfloat16 only "
                f"(load the model with torch_dtype=torch.bfloat16, or transformer.to(torch.bfloat16))"
            )
        if t.dim() != 4:
            raise ValueError(f"{_WHO}: {name} must be 4-D [batch, seq, heads, head_dim]; got shape {tuple(t.shape)}")
    if enable_gqa or key.shape[2] != query.shape[2] or value.shape[2] != query.shape[2]:
        raise ValueError(
            f"{_WHO}: grouped-query attention is not supported (query has {query.shape[2]} heads, key "
            f"{key.shape[2]}, value {value.shape[2]}, enable_gqa={enable_gqa}); query, key and value need one head count"
        )


def _lse_bsh(lse: torch.Tensor) -> torch.Tensor:
    """xstage's [batch, heads, seq] log-sum-exp in diffusers' [batch, seq, heads] layout."""
    return lse.transpose(1, 2)


def _attention(query, key, value, attn_mask, scale, return_lse):
    """One GPU: xstage.flash_attention, with a key-padding mask applied as per-sequence key lengths."""
    lengths = None
    if attn_mask is not None:
        key, value, lengths = _kept_keys_first(attn_mask, key, value, query.shape[1])
    if return_lse:
        out, lse = flash_attention(query, key, value, softmax_scale=scale, return_lse=True, key_lengths=lengths)
        return out, _lse_bsh(lse)
    return flash_attention(query, key, value, softmax_scale=scale, key_lengths=lengths)


def _kept_keys_first(attn_mask, key, value, seqlen_q):
    """(key, value, lengths) for a key-padding mask, all on the GPU: each sequence's kept keys moved to the front in
    their order (a stable sort of the mask, one gather of key and value) and their count as int32 [batch]. Nothing
    is read on the host: the kernel takes the counts as they are, and the mask's values are checked on the device."""
    batch, seqlen_k = key.shape[0], key.shape[1]
    keep = _kept_keys(attn_mask.to(key.device), batch, seqlen_q, seqlen_k)
    lengths = keep.sum(-1, dtype=torch.int32)
    torch._assert_async(
        lengths.amin() > 0, f"{_WHO}: attn_mask masks every key of a sequence of the batch; its attention is undefined"
    )
    # Kept (1) before masked (0); stable: the kept keys stay in their order. As uint8: a copy, not a view (Inductor
    # cannot lower a bool-to-uint8 view, and sort takes no bool on CUDA).
    order = keep.to(torch.uint8).sort(dim=-1, descending=True, stable=True).indices
    index = order.view(batch, seqlen_k, 1, 1).expand(batch, seqlen_k, key.shape[2], key.shape[3])
    return key.gather(1, index), value.gather(1, index), lengths


def _kept_keys(mask: torch.Tensor, batch: int, seqlen_q: int, seqlen_k: int) -> torch.Tensor:
    """[batch, seqlen_k] bool, True for a key the sequence's queries attend to, on the mask's device. mask:
    [seqlen_k], [batch, seqlen_k], [batch, seqlen_q, seqlen_k] or [batch, heads, seqlen_q, seqlen_k] (any of these
    dimensions but the keys' may be 1). Its shape and dtype are checked here (ValueError, TypeError); its values,
    which must be the same for every head and query (a key-padding mask) and, for an additive mask, 0 or masking,
    by assertions on the device (torch._assert_async), so that nothing waits for the GPU."""
    shape = tuple(mask.shape)
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"{_WHO}: attn_mask has dtype {mask.dtype}; it must be bool (True: attend) or an additive float mask")
    if not 1 <= mask.dim() <= 4 or shape[-1] != seqlen_k or (mask.dim() > 1 and shape[0] not in (1, batch)) or (
        mask.dim() > 2 and shape[-2] not in (1, seqlen_q)
    ):
        raise ValueError(
            f"{_WHO}: attn_mask of shape {shape} does not fit {batch} sequences of {seqlen_q} queries and {seqlen_k} "
            f"keys ([seq_k], [batch, seq_k], [batch, seq_q, seq_k] or [batch, heads, seq_q, seq_k], 1 allowed for all "
            f"but seq_k)"
        )
    mask = mask.reshape(shape[:1] + (1,) * (4 - mask.dim()) + shape[1:]) if mask.dim() > 1 else mask.view(1, 1, 1, -1)
    first = mask[:, :1, :1]  # the first head's first query: its kept keys are the sequence's
    # Heads and queries that are broadcast (size 1, or stride 0 as expand() makes them) agree by construction.
    per_head_or_query = any(mask.shape[d] > 1 and mask.stride(d) != 0 for d in (1, 2))
    if mask.dtype == torch.bool:
        row = first
        if per_head_or_query:
            torch._assert_async(
                torch.all(mask == row),
                f"{_WHO}: attn_mask (shape {shape}) differs between heads or queries; only key-padding masks (the "
                f"same kept keys for every query and head of a sequence) are supported",
            )
    else:
        row = first == 0
        # One check for both: every value 0 where the first row keeps the key, <= the bias where it masks it.
        torch._assert_async(
            torch.all(torch.where(row, mask == 0, mask <= _MASKED_BIAS_IN.get(mask.dtype, _MASKED_BIAS))),
            f"{_WHO}: the additive attn_mask (shape {shape}) is not a key-padding mask: it has values other than 0 "
            f"and <= {_MASKED_BIAS} (a bias on the scores), or kept keys that differ between heads or queries",
        )
    return row[:, 0, 0].expand(batch, seqlen_k)


# --- under diffusers' context parallelism -----------------------------------------------------------------


def set_ulysses_path(path: Optional[str]) -> None:
    """Chooses how the backend runs Ulysses attention under enable_parallelism: "fused_post", "fused_both" or
    "serial" (xstage.ulysses_attention's `path`; all three give the same output); None goes back to the default,
    xstage.ulysses.DEFAULT_ULYSSES_PATH. Set it on every rank alike, before the first parallel call (torch.compile
    fixes the path in the graph it traces). An unknown name raises xstage.InputError listing the paths."""
    global _ulysses_path
    if path is not None:
        _ulysses_module._path_code(path)
    _ulysses_path = path


def ulysses_path() -> str:
    """The Ulysses path the backend runs under enable_parallelism (set_ulysses_path)."""
    return _ulysses_path if _ulysses_path is not None else _ulysses_module.DEFAULT_ULYSSES_PATH


def _ulysses(query, key, value, attn_mask, scale, return_lse, cp):
    if cp.ring_degree > 1:
        raise ValueError(
            f"{_WHO}: ring attention (ContextParallelConfig ring_degree={cp.ring_degree}) is not supported; use "
            f"ContextParallelConfig(ulysses_degree=P)"
        )
    if cp.ulysses_anything:
        raise ValueError(
            f"{_WHO}: ulysses_anything is not supported: the heads and the sequence must divide by ulysses_degree"
        )
    group = cp._ulysses_mesh.get_group()
    ranks = cp.ulysses_degree
    heads, head_dim = query.shape[2], query.shape[3]
    if heads % ranks != 0:
        raise ValueError(f"{_WHO}: {heads} heads cannot be split over ulysses_degree={ranks} ranks (Ulysses gives each rank heads/P)")
    default_scale = scale is None or abs(scale * math.sqrt(head_dim) - 1.0) < 1e-6
    fused = attn_mask is None and not return_lse and default_scale and key.shape == query.shape and value.shape == query.shape
    if fused:
        if query.is_cuda and not torch.compiler.is_compiling() and not _distributed.is_initialized(group):
            _distributed.init(group)  # collective, like the call: every rank reaches it at the same layer
        return ulysses_attention(query.contiguous(), key.contiguous(), value.contiguous(), group=group, path=ulysses_path())
    return _ulysses_composed(query, key, value, attn_mask, scale, return_lse, group, ranks)


def _wait(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed import _functional_collectives as funcol

    return t.wait() if isinstance(t, funcol.AsyncCollectiveTensor) else t


def _all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    """Chunk p of x's first dimension to rank p; returns the chunks received, rank r's at index r."""
    from torch.distributed import _functional_collectives as funcol

    return _wait(funcol.all_to_all_single(x.contiguous(), None, None, group))


def _sequence_to_heads(x: torch.Tensor, group, ranks: int) -> torch.Tensor:
    """[b, s/P, h, d] (this rank's rows, all heads) -> [b, s, h/P, d] (all rows, this rank's heads)."""
    b, s, h, d = x.shape
    x = _all_to_all(x.reshape(b, s, ranks, h // ranks, d).permute(2, 0, 1, 3, 4), group)  # [P, b, s/P, h/P, d]
    return x.permute(1, 0, 2, 3, 4).reshape(b, ranks * s, h // ranks, d)


def _heads_to_sequence(x: torch.Tensor, group, ranks: int) -> torch.Tensor:
    """[b, s, h/P, ...] (all rows, this rank's heads) -> [b, s/P, h, ...] (this rank's rows, all heads)."""
    b, s, h = x.shape[:3]
    rest = x.shape[3:]
    x = _all_to_all(x.reshape(b, ranks, s // ranks, h, *rest).transpose(0, 1), group)  # [P, b, s/P, h/P, ...]
    return x.permute(1, 2, 0, *range(3, x.dim())).reshape(b, s // ranks, ranks * h, *rest)


def _gather_keys(mask: torch.Tensor, group) -> torch.Tensor:
    """The masks of every rank's keys, concatenated along the last (key) dimension in rank order."""
    from torch.distributed import _functional_collectives as funcol

    data = mask.to(torch.uint8) if mask.dtype == torch.bool else mask
    gathered = _wait(funcol.all_gather_tensor(data.contiguous(), mask.dim() - 1, group))
    return gathered.bool() if mask.dtype == torch.bool else gathered


def _ulysses_composed(query, key, value, attn_mask, scale, return_lse, group, ranks):
    """Ulysses for what the fused layer does not take: all-to-all, xstage.flash_attention, all-to-all."""
    seqlen_k_local = key.shape[1]
    q, k, v = (_sequence_to_heads(t, group, ranks) for t in (query, key, value))
    if attn_mask is not None and attn_mask.shape[-1] == seqlen_k_local:
        # A mask over this rank's keys (the model's plan sharded it): the keys of all ranks, in all-to-all order.
        attn_mask = _gather_keys(attn_mask, group)
    result = _attention(q, k, v, attn_mask, scale, return_lse)
    if not return_lse:
        return _heads_to_sequence(result, group, ranks)
    out, lse = result
    return _heads_to_sequence(out, group, ranks), _heads_to_sequence(lse, group, ranks)


# --- MoE --------------------------------------------------------------------------------------------------

# module type -> converter(module, dtype, **options) -> the module that replaces it
_MOE_SWAPS: Dict[type, Callable[..., torch.nn.Module]] = {}


def register_moe(module_type: type, convert: Callable[..., torch.nn.Module]) -> None:
    """Teaches swap_moe another MoE feed-forward: convert(module, dtype, **options) returns the module that
    replaces an instance of module_type (its router and shared experts kept, its routed experts one
    xstage.nn.MoE: see HiDreamMoE and _convert_hidream for the pattern)."""
    _MOE_SWAPS[module_type] = convert


def swap_moe(transformer: torch.nn.Module, dtype: torch.dtype = torch.bfloat16, **options) -> int:
    """Replaces every MoE feed-forward of `transformer` that swap_moe recognises (diffusers' HiDream
    MOEFeedForwardSwiGLU; others through register_moe) by one whose routed experts are an xstage.nn.MoE holding
    the module's expert weights (bf16, or fp8 W8A8 for dtype=torch.float8_e4m3fn, quantized once), keeping its
    router and shared experts. options go to xstage.nn.MoE (schedule, max_tokens, ...). The transformer's
    weights must be on the GPU (or on the meta device: empty xstage modules of the right shapes, for tracing).
    Returns how many modules it replaced; ValueError if none."""
    from .moe import _weight_dtypes

    if dtype not in _weight_dtypes():
        raise TypeError(f"xstage.diffusers.swap_moe: dtype is {dtype}; it must be torch.bfloat16 or torch.float8_e4m3fn")
    if not _MOE_SWAPS:
        _register_known_moe()
    targets = [
        (parent, name, child)
        for parent in transformer.modules()
        for name, child in parent.named_children()
        if type(child) in _MOE_SWAPS
    ]
    if not targets:
        known = ", ".join(t.__name__ for t in _MOE_SWAPS)
        raise ValueError(
            f"xstage.diffusers.swap_moe: {type(transformer).__name__} has no MoE feed-forward swap_moe knows ({known}); "
            f"teach it others with xstage.diffusers.register_moe"
        )
    for parent, name, child in targets:
        setattr(parent, name, _MOE_SWAPS[type(child)](child, dtype=dtype, **options))
    return len(targets)


class HiDreamMoE(torch.nn.Module):
    """diffusers' HiDream MOEFeedForwardSwiGLU with its routed experts as one xstage.nn.MoE: the same router
    (gate: softmax top-k) and shared expert; out = experts(x, top-k ids, top-k weights) + shared_experts(x)."""

    def __init__(self, gate: torch.nn.Module, experts: MoE, shared_experts: torch.nn.Module):
        super().__init__()
        self.gate, self.experts, self.shared_experts = gate, experts, shared_experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        topk_ids, topk_weights, _ = self.gate(x)  # [tokens, top_k] over the flattened tokens
        return self.experts(x, topk_ids.to(torch.int32), topk_weights.float()) + self.shared_experts(x)


def _convert_hidream(ff, dtype, **options) -> HiDreamMoE:
    w1 = [torch.cat([e.w1.weight, e.w3.weight], dim=0) for e in ff.experts]  # [gate; up] rows per expert
    w2 = [e.w2.weight for e in ff.experts]
    device = w1[0].device
    if device.type == "meta":
        experts = MoE(len(w1), w2[0].shape[0], w2[0].shape[1], ff.num_activated_experts, dtype=dtype, device=device, **options)
    elif device.type != "cuda":
        raise ValueError(
            f"xstage.diffusers.swap_moe: the experts' weights are on {device}; move the transformer to the GPU "
            f"first (transformer.to('cuda'))"
        )
    else:
        experts = MoE.from_weights(torch.stack(w1), torch.stack(w2), top_k=ff.num_activated_experts, dtype=dtype, **options)
    return HiDreamMoE(ff.gate, experts, ff.shared_experts)


def _register_known_moe() -> None:
    from diffusers.models.transformers.transformer_hidream_image import MOEFeedForwardSwiGLU

    register_moe(MOEFeedForwardSwiGLU, _convert_hidream)


_register()
