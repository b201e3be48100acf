"""xstage.moe: the fused MegaMoE layer (expert-parallel over a process group) as a PyTorch operator, and the
one-time weight preparation it needs (xstage.moe_pack_weights).

Every rank holds E/P experts (rank r: experts [r*E/P, (r+1)*E/P)) and its own tokens with their router
output; one call dispatches each token to its top-k experts' ranks over NVLink, runs Linear-1, SwiGLU and
Linear-2 there, and combines the weighted results back at the token's rank:

    out[t] = sum_j topk_weights[t, j] * W2[e] @ (silu(W1_gate[e] @ x[t]) * (W1_up[e] @ x[t])),  e = topk_ids[t, j]

Registered as torch.ops.xstage.moe (xstage._ops: torch.library, with a fake implementation that needs no
communicator), on the current CUDA stream, no host synchronisation: torch.compile(fullgraph=True) and CUDA
graphs take it. CUDA tensors go to libxstage_torch.so's C++ kernel where torch has the stable ABI (xstage._ops;
it asks _resolve_layer for a configuration's layer once), else to _moe_impl below.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import torch

from . import _capi, _ops, _tensors, distributed

__all__ = ["MoeWeights", "moe", "moe_pack_weights", "DEFAULT_SCHEDULE"]

_OP = "xstage.moe"
_INT32_MAX = 2**31 - 1

DEFAULT_SCHEDULE = "auto"


@functools.lru_cache(maxsize=None)
def _schedule_codes(schedule: str) -> tuple:
    """(XSTAGE_MOE_SCHEDULE_*, wave_lag) of a schedule name: "auto", "interleaved", "expert_wave" or
    "pipelined_waves" (docs/MOE.md). The names are the C library's; xstage.InputError (a ValueError) lists them
    for any other."""
    return _capi.moe_schedule_from_name(schedule)


class MoeWeights(NamedTuple):
    """A rank's expert weights as the fused layer reads them (moe_pack_weights makes them)."""

    w1: torch.Tensor  # [E_local, 2*inter, hidden], tile-interleaved for tile_n; bf16 or float8_e4m3fn
    w2: torch.Tensor  # [E_local, hidden, inter]
    w1_scales: Optional[torch.Tensor]  # fp8: [E_local*2*inter/128, round_up(hidden/128, 4)] float32, else None
    w2_scales: Optional[torch.Tensor]  # fp8: [E_local*hidden/128, round_up(inter/128, 4)] float32, else None
    tile_n: int


def _round_up(a: int, b: int) -> int:
    return (a + b - 1) // b * b


def _weight_dtypes():
    return (torch.bfloat16,) + ((_tensors.FLOAT8,) if _tensors.FLOAT8 is not None else ())


def default_tile_n(dtype: torch.dtype, hidden: int, inter: int) -> int:
    """The tile width the layer uses for a shape unless told otherwise (the C library's rule: 256 where it
    fits, else 128)."""
    return _capi.moe_default_tile_n(_tensors.DTYPE_CODES[dtype], int(hidden), int(inter))


def moe_pack_weights(
    w1: torch.Tensor, w2: torch.Tensor, dtype: torch.dtype = torch.bfloat16, tile_n: Optional[int] = None
) -> MoeWeights:
    """Prepares a rank's expert weights once: W1 into the layer's tile-interleaved order, and for
    dtype=torch.float8_e4m3fn both matrices quantized to e4m3 with one fp32 scale per 128x128 block (W8A8:
    the layer quantizes the tokens per 1x128 inside each call).

    w1: [E_local, 2*inter, hidden] bf16, each expert's gate_proj rows then its up_proj rows
        (torch.cat([gate_proj.weight, up_proj.weight], dim=0) per expert); w2: [E_local, hidden, inter] bf16
        (down_proj.weight). Contiguous, on one Hopper GPU. tile_n: default default_tile_n(dtype, ...).
    Runs on the current stream; returns new tensors (the inputs are not kept).
    """
    op = "xstage.moe_pack_weights"
    _tensors.require_tensors(op, {"w1": w1, "w2": w2})
    if dtype not in _weight_dtypes():
        raise TypeError(f"{op}: dtype is {dtype}; it must be torch.bfloat16 or torch.float8_e4m3fn (W8A8)")
    for name, t in (("w1", w1), ("w2", w2)):
        _tensors.require_dtype(op, name, t, (torch.bfloat16,), " (the bf16 weights; convert with .to(torch.bfloat16))")
        if t.dim() != 3:
            raise ValueError(f"{op}: {name} must be 3-D; got shape {tuple(t.shape)}")
    _tensors.require_cuda(op, {"w1": w1, "w2": w2}, fake=False, first="w1")
    _tensors.require_contiguous(op, {"w1": w1, "w2": w2})
    e, n2, h = w1.shape
    inter = w2.shape[2]
    if w2.shape != (e, h, inter) or n2 != 2 * inter:
        raise ValueError(
            f"{op}: w1 {tuple(w1.shape)} and w2 {tuple(w2.shape)} must be [E_local, 2*inter, hidden] and "
            f"[E_local, hidden, inter]"
        )
    if tile_n is None:
        tile_n = default_tile_n(dtype, h, inter)
    c, stream = _tensors.c_tensor, _tensors.current_stream(w1.device)
    packed = torch.empty_like(w1)
    _capi.moe_pack_w1(c(w1), c(packed), int(tile_n), stream)
    if dtype == torch.bfloat16:
        return MoeWeights(packed, w2.clone(), None, None, int(tile_n))
    quantized = []
    for w in (packed.view(e * n2, h), w2.view(e * h, inter)):
        n, k = w.shape
        codes = torch.empty((n, k), dtype=_tensors.FLOAT8, device=w.device)
        scales = torch.empty((n // 128, _round_up(k // 128, 4)), dtype=torch.float32, device=w.device)
        _capi.moe_quantize_weights_fp8(c(w), c(codes), c(scales), stream)
        quantized.append((codes, scales))
    (c1, s1), (c2, s2) = quantized
    return MoeWeights(c1.view(e, n2, h), c2.view(e, h, inter), s1, s2, int(tile_n))


def _config(experts, top_k, hidden, inter, max_tokens, fp8, tile_n, schedule, cluster_n, cluster_m, timeout_s):
    """The xstage_moe_config of a layer."""
    cfg = _capi.MoeConfig()
    cfg.experts, cfg.top_k, cfg.hidden, cfg.inter, cfg.max_tokens = experts, top_k, hidden, inter, max_tokens
    cfg.dtype = _capi.DTYPE_FLOAT8_E4M3 if fp8 else _capi.DTYPE_BFLOAT16
    cfg.schedule, cfg.wave_lag = _schedule_codes(schedule)
    cfg.tile_n, cfg.cluster_n, cfg.cluster_m, cfg.timeout_s = tile_n, cluster_n, cluster_m, timeout_s
    return cfg


def _check_dtypes(x, topk_ids, topk_weights, w1, w2) -> None:
    """The tensors' types (pure Python: what the public function also runs as traced code under torch.compile)."""
    _tensors.require_tensors(_OP, {"x": x, "topk_ids": topk_ids, "topk_weights": topk_weights, "w1": w1, "w2": w2})
    _tensors.require_dtype(_OP, "x", x, (torch.bfloat16,), " (convert with .to(torch.bfloat16))")
    _tensors.require_dtype(_OP, "topk_ids", topk_ids, (torch.int32,), " (the router's expert ids: .to(torch.int32))")
    _tensors.require_dtype(_OP, "topk_weights", topk_weights, (torch.float32,), " (.float())")
    _tensors.require_dtype(
        _OP, "w1", w1, _weight_dtypes(), " (prepare the weights once with xstage.moe_pack_weights)"
    )
    if w2.dtype != w1.dtype:
        raise TypeError(f"{_OP}: w2 has dtype {w2.dtype} but w1 has {w1.dtype}; both come from xstage.moe_pack_weights")


def _check_inputs(x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, world_size, max_tokens, knobs, *, fake):
    """knobs: (tile_n, schedule, cluster_n, cluster_m, timeout_s)."""
    named = {"x": x, "topk_ids": topk_ids, "topk_weights": topk_weights, "w1": w1, "w2": w2}
    _check_dtypes(x, topk_ids, topk_weights, w1, w2)
    fp8 = w1.dtype != torch.bfloat16
    if fp8:
        if w1_scales is None or w2_scales is None:
            raise ValueError(f"{_OP}: float8 weights need w1_scales and w2_scales (xstage.moe_pack_weights gives them)")
        named.update(w1_scales=w1_scales, w2_scales=w2_scales)
        _tensors.require_tensors(_OP, named)
        for name in ("w1_scales", "w2_scales"):
            _tensors.require_dtype(_OP, name, named[name], (torch.float32,), "")
    elif w1_scales is not None or w2_scales is not None:
        raise ValueError(f"{_OP}: bfloat16 weights take no scales (w1_scales and w2_scales must be None)")
    _tensors.require_cuda(_OP, named, fake=fake, first="x")
    if x.dim() != 2:
        raise ValueError(f"{_OP}: x must be 2-D [tokens, hidden]; got shape {tuple(x.shape)} (flatten the leading dimensions)")
    t, h = x.shape
    if t > _INT32_MAX:
        raise ValueError(f"{_OP}: {t} tokens (x shape {tuple(x.shape)}); the layer counts tokens in 32 bits: at most 2^31 - 1")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != t:
        raise ValueError(f"{_OP}: topk_ids must be [tokens, top_k] = [{t}, k]; got shape {tuple(topk_ids.shape)}")
    k = topk_ids.shape[1]
    if topk_weights.shape != topk_ids.shape:
        raise ValueError(f"{_OP}: topk_weights shape {tuple(topk_weights.shape)} must equal topk_ids shape {tuple(topk_ids.shape)}")
    if w1.dim() != 3 or w2.dim() != 3:
        raise ValueError(f"{_OP}: w1 and w2 must be 3-D [E_local, 2*inter, hidden] and [E_local, hidden, inter]; got "
                         f"{tuple(w1.shape)} and {tuple(w2.shape)}")
    e_local, inter = w2.shape[0], w2.shape[2]
    if w1.shape != (e_local, 2 * inter, h) or w2.shape[1] != h:
        raise ValueError(
            f"{_OP}: with x [tokens, {h}] and w2 {tuple(w2.shape)} = [E_local, hidden, inter], w1 must be "
            f"[{e_local}, {2 * inter}, {h}] and w2 [{e_local}, {h}, {inter}]; got w1 {tuple(w1.shape)}"
        )
    if fp8:
        want1 = (e_local * 2 * inter // 128, _round_up(h // 128, 4))
        want2 = (e_local * h // 128, _round_up(inter // 128, 4))
        if tuple(w1_scales.shape) != want1 or tuple(w2_scales.shape) != want2:
            raise ValueError(
                f"{_OP}: w1_scales {tuple(w1_scales.shape)} and w2_scales {tuple(w2_scales.shape)} must be {want1} and {want2}"
            )
    if e_local == 0 or h == 0 or inter == 0 or k == 0:
        raise ValueError(f"{_OP}: empty layer (w1 {tuple(w1.shape)}, top_k {k})")
    _tensors.require_contiguous(_OP, named)
    if world_size is not None and k > e_local * world_size:
        raise ValueError(f"{_OP}: top_k = {k} is more than the layer's {e_local * world_size} experts")
    if max_tokens and t > max_tokens:
        raise ValueError(f"{_OP}: {t} tokens, more than max_tokens = {max_tokens}")
    if max_tokens < 0:
        raise ValueError(f"{_OP}: max_tokens is {max_tokens}; it must be >= 1 (or None)")
    _schedule_codes(knobs[1])
    # The layer's configuration as the C library judges it (no GPU needed), where the group's size and the shapes
    # are known (not symbolic: a traced token count does not matter to it).
    sizes = (e_local, k, h, inter) + tuple(knobs[i] for i in (0, 2, 3))
    if world_size is not None and all(isinstance(v, int) for v in sizes):
        tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else 1
        _capi.moe_check_config(_config(e_local * world_size, k, h, inter, tokens, fp8, *knobs), world_size)


_checked = _tensors.CheckedSignatures()


def _communicator(x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, group, max_tokens, knobs, device, *, fake):
    """The group's communicator (a default group of one rank: the local one on `device`, built on first use), for
    inputs that pass every check (raises what the first failing one finds). knobs: as _check_inputs takes them."""
    # the inputs' errors before a missing communicator's
    _check_inputs(x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, None, max_tokens, knobs, fake=fake)
    comm = distributed.communicator_for_key(group, _OP, device)
    _check_inputs(x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, comm.world_size, max_tokens, knobs, fake=fake)
    return comm


def _check_device(index: Optional[int], comm) -> None:
    if index != comm.device:
        where = f"cuda:{index}" if index is not None and index >= 0 else "the host"
        raise ValueError(f"{_OP}: the tensors are on {where} but this rank's xstage communicator is on cuda:{comm.device}")


def _layer(comm, t, k, h, e_local, inter, w_dtype, max_tokens, tile_n, schedule, cluster_n, cluster_m, timeout_s):
    """(key, handle): the communicator's layer (xstage_moe handle) for a call of t tokens with this configuration,
    built (collective) on the first call that needs it, and the key it is cached under."""
    fp8 = w_dtype != torch.bfloat16
    options = (e_local * comm.world_size, k, h, inter, w_dtype, tile_n, schedule, cluster_n, cluster_m, float(timeout_s))
    if max_tokens:
        tokens_cap = max_tokens
    elif comm.world_size == 1:
        # One rank: any cached layer of this configuration with room for the tokens (no agreement needed).
        fits = [key[-1] for key, _ in comm.layers() if key[:-1] == ("moe",) + options and key[-1] >= t]
        tokens_cap = min(fits) if fits else max(t, 1)
    else:
        raise ValueError(
            f"{_OP}: pass max_tokens (the same on every rank) with a group of {comm.world_size} ranks: each layer's "
            f"buffers are sized by it and built together by all ranks"
        )

    def create():
        config = _config(e_local * comm.world_size, k, h, inter, tokens_cap, fp8, tile_n, schedule, cluster_n, cluster_m, timeout_s)
        return _capi.moe_create(comm.handle, config)

    key = ("moe",) + options + (tokens_cap,)
    return key, comm.layer(key, create)


def _failure(comm, key, layer: int, error: Exception) -> Exception:
    """What a call of `layer` (cached under `key`) that failed with xstage.PlatformError `error` raises. A failure
    of an earlier call (a device-side wait that timed out) that ended the layer: one rank has no one to agree with,
    so the layer is dropped here and the next call builds a new one; more ranks rebuild together."""
    if not _capi.moe_ended(layer):
        return error
    if comm.world_size == 1:
        comm.drop_layer(key)
        return _capi.PlatformError(f"{error}. {_OP}: the layer was dropped; the next call builds a new one")
    return _capi.PlatformError(
        f"{error}. {_OP}: call xstage.distributed.teardown() and then xstage.distributed.init() on every rank of the "
        f"group; the next calls build new layers"
    )


def _moe_impl(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_scales: Optional[torch.Tensor],
    w2_scales: Optional[torch.Tensor],
    group: str,
    max_tokens: int,
    tile_n: int,
    schedule: str,
    cluster_n: int,
    cluster_m: int,
    timeout_s: float,
) -> torch.Tensor:
    if x.is_cuda and _ops.load_torch_library():  # from now on the C++ kernel takes CUDA tensors
        return _moe_op(x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, group, max_tokens, tile_n, schedule,
                       cluster_n, cluster_m, timeout_s)
    knobs = (tile_n, schedule, cluster_n, cluster_m, timeout_s)
    signature = _checked.of((x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales), group, max_tokens, knobs)
    if _checked.passed(signature):
        comm = distributed.communicator_for_key(group, _OP, x.device.index)
    else:
        comm = _communicator(x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, group, max_tokens, knobs,
                             x.device.index, fake=False)
        _checked.add(signature)
    _check_device(x.device.index, comm)
    t, h = x.shape
    key, layer = _layer(comm, t, topk_ids.shape[1], h, w2.shape[0], w2.shape[2], w1.dtype, max_tokens, tile_n, schedule,
                        cluster_n, cluster_m, timeout_s)
    out = torch.empty((t, h), dtype=torch.bfloat16, device=x.device)
    c = _tensors.c_tensor
    fp8 = w1.dtype != torch.bfloat16
    try:
        _capi.moe_forward(
            layer,
            c(x),
            c(topk_ids),
            c(topk_weights),
            c(w1),
            c(w2),
            c(w1_scales) if fp8 else None,
            c(w2_scales) if fp8 else None,
            c(out),
            _tensors.current_stream(x.device),
        )
    except _capi.PlatformError as e:
        failure = _failure(comm, key, layer, e)
        if failure is e:
            raise
        raise failure from None
    return out


# libxstage_torch.so's MoE kernel (xstage._ops) caches each configuration's layer handle and asks these two.


def _resolve_layer(operands, group, max_tokens, tile_n, schedule, cluster_n, cluster_m, timeout_s) -> int:
    """The layer for a call that has none cached for its configuration: the call's operands (xstage_tensor
    descriptors) pass the same checks as meta tensors first, so that no layer is built for inputs the op rejects.
    The C library checks the operands' memory and devices at the call."""
    meta = [_tensors.meta_tensor(d) if d is not None else None for d in operands]
    x, topk_ids, _, w1, w2, _, _ = meta
    device = operands[0].device if operands[0].device >= 0 else None
    knobs = (tile_n, schedule, cluster_n, cluster_m, timeout_s)
    comm = _communicator(*meta, group, max_tokens, knobs, device, fake=True)
    _check_device(device, comm)
    return _layer(comm, x.shape[0], topk_ids.shape[1], x.shape[1], w2.shape[0], w2.shape[2], w1.dtype, max_tokens, tile_n,
                  schedule, cluster_n, cluster_m, timeout_s)[1]


def _layer_failed(layer: int, message: str) -> str:
    """The message of the xstage.PlatformError a call of `layer` raises, its C library's being `message` (as the
    Python path raises it: _failure)."""
    found = distributed.find_layer(layer)
    if found is None:
        return message
    return str(_failure(*found, layer, _capi.PlatformError(message)))


_ops.set_moe_callbacks(_resolve_layer, _layer_failed)


def _moe_fake(x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, group, max_tokens, tile_n, schedule, cluster_n, cluster_m, timeout_s):
    world_size = distributed.world_size_for_key(group)
    knobs = (tile_n, schedule, cluster_n, cluster_m, timeout_s)
    _check_inputs(x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, world_size, max_tokens, knobs, fake=True)
    return x.new_empty(x.shape)


_moe_op = _ops.define("moe", _moe_impl, _moe_fake)


def moe(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_scales: Optional[torch.Tensor] = None,
    w2_scales: Optional[torch.Tensor] = None,
    *,
    group=None,
    tile_n: int = 0,
    schedule: str = DEFAULT_SCHEDULE,
    max_tokens: Optional[int] = None,
    cluster_n: int = 0,
    cluster_m: int = 1,
    timeout_s: float = 10.0,
) -> torch.Tensor:
    """The expert-parallel MoE layer (routed experts, SwiGLU) over the ranks of `group`; see the module
    docstring for what it computes.

    x: this rank's tokens [tokens, hidden] bf16; topk_ids: [tokens, top_k] int32 global expert ids in
    [0, E); topk_weights: [tokens, top_k] float32 (used as given: normalise them in the router if wanted);
    w1, w2 (and w1_scales, w2_scales for float8): this rank's E/P experts from xstage.moe_pack_weights, with
    its tile_n (0: the default, which moe_pack_weights also uses). All contiguous, on this rank's GPU.
    Returns [tokens, hidden] bf16.

    schedule: "auto" (default: the schedule and CTA pairing chosen for the layer's shape when it is built,
    docs/MOE.md "Choosing the schedule per layer"; cluster_n / cluster_m are then ignored), "interleaved"
    (Linear-1 and Linear-2 tiles interleaved with a lead, CTA pairs where the tiles pair up), "expert_wave"
    (experts in waves) or "pipelined_waves" (waves, Linear-2 one wave behind). cluster_n / cluster_m: CTA
    pairs along N (0: automatic) / M. max_tokens: the most tokens a
    call of this rank may have; required (and the same on every rank) for groups of more than one rank;
    one rank: default the call's token count (a cached layer with room is reused).
    Router ids outside [0, E), or repeated in a token's top-k, are dropped (they add nothing to the output) and
    counted; xstage.distributed.poll() reports them as xstage.InputError, and the layer goes on. A failure that
    leaves the layer's state unknown (a device-side wait that timed out after timeout_s) ends it: poll() raises
    xstage.PlatformError, and so does the layer's next call, saying how to recover (one rank: the call after
    it builds a new layer; more: xstage.distributed.teardown() and init() on every rank).
    Collective: every rank calls it, also a rank with no tokens (x of shape [0, hidden]).
    """
    if torch.compiler.is_compiling():  # raised from here under torch.compile, as in eager
        _check_dtypes(x, topk_ids, topk_weights, w1, w2)
    group, max_tokens = distributed.group_key(group), int(max_tokens or 0)
    tile_n, cluster_n, cluster_m, timeout_s = int(tile_n), int(cluster_n), int(cluster_m), float(timeout_s)
    args = (x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, group, max_tokens, tile_n, schedule, cluster_n,
            cluster_m, timeout_s)
    try:
        if _ops.needs_autograd(x, topk_weights, w1, w2):
            return _ops.forward_only(_OP, _moe_op, *args)
        return _moe_op(*args)
    except RuntimeError as e:
        _ops.raise_typed(e, lambda: _check_device(x.device.index, _communicator(
            x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, group, max_tokens,
            (tile_n, schedule, cluster_n, cluster_m, timeout_s), x.device.index, fake=False)))
        raise
