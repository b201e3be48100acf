"""libxstage_torch.so, the ops' C++ kernels for CUDA tensors through PyTorch's stable ABI, on a machine without a
GPU: it builds, loads under this torch beside libxstage_c.so, adds CUDA kernels to flash_attention and moe without
changing their schemas, needs nothing of torch but its stable C ABI, and leaves fake tensors and torch.compile to
the Python fake implementations. The kernels themselves run here through torch's dispatcher on host tensors
(redispatched to the CUDA key): their arguments cross, outputs are allocated, the C library's checks answer and
their errors come back tagged; the MoE kernel asks Python for its layer. (On a GPU: tests/python/gpu/.)"""

import ctypes
import importlib
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

import xstage
from support import Capture, cuda
from xstage import _capi, _ops

BF16 = torch.bfloat16
CUDA_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
ATTENTION_SCHEMA = (
    "xstage::flash_attention(Tensor q, Tensor k, Tensor v, float softmax_scale, bool return_lse, Tensor? key_lengths=None) "
    "-> (Tensor, Tensor)"
)


@pytest.fixture(scope="module")
def torch_library(c_library):
    """The loaded libxstage_torch.so. Skips where torch predates the stable ABI or none was built and none was
    named; fails where XSTAGE_TORCH_LIBRARY names one that does not load."""
    path = _ops.torch_library_path()
    if path is None:
        pytest.skip(f"torch {torch.__version__} predates the stable ABI (or XSTAGE_TORCH_LIBRARY=none)")
    if not os.path.isfile(path) and not os.environ.get(_ops.TORCH_LIBRARY_ENV):
        pytest.skip(f"{_ops.TORCH_LIBRARY_NAME} not built: set {_ops.TORCH_LIBRARY_ENV}=<build dir>/{_ops.TORCH_LIBRARY_NAME}")
    _ops.load_torch_library()
    assert _ops.torch_library() == path
    return path


def test_loads_once_and_adds_cuda_kernels(torch_library):
    assert not _ops.load_torch_library()  # already loaded: no second load, no re-dispatch
    for op in ("flash_attention", "moe"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"xstage::{op}", "CUDA")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"xstage::{op}", "CompositeExplicitAutograd")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("xstage::ulysses_attention", "CUDA")


def test_schemas_unchanged(torch_library):
    assert str(torch.ops.xstage.flash_attention.default._schema) == ATTENTION_SCHEMA
    assert str(torch.ops.xstage.moe.default._schema).startswith("xstage::moe(Tensor x, Tensor topk_ids, Tensor topk_weights")


def _readelf(path, flag):
    if shutil.which("readelf") is None:
        pytest.skip("readelf not found")
    return subprocess.run(["readelf", flag, "-W", path], capture_output=True, text=True, check=True).stdout


def test_binds_to_the_torch_of_the_process(torch_library):
    """Only sonames and $ORIGIN: no path into the torch it was built against."""
    dynamic = _readelf(torch_library, "-d")
    needed = set(re.findall(r"\(NEEDED\).*\[(.+)\]", dynamic))
    assert {"libtorch_cpu.so", "libtorch_cuda.so", "libxstage_c.so"} <= needed, needed
    assert all(not n.startswith(("libc10", "libtorch_python", "libcudart")) for n in needed), needed
    paths = re.findall(r"\((?:RPATH|RUNPATH)\).*\[(.+)\]", dynamic)
    assert paths in ([], ["$ORIGIN"]), paths


def test_uses_only_the_stable_c_abi(torch_library):
    """Every symbol it takes from torch is a function of the C shim (aoti_torch_*, torch_*): no C++ symbol of
    libtorch or c10, whose ABI changes from one torch release to the next."""
    undefined = [line.split()[-1] for line in _readelf(torch_library, "--dyn-syms").splitlines() if " UND " in line]
    names = [u.split("@")[0] for u in undefined if u and u != "0"]
    torch_cpp = [n for n in names if re.match(r"_ZN(K)?(3c10|2at|5torch|6caffe2)", n)]
    assert torch_cpp == []
    assert any(n.startswith("aoti_torch_") for n in names)
    assert {"xstage_flash_attention_forward_key_lengths_trusted", "xstage_moe_forward_trusted"} <= set(names)


def test_attention_kernel_reaches_the_c_checks(torch_library):
    q = torch.zeros(1, 64, 2, 64, dtype=BF16)
    with pytest.raises(RuntimeError, match=r"^xstage\.InputError: xstage_flash_attention_forward: q is in host memory"):
        torch.ops.xstage.flash_attention.default.redispatch(CUDA_KEY, q, q, q, 0.125, False)
    with pytest.raises(RuntimeError, match=r"^xstage\.InputError: .*head_dim is 96"):
        q96 = torch.zeros(1, 64, 2, 96, dtype=BF16)
        torch.ops.xstage.flash_attention.default.redispatch(CUDA_KEY, q96, q96, q96, 0.125, True)
    with pytest.raises(RuntimeError, match=r"^xstage\.InputError: .*q must be 4-D .*got 3 dimensions"):
        q3 = torch.zeros(64, 2, 64, dtype=BF16)
        torch.ops.xstage.flash_attention.default.redispatch(CUDA_KEY, q3, q3, q3, 0.125, False)


def test_tagged_errors_are_raised_typed():
    with pytest.raises(xstage.InputError, match="^bad alignment$"):
        _ops.raise_typed(RuntimeError("xstage.InputError: bad alignment"), lambda: None)
    with pytest.raises(xstage.PlatformError, match="^no GPU$"):
        _ops.raise_typed(RuntimeError("xstage.PlatformError: no GPU"), lambda: None)
    # the op's own checks name the problem first
    with pytest.raises(TypeError, match="checked"):
        _ops.raise_typed(RuntimeError("xstage.InputError: k has dtype float16"), lambda: (_ for _ in ()).throw(TypeError("checked")))
    _ops.raise_typed(RuntimeError("CUDA error: something else"), lambda: pytest.fail("not an xstage error"))  # returns


def _moe_operands(ids_dtype=torch.int32, E=8, K=2, H=256, I=128, T=16):
    x = torch.zeros(T, H, dtype=BF16)
    ids = torch.zeros(T, K, dtype=ids_dtype)
    wts = torch.zeros(T, K, dtype=torch.float32)
    return x, ids, wts, torch.zeros(E, 2 * I, H, dtype=BF16), torch.zeros(E, H, I, dtype=BF16)


def _moe_redispatch(x, ids, wts, w1, w2, group="xstage-test-no-such-group", max_tokens=0):
    return torch.ops.xstage.moe.default.redispatch(CUDA_KEY, x, ids, wts, w1, w2, None, None, group, max_tokens, 0, "auto", 0, 1, 10.0)


def test_moe_kernel_asks_python_for_its_layer(torch_library):
    """No layer cached: the kernel asks moe.py, which checks the operands (as meta tensors) before it looks for the
    communicator; the errors come back through the C++ kernel with their status."""
    with pytest.raises(RuntimeError, match=r"^xstage\.InputError: xstage\.moe: topk_ids has dtype torch\.int64"):
        _moe_redispatch(*_moe_operands(ids_dtype=torch.int64))
    with pytest.raises(RuntimeError, match=r"^xstage\.XstageError: xstage\.moe: xstage\.distributed is not initialised"):
        _moe_redispatch(*_moe_operands())
    x, ids, wts, w1, w2 = _moe_operands()
    with pytest.raises(RuntimeError, match=r"^xstage\.InputError: xstage\.moe: x must be 2-D"):  # no key: Python's checks
        _moe_redispatch(x[None], ids, wts, w1, w2)


def test_moe_kernel_caches_the_layer_per_configuration(torch_library, monkeypatch):
    """Python is asked once per configuration: with max_tokens any token count shares the layer; without it (one
    rank) each count is its own question; destroying a layer empties the cache. The answer here is a zeroed
    buffer, which the C library reads as a layer without its C++ object and refuses."""
    fake_layer = ctypes.create_string_buffer(4096)
    asked = []

    def resolve(operands, group, max_tokens, *rest):
        asked.append((group, max_tokens, operands[0].shape[0]))
        return ctypes.addressof(fake_layer)

    monkeypatch.setattr(_ops, "_moe_resolver", resolve)
    for forget in _capi.forget_layer_handles:
        forget()
    x, ids, wts, w1, w2 = _moe_operands(T=16)

    def call(t, max_tokens, group="g"):
        with pytest.raises(RuntimeError, match=r"^xstage\.InputError: xstage_moe_forward: "):
            _moe_redispatch(x[:t], ids[:t], wts[:t], w1, w2, group=group, max_tokens=max_tokens)

    for t in (16, 16, 5, 0):
        call(t, 64)
    assert asked == [("g", 64, 16)]
    call(16, 64, group="other")
    call(16, 0)
    call(5, 0)
    call(5, 0)
    assert asked[1:] == [("other", 64, 16), ("g", 0, 16), ("g", 0, 5)]
    for forget in _capi.forget_layer_handles:
        forget()
    call(16, 64)
    assert len(asked) == 5


def test_moe_kernel_leaks_nothing_per_call(torch_library, monkeypatch):
    """The kernel takes its two string arguments without TORCH_BOX, whose conversion (torch 2.10, 2.11) leaks a copy
    of each per call: 5000 calls with long group and schedule names would leave ~2 MB behind (glibc's count of the
    heap bytes in use)."""
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("no glibc mallinfo2 (glibc < 2.33)")
    libc.mallinfo2.restype = MallInfo2
    fake_layer = ctypes.create_string_buffer(4096)
    monkeypatch.setattr(_ops, "_moe_resolver", lambda *a: ctypes.addressof(fake_layer))
    for forget in _capi.forget_layer_handles:
        forget()
    x, ids, wts, w1, w2 = _moe_operands()

    def call():
        with pytest.raises(RuntimeError, match=r"^xstage\.InputError: xstage_moe_forward: "):  # the C library refuses the fake
            torch.ops.xstage.moe.default.redispatch(CUDA_KEY, x, ids, wts, w1, w2, None, None, "g" * 200, 64, 0, "s" * 100, 0, 1, 10.0)

    for _ in range(500):
        call()
    before = libc.mallinfo2().uordblks
    for _ in range(5000):
        call()
    assert libc.mallinfo2().uordblks - before < 100_000


def test_creating_a_communicator_forgets_the_cached_layers(torch_library, monkeypatch):
    """A configuration's layer may belong to another communicator once one is created (init() after calls on the
    local one): the kernel asks again. (Without a GPU the creation itself then fails.)"""
    fake_layer = ctypes.create_string_buffer(4096)
    asked = []
    monkeypatch.setattr(_ops, "_moe_resolver", lambda *a: asked.append(a) or ctypes.addressof(fake_layer))
    for forget in _capi.forget_layer_handles:
        forget()
    x, ids, wts, w1, w2 = _moe_operands()
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"^xstage\.InputError: xstage_moe_forward: "):
            _moe_redispatch(x, ids, wts, w1, w2, group="g", max_tokens=64)
        if len(asked) == 1:
            with pytest.raises(xstage.XstageError):
                _capi.comm_create(bytes(_capi.COMM_UNIQUE_ID_BYTES), 0, 1, 0)
    assert len(asked) == 2


def test_forgetting_layers_is_safe(torch_library):
    for forget in _capi.forget_layer_handles:
        forget()
    with pytest.raises(RuntimeError, match="not initialised"):
        _moe_redispatch(*_moe_operands())


def test_moe_callbacks_turn_exceptions_into_statuses(torch_library, monkeypatch):
    """The two callbacks as the kernel calls them (ctypes function pointers): an answer, or a status and a message
    for an exception, never an exception into C++."""
    message = ctypes.create_string_buffer(64)
    monkeypatch.setattr(_ops, "_moe_failed", lambda layer, error: f"{error} (layer {layer})")
    assert _ops._failed_thunk(1234, b"xstage_moe_forward: it ended", message, 64) == _capi.ERROR_PLATFORM
    assert message.value == b"xstage_moe_forward: it ended (layer 1234)"
    monkeypatch.setattr(_ops, "_moe_failed", lambda layer, error: (_ for _ in ()).throw(xstage.InputError("no")))
    assert _ops._failed_thunk(1234, b"it ended", message, 64) == _capi.ERROR_INPUT
    assert message.value == b"it ended (and then: no)"
    monkeypatch.setattr(_ops, "_moe_resolver", lambda *a: (_ for _ in ()).throw(ValueError("x" * 100)))
    request, layer = _ops.MoeRequest(), ctypes.c_void_p()
    request.group, request.schedule = b"", b"auto"
    assert _ops._resolve_thunk(ctypes.pointer(request), ctypes.pointer(layer), message, 64) == _capi.ERROR_INPUT
    assert message.value == b"x" * 63  # cut to the buffer, NUL-terminated


class _Comm:
    def __init__(self, world_size):
        self.world_size, self.dropped = world_size, []

    def drop_layer(self, key):
        self.dropped.append(key)


@pytest.mark.parametrize("ended", [False, True])
@pytest.mark.parametrize("world_size", [1, 2])
def test_a_failed_call_raises_what_the_python_path_raises(monkeypatch, ended, world_size):
    """moe._failure decides for both paths (the ctypes path's _moe_impl, the kernel's _layer_failed): a layer an
    earlier call ended is dropped on one rank, needs teardown() and init() on more; any other platform error
    passes as it is."""
    from xstage import distributed

    moe = importlib.import_module("xstage.moe")  # the module (xstage.moe is the function)
    comm, key, layer = _Comm(world_size), ("moe", 1), 4096
    monkeypatch.setattr(_capi, "moe_ended", lambda handle: handle == layer and ended)
    monkeypatch.setattr(distributed, "find_layer", lambda handle: (comm, key) if handle == layer else None)
    error = xstage.PlatformError("xstage_moe_forward: the layer has ended")
    raised = moe._failure(comm, key, layer, error)
    text = moe._layer_failed(layer, str(error))
    if not ended:
        assert raised is error and text == str(error) and comm.dropped == []
        return
    assert isinstance(raised, xstage.PlatformError) and str(raised) == text
    assert text.startswith(str(error))
    if world_size == 1:
        assert "the layer was dropped; the next call builds a new one" in text and comm.dropped == [key, key]
    else:
        assert "teardown() and then xstage.distributed.init()" in text and comm.dropped == []
    assert moe._layer_failed(layer + 1, "other") == "other"  # a handle no communicator holds


def test_the_resolver_takes_the_local_communicator_of_the_tensors_device(torch_library):
    """The default group without torch.distributed: the layer's communicator is the local one of x's device (here,
    without a GPU, building it fails as the platform's error, not as a missing init())."""
    from xstage import _tensors

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU (the GPU tests build the local communicator: test_diffusers_gpu.py)")
    moe = importlib.import_module("xstage.moe")
    operands = [_tensors.c_tensor(t) for t in _moe_operands()] + [None, None]
    for d in operands[:5]:
        d.device = 0
    with pytest.raises(xstage.PlatformError):
        moe._resolve_layer(operands, "", 64, 0, "auto", 0, 1, 10.0)
    operands[0].device = _capi.DEVICE_CPU
    with pytest.raises(RuntimeError, match="not initialised"):
        moe._resolve_layer(operands, "", 64, 0, "auto", 0, 1, 10.0)


def test_fake_and_compile_stay_python(torch_library, fake):
    torch._dynamo.reset()
    backend = Capture()
    q = cuda(2, 300, 4, 128)
    out, lse = torch.compile(lambda q: xstage.flash_attention(q, q, q, return_lse=True), fullgraph=True, backend=backend)(q)
    assert out.shape == q.shape and lse.shape == (2, 4, 300)
    assert backend.ops().count(torch.ops.xstage.flash_attention.default) == 1
    with pytest.raises(ValueError, match="head_dim is 96"):
        xstage.flash_attention(cuda(1, 64, 2, 96), cuda(1, 64, 2, 96), cuda(1, 64, 2, 96))


def test_meta_tensors_compile(torch_library):
    torch._dynamo.reset()
    q = torch.empty(2, 513, 4, 128, dtype=BF16, device="meta")
    y = torch.compile(lambda q: xstage.flash_attention(q, q, q).flatten(2), fullgraph=True, backend="aot_eager")(q)
    assert y.shape == (2, 513, 4 * 128) and y.device.type == "meta"


def test_host_tensors_keep_the_python_error(torch_library):
    q = torch.zeros(1, 64, 2, 64, dtype=BF16)
    with pytest.raises(ValueError, match="q is a cpu tensor"):
        xstage.flash_attention(q, q, q)


_PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(xstage.__file__)))


def _python(code, **env):
    env = {**os.environ, "PYTHONPATH": _PYTHONPATH, **env}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return run.returncode, run.stdout + run.stderr


def test_none_keeps_the_ctypes_path():
    rc, out = _python("from xstage import _ops; print(_ops.torch_library_path(), _ops.load_torch_library(), _ops.torch_library())",
                      XSTAGE_TORCH_LIBRARY="none")
    assert rc == 0 and out.split() == ["None", "False", "None"], out


def test_a_named_library_that_is_missing_is_an_error(tmp_path):
    missing = str(tmp_path / "libxstage_torch.so")
    rc, out = _python("from xstage import _ops; _ops.load_torch_library()", XSTAGE_TORCH_LIBRARY=missing)
    if "predates" in out or _ops._torch_version() < _ops.STABLE_ABI_TORCH:
        pytest.skip("torch predates the stable ABI")
    assert rc != 0 and "LibraryError" in out and "no such file" in out, out


def test_default_place_without_a_library_keeps_the_ctypes_path(tmp_path, c_library):
    """A C library whose folder has no libxstage_torch.so (a build of the xstage_c target alone)."""
    lib = tmp_path / "libxstage_c.so"
    shutil.copy(_capi.library_path(), lib)
    env = {k: v for k, v in os.environ.items() if k != _ops.TORCH_LIBRARY_ENV}
    env.update({_capi.LIBRARY_ENV: str(lib), "PYTHONPATH": _PYTHONPATH})
    run = subprocess.run([sys.executable, "-c", "from xstage import _ops; print(_ops.load_torch_library(), _ops.torch_library())"],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout.split() == ["False", "None"], run.stdout + run.stderr
