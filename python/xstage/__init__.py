"""xstage from PyTorch: xstage's Hopper kernels as PyTorch operators.

    import xstage
    out = xstage.flash_attention(q, k, v)        # [batch, seqlen, heads, head_dim] bf16, head_dim 64/128

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
from .attention import flash_attention

__version__ = "0.1.0"

__all__ = [
    "InputError",
    "LibraryError",
    "PlatformError",
    "XstageError",
    "abi_version",
    "check_device",
    "flash_attention",
    "is_available",
    "library_path",
    "library_version",
    "load_library",
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
