"""How xstage's operators are registered with torch.

Every op is defined here from Python: one torch.library.Library for the "xstage" namespace, each op's schema
inferred from its implementation's annotations, the implementation registered for every backend
(CompositeExplicitAutograd: the body rejects what it cannot run, with an error that names the problem) and a
fake implementation for torch.compile and fake tensors. This is the lower-level torch.library API rather than
torch.library.custom_op, which registers the same but wraps each call in Python layers (autograd, output
aliasing checks, a dynamo guard): ~10 us per call on the GPU machine's host.

The ops are forward-only (inference). The public functions (xstage.flash_attention, ulysses_attention, moe)
route a call that autograd would record through `forward_only`, whose backward raises; a call under
torch.no_grad() or on tensors that need no gradient goes to the op directly. torch.library.register_autograd
would do the same at the op, but its autograd kernel is Python that runs on every call, requires_grad or not:
host time on every eager call for what only a training mistake needs.

Where torch has the stable C ABI (>= STABLE_ABI_TORCH), libxstage_torch.so (src/torch_ops/) adds C++ kernels
for CUDA tensors to flash_attention and moe, loaded on the first CUDA call of either (load_torch_library):
torch's dispatcher then calls C++ directly, which allocates the outputs and calls the C library, instead of
the Python implementation and its ctypes descriptors (docs/PYTHON.md, "Host time per call"). Their errors
arrive as RuntimeError("xstage.<class>: ..."); the public functions re-raise them typed (raise_typed). The
schemas, fake implementations and other devices' kernels are the Python ones either way.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import List

import torch

from . import _capi

_LIB = torch.library.Library("xstage", "DEF")
# Public as torch.library.infer_schema since torch 2.5; torch 2.4 has it in torch._library.
_infer_schema = getattr(torch.library, "infer_schema", None)
if _infer_schema is None:
    from torch._library.infer_schema import infer_schema as _infer_schema


def define(name: str, impl, fake) -> torch._ops.OpOverload:
    """Defines torch.ops.xstage.<name> with impl (annotated: the schema comes from its signature, no argument
    mutated) and fake; returns the op's OpOverload (torch.ops.xstage.<name>.default), the cheapest to call."""
    _LIB.define(name + _infer_schema(impl, mutates_args=()))
    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"xstage::{name}", fake, lib=_LIB)
    return getattr(torch.ops.xstage, name).default


def _no_backward_impl(grad: torch.Tensor, op: str, shape: List[int]) -> torch.Tensor:
    raise RuntimeError(
        f"{op} is forward-only (inference): it has no backward, so gradients cannot flow through it. "
        f"Run the model under torch.no_grad() or torch.inference_mode(), or use another attention backend "
        f"for training"
    )


def _no_backward_fake(grad, op, shape):
    return grad.new_empty(shape)


# The backward of every xstage op: an op of its own, so that torch.compile puts it into the backward graph
# (a Python raise would fail the compilation of the forward) and it raises when the backward runs.
_no_backward = define("no_backward", _no_backward_impl, _no_backward_fake)


class _ForwardOnly(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, *args):
        ctx.name = name
        ctx.shapes = [a.shape if isinstance(a, torch.Tensor) else None for a in args]
        return op(*args)

    @staticmethod
    def backward(ctx, *grads):
        grad = next(g for g in grads if g is not None)
        needs = ctx.needs_input_grad[2:]
        return (None, None) + tuple(
            _no_backward(grad, ctx.name, list(shape)) if need else None for need, shape in zip(needs, ctx.shapes)
        )


def needs_autograd(*tensors) -> bool:
    """Whether autograd would record a call on these tensors (grad mode on and one of them requires grad)."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:  # a loop, not any(<generator>): this runs on every eager call
        if t is not None and t.requires_grad:
            return True
    return False


def forward_only(name: str, op, *args):
    """op(*args) recorded by autograd with a backward that raises (name: the public function, for the message)."""
    return _ForwardOnly.apply(name, op, *args)


# --- libxstage_torch.so ------------------------------------------------------------------------------------

STABLE_ABI_TORCH = (2, 10)  # the oldest torch libxstage_torch.so is built for (src/torch_ops/CMakeLists.txt)
TORCH_LIBRARY_NAME = "libxstage_torch.so"
TORCH_LIBRARY_ENV = "XSTAGE_TORCH_LIBRARY"  # a path, or "none" for the ctypes path on any torch

_state_lock = threading.Lock()
_attempted = False
_loaded_path: str | None = None
_torch_lib: ctypes.CDLL | None = None


def _torch_version() -> tuple:
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def torch_library_path() -> str | None:
    """Where libxstage_torch.so is looked for: $XSTAGE_TORCH_LIBRARY, else beside the C library
    (xstage.library_path()); None where it is not used (XSTAGE_TORCH_LIBRARY=none, or torch older than
    STABLE_ABI_TORCH)."""
    env = os.environ.get(TORCH_LIBRARY_ENV)
    if env is not None and env.strip().lower() == "none":
        return None
    if _torch_version() < STABLE_ABI_TORCH:
        return None
    return env or os.path.join(os.path.dirname(_capi.library_path()), TORCH_LIBRARY_NAME)


def torch_library() -> str | None:
    """The path of the loaded libxstage_torch.so, or None while the Python implementations serve CUDA tensors
    (not loaded yet, not built, disabled or torch too old)."""
    return _loaded_path


def load_torch_library() -> bool:
    """Loads libxstage_torch.so once, after the C library; True only for the call that loaded it (the caller, a
    Python implementation on its first CUDA call, then re-dispatches to the C++ kernel). A missing file at the
    default place means the ctypes path; one named by XSTAGE_TORCH_LIBRARY, or one that does not load, raises
    xstage.LibraryError."""
    global _attempted, _loaded_path, _torch_lib
    if _attempted:
        return False
    with _state_lock:
        if _attempted:
            return False
        path = torch_library_path()
        if path is None or (not os.path.isfile(path) and not os.environ.get(TORCH_LIBRARY_ENV)):
            _attempted = True
            return False
        if not os.path.isfile(path):
            raise _capi.LibraryError(f"{TORCH_LIBRARY_ENV}={path}: no such file (point it at a built {TORCH_LIBRARY_NAME}, or set it to none)")
        _capi.load_library()  # its C ABI first: libxstage_torch.so binds to the loaded libxstage_c.so by soname
        try:
            torch.ops.load_library(path)
            lib = ctypes.CDLL(path)
            lib.xstage_torch_moe_request_size.restype = ctypes.c_size_t
            if lib.xstage_torch_moe_request_size() != ctypes.sizeof(MoeRequest):
                raise OSError(f"sizeof(xstage_torch_moe_request) is {lib.xstage_torch_moe_request_size()} bytes, "
                              f"the binding's is {ctypes.sizeof(MoeRequest)}")
            lib.xstage_torch_set_moe_callbacks.argtypes = [_RESOLVE, _FAILED]
            lib.xstage_torch_set_moe_callbacks.restype = None
            lib.xstage_torch_forget_moe_layers.argtypes = []
            lib.xstage_torch_forget_moe_layers.restype = None
        except (OSError, AttributeError) as e:  # AttributeError: a function missing (a library of another checkout)
            raise _capi.LibraryError(
                f"cannot load {path}: {e} (rebuild it from the same checkout as libxstage_c.so, or set "
                f"{TORCH_LIBRARY_ENV}=none for the ctypes path)"
            ) from None
        lib.xstage_torch_set_moe_callbacks(_resolve_thunk, _failed_thunk)
        _capi.forget_layer_handles.append(lib.xstage_torch_forget_moe_layers)
        _torch_lib, _loaded_path, _attempted = lib, path, True
        return True


_TAGS = {"xstage.InputError": _capi.InputError, "xstage.PlatformError": _capi.PlatformError,
         "xstage.XstageError": _capi.XstageError}


def raise_typed(error: RuntimeError, diagnose) -> None:
    """For an error of a C++ kernel (RuntimeError("xstage.<class>: message")): runs diagnose() (the op's Python
    checks, which raise their TypeError/ValueError for what they find), then raises the tagged class. Returns
    for any other error (the caller re-raises it as it is)."""
    text = str(error)
    tag, sep, message = text.partition(": ")
    cls = _TAGS.get(tag) if sep else None
    if cls is None:
        return
    diagnose()
    raise cls(message) from None


# The MoE kernel's two questions to python/xstage/moe.py (src/torch_ops/ops.cpp): which layer serves a call whose
# configuration has none cached (xstage_torch_moe_request), and what a call of a layer that failed with
# XSTAGE_ERROR_PLATFORM raises (a layer ended by an earlier call is dropped or must be rebuilt).
class MoeRequest(ctypes.Structure):
    _fields_ = [
        ("operands", ctypes.POINTER(_capi.Tensor) * 7),
        ("group", ctypes.c_char_p),
        ("schedule", ctypes.c_char_p),
        ("max_tokens", ctypes.c_int64),
        ("tile_n", ctypes.c_int64),
        ("cluster_n", ctypes.c_int64),
        ("cluster_m", ctypes.c_int64),
        ("timeout_s", ctypes.c_double),
    ]


_RESOLVE = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(MoeRequest), ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_size_t
)
_FAILED = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
_moe_resolver = None
_moe_failed = None


def set_moe_callbacks(resolve, failed) -> None:
    """resolve(operands, group, max_tokens, tile_n, schedule, cluster_n, cluster_m, timeout_s) -> layer handle, where
    operands are the seven xstage_tensor descriptors (None for an absent scale); raises what is wrong.
    failed(layer, message) -> the message of the xstage.PlatformError to raise for a call of that layer that failed
    with `message`."""
    global _moe_resolver, _moe_failed
    _moe_resolver, _moe_failed = resolve, failed


def _status(e: BaseException) -> int:
    if isinstance(e, (_capi.InputError, ValueError, TypeError)):
        return _capi.ERROR_INPUT
    if isinstance(e, _capi.PlatformError):
        return _capi.ERROR_PLATFORM
    return _capi.ERROR_OTHER


def _write(message, size: int, text: str) -> None:
    data = text.encode("utf-8", "replace")[: size - 1] + b"\0"
    ctypes.memmove(message, data, len(data))


# A ctypes callback must not raise: an exception becomes a status and a message for the C++ caller.


def _resolve(request, layer, message, size) -> int:
    try:
        r = request.contents
        operands = [r.operands[i].contents if r.operands[i] else None for i in range(7)]
        layer[0] = _moe_resolver(
            operands, r.group.decode(), r.max_tokens, r.tile_n, r.schedule.decode(), r.cluster_n, r.cluster_m, r.timeout_s
        )
        return _capi.OK
    except BaseException as e:  # noqa: BLE001 - every failure goes back to C++ as a status
        _write(message, size, str(e))
        return _status(e)


def _failed(layer, error, message, size) -> int:
    try:
        _write(message, size, _moe_failed(layer, error.decode("utf-8", "replace")))
        return _capi.ERROR_PLATFORM
    except BaseException as e:  # noqa: BLE001
        _write(message, size, f"{error.decode('utf-8', 'replace')} (and then: {e})")
        return _status(e)


_resolve_thunk = _RESOLVE(_resolve)
_failed_thunk = _FAILED(_failed)
