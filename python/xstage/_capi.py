"""ctypes binding of libxstage_c.so, xstage's C ABI (src/capi/xstage_c.h). No torch in this module.

The library is found at, in this order:
  1. the path in the environment variable XSTAGE_C_LIBRARY, if it is set;
  2. libxstage_c.so in this package's folder (where `pip install .` puts it).
It is loaded on first use (not at import), once per process.

Every C function returns a status; a non-zero one is raised here as InputError (2, a ValueError: fix the
arguments), PlatformError (3, a RuntimeError: the machine cannot run it) or XstageError (1), with the
library's message, which names the argument and the problem.
"""

from __future__ import annotations

import ctypes
import os
import threading

ABI_VERSION = 1  # XSTAGE_C_ABI_VERSION this binding is written for
MAX_NDIM = 8

OK = 0
ERROR_OTHER = 1
ERROR_INPUT = 2
ERROR_PLATFORM = 3

DTYPE_BFLOAT16 = 1
DTYPE_FLOAT16 = 2
DTYPE_FLOAT32 = 3
DTYPE_FLOAT8_E4M3 = 4
DTYPE_INT32 = 5
DTYPE_INT64 = 6
DTYPE_UINT8 = 7

DEVICE_CPU = -1

LIBRARY_NAME = "libxstage_c.so"
LIBRARY_ENV = "XSTAGE_C_LIBRARY"


class XstageError(RuntimeError):
    """An xstage call failed (status 1: neither bad input nor the platform)."""


class InputError(XstageError, ValueError):
    """Bad arguments (status 2): the message names the argument and what is wrong with it."""


class PlatformError(XstageError):
    """The machine cannot run the call (status 3): no GPU or driver, not a Hopper GPU, a CUDA error."""


class LibraryError(XstageError):
    """libxstage_c.so was not found, could not be loaded, or is of another ABI version."""


class Tensor(ctypes.Structure):
    """xstage_tensor: data pointer, shape, strides in elements, dtype code, device ordinal (-1: host)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("shape", ctypes.c_int64 * MAX_NDIM),
        ("strides", ctypes.c_int64 * MAX_NDIM),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


def make_tensor(data: int, shape, strides, dtype: int, device: int) -> Tensor:
    """An xstage_tensor from plain values (data is an address)."""
    ndim = len(shape)
    if len(strides) != ndim:
        raise InputError(f"shape {tuple(shape)} and strides {tuple(strides)} differ in length")
    if not 1 <= ndim <= MAX_NDIM:
        raise InputError(f"tensors of 1 to {MAX_NDIM} dimensions cross the C ABI; got {ndim}")
    t = Tensor()
    t.data = data
    t.ndim = ndim
    t.dtype = dtype
    t.device = device
    t.shape[:ndim] = [int(s) for s in shape]
    t.strides[:ndim] = [int(s) for s in strides]
    return t


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_path: str | None = None


def library_path() -> str:
    """The path the library is (or would be) loaded from."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)


def _declare(lib: ctypes.CDLL) -> None:
    tp = ctypes.POINTER(Tensor)
    lib.xstage_abi_version.argtypes = []
    lib.xstage_abi_version.restype = ctypes.c_int32
    lib.xstage_tensor_struct_size.argtypes = []
    lib.xstage_tensor_struct_size.restype = ctypes.c_size_t
    lib.xstage_version.argtypes = []
    lib.xstage_version.restype = ctypes.c_char_p
    lib.xstage_last_error.argtypes = []
    lib.xstage_last_error.restype = ctypes.c_char_p
    lib.xstage_check_device.argtypes = [ctypes.c_int32]
    lib.xstage_check_device.restype = ctypes.c_int
    lib.xstage_flash_attention_forward.argtypes = [tp, tp, tp, tp, tp, ctypes.c_float, ctypes.c_void_p]
    lib.xstage_flash_attention_forward.restype = ctypes.c_int


def load_library() -> ctypes.CDLL:
    """Loads libxstage_c.so (once) and checks its ABI version; raises LibraryError saying what to do."""
    global _lib, _lib_path
    lib = _lib
    if lib is not None:
        return lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        from_env = bool(os.environ.get(LIBRARY_ENV))
        if not os.path.isfile(path):
            if from_env:
                raise LibraryError(f"{LIBRARY_ENV}={path}: no such file (point it at a built libxstage_c.so)")
            raise LibraryError(
                f"xstage's C library is not built: {path} does not exist. Install the package with "
                f"`pip install .` from an xstage checkout, or build the library "
                f"(cmake --build <build dir> --target xstage_c) and set {LIBRARY_ENV}=<build dir>/{LIBRARY_NAME}"
            )
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryError(f"cannot load xstage's C library {path}: {e}") from None
        try:
            _declare(lib)
        except AttributeError as e:
            raise LibraryError(f"{path} is not xstage's C library or is too old: {e}") from None
        abi = lib.xstage_abi_version()
        if abi != ABI_VERSION:
            raise LibraryError(
                f"{path} has C ABI version {abi}; this xstage package needs version {ABI_VERSION} "
                f"(rebuild the library from the same checkout as the package)"
            )
        size = lib.xstage_tensor_struct_size()
        if size != ctypes.sizeof(Tensor):
            raise LibraryError(
                f"{path}: sizeof(xstage_tensor) is {size} bytes, the binding's is {ctypes.sizeof(Tensor)}"
            )
        _lib, _lib_path = lib, path
        return lib


def _raise_for(lib: ctypes.CDLL, status: int) -> None:
    if status == OK:
        return
    message = (lib.xstage_last_error() or b"").decode("utf-8", "replace") or f"status {status}"
    if status == ERROR_INPUT:
        raise InputError(message)
    if status == ERROR_PLATFORM:
        raise PlatformError(message)
    raise XstageError(message)


def abi_version() -> int:
    return load_library().xstage_abi_version()


def library_version() -> str:
    return load_library().xstage_version().decode()


def check_device(device: int) -> None:
    """Raises PlatformError unless CUDA device `device` can run xstage's kernels (sm_90: Hopper)."""
    lib = load_library()
    _raise_for(lib, lib.xstage_check_device(int(device)))


def flash_attention_forward(
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor | None, softmax_scale: float, stream: int
) -> None:
    """xstage_flash_attention_forward: enqueues the kernel on `stream` (a cudaStream_t as int; 0: legacy)."""
    lib = load_library()
    status = lib.xstage_flash_attention_forward(
        ctypes.byref(q),
        ctypes.byref(k),
        ctypes.byref(v),
        ctypes.byref(out),
        ctypes.byref(lse) if lse is not None else None,
        ctypes.c_float(softmax_scale),
        ctypes.c_void_p(stream or None),
    )
    _raise_for(lib, status)
