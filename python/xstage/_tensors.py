"""torch.Tensor <-> the C ABI's xstage_tensor, and the argument checks the operators share (they run on real,
fake and meta tensors alike: metadata only)."""

from __future__ import annotations

import torch

from . import _capi

DTYPE_CODES = {
    torch.bfloat16: _capi.DTYPE_BFLOAT16,
    torch.float16: _capi.DTYPE_FLOAT16,
    torch.float32: _capi.DTYPE_FLOAT32,
    torch.int32: _capi.DTYPE_INT32,
    torch.int64: _capi.DTYPE_INT64,
    torch.uint8: _capi.DTYPE_UINT8,
}
FLOAT8 = getattr(torch, "float8_e4m3fn", None)
if FLOAT8 is not None:
    DTYPE_CODES[FLOAT8] = _capi.DTYPE_FLOAT8_E4M3


_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}


def meta_tensor(t: _capi.Tensor) -> torch.Tensor:
    """A meta tensor with the shape, strides and dtype of an xstage_tensor (what the ops' checks read)."""
    dtype = _DTYPES.get(t.dtype)
    if dtype is None:
        raise TypeError(f"a tensor has a dtype xstage does not take (xstage_tensor dtype code {t.dtype})")
    if not 0 <= t.ndim <= _capi.MAX_NDIM:
        raise ValueError(f"a tensor has {t.ndim} dimensions")
    return torch.empty_strided(tuple(t.shape[: t.ndim]), tuple(t.strides[: t.ndim]), dtype=dtype, device="meta")


def c_tensor(t: torch.Tensor) -> _capi.Tensor:
    """The xstage_tensor of a torch tensor (pointer, shape, strides in elements, dtype code, device)."""
    device = t.device
    return _capi.make_tensor(
        t.data_ptr(),
        t.shape,
        t.stride(),
        DTYPE_CODES.get(t.dtype, 0),
        device.index if device.type == "cuda" else _capi.DEVICE_CPU,
    )


# torch's own accessor for the raw current stream (what code torch.compile generates calls); the public
# torch.cuda.current_stream(device).cuda_stream builds a Stream object per call, ~5 us on the H200 machine's host.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream(device: torch.device) -> int:
    """The cudaStream_t of torch's current stream on `device`, as an int."""
    if _raw_stream is not None:
        return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


class CheckedSignatures:
    """The signatures (tensor metadata and the other arguments) of real inputs an op's Python checks have
    passed. The checks look at metadata only, so a call whose signature passed before skips them; the C library
    still checks what only memory shows (pointers, alignment). Bounded: forgotten past 4096 signatures."""

    def __init__(self):
        self._seen = set()

    @staticmethod
    def of(tensors, *args) -> tuple:
        return tuple((t.shape, t.stride(), t.dtype, t.device) if t is not None else None for t in tensors) + args

    def passed(self, signature: tuple) -> bool:
        return signature in self._seen

    def add(self, signature: tuple) -> None:
        if len(self._seen) >= 4096:
            self._seen.clear()
        self._seen.add(signature)


def require_tensors(op: str, named: dict) -> None:
    """TypeError unless every value is a torch.Tensor."""
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")


def require_dtype(op: str, name: str, t: torch.Tensor, dtypes, hint: str) -> None:
    if t.dtype not in dtypes:
        want = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"{op}: {name} has dtype {t.dtype}; it must be {want}{hint}")


def require_cuda(op: str, named: dict, *, fake: bool, first: str) -> None:
    """ValueError unless every tensor is a CUDA tensor (or, in a fake implementation, a meta tensor) on the
    device of `named[first]`."""
    ref = named[first]
    for name, t in named.items():
        dev = t.device.type
        if dev != "cuda" and not (fake and dev == "meta"):
            hint = "" if torch.cuda.is_available() else " (and this PyTorch sees no CUDA GPU)"
            raise ValueError(
                f"{op}: {name} is a {dev} tensor; {op} runs on CUDA tensors of a Hopper (sm_90) GPU{hint}"
            )
        if t.device != ref.device:
            raise ValueError(f"{op}: {name} is on {t.device} but {first} is on {ref.device}; all tensors must be on one device")


def require_contiguous(op: str, named: dict) -> None:
    for name, t in named.items():
        if not t.is_contiguous():
            raise ValueError(
                f"{op}: {name} (shape {tuple(t.shape)}, strides {tuple(t.stride())}) is not contiguous; "
                f"it must be densely packed row-major: pass {name}.contiguous()"
            )
