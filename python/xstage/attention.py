"""xstage.flash_attention: the Hopper FlashAttention forward kernel as a PyTorch operator.

Registered as torch.ops.xstage.flash_attention (xstage._ops: torch.library) with a fake implementation, so
torch.compile(fullgraph=True) traces it without graph breaks, and it runs on the current CUDA stream
without host synchronisation, allocating only its outputs and, where the launch splits its last wave, a
stream-ordered workspace from a pool the C library keeps (docs/PYTHON.md), so CUDA graphs capture it. CUDA tensors
go to libxstage_torch.so's C++ kernel where torch has the stable ABI (xstage._ops), else to
_flash_attention_impl below.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from . import _capi, _ops, _tensors

__all__ = ["flash_attention"]

_HEAD_DIMS = (64, 128)
_INT32_MAX = 2**31 - 1
_MAX_STRIDE = 2**39  # elements: the TMA unit takes strides below 2^40 bytes (bf16: 2 bytes each)

_c_tensor = _tensors.c_tensor


def _check_inputs(q, k, v, softmax_scale, *, fake: bool, key_lengths=None) -> None:
    """Raises TypeError/ValueError naming the problem. Runs on real and on fake/meta tensors (metadata only)."""
    names = ("q", "k", "v")
    tensors = (q, k, v)
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"xstage.flash_attention: {name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in zip(names, tensors):
        if t.dtype != torch.bfloat16:
            raise TypeError(
                f"xstage.flash_attention: {name} has dtype {t.dtype}; q, k and v must be torch.bfloat16 "
                f"(convert with .to(torch.bfloat16))"
            )
    for name, t in zip(names, tensors):
        dev = t.device.type
        if dev != "cuda" and not (fake and dev == "meta"):
            hint = "" if torch.cuda.is_available() else " (and this PyTorch sees no CUDA GPU)"
            raise ValueError(
                f"xstage.flash_attention: {name} is a {dev} tensor; xstage.flash_attention runs on CUDA "
                f"tensors of a Hopper (sm_90) GPU{hint}"
            )
        if t.device != q.device:
            raise ValueError(
                f"xstage.flash_attention: {name} is on {t.device} but q is on {q.device}; "
                f"q, k and v must be on one device"
            )
    for name, t in zip(names, tensors):
        if t.dim() != 4:
            raise ValueError(
                f"xstage.flash_attention: {name} must be 4-D [batch, seqlen, heads, head_dim]; "
                f"got shape {tuple(t.shape)}"
            )
    b, m, h, d = q.shape
    for what, n in (("batch", b), ("seqlen_q", m), ("heads", h), ("seqlen_k", k.shape[1])):
        if n > _INT32_MAX:
            raise ValueError(
                f"xstage.flash_attention: {what} is {n} (q shape {tuple(q.shape)}, k shape {tuple(k.shape)}); "
                f"the kernel's sizes are 32-bit: at most 2^31 - 1"
            )
    if b * h * ((m + 63) // 64) > _INT32_MAX:
        raise ValueError(
            f"xstage.flash_attention: batch * heads * ceil(seqlen_q / 64) = {b * h * ((m + 63) // 64)} output tiles "
            f"(q shape {tuple(q.shape)}) is more than one launch indexes (2^31 - 1): split the batch"
        )
    if d not in _HEAD_DIMS:
        raise ValueError(
            f"xstage.flash_attention: head_dim is {d} (q shape {tuple(q.shape)}); "
            f"the kernels are built for head_dim 64 and 128"
        )
    if k.shape[0] != b or k.shape[2] != h or k.shape[3] != d:
        raise ValueError(
            f"xstage.flash_attention: k shape {tuple(k.shape)} does not match q shape {tuple(q.shape)} "
            f"(batch, heads and head_dim must be equal; seqlen may differ)"
        )
    if v.shape != k.shape:
        raise ValueError(f"xstage.flash_attention: v shape {tuple(v.shape)} must equal k shape {tuple(k.shape)}")
    if b == 0 or m == 0 or h == 0 or k.shape[1] == 0:
        raise ValueError(
            f"xstage.flash_attention: empty attention (q shape {tuple(q.shape)}, k shape {tuple(k.shape)}); "
            f"batch, heads and both sequence lengths must be >= 1"
        )
    for name, t in zip(names, tensors):
        if t.stride(3) != 1:
            raise ValueError(
                f"xstage.flash_attention: {name} has head_dim stride {t.stride(3)}; the last (head_dim) "
                f"dimension must be contiguous (stride 1): pass {name}.contiguous()"
            )
        for dim, what in ((0, "batch"), (1, "seqlen"), (2, "heads")):
            if t.shape[dim] != 1 and (t.stride(dim) <= 0 or t.stride(dim) % 8 != 0 or t.stride(dim) >= _MAX_STRIDE):
                raise ValueError(
                    f"xstage.flash_attention: {name} has {what} stride {t.stride(dim)} (strides {tuple(t.stride())}); "
                    f"the kernel's TMA loads need positive strides that are multiples of 8 elements (16 bytes) "
                    f"and below 2^40 bytes: pass {name}.contiguous()"
                )
    if key_lengths is not None:
        _check_key_lengths(key_lengths, q)
    if not isinstance(softmax_scale, (float, int, torch.SymFloat, torch.SymInt)):
        raise TypeError(f"xstage.flash_attention: softmax_scale must be a float, got {type(softmax_scale).__name__}")
    if isinstance(softmax_scale, (float, int)) and (not math.isfinite(softmax_scale) or softmax_scale <= 0):
        raise ValueError(
            f"xstage.flash_attention: softmax_scale is {softmax_scale}; it must be finite and positive "
            f"(the usual value is 1/sqrt(head_dim))"
        )


def _check_key_lengths(key_lengths, q) -> None:
    """The metadata of key_lengths ([batch] int32 on q's device, contiguous). Its values stay on the device: the
    kernel clamps each to [1, seqlen_k] (reading them here would synchronise with the GPU)."""
    if not isinstance(key_lengths, torch.Tensor):
        raise TypeError(f"xstage.flash_attention: key_lengths must be a torch.Tensor or None, got {type(key_lengths).__name__}")
    if key_lengths.dtype != torch.int32:
        raise TypeError(
            f"xstage.flash_attention: key_lengths has dtype {key_lengths.dtype}; it must be torch.int32 "
            f"(convert with .to(torch.int32))"
        )
    if tuple(key_lengths.shape) != (q.shape[0],):
        raise ValueError(
            f"xstage.flash_attention: key_lengths has shape {tuple(key_lengths.shape)}; it must be [batch] = "
            f"[{q.shape[0]}] (one key length per sequence of q)"
        )
    if key_lengths.device != q.device:
        raise ValueError(
            f"xstage.flash_attention: key_lengths is on {key_lengths.device} but q is on {q.device}; they must be on one device"
        )
    if q.shape[0] > 1 and key_lengths.stride(0) != 1:
        raise ValueError(
            f"xstage.flash_attention: key_lengths has stride {key_lengths.stride(0)}; it must be contiguous: pass "
            f"key_lengths.contiguous()"
        )


_checked = _tensors.CheckedSignatures()


def _flash_attention_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float,
    return_lse: bool,
    key_lengths: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    if q.is_cuda and _ops.load_torch_library():  # from now on the C++ kernel takes CUDA tensors
        return _flash_attention_op(q, k, v, softmax_scale, return_lse, key_lengths)
    signature = _checked.of((q, k, v, key_lengths), softmax_scale)
    if not _checked.passed(signature):
        _check_inputs(q, k, v, softmax_scale, fake=False, key_lengths=key_lengths)
        _checked.add(signature)
    b, m, h, d = q.shape
    out = torch.empty((b, m, h, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, h, m) if return_lse else (0,), dtype=torch.float32, device=q.device)
    stream = _tensors.current_stream(q.device)
    _capi.flash_attention_forward(
        _c_tensor(q),
        _c_tensor(k),
        _c_tensor(v),
        _c_tensor(out),
        _c_tensor(lse) if return_lse else None,
        softmax_scale,
        stream,
        _c_tensor(key_lengths) if key_lengths is not None else None,
    )
    return out, lse


def _flash_attention_fake(q, k, v, softmax_scale, return_lse, key_lengths=None):
    _check_inputs(q, k, v, softmax_scale, fake=True, key_lengths=key_lengths)
    b, m, h, d = q.shape
    out = q.new_empty((b, m, h, d))
    lse = q.new_empty((b, h, m) if return_lse else (0,), dtype=torch.float32)
    return out, lse


_flash_attention_op = _ops.define("flash_attention", _flash_attention_impl, _flash_attention_fake)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float | None = None,
    return_lse: bool = False,
    key_lengths: torch.Tensor | None = None,
):
    """Full (non-causal) attention, out = softmax(softmax_scale * q k^T) v, per batch and head.

    q: [batch, seqlen_q, heads, head_dim], k and v: [batch, seqlen_k, heads, head_dim]; torch.bfloat16 on one
    CUDA device of a Hopper GPU; head_dim 64 or 128; any batch, heads and sequence lengths >= 1. Strides are
    free (views of a packed QKV projection or of [batch, heads, seqlen, head_dim] tensors are used as they
    are) as long as head_dim is contiguous and the other strides are multiples of 8 elements.
    softmax_scale defaults to 1/sqrt(head_dim).

    key_lengths: None (every key), or per-sequence key lengths, a [batch] torch.int32 tensor on q's device:
    sequence b attends to its first key_lengths[b] keys of k and v, the others are never read (a key-padding mask
    whose kept keys come first). Its values stay on the GPU (no host synchronisation; the call can be captured in a
    CUDA graph and fed new lengths): they are not checked, the kernel clamps each to [1, seqlen_k]. lse has the
    log-sum-exp over the sequence's own keys.

    Returns out ([batch, seqlen_q, heads, head_dim] bfloat16, contiguous), or (out, lse) with return_lse,
    lse being [batch, heads, seqlen_q] float32, the natural-log log-sum-exp of each row's scaled scores.
    Runs on torch.cuda.current_stream(). Forward only: a backward through it raises.
    Raises TypeError/ValueError for bad arguments, RuntimeError (xstage.PlatformError) when the GPU cannot
    run it, xstage.LibraryError when libxstage_c.so is missing.
    """
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"xstage.flash_attention: {name} must be a torch.Tensor, got {type(t).__name__}")
    if key_lengths is not None and not isinstance(key_lengths, torch.Tensor):
        _check_key_lengths(key_lengths, q)  # raises its TypeError
    if torch.compiler.is_compiling():
        # The checks traced as Python: an error is raised from here, as in eager, instead of surfacing from
        # the fake implementation wrapped in torch.compile's own error report.
        _check_inputs(q, k, v, 1.0 if softmax_scale is None else softmax_scale, fake=True, key_lengths=key_lengths)
    if softmax_scale is None:
        if q.dim() != 4:
            raise ValueError(
                f"xstage.flash_attention: q must be 4-D [batch, seqlen, heads, head_dim]; got shape {tuple(q.shape)}"
            )
        softmax_scale = 1.0 / math.sqrt(q.shape[3])
    elif isinstance(softmax_scale, (int, float)):
        softmax_scale = float(softmax_scale)
    try:
        if _ops.needs_autograd(q, k, v):
            out, lse = _ops.forward_only(
                "xstage.flash_attention", _flash_attention_op, q, k, v, softmax_scale, bool(return_lse), key_lengths
            )
        else:
            out, lse = _flash_attention_op(q, k, v, softmax_scale, bool(return_lse), key_lengths)
    except RuntimeError as e:
        _ops.raise_typed(e, lambda: _check_inputs(q, k, v, softmax_scale, fake=False, key_lengths=key_lengths))
        raise
    return (out, lse) if return_lse else out
