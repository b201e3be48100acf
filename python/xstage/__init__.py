"""xstage from PyTorch: xstage's Hopper kernels as PyTorch operators.

    import xstage
    out = xstage.flash_attention(q, k, v)        # [batch, seqlen, heads, head_dim] bf16, head_dim 64/128

    xstage.distributed.init()                    # once per process group (torchrun + NCCL), collective; one GPU
                                                 # without torch.distributed needs none (a local communicator)
    out = xstage.ulysses_attention(q, k, v)      # sequence-parallel: [batch, seqlen/P, heads, head_dim] per rank
    w = xstage.moe_pack_weights(w1, w2)          # once: this rank's experts in the layer's format
    y = xstage.moe(x, topk_ids, topk_weights, w.w1, w.w2)   # expert-parallel MoE layer
    moe = xstage.nn.MoE.from_weights(w1, w2, top_k=8)        # the same as a module

    import xstage.diffusers                      # diffusers' "xstage" attention backend and swap_moe (needs diffusers)

The kernels live in libxstage_c.so, a plain C library loaded with ctypes (see _capi.py and docs/PYTHON.md),
so one build works under any Python 3 and PyTorch version. Importing xstage needs neither a GPU nor the
library; the library is loaded on the first call.
"""

from __future__ import annotations

from ._capi import (
    InputError,
    LibraryError,
    PlatformError,
    XstageError,
    abi_version,
    check_device,
    library_path,
    library_version,
    load_library,
)
from . import distributed, nn
from .attention import flash_attention
from .moe import MoeWeights, moe, moe_pack_weights
from .ulysses import ulysses_attention

__version__ = "0.1.0"

__all__ = [
    "InputError",
    "LibraryError",
    "PlatformError",
    "XstageError",
    "abi_version",
    "check_device",
    "distributed",
    "flash_attention",
    "is_available",
    "library_path",
    "library_version",
    "load_library",
    "moe",
    "moe_pack_weights",
    "MoeWeights",
    "nn",
    "ulysses_attention",
]


def is_available(device: int | None = None) -> bool:
    """True if the C library loads and CUDA device `device` (default: torch's current one) is a Hopper GPU."""
    import torch

    try:
        load_library()
        if not torch.cuda.is_available():
            return False
        check_device(torch.cuda.current_device() if device is None else int(device))
    except XstageError:
        return False
    return True
