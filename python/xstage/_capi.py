"""ctypes binding of libxstage_c.so, xstage's C ABI (src/capi/xstage_c.h). No torch in this module.

The library is found at, in this order:
  1. the path in the environment variable XSTAGE_C_LIBRARY, if it is set;
  2. libxstage_c.so in this package's folder (where `pip install .` puts it).
It is loaded on first use (not at import), once per process. It needs NCCL (libnccl.so.2, 2.28): in a process
that has imported a CUDA build of torch, torch has loaded it already and the library uses that copy; else it is
preloaded from XSTAGE_NCCL_LIBRARY if set, else from the nvidia-nccl wheel's folder (nvidia/nccl/lib) if that
package is installed, else the dynamic loader looks for it (LD_LIBRARY_PATH, ldconfig).

Every C function returns a status; a non-zero one is raised here as InputError (2, a ValueError: fix the
arguments), PlatformError (3, a RuntimeError: the machine cannot run it) or XstageError (1), with the
library's message, which names the argument and the problem.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import threading

ABI_VERSION = 2  # XSTAGE_C_ABI_VERSION this binding is written for
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
NCCL_SONAME = "libnccl.so.2"
NCCL_ENV = "XSTAGE_NCCL_LIBRARY"

COMM_UNIQUE_ID_BYTES = 128
A2A_STORE_TMA = 0
A2A_STORE_ST_GLOBAL = 1
ULYSSES_SERIAL = 0
ULYSSES_FUSED_POST = 1
ULYSSES_FUSED_BOTH = 2
MOE_SCHEDULE_INTERLEAVED = 0
MOE_SCHEDULE_EXPERT_WAVE = 1
MOE_SCHEDULE_AUTO = 2


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


class MoeConfig(ctypes.Structure):
    """xstage_moe_config (xstage_c.h): the MoE layer's problem and options; zero fields take the defaults."""

    _fields_ = [
        ("experts", ctypes.c_int32),
        ("top_k", ctypes.c_int32),
        ("hidden", ctypes.c_int32),
        ("inter", ctypes.c_int32),
        ("max_tokens", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("tile_n", ctypes.c_int32),
        ("schedule", ctypes.c_int32),
        ("wave_lag", ctypes.c_int32),
        ("wave_experts", ctypes.c_int32),
        ("lead_rows", ctypes.c_int32),
        ("cluster_n", ctypes.c_int32),
        ("cluster_m", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("capacity_slack", ctypes.c_double),
        ("timeout_s", ctypes.c_double),
    ]


def make_tensor(data: int, shape, strides, dtype: int, device: int) -> Tensor:
    """An xstage_tensor from plain values (data is an address)."""
    ndim = len(shape)
    if len(strides) != ndim:
        raise InputError(f"shape {tuple(shape)} and strides {tuple(strides)} differ in length")
    if not 1 <= ndim <= MAX_NDIM:
        raise InputError(f"tensors of 1 to {MAX_NDIM} dimensions cross the C ABI; got {ndim}")
    t = Tensor(data, ndim=ndim, dtype=dtype, device=device)
    t.shape[:ndim] = shape
    t.strides[:ndim] = strides
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
    # The _trusted twins are called by libxstage_torch.so (src/torch_ops), declared here so that a C library
    # without them is refused at load.
    for name in ("xstage_flash_attention_forward", "xstage_flash_attention_forward_trusted"):
        getattr(lib, name).argtypes = [tp, tp, tp, tp, tp, ctypes.c_float, ctypes.c_void_p]
        getattr(lib, name).restype = ctypes.c_int
    for name in ("xstage_flash_attention_forward_key_lengths", "xstage_flash_attention_forward_key_lengths_trusted"):
        getattr(lib, name).argtypes = [tp, tp, tp, tp, tp, tp, ctypes.c_float, ctypes.c_void_p]
        getattr(lib, name).restype = ctypes.c_int
    h, i32, vp = ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p
    i32p, hp = ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_void_p)
    cp = ctypes.POINTER(MoeConfig)
    signatures = {
        "xstage_comm_unique_id": [ctypes.c_char_p],
        "xstage_comm_create": [ctypes.c_char_p, i32, i32, i32, hp],
        "xstage_comm_info": [h, i32p, i32p, i32p, i32p],
        "xstage_comm_barrier": [h],
        "xstage_comm_destroy": [h],
        "xstage_ulysses_path_from_name": [ctypes.c_char_p, i32p],
        "xstage_ulysses_check_shape": [i32, i32, i32, i32, i32],
        "xstage_ulysses_create": [h, i32, i32, i32, i32, i32, ctypes.c_double, hp],
        "xstage_ulysses_forward": [h, tp, tp, tp, tp, i32, vp],
        "xstage_ulysses_poll": [h],
        "xstage_ulysses_destroy": [h],
        "xstage_moe_default_tile_n": [i32, i32, i32, i32p],
        "xstage_moe_schedule_from_name": [ctypes.c_char_p, i32p, i32p],
        "xstage_moe_check_config": [cp, i32],
        "xstage_moe_create": [h, cp, hp],
        "xstage_moe_forward": [h, tp, tp, tp, tp, tp, tp, tp, tp, vp],
        "xstage_moe_forward_trusted": [h, tp, tp, tp, tp, tp, tp, tp, tp, vp],
        "xstage_moe_poll": [h],
        "xstage_moe_ended": [h, i32p],
        "xstage_moe_destroy": [h],
        "xstage_moe_pack_w1": [tp, tp, i32, vp],
        "xstage_moe_quantize_weights_fp8": [tp, tp, tp, vp],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    lib.xstage_moe_config_struct_size.argtypes = []
    lib.xstage_moe_config_struct_size.restype = ctypes.c_size_t


def _nccl_in_process() -> bool:
    """Whether a libnccl.so is mapped into this process already (torch's, typically)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libnccl.so" in line for line in maps)
    except OSError:
        return False


def _preload_nccl() -> str | None:
    """Loads libnccl.so.2 with RTLD_GLOBAL where the dynamic loader would not find the right one by itself
    (see the module docstring); returns the path it loaded, or None. Raises LibraryError for a bad
    XSTAGE_NCCL_LIBRARY."""
    path = os.environ.get(NCCL_ENV)
    if not path:
        if _nccl_in_process():
            return None
        try:
            spec = importlib.util.find_spec("nvidia.nccl")
        except (ImportError, ValueError):
            spec = None
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        candidates = [os.path.join(f, "lib", NCCL_SONAME) for f in folders]
        path = next((c for c in candidates if os.path.isfile(c)), None)
        if path is None:
            return None
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise LibraryError(f"cannot load NCCL from {path} ({NCCL_ENV} or the nvidia-nccl package): {e}") from None
    return path


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
        _preload_nccl()
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            hint = ""
            if NCCL_SONAME in str(e):
                hint = (
                    f" (it needs NCCL 2.28: import torch first (a CUDA build loads its NCCL), install the "
                    f"nvidia-nccl-cu13 wheel, add the folder of {NCCL_SONAME} to LD_LIBRARY_PATH, or set "
                    f"{NCCL_ENV}=/path/to/{NCCL_SONAME})"
                )
            raise LibraryError(f"cannot load xstage's C library {path}: {e}{hint}") from None
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
        size = lib.xstage_moe_config_struct_size()
        if size != ctypes.sizeof(MoeConfig):
            raise LibraryError(
                f"{path}: sizeof(xstage_moe_config) is {size} bytes, the binding's is {ctypes.sizeof(MoeConfig)}"
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
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor | None, softmax_scale: float, stream: int,
    key_lengths: Tensor | None = None,
) -> None:
    """xstage_flash_attention_forward_key_lengths (key_lengths None: every key): enqueues the kernel on `stream` (a
    cudaStream_t as int; 0: legacy)."""
    lib = load_library()
    status = lib.xstage_flash_attention_forward_key_lengths(
        ctypes.byref(q),
        ctypes.byref(k),
        ctypes.byref(v),
        ctypes.byref(key_lengths) if key_lengths is not None else None,
        ctypes.byref(out),
        ctypes.byref(lse) if lse is not None else None,
        ctypes.c_float(softmax_scale),
        ctypes.c_void_p(stream or None),
    )
    _raise_for(lib, status)


def _call(name: str, *args) -> None:
    lib = load_library()
    _raise_for(lib, getattr(lib, name)(*args))


def _ref(t: Tensor | None):
    return ctypes.byref(t) if t is not None else None


def _stream(stream: int):
    return ctypes.c_void_p(stream or None)


# --- communicator -----------------------------------------------------------------------------------------


def comm_unique_id() -> bytes:
    """A new NCCL unique id (128 bytes) for xstage_comm_create; one rank makes it and hands it to all."""
    buf = ctypes.create_string_buffer(COMM_UNIQUE_ID_BYTES)
    _call("xstage_comm_unique_id", buf)
    return buf.raw


# Called (without arguments) before any MoE layer is destroyed and before a communicator is created:
# libxstage_torch.so forgets the layer handles it cached per configuration (python/xstage/_ops.py), which could
# dangle, or belong to another communicator than the one its group or device now finds.
forget_layer_handles: list = []


def comm_create(unique_id: bytes, rank: int, world_size: int, device: int) -> int:
    """Collective: returns the communicator handle (an address)."""
    if len(unique_id) != COMM_UNIQUE_ID_BYTES:
        raise InputError(f"the NCCL unique id has {len(unique_id)} bytes; it must have {COMM_UNIQUE_ID_BYTES}")
    for forget in forget_layer_handles:
        forget()
    out = ctypes.c_void_p()
    _call("xstage_comm_create", bytes(unique_id), int(rank), int(world_size), int(device), ctypes.byref(out))
    return out.value


def comm_info(handle: int) -> tuple[int, int, int, int]:
    """(rank, world_size, device, lsa_size) of a communicator."""
    vals = [ctypes.c_int32() for _ in range(4)]
    _call("xstage_comm_info", ctypes.c_void_p(handle), *(ctypes.byref(v) for v in vals))
    return tuple(v.value for v in vals)


def comm_barrier(handle: int) -> None:
    _call("xstage_comm_barrier", ctypes.c_void_p(handle))


def comm_destroy(handle: int) -> None:
    _call("xstage_comm_destroy", ctypes.c_void_p(handle))


# --- Ulysses attention ------------------------------------------------------------------------------------


def ulysses_path_from_name(name: str) -> int:
    """ULYSSES_* of a path name (the C library's list); InputError naming the choices."""
    path = ctypes.c_int32()
    _call("xstage_ulysses_path_from_name", str(name).encode(), ctypes.byref(path))
    return path.value


def ulysses_check_shape(batch: int, seqlen: int, heads: int, head_dim: int, ranks: int) -> None:
    _call("xstage_ulysses_check_shape", int(batch), int(seqlen), int(heads), int(head_dim), int(ranks))


def ulysses_create(comm: int, batch: int, seqlen: int, heads: int, head_dim: int, store_path: int, timeout_s: float) -> int:
    out = ctypes.c_void_p()
    _call(
        "xstage_ulysses_create",
        ctypes.c_void_p(comm),
        int(batch),
        int(seqlen),
        int(heads),
        int(head_dim),
        int(store_path),
        float(timeout_s),
        ctypes.byref(out),
    )
    return out.value


def ulysses_forward(layer: int, q: Tensor, k: Tensor, v: Tensor, out: Tensor, path: int, stream: int) -> None:
    _call("xstage_ulysses_forward", ctypes.c_void_p(layer), _ref(q), _ref(k), _ref(v), _ref(out), int(path), _stream(stream))


def ulysses_poll(layer: int) -> None:
    _call("xstage_ulysses_poll", ctypes.c_void_p(layer))


def ulysses_destroy(layer: int) -> None:
    _call("xstage_ulysses_destroy", ctypes.c_void_p(layer))


# --- MoE --------------------------------------------------------------------------------------------------


def moe_default_tile_n(dtype: int, hidden: int, inter: int) -> int:
    out = ctypes.c_int32()
    _call("xstage_moe_default_tile_n", int(dtype), int(hidden), int(inter), ctypes.byref(out))
    return out.value


def moe_schedule_from_name(name: str) -> tuple[int, int]:
    """(MOE_SCHEDULE_*, wave_lag) of a schedule name (the C library's list); InputError naming the choices."""
    schedule, wave_lag = ctypes.c_int32(), ctypes.c_int32()
    _call("xstage_moe_schedule_from_name", str(name).encode(), ctypes.byref(schedule), ctypes.byref(wave_lag))
    return schedule.value, wave_lag.value


def moe_check_config(config: MoeConfig, ranks: int) -> None:
    _call("xstage_moe_check_config", ctypes.byref(config), int(ranks))


def moe_create(comm: int, config: MoeConfig) -> int:
    out = ctypes.c_void_p()
    _call("xstage_moe_create", ctypes.c_void_p(comm), ctypes.byref(config), ctypes.byref(out))
    return out.value


def moe_forward(layer: int, tokens, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, out, stream: int) -> None:
    _call(
        "xstage_moe_forward",
        ctypes.c_void_p(layer),
        *(_ref(t) for t in (tokens, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, out)),
        _stream(stream),
    )


def moe_poll(layer: int) -> None:
    _call("xstage_moe_poll", ctypes.c_void_p(layer))


def moe_ended(layer: int) -> bool:
    """Whether a failure of an earlier call has ended the layer (it refuses further calls)."""
    ended = ctypes.c_int32()
    _call("xstage_moe_ended", ctypes.c_void_p(layer), ctypes.byref(ended))
    return bool(ended.value)


def moe_destroy(layer: int) -> None:
    for forget in forget_layer_handles:
        forget()
    _call("xstage_moe_destroy", ctypes.c_void_p(layer))


def moe_pack_w1(logical: Tensor, packed: Tensor, tile_n: int, stream: int) -> None:
    _call("xstage_moe_pack_w1", _ref(logical), _ref(packed), int(tile_n), _stream(stream))


def moe_quantize_weights_fp8(w: Tensor, codes: Tensor, scales: Tensor, stream: int) -> None:
    _call("xstage_moe_quantize_weights_fp8", _ref(w), _ref(codes), _ref(scales), _stream(stream))
