"""Every bad input raises a Python exception that names the problem, on a machine without a GPU:
  - xstage.flash_attention on fake CUDA tensors (FakeTensorMode: the checks the op makes before the C call,
    the same ones torch.compile runs at trace time) and on real CPU tensors;
  - the C library's own checks, called through ctypes with made-up device pointers (nothing is
    dereferenced: argument errors are found before CUDA is touched)."""

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import xstage
from support import cuda
from xstage import _capi

BF16 = torch.bfloat16


def test_valid_fake_call_gives_shapes(fake):
    q, k = cuda(2, 300, 5, 128), cuda(2, 77, 5, 128)
    out = xstage.flash_attention(q, k, k)
    assert out.shape == q.shape and out.dtype == BF16 and out.device == q.device and out.is_contiguous()
    out, lse = xstage.flash_attention(q, k, k, return_lse=True)
    assert lse.shape == (2, 5, 300) and lse.dtype == torch.float32 and lse.is_contiguous()


@pytest.mark.parametrize(
    "dtype_q,dtype_kv,name",
    [(torch.float16, BF16, "q"), (torch.float32, BF16, "q"), (BF16, torch.float16, "k")],
)
def test_wrong_dtype(fake, dtype_q, dtype_kv, name):
    q, k = cuda(1, 64, 2, 64, dtype=dtype_q), cuda(1, 64, 2, 64, dtype=dtype_kv)
    with pytest.raises(TypeError, match=rf"{name} has dtype torch\.\w+; q, k and v must be torch.bfloat16"):
        xstage.flash_attention(q, k, k)


def test_not_a_tensor(fake):
    q = cuda(1, 64, 2, 64)
    with pytest.raises(TypeError, match="k must be a torch.Tensor, got list"):
        xstage.flash_attention(q, [1, 2], q)


@pytest.mark.parametrize("shape", [(64, 2, 64), (1, 1, 64, 2, 64), (64,)])
def test_wrong_ndim(fake, shape):
    q = cuda(*shape)
    with pytest.raises(ValueError, match=r"q must be 4-D \[batch, seqlen, heads, head_dim\]"):
        xstage.flash_attention(q, q, q)
    with pytest.raises(ValueError, match=r"must be 4-D"):
        xstage.flash_attention(q, q, q, softmax_scale=0.1)


@pytest.mark.parametrize("head_dim", [32, 96, 256, 80])
def test_unsupported_head_dim(fake, head_dim):
    q = cuda(1, 64, 2, head_dim)
    with pytest.raises(ValueError, match=rf"head_dim is {head_dim} .*built for head_dim 64 and 128"):
        xstage.flash_attention(q, q, q)


@pytest.mark.parametrize(
    "k_shape,v_shape,message",
    [
        ((1, 64, 3, 64), (1, 64, 3, 64), r"k shape \(1, 64, 3, 64\) does not match q shape"),
        ((2, 64, 2, 64), (2, 64, 2, 64), r"k shape .* does not match q shape"),
        ((1, 64, 2, 128), (1, 64, 2, 128), r"k shape .* does not match q shape"),
        ((1, 64, 2, 64), (1, 63, 2, 64), r"v shape \(1, 63, 2, 64\) must equal k shape"),
        ((1, 0, 2, 64), (1, 0, 2, 64), r"empty attention"),
    ],
)
def test_mismatched_shapes(fake, k_shape, v_shape, message):
    q = cuda(1, 64, 2, 64)
    with pytest.raises(ValueError, match=message):
        xstage.flash_attention(q, cuda(*k_shape), cuda(*v_shape))


def test_seqlens_may_differ(fake):
    out = xstage.flash_attention(cuda(1, 1, 2, 64), cuda(1, 5000, 2, 64), cuda(1, 5000, 2, 64))
    assert out.shape == (1, 1, 2, 64)


def test_head_dim_not_contiguous(fake):
    q = cuda(1, 64, 128, 2).transpose(2, 3)  # [1, 64, 2, 128], head_dim stride 2
    with pytest.raises(ValueError, match=r"q has head_dim stride 2; .*must be contiguous.*q.contiguous\(\)"):
        xstage.flash_attention(q, q, q)


def test_stride_not_multiple_of_8(fake):
    q = cuda(1, 64, 2 * 64 + 4)[:, :, : 2 * 64].unflatten(-1, (2, 64))  # row stride 132 elements
    with pytest.raises(ValueError, match=r"q has seqlen stride 132 .*multiples of 8 elements"):
        xstage.flash_attention(q, q, q)


def test_strided_views_are_accepted(fake):
    qkv = cuda(2, 333, 3, 7, 64)  # a packed QKV projection: three views, no copy
    q, k, v = qkv.unbind(2)
    assert xstage.flash_attention(q, k, v).shape == (2, 333, 7, 64)
    bhsd = cuda(2, 7, 333, 128)  # [batch, heads, seq, d] as SDPA takes it, seen as [batch, seq, heads, d]
    x = bhsd.transpose(1, 2)
    assert xstage.flash_attention(x, x, x).shape == (2, 333, 7, 128)
    one = cuda(1, 1, 1, 64)[:, :, :, :]  # size-1 dimensions: their strides do not matter
    assert xstage.flash_attention(one, one, one).shape == (1, 1, 1, 64)


@pytest.mark.fake_cuda1
def test_mixed_devices(fake):
    q, k = cuda(1, 64, 2, 64, device="cuda:0"), cuda(1, 64, 2, 64, device="cuda:1")
    with pytest.raises(ValueError, match=r"k is on cuda:1 but q is on cuda:0"):
        xstage.flash_attention(q, k, k)


@pytest.mark.parametrize("scale", [0.0, -0.2, math.inf, math.nan])
def test_bad_softmax_scale(fake, scale):
    q = cuda(1, 64, 2, 64)
    with pytest.raises(ValueError, match="softmax_scale is .* must be finite and positive"):
        xstage.flash_attention(q, q, q, softmax_scale=scale)


def test_key_lengths_give_the_same_shapes(fake):
    q, k = cuda(3, 300, 5, 128), cuda(3, 77, 5, 128)
    lengths = cuda(3, dtype=torch.int32)
    out, lse = xstage.flash_attention(q, k, k, return_lse=True, key_lengths=lengths)
    assert out.shape == q.shape and lse.shape == (3, 5, 300)
    assert xstage.flash_attention(q[:1], k[:1], k[:1], key_lengths=cuda(1, dtype=torch.int32)[::1]).shape == (1, 300, 5, 128)
    one = cuda(4, dtype=torch.int32)[::4]  # batch 1: the stride of a single length does not matter
    assert xstage.flash_attention(q[:1], k[:1], k[:1], key_lengths=one).shape == (1, 300, 5, 128)


@pytest.mark.parametrize(
    "lengths,error,message",
    [
        (lambda: [3, 3], TypeError, r"key_lengths must be a torch.Tensor or None, got list"),
        (lambda: cuda(3, dtype=torch.int64), TypeError, r"key_lengths has dtype torch.int64; it must be torch.int32"),
        (lambda: cuda(3, dtype=torch.float32), TypeError, r"key_lengths has dtype torch.float32"),
        (lambda: cuda(2, dtype=torch.int32), ValueError, r"key_lengths has shape \(2,\); it must be \[batch\] = \[3\]"),
        (lambda: cuda(3, 1, dtype=torch.int32), ValueError, r"key_lengths has shape \(3, 1\)"),
        (lambda: cuda(6, dtype=torch.int32)[::2], ValueError, r"key_lengths has stride 2; it must be contiguous"),
        (lambda: torch.empty(3, dtype=torch.int32, device="cpu"), ValueError, r"key_lengths is on cpu but q is on cuda:0"),
    ],
)
def test_bad_key_lengths(fake, lengths, error, message):
    q = cuda(3, 64, 2, 64)
    with pytest.raises(error, match=message):
        xstage.flash_attention(q, q, q, key_lengths=lengths())


def test_cpu_tensors_say_cuda_is_needed():
    q = torch.zeros(1, 64, 2, 64, dtype=BF16)
    with pytest.raises(ValueError, match=r"q is a cpu tensor; xstage.flash_attention runs on CUDA tensors"):
        xstage.flash_attention(q, q, q)
    with pytest.raises(ValueError, match=r"cpu tensor"):
        torch.ops.xstage.flash_attention(q, q, q, 0.125, False)


def test_cpu_tensors_without_gpu_mention_it():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    q = torch.zeros(1, 64, 2, 64, dtype=BF16)
    with pytest.raises(ValueError, match=r"this PyTorch sees no CUDA GPU"):
        xstage.flash_attention(q, q, q)


def test_meta_tensors_only_in_fake_mode():
    q = torch.empty(1, 64, 2, 64, dtype=BF16, device="meta")
    out = xstage.flash_attention(q, q, q)  # meta dispatches to the fake implementation: shapes only
    assert out.shape == q.shape and out.device.type == "meta"


# --- the C library's checks, through ctypes ------------------------------------------------------------

ADDR = 1 << 20  # a made-up, 16-byte aligned device address; never dereferenced


def ct(shape, dtype=_capi.DTYPE_BFLOAT16, device=0, data=ADDR, strides=None):
    if strides is None:
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
    return _capi.make_tensor(data, shape, strides, dtype, device)


Q = [1, 100, 2, 64]
C_CASES = {
    "dtype": ((ct(Q, dtype=_capi.DTYPE_FLOAT16), ct(Q), ct(Q), ct(Q), None), "q has dtype float16; it must be bfloat16"),
    "out_dtype": ((ct(Q), ct(Q), ct(Q), ct(Q, dtype=_capi.DTYPE_FLOAT32), None), "out has dtype float32"),
    "ndim": ((ct([100, 2, 64]), ct(Q), ct(Q), ct(Q), None), r"q must be 4-D \[batch, seqlen, heads, head_dim\]; got shape \[100, 2, 64\]"),
    "head_dim": ((ct([1, 100, 2, 96]),) * 4 + (None,), r"head_dim is 96 .*built for head_dim 64 and 128"),
    "k_heads": ((ct(Q), ct([1, 100, 3, 64]), ct([1, 100, 3, 64]), ct(Q), None), r"k shape \[1, 100, 3, 64\] does not match q shape"),
    "v_len": ((ct(Q), ct(Q), ct([1, 99, 2, 64]), ct(Q), None), r"v shape \[1, 99, 2, 64\] must equal k shape"),
    "out_shape": ((ct(Q), ct(Q), ct(Q), ct([1, 100, 2, 128]), None), r"out shape .* must equal q shape"),
    "head_dim_stride": ((ct(Q, strides=[12800, 128, 1, 2]), ct(Q), ct(Q), ct(Q), None), "q has head_dim stride 2"),
    "row_stride": ((ct(Q, strides=[12800, 129, 64, 1]), ct(Q), ct(Q), ct(Q), None), r"Q row stride is 129 elements.*multiple of 16 bytes"),
    "host": ((ct(Q, device=-1), ct(Q), ct(Q), ct(Q), None), r"q is in host memory"),
    "devices": ((ct(Q), ct(Q, device=1), ct(Q), ct(Q), None), "k is on CUDA device 1 but q is on CUDA device 0"),
    "lse_shape": ((ct(Q), ct(Q), ct(Q), ct(Q), ct([1, 100, 2], dtype=_capi.DTYPE_FLOAT32)), r"lse shape \[1, 100, 2\] must be \[batch, heads, seqlen_q\] = \[1, 2, 100\]"),
    "lse_dtype": ((ct(Q), ct(Q), ct(Q), ct(Q), ct([1, 2, 100])), "lse has dtype bfloat16; it must be float32"),
    "lse_strides": ((ct(Q), ct(Q), ct(Q), ct(Q), ct([1, 2, 100], dtype=_capi.DTYPE_FLOAT32, strides=[200, 1, 2])), "lse must be contiguous"),
    "null": ((ct(Q, data=0), ct(Q), ct(Q), ct(Q), None), "Q pointer is null"),
    "alignment": ((ct(Q, data=ADDR + 8), ct(Q), ct(Q), ct(Q), None), "not 16-byte aligned"),
    "empty": ((ct([1, 0, 2, 64]), ct(Q), ct(Q), ct([1, 0, 2, 64]), None), "empty attention"),
}


I32 = _capi.DTYPE_INT32
# Per-sequence key lengths (the C library checks their metadata and alignment, never their values).
LENGTH_CASES = {
    "dtype": (ct([1], dtype=_capi.DTYPE_INT64), "key_lengths has dtype int64; it must be int32"),
    "shape": (ct([2], dtype=I32), r"key_lengths has shape \[2\]; it must be \[batch\] = \[1\]"),
    "ndim": (ct([1, 1], dtype=I32), r"key_lengths has shape \[1, 1\]; it must be \[batch\]"),
    "host": (ct([1], dtype=I32, device=-1), r"key_lengths is in host memory"),
    "device": (ct([1], dtype=I32, device=1), r"key_lengths is on CUDA device 1 but q is on CUDA device 0"),
    "null": (ct([1], dtype=I32, data=0), r"key_lengths has a NULL data pointer"),
    "alignment": (ct([1], dtype=I32, data=ADDR + 2), r"key_lengths's data pointer is not 4-byte aligned"),
}


@pytest.mark.parametrize("case", sorted(LENGTH_CASES))
def test_c_library_rejects_bad_key_lengths(c_library, case):
    lengths, message = LENGTH_CASES[case]
    with pytest.raises(xstage.InputError, match=message) as info:
        _capi.flash_attention_forward(ct(Q), ct(Q), ct(Q), ct(Q), None, 0.125, 0, lengths)
    assert str(info.value).startswith("xstage_flash_attention_forward: ")


def test_c_library_rejects_non_contiguous_key_lengths(c_library):
    q = ct([3, 100, 2, 64])
    with pytest.raises(xstage.InputError, match=r"key_lengths is not contiguous \(shape \[3\], strides \[2\]\)"):
        _capi.flash_attention_forward(q, q, q, q, None, 0.125, 0, ct([3], dtype=I32, strides=[2]))


def test_c_library_takes_key_lengths_of_any_value_without_gpu(c_library):
    """The values are never read on the host (a made-up device address): the call gets past every argument check
    to CUDA, which fails only for want of a GPU."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    q = ct([3, 100, 2, 64])
    with pytest.raises(xstage.PlatformError, match="CUDA is not usable"):
        _capi.flash_attention_forward(q, q, q, q, None, 0.125, 0, ct([3], dtype=I32, data=ADDR + 4))


@pytest.mark.parametrize("case", sorted(C_CASES))
def test_c_library_rejects(c_library, case):
    args, message = C_CASES[case]
    with pytest.raises(ValueError, match=message) as info:
        _capi.flash_attention_forward(*args, 0.125, 0)
    assert isinstance(info.value, xstage.InputError)
    assert str(info.value).startswith("xstage_flash_attention_forward: ")
    assert c_library.xstage_last_error().decode() == str(info.value)


def test_c_library_rejects_bad_scale(c_library):
    with pytest.raises(ValueError, match="softmax_scale must be finite and positive"):
        _capi.flash_attention_forward(ct(Q), ct(Q), ct(Q), ct(Q), None, float("nan"), 0)


def test_c_library_null_tensor(c_library):
    import ctypes

    status = c_library.xstage_flash_attention_forward(None, None, None, None, None, ctypes.c_float(0.1), None)
    assert status == _capi.ERROR_INPUT
    assert c_library.xstage_last_error() == b"xstage_flash_attention_forward: q is NULL"


def test_c_library_valid_arguments_without_gpu(c_library):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="CUDA is not usable on this machine") as info:
        _capi.flash_attention_forward(ct(Q), ct([1, 50, 2, 64]), ct([1, 50, 2, 64]), ct(Q), None, 0.125, 0)
    assert isinstance(info.value, xstage.PlatformError) and not isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "shape,lse_strides",
    [([1, 1, 1, 64], [7, 5, 3]), ([2, 1, 3, 128], [3, 1, 9]), ([1, 100, 2, 64], [200, 100, 1])],
)
def test_c_library_accepts_valid_size_one_dimensions(c_library, shape, lse_strides):
    """Strides of dimensions of size 1 are not checked (PyTorch gives them any value): the call gets past
    every argument check to CUDA, which fails only for want of a GPU."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    b, m, h, d = shape
    odd = [b * m * h * d + 13 if s == 1 else st for s, st in zip(shape, ct(shape).strides[:4])]
    q = ct(shape, strides=odd)
    lse = ct([b, h, m], dtype=_capi.DTYPE_FLOAT32, strides=lse_strides)
    with pytest.raises(xstage.PlatformError, match="CUDA is not usable"):
        _capi.flash_attention_forward(q, q, q, ct(shape), lse, 0.125, 0)


def test_too_many_dimensions_for_the_abi():
    with pytest.raises(ValueError, match="tensors of 1 to 8 dimensions"):
        ct([1] * 9)


def test_checked_signatures_tell_metadata_apart():
    """The ops skip their Python checks for a signature that passed them before: the signature must change with
    every piece of metadata the checks read (shape, strides, dtype, device) and with the other arguments."""
    from xstage._tensors import CheckedSignatures

    of = CheckedSignatures.of
    q = torch.zeros(2, 64, 4, 64, dtype=BF16)
    base = of((q, q, q), 0.125)
    assert of((q.clone(), q, q), 0.125) == base  # other memory, same metadata
    assert of((q.transpose(1, 2), q, q), 0.125) != base
    assert of((q[:, :32], q, q), 0.125) != base
    assert of((torch.zeros(2, 64, 4, 128, dtype=BF16)[..., :64], q, q), 0.125) != base  # same shape, other strides
    assert of((q.float(), q, q), 0.125) != base
    assert of((q.to("meta"), q, q), 0.125) != base
    assert of((q, q, q), 0.25) != base
    assert of((q, None), "g") != of((q, q), "g")
    seen = CheckedSignatures()
    seen.add(base)
    assert seen.passed(base) and not seen.passed(of((q, q, q), 0.25))


def test_a_failed_check_is_not_remembered():
    q = torch.zeros(1, 64, 2, 64, dtype=BF16)
    for _ in range(2):
        with pytest.raises(ValueError, match=r"q is a cpu tensor"):
            xstage.flash_attention(q, q, q)
