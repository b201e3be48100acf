"""xstage.ulysses_attention: Ulysses sequence-parallel attention over a process group, as a PyTorch operator.

Each rank holds its shard of the sequence, q, k, v [batch, seqlen/P, heads, head_dim] bf16, and gets the
same shard of the attention output over the whole sequence: the pre-attention all-to-all (to all rows of
heads/P heads), xstage's FlashAttention on them, and the post-attention all-to-all back. Three paths
(docs/ATTENTION.md): "serial" (NCCL all-to-all, attention, NCCL all-to-all), "fused_post" (the post-attention
all-to-all inside the attention kernel's epilogue, straight into the owners' NVLink windows) and "fused_both"
(that, and Q, K and V pushed into every rank's inbox head by head: the first wave's heads on every SM before the
attention kernel, the rest chunk by chunk by a pusher kernel on a few SMs of its own while it runs). DEFAULT_ULYSSES_PATH is the measured best; every other caller (xstage.diffusers) takes it from here.
Registered as
torch.ops.xstage.ulysses_attention (xstage._ops: torch.library, with a fake implementation that needs no
communicator), on the current CUDA stream, no host synchronisation: torch.compile(fullgraph=True) and CUDA
graphs take it.
"""

from __future__ import annotations

import functools

import torch

from . import _capi, _ops, _tensors, distributed

__all__ = ["ulysses_attention", "DEFAULT_ULYSSES_PATH"]

# The path ulysses_attention takes when none is given, and the diffusers backend's. fused_both measures faster on one
# GPU with virtual ranks (docs/ATTENTION.md), but its remote pushes have not run across NVLink yet: the default stays
# the path that has.
DEFAULT_ULYSSES_PATH = "fused_post"

_OP = "xstage.ulysses_attention"
_HEAD_DIMS = (64, 128)
_INT32_MAX = 2**31 - 1
_STORE_PATHS = {"tma": _capi.A2A_STORE_TMA, "st_global": _capi.A2A_STORE_ST_GLOBAL}


@functools.lru_cache(maxsize=None)
def _path_code(path: str) -> int:
    """XSTAGE_ULYSSES_* of a path name: "serial", "fused_post" or "fused_both". The names are the C library's;
    xstage.InputError (a ValueError) lists them for any other."""
    return _capi.ulysses_path_from_name(path)


def _check_inputs(q, k, v, world_size, path, store_path, *, fake: bool) -> None:
    named = {"q": q, "k": k, "v": v}
    _tensors.require_tensors(_OP, named)
    for name, t in named.items():
        _tensors.require_dtype(_OP, name, t, (torch.bfloat16,), " (convert with .to(torch.bfloat16))")
    _tensors.require_cuda(_OP, named, fake=fake, first="q")
    for name, t in named.items():
        if t.dim() != 4:
            raise ValueError(
                f"{_OP}: {name} must be 4-D [batch, seqlen/P, heads, head_dim] (this rank's shard of the sequence); "
                f"got shape {tuple(t.shape)}"
            )
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(
            f"{_OP}: q, k and v must have one shape (self-attention over one sequence); got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    b, ms, h, d = q.shape
    if d not in _HEAD_DIMS:
        raise ValueError(f"{_OP}: head_dim is {d} (q shape {tuple(q.shape)}); the kernels are built for head_dim 64 and 128")
    if b == 0 or ms == 0 or h == 0:
        raise ValueError(f"{_OP}: empty attention (q shape {tuple(q.shape)}); batch, seqlen/P and heads must be >= 1")
    ranks = world_size or 1
    for what, n in (("batch", b), ("seqlen (seqlen/P times the group's size)", ms * ranks), ("heads", h)):
        if n > _INT32_MAX:
            raise ValueError(f"{_OP}: {what} is {n} (q shape {tuple(q.shape)}); the layer's sizes are 32-bit: at most 2^31 - 1")
    if b * (h // ranks) * ((ms * ranks + 63) // 64) > _INT32_MAX:
        raise ValueError(f"{_OP}: q shape {tuple(q.shape)} has more output tiles than one launch indexes (2^31 - 1): split the batch")
    _tensors.require_contiguous(_OP, named)
    if world_size is not None and h % world_size != 0:
        raise ValueError(
            f"{_OP}: {h} heads cannot be split over the group's {world_size} ranks; Ulysses gives each rank "
            f"heads/P whole heads, so heads must be a multiple of the group size"
        )
    if not torch.compiler.is_compiling():  # a C call; under torch.compile the fake implementation makes it
        _path_code(path)
    if store_path not in _STORE_PATHS:
        raise ValueError(f"{_OP}: store_path is {store_path!r}; it must be one of {sorted(_STORE_PATHS)}")


_checked = _tensors.CheckedSignatures()


def _ulysses_impl(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: str, path: str, store_path: str, timeout_s: float
) -> torch.Tensor:
    signature = _checked.of((q, k, v), group, path, store_path)
    if _checked.passed(signature):
        comm = distributed.communicator_for_key(group, _OP, q.device.index)
    else:
        _check_inputs(q, k, v, None, path, store_path, fake=False)  # the inputs' errors before a missing communicator's
        comm = distributed.communicator_for_key(group, _OP, q.device.index)
        _check_inputs(q, k, v, comm.world_size, path, store_path, fake=False)
        _checked.add(signature)
    if q.device.index != comm.device:
        raise ValueError(
            f"{_OP}: the tensors are on {q.device} but this rank's xstage communicator is on cuda:{comm.device} "
            f"(the current device when xstage.distributed.init ran)"
        )
    b, ms, h, d = q.shape
    seqlen = ms * comm.world_size
    layer = comm.layer(
        ("ulysses", b, seqlen, h, d, store_path, float(timeout_s)),
        lambda: _capi.ulysses_create(comm.handle, b, seqlen, h, d, _STORE_PATHS[store_path], timeout_s),
    )
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    c = _tensors.c_tensor
    _capi.ulysses_forward(layer, c(q), c(k), c(v), c(out), _path_code(path), _tensors.current_stream(q.device))
    return out


def _ulysses_fake(q, k, v, group, path, store_path, timeout_s):
    _check_inputs(q, k, v, distributed.world_size_for_key(group), path, store_path, fake=True)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


_ulysses_op = _ops.define("ulysses_attention", _ulysses_impl, _ulysses_fake)


def ulysses_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group=None,
    path: str = DEFAULT_ULYSSES_PATH,
    store_path: str = "tma",
    timeout_s: float = 10.0,
) -> torch.Tensor:
    """Full (non-causal) self-attention over a sequence sharded across the ranks of `group`.

    q, k, v: this rank's rows of the sequence, [batch, seqlen/P, heads, head_dim] torch.bfloat16, contiguous,
    on this rank's GPU (a Hopper GPU; P = the group's size; rank r holds rows [r*seqlen/P, (r+1)*seqlen/P)).
    heads must be a multiple of P; head_dim 64 or 128; softmax scale 1/sqrt(head_dim). Returns out, the
    same shard of softmax(q k^T / sqrt(d)) v over the whole sequence, [batch, seqlen/P, heads, head_dim] bf16.

    group: a torch.distributed process group for which xstage.distributed.init(group) was called (default:
    the default group; a process without torch.distributed, or whose default group has one rank, needs no
    init: a local communicator of one rank is built on the first call). path: "fused_post" (the post-attention
    all-to-all inside the attention kernel), "fused_both" (that, and Q, K, V pushed by a pusher kernel
    while the attention kernel runs) or "serial" (NCCL all-to-all, attention, NCCL all-to-all); the same on every rank; all
    three give bit-identical outputs. Default DEFAULT_ULYSSES_PATH. store_path: how the fused epilogue stores
    to peers ("tma" or "st_global"). timeout_s: every device-side wait gives up after it (a failure surfaces
    through xstage.distributed.poll() or the next call).

    Collective: every rank calls it with the same shapes and options. The first call for a shape builds the
    layer (buffers, symmetric windows; blocks the host): warm up before CUDA-graph capture. Forward only: a
    backward through it raises.
    """
    if torch.compiler.is_compiling():
        _check_inputs(q, k, v, None, path, store_path, fake=True)  # raised from here under torch.compile, as in eager
    args = (q, k, v, distributed.group_key(group), path, store_path, float(timeout_s))
    if _ops.needs_autograd(q, k, v):
        return _ops.forward_only(_OP, _ulysses_op, *args)
    return _ulysses_op(*args)
