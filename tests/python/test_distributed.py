"""xstage.distributed, xstage.ulysses_attention, xstage.moe, xstage.moe_pack_weights and xstage.nn.MoE on a
machine without a GPU: every bad input raises a Python exception that names the problem,
  - in the ops' own checks, on fake CUDA tensors (FakeTensorMode: what torch.compile runs at trace time) and
    on real CPU tensors;
  - in xstage.distributed.init (no process group, a non-NCCL group) and when an op has no communicator;
  - in the C library's checks, through ctypes with made-up device pointers (never dereferenced)."""

import ctypes

import pytest
import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode

import xstage
from support import cuda
from xstage import _capi, distributed

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
I32 = torch.int32
F32 = torch.float32


class FakeComm(distributed.Communicator):
    """A registered communicator without a C handle: what the fake implementations look at (group size)."""

    def __init__(self, world_size):
        super().__init__(None, None, 0, world_size, 0)


@pytest.fixture
def group_of(monkeypatch):
    """Registers a FakeComm of the given size as the default group's communicator."""

    def register(world_size):
        monkeypatch.setitem(distributed._comms, "", FakeComm(world_size))

    return register


# --- xstage.ulysses_attention -----------------------------------------------------------------------------


def test_ulysses_fake_shapes(fake):
    q = cuda(2, 300, 8, 128)
    out = xstage.ulysses_attention(q, q, q)
    assert out.shape == q.shape and out.dtype == BF16 and out.device == q.device and out.is_contiguous()
    for path in ("serial", "fused_post", "fused_both"):
        out = xstage.ulysses_attention(q, q, q, path=path, store_path="st_global")
        assert out.shape == q.shape


@pytest.mark.parametrize("name,dtype", [("q", torch.float16), ("k", F32), ("v", FP8)])
def test_ulysses_wrong_dtype(fake, name, dtype):
    args = {n: cuda(1, 64, 4, 64) for n in "qkv"}
    args[name] = cuda(1, 64, 4, 64, dtype=dtype)
    with pytest.raises(TypeError, match=rf"xstage.ulysses_attention: {name} has dtype {dtype}; it must be torch.bfloat16"):
        xstage.ulysses_attention(args["q"], args["k"], args["v"])


def test_ulysses_not_a_tensor(fake):
    q = cuda(1, 64, 4, 64)
    with pytest.raises(TypeError, match="v must be a torch.Tensor, got NoneType"):
        xstage.ulysses_attention(q, q, None)


@pytest.mark.parametrize("shape", [(64, 4, 64), (1, 1, 64, 4, 64)])
def test_ulysses_wrong_ndim(fake, shape):
    q = cuda(*shape)
    with pytest.raises(ValueError, match=r"q must be 4-D \[batch, seqlen/P, heads, head_dim\]"):
        xstage.ulysses_attention(q, q, q)


def test_ulysses_mismatched_shapes(fake):
    q = cuda(1, 64, 4, 64)
    with pytest.raises(ValueError, match=r"q, k and v must have one shape .* k \(1, 32, 4, 64\)"):
        xstage.ulysses_attention(q, cuda(1, 32, 4, 64), q)


@pytest.mark.parametrize("head_dim", [32, 96, 256])
def test_ulysses_head_dim(fake, head_dim):
    q = cuda(1, 64, 4, head_dim)
    with pytest.raises(ValueError, match=rf"head_dim is {head_dim} .*head_dim 64 and 128"):
        xstage.ulysses_attention(q, q, q)


def test_ulysses_empty(fake):
    q = cuda(1, 0, 4, 64)
    with pytest.raises(ValueError, match="empty attention"):
        xstage.ulysses_attention(q, q, q)


def test_ulysses_strided_input(fake):
    q = cuda(1, 4, 64, 64).transpose(1, 2)  # [1, 64, 4, 64] seen through a transpose
    with pytest.raises(ValueError, match=r"q \(shape \(1, 64, 4, 64\), strides .*\) is not contiguous.*q.contiguous\(\)"):
        xstage.ulysses_attention(q, q, q)
    qkv = cuda(1, 64, 3, 4, 64)  # views of a packed QKV projection: not densely packed either
    with pytest.raises(ValueError, match="k .* is not contiguous"):
        xstage.ulysses_attention(qkv[:, :, 0].contiguous(), qkv[:, :, 1], qkv[:, :, 2])


def test_ulysses_heads_not_divisible_by_group(fake, group_of):
    group_of(4)
    q = cuda(1, 64, 6, 128)
    with pytest.raises(ValueError, match=r"6 heads cannot be split over the group's 4 ranks"):
        xstage.ulysses_attention(q, q, q)
    assert xstage.ulysses_attention(cuda(1, 64, 8, 128), cuda(1, 64, 8, 128), cuda(1, 64, 8, 128)).shape == (1, 64, 8, 128)


@pytest.mark.fake_cuda1
def test_ulysses_mixed_devices(fake):
    q, k = cuda(1, 64, 4, 64, device="cuda:0"), cuda(1, 64, 4, 64, device="cuda:1")
    with pytest.raises(ValueError, match="k is on cuda:1 but q is on cuda:0"):
        xstage.ulysses_attention(q, k, q)


def test_ulysses_store_path(fake):
    q = cuda(1, 64, 4, 64)
    with pytest.raises(ValueError, match=r"store_path is 'nvls'"):
        xstage.ulysses_attention(q, q, q, store_path="nvls")


@pytest.mark.parametrize("path", ["fused", "Fused_Post", ""])
def test_ulysses_unknown_path(fake, path):
    q = cuda(1, 64, 4, 64)
    with pytest.raises(xstage.InputError, match=rf"unknown Ulysses path '{path}' \(choose from serial, fused_post, fused_both\)"):
        xstage.ulysses_attention(q, q, q, path=path)


def test_ulysses_default_path_is_a_path(c_library):
    assert _capi.ulysses_path_from_name(xstage.ulysses.DEFAULT_ULYSSES_PATH) in (
        _capi.ULYSSES_SERIAL, _capi.ULYSSES_FUSED_POST, _capi.ULYSSES_FUSED_BOTH)


def test_ulysses_cpu_tensors_say_cuda_is_needed():
    q = torch.zeros(1, 64, 4, 64, dtype=BF16)
    with pytest.raises(ValueError, match=r"q is a cpu tensor; xstage.ulysses_attention runs on CUDA tensors") as info:
        xstage.ulysses_attention(q, q, q)
    if not torch.cuda.is_available():
        assert "this PyTorch sees no CUDA GPU" in str(info.value)


def test_ulysses_meta_tensors_need_no_communicator():
    q = torch.empty(2, 128, 8, 64, dtype=BF16, device="meta")
    assert not distributed.is_initialized()
    assert xstage.ulysses_attention(q, q, q).shape == q.shape


# --- xstage.moe -------------------------------------------------------------------------------------------

T, H, I, E, K = 100, 256, 128, 8, 2


def moe_args(t=T, h=H, inter=I, e=E, k=K, dtype=BF16):
    args = dict(
        x=cuda(t, h),
        topk_ids=cuda(t, k, dtype=I32),
        topk_weights=cuda(t, k, dtype=F32),
        w1=cuda(e, 2 * inter, h, dtype=dtype),
        w2=cuda(e, h, inter, dtype=dtype),
    )
    if dtype == FP8:
        args["w1_scales"] = cuda(e * 2 * inter // 128, (h // 128 + 3) // 4 * 4, dtype=F32)
        args["w2_scales"] = cuda(e * h // 128, (inter // 128 + 3) // 4 * 4, dtype=F32)
    return args


def test_moe_fake_shapes(c_library, fake):
    out = xstage.moe(**moe_args())
    assert out.shape == (T, H) and out.dtype == BF16 and out.device.type == "cuda"
    out = xstage.moe(**moe_args(dtype=FP8), schedule="pipelined_waves", max_tokens=4096)
    assert out.shape == (T, H)
    assert xstage.moe(**moe_args(t=0)).shape == (0, H)  # a rank without tokens this step


@pytest.mark.parametrize(
    "name,dtype,message",
    [
        ("x", F32, r"x has dtype torch.float32; it must be torch.bfloat16"),
        ("topk_ids", torch.int64, r"topk_ids has dtype torch.int64; it must be torch.int32 .*\.to\(torch.int32\)"),
        ("topk_weights", BF16, r"topk_weights has dtype torch.bfloat16; it must be torch.float32"),
        ("w1", torch.float16, r"w1 has dtype torch.float16; it must be torch.bfloat16 or torch.float8_e4m3fn .*moe_pack_weights"),
        ("w2", FP8, r"w2 has dtype torch.float8_e4m3fn but w1 has torch.bfloat16"),
    ],
)
def test_moe_wrong_dtype(fake, name, dtype, message):
    args = moe_args()
    args[name] = torch.empty(args[name].shape, dtype=dtype, device="cuda")
    with pytest.raises(TypeError, match=message):
        xstage.moe(**args)


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(x=(3, T, H)), r"x must be 2-D \[tokens, hidden\]; got shape \(3, 100, 256\) \(flatten"),
        (dict(topk_ids=(T + 1, K)), r"topk_ids must be \[tokens, top_k\] = \[100, k\]"),
        (dict(topk_weights=(T, K + 1)), r"topk_weights shape \(100, 3\) must equal topk_ids shape \(100, 2\)"),
        (dict(w1=(E, 2 * I, H + 128)), r"w1 must be \[8, 256, 256\] and w2 \[8, 256, 128\]"),
        (dict(w1=(E, I, H)), r"w1 must be \[8, 256, 256\]"),
        (dict(w2=(E - 1, H, I)), r"w1 must be \[7, 256, 256\]"),
        (dict(w1=(E, 2 * I)), r"w1 and w2 must be 3-D"),
    ],
)
def test_moe_wrong_shapes(fake, change, message):
    args = moe_args()
    for name, shape in change.items():
        args[name] = torch.empty(shape, dtype=args[name].dtype, device="cuda")
    with pytest.raises(ValueError, match=message):
        xstage.moe(**args)


def test_moe_scales(fake):
    args = moe_args(dtype=FP8)
    del args["w2_scales"]
    with pytest.raises(ValueError, match="float8 weights need w1_scales and w2_scales"):
        xstage.moe(**args)
    args = moe_args(dtype=FP8)
    args["w1_scales"] = cuda(3, 4, dtype=F32)
    with pytest.raises(ValueError, match=r"w1_scales \(3, 4\) and w2_scales \(16, 4\) must be \(16, 4\) and \(16, 4\)"):
        xstage.moe(**args)
    args = moe_args(dtype=FP8)
    args["w2_scales"] = cuda(16, 4, dtype=BF16)
    with pytest.raises(TypeError, match="w2_scales has dtype torch.bfloat16; it must be torch.float32"):
        xstage.moe(**args)
    args = moe_args()
    with pytest.raises(ValueError, match="bfloat16 weights take no scales"):
        xstage.moe(**args, w1_scales=cuda(16, 4, dtype=F32))


def test_moe_not_contiguous(fake):
    args = moe_args()
    args["x"] = cuda(H, T).t()
    with pytest.raises(ValueError, match=r"x \(shape \(100, 256\), strides \(1, 100\)\) is not contiguous"):
        xstage.moe(**args)


def test_moe_tokens_and_options(c_library, fake, group_of):
    with pytest.raises(ValueError, match="100 tokens, more than max_tokens = 64"):
        xstage.moe(**moe_args(), max_tokens=64)
    with pytest.raises(ValueError, match=r"schedule is 'waves'; it must be one of auto, interleaved, expert_wave, pipelined_waves"):
        xstage.moe(**moe_args(), schedule="waves")
    group_of(2)  # 8 local experts x 2 ranks = 16 experts
    with pytest.raises(ValueError, match="top_k = 17 is more than the layer's 16 experts"):
        xstage.moe(**moe_args(k=17))
    assert xstage.moe(**moe_args(k=16)).shape == (T, H)
    # With the group's size known, the configuration is the C library's to judge, at trace time (no GPU).
    with pytest.raises(xstage.InputError, match="do not combine"):
        xstage.moe(**moe_args(), schedule="interleaved", cluster_n=2, cluster_m=2)
    xstage.moe(**moe_args(), cluster_n=2, cluster_m=2)  # "auto" chooses the pairing itself: these are ignored
    with pytest.raises(xstage.InputError, match="the fused fp8 kernel needs 256-wide tiles"):
        xstage.moe(**moe_args(dtype=FP8), tile_n=128)


@pytest.mark.fake_cuda1
def test_moe_mixed_devices(fake):
    args = moe_args()
    args["w2"] = cuda(E, H, I, device="cuda:1")
    with pytest.raises(ValueError, match="w2 is on cuda:1 but x is on cuda:0"):
        xstage.moe(**args)


def test_moe_cpu_tensors_say_cuda_is_needed():
    args = {n: torch.zeros(t.shape, dtype=t.dtype) for n, t in moe_args_cpu().items()}
    with pytest.raises(ValueError, match=r"x is a cpu tensor; xstage.moe runs on CUDA tensors"):
        xstage.moe(**args)


def moe_args_cpu():
    with FakeTensorMode():
        shapes = {n: (t.shape, t.dtype) for n, t in moe_args().items()}
    return {n: torch.empty(s, dtype=d) for n, (s, d) in shapes.items()}


def test_moe_pack_weights_checks(c_library):
    w1, w2 = torch.zeros(E, 2 * I, H, dtype=BF16), torch.zeros(E, H, I, dtype=BF16)
    with pytest.raises(ValueError, match=r"xstage.moe_pack_weights: w1 is a cpu tensor"):
        xstage.moe_pack_weights(w1, w2)
    with pytest.raises(TypeError, match=r"w1 has dtype torch.float32; it must be torch.bfloat16"):
        xstage.moe_pack_weights(w1.float(), w2)
    with pytest.raises(TypeError, match=r"dtype is torch.float16; it must be torch.bfloat16 or torch.float8_e4m3fn"):
        xstage.moe_pack_weights(w1, w2, dtype=torch.float16)
    with pytest.raises(ValueError, match="w2 must be 3-D"):
        xstage.moe_pack_weights(w1, w2[0])


# --- xstage.nn.MoE ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [BF16, FP8])
def test_nn_moe_on_meta(c_library, dtype):
    m = xstage.nn.MoE(E, H, I, K, dtype=dtype, device="meta")
    assert m.experts_per_rank == E and m.tile_n == 256
    assert m.w1.shape == (E, 2 * I, H) and m.w1.dtype == dtype and m.w2.shape == (E, H, I)
    if dtype == FP8:
        assert m.w1_scales.shape == (E * 2 * I // 128, 4) and m.w2_scales.shape == (E * H // 128, 4)
    else:
        assert m.w1_scales is None
    x = torch.empty(2, 50, H, dtype=BF16, device="meta")
    ids = torch.empty(2, 50, K, dtype=I32, device="meta")
    y = m(x, ids, torch.empty(2, 50, K, dtype=F32, device="meta"))
    assert y.shape == (2, 50, H) and y.dtype == BF16
    assert "schedule='auto'" in repr(m)


def test_nn_moe_arguments(c_library, group_of):
    with pytest.raises(ValueError, match="schedule is 'fast'"):
        xstage.nn.MoE(E, H, I, K, schedule="fast", device="meta")
    group_of(3)
    with pytest.raises(ValueError, match="8 experts cannot be split evenly over the group's 3 ranks"):
        xstage.nn.MoE(E, H, I, K, device="meta")
    group_of(2)
    with pytest.raises(ValueError, match=r"pass max_tokens \(the same on every rank\) for a group of 2 ranks"):
        xstage.nn.MoE(E, H, I, K, device="meta")
    m = xstage.nn.MoE(E, H, I, K, device="meta", max_tokens=512)
    assert m.experts_per_rank == 4 and m.w1.shape == (4, 2 * I, H)


def test_nn_moe_load_weights_on_cpu(c_library):
    m = xstage.nn.MoE(E, H, I, K)
    with pytest.raises(ValueError, match="w1 is a cpu tensor"):
        m.load_weights(torch.zeros(E, 2 * I, H), torch.zeros(E, H, I))


# --- xstage.distributed -----------------------------------------------------------------------------------


def test_init_without_process_group():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"no torch.distributed process group; call torch.distributed.init_process_group\('nccl'\)"):
        xstage.distributed.init()


def test_init_with_a_gloo_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match=r"backend is 'gloo'; xstage needs an NCCL group"):
            xstage.distributed.init()
        with pytest.raises(ValueError, match=r"backend is 'gloo'"):
            xstage.distributed.init(dist.group.WORLD)
        assert not xstage.distributed.is_initialized()
    finally:
        dist.destroy_process_group()


def test_ops_without_communicator_say_init():
    with pytest.raises(RuntimeError, match=r"xstage.ulysses_attention: xstage.distributed is not initialised for the default process group: call xstage.distributed.init\(\)"):
        distributed.get_communicator(None, "xstage.ulysses_attention")
    with pytest.raises(RuntimeError, match=r"not initialised for process group '7': call xstage.distributed.init\(group\)"):
        distributed.communicator_for_key("7", "xstage.moe")
    xstage.distributed.poll()  # nothing to poll
    xstage.distributed.teardown()  # nothing to tear down


def test_communicator_caches_layers(group_of):
    comm = FakeComm(2)
    comm.handle = 1  # a made-up handle: no C call is made here
    made = []
    assert comm.layer(("ulysses", 1), lambda: made.append(1) or 11) == 11
    assert comm.layer(("ulysses", 1), lambda: made.append(2) or 12) == 11
    assert comm.layer(("moe", 1), lambda: 13) == 13
    assert made == [1] and comm.layers() == [(("ulysses", 1), 11), (("moe", 1), 13)]
    comm.handle = None  # torn down: no new layers
    with pytest.raises(RuntimeError, match="torn down"):
        comm.layer(("moe", 2), lambda: 14)


# --- the C library's checks (made-up device pointers; argument errors come before CUDA) -------------------

ADDR = 1 << 20


def ct(shape, dtype=_capi.DTYPE_BFLOAT16, device=0, data=ADDR, strides=None):
    if strides is None:
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
    return _capi.make_tensor(data, shape, strides, dtype, device)


FAR = ADDR + (1 << 30)  # a second buffer that does not overlap the first
W = [4, 512, 256]
PACK_CASES = {
    "dtype": ((ct(W, dtype=_capi.DTYPE_FLOAT32), ct(W, data=FAR), 256), "logical has dtype float32; it must be bfloat16"),
    "shape": ((ct(W), ct([4, 512, 128], data=FAR), 256), r"packed has shape \[4, 512, 128\]; it must be \[experts, 2\*inter, hidden\] = \[4, 512, 256\]"),
    "tile": ((ct(W), ct(W, data=FAR), 192), "tile_n is 192; it must be 128 or 256"),
    "rows": ((ct([4, 384, 256]), ct([4, 384, 256], data=FAR), 256), r"2\*inter a multiple of tile_n = 256"),
    "overlap": ((ct(W), ct(W, data=ADDR + 4096), 256), "packed and logical overlap in memory"),
    "strides": ((ct(W, strides=[512 * 264, 264, 1]), ct(W, data=FAR), 128), r"logical is not contiguous .*strides \[135168, 264, 1\]"),
    "host": ((ct(W, device=-1), ct(W, data=FAR), 128), "logical is in host memory"),
    "devices": ((ct(W), ct(W, data=FAR, device=1), 128), "packed is on CUDA device 1 but"),
    "align": ((ct(W, data=ADDR + 2), ct(W, data=FAR), 128), "logical's data pointer is not 16-byte aligned"),
}


@pytest.mark.parametrize("case", sorted(PACK_CASES))
def test_c_pack_w1_rejects(c_library, case):
    args, message = PACK_CASES[case]
    with pytest.raises(xstage.InputError, match=message) as info:
        _capi.moe_pack_w1(*args, 0)
    assert str(info.value).startswith("xstage_moe_pack_w1: ")


Q8 = [_capi.DTYPE_FLOAT8_E4M3, _capi.DTYPE_UINT8]
QUANT_CASES = {
    "n": ((ct([200, 256]), ct([200, 256], dtype=Q8[0], data=FAR), ct([1, 4], dtype=_capi.DTYPE_FLOAT32, data=2 * FAR)), "n and k positive multiples of 128"),
    "codes_dtype": ((ct([256, 256]), ct([256, 256], data=FAR), ct([2, 4], dtype=_capi.DTYPE_FLOAT32, data=2 * FAR)), "codes has dtype bfloat16; it must be float8_e4m3fn"),
    "scales_shape": ((ct([256, 640]), ct([256, 640], dtype=Q8[1], data=FAR), ct([2, 5], dtype=_capi.DTYPE_FLOAT32, data=2 * FAR)), r"scales has shape \[2, 5\]; it must be \[n/128, round_up\(k/128, 4\)\] = \[2, 8\]"),
    "w_dtype": ((ct([256, 256], dtype=_capi.DTYPE_FLOAT16), ct([256, 256], dtype=Q8[0], data=FAR), ct([2, 4], dtype=_capi.DTYPE_FLOAT32, data=2 * FAR)), "w has dtype float16; it must be bfloat16"),
}


@pytest.mark.parametrize("case", sorted(QUANT_CASES))
def test_c_quantize_rejects(c_library, case):
    args, message = QUANT_CASES[case]
    with pytest.raises(xstage.InputError, match=message):
        _capi.moe_quantize_weights_fp8(*args, 0)


def test_c_weight_helpers_valid_arguments_without_gpu(c_library):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(xstage.PlatformError, match="CUDA is not usable on this machine"):
        _capi.moe_pack_w1(ct(W), ct(W, data=FAR), 256, 0)
    scales = ct([2, 4], dtype=_capi.DTYPE_FLOAT32, data=2 * FAR)
    with pytest.raises(xstage.PlatformError, match="CUDA is not usable on this machine"):
        _capi.moe_quantize_weights_fp8(ct([256, 256]), ct([256, 256], dtype=Q8[0], data=FAR), scales, 0)


def config(**fields):
    c = _capi.MoeConfig()
    base = dict(experts=256, top_k=8, hidden=7168, inter=2048, max_tokens=4096, dtype=_capi.DTYPE_BFLOAT16, cluster_m=1)
    base.update(fields)
    for k, v in base.items():
        setattr(c, k, v)
    return c


CONFIG_CASES = {
    "experts_over_ranks": (dict(experts=10), 4, r"E = 10 experts cannot be split evenly over P = 4 ranks"),
    "top_k": (dict(top_k=300), 1, r"top_k = 300 must be in \[1, E = 256\]"),
    "tokens": (dict(max_tokens=0), 1, r"T \(tokens per rank\) must be at least 1"),
    "dtype": (dict(dtype=_capi.DTYPE_FLOAT16), 1, "config.dtype is float16; the MoE layer runs bfloat16 or float8_e4m3fn"),
    "tile": (dict(tile_n=64), 1, "config.tile_n is 64; it must be 128, 256 or 0"),
    "hidden": (dict(hidden=1000), 1, r"h = 1000 must be a multiple of"),
    "fp8_tile": (dict(dtype=_capi.DTYPE_FLOAT8_E4M3, tile_n=128), 1, "the fused fp8 kernel needs 256-wide tiles"),
    "schedule": (dict(schedule=5), 1, "config.schedule is 5"),
    "pairs": (dict(cluster_n=2, cluster_m=2), 1, "do not combine"),
    "cluster_n": (dict(cluster_n=4), 1, "cluster_n is 4; it must be 0 .*, 1 or 2"),
    "wave_lag": (dict(wave_lag=-1), 1, "wave_lag is -1"),
    "wave_experts": (dict(wave_experts=300), 1, "wave_experts is 300; it must be 0 .* to 256"),
    "m_pairs_tile": (dict(cluster_m=2, tile_n=128), 1, "M-pairs need 128 x 256 tiles"),
    "pairs_half_block": (dict(experts=16, top_k=2, hidden=1152, inter=4608, dtype=_capi.DTYPE_FLOAT8_E4M3, cluster_n=2), 2,
                         "CTA pairs need even Linear-1 and Linear-2 n-block counts"),
    "capacity_slack": (dict(capacity_slack=0.5), 1, "capacity_slack is 0.5"),
    "reserved": (dict(reserved=1), 1, "config.reserved must be 0"),
    "ranks": (dict(), 9, "1 to 8 ranks"),
    "local_experts": (dict(experts=1024), 1, "1024 experts per rank is more than the kernel's shared-memory tables hold"),
    "timeout": (dict(timeout_s=-1.0), 1, "config.timeout_s"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_c_moe_config_rejects(c_library, case):
    fields, ranks, message = CONFIG_CASES[case]
    with pytest.raises(xstage.InputError, match=message) as info:
        _capi.moe_check_config(config(**fields), ranks)
    assert str(info.value).startswith("xstage_moe_check_config: ")


def test_c_moe_schedule_names(c_library):
    assert _capi.moe_schedule_from_name("auto") == (_capi.MOE_SCHEDULE_AUTO, 0)
    assert _capi.moe_schedule_from_name("interleaved") == (_capi.MOE_SCHEDULE_INTERLEAVED, 0)
    assert _capi.moe_schedule_from_name("expert_wave") == (_capi.MOE_SCHEDULE_EXPERT_WAVE, 0)
    assert _capi.moe_schedule_from_name("pipelined_waves") == (_capi.MOE_SCHEDULE_EXPERT_WAVE, 1)
    with pytest.raises(xstage.InputError, match="schedule is 'waves'; it must be one of auto, interleaved, expert_wave, pipelined_waves"):
        _capi.moe_schedule_from_name("waves")


def test_c_moe_config_accepts_the_headline_shapes(c_library):
    _capi.moe_check_config(config(), 1)  # DeepSeek-V3-like, EP=1
    _capi.moe_check_config(config(dtype=_capi.DTYPE_FLOAT8_E4M3), 8)
    _capi.moe_check_config(config(schedule=_capi.MOE_SCHEDULE_AUTO), 2)
    _capi.moe_check_config(config(experts=16, top_k=2, hidden=1152, inter=4608, schedule=1, wave_lag=1), 2)
    assert _capi.moe_default_tile_n(_capi.DTYPE_BFLOAT16, 7168, 2048) == 256
    assert _capi.moe_default_tile_n(_capi.DTYPE_BFLOAT16, 1152, 4608) == 128  # h an odd multiple of 128
    assert _capi.moe_default_tile_n(_capi.DTYPE_FLOAT8_E4M3, 1152, 4608) == 256


@pytest.mark.parametrize(
    "shape,message",
    [
        ((1, 100, 6, 128, 4), "H must be a multiple of P"),
        ((1, 102, 8, 128, 4), "M must be a multiple of P .*pad the sequence"),
        ((1, 128, 8, 96, 2), "head_dim must be 64 or 128"),
        ((1, 128, 16, 64, 16), "1 to 8 ranks"),
        ((0, 128, 8, 64, 2), "batch, M and H must be >= 1"),
    ],
)
def test_c_ulysses_shape_rejects(c_library, shape, message):
    with pytest.raises(xstage.InputError, match=message):
        _capi.ulysses_check_shape(*shape)


def test_c_ulysses_path_names(c_library):
    """The XSTAGE_ULYSSES_* values: 1 is the old `fused = 1`; a name or a value outside them is refused by name."""
    assert [_capi.ulysses_path_from_name(n) for n in ("serial", "fused_post", "fused_both")] == [
        _capi.ULYSSES_SERIAL, _capi.ULYSSES_FUSED_POST, _capi.ULYSSES_FUSED_BOTH] == [0, 1, 2]
    with pytest.raises(xstage.InputError, match=r"xstage_ulysses_path_from_name: unknown Ulysses path 'fused' \(choose from"):
        _capi.ulysses_path_from_name("fused")
    status = c_library.xstage_ulysses_path_from_name(None, ctypes.byref(ctypes.c_int32()))
    assert status == _capi.ERROR_INPUT and b"name or path is NULL" in c_library.xstage_last_error()


@pytest.mark.parametrize("path", [-1, 3, 2**31 - 1])
def test_c_ulysses_forward_refuses_a_bad_path(c_library, path):
    """Checked before anything else: no layer, tensor or GPU is needed to see it."""
    with pytest.raises(xstage.InputError, match=rf"xstage_ulysses_forward: path is {path}; it must be XSTAGE_ULYSSES_SERIAL \(0\), "
                                                r"XSTAGE_ULYSSES_FUSED_POST \(1\) or XSTAGE_ULYSSES_FUSED_BOTH \(2\)"):
        _capi.ulysses_forward(None, None, None, None, None, path, 0)


def test_c_ulysses_shape_accepts(c_library):
    _capi.ulysses_check_shape(1, 8192, 24, 128, 8)
    _capi.ulysses_check_shape(2, 4097, 3, 64, 1)


def test_c_null_handles(c_library):
    with pytest.raises(xstage.InputError, match="xstage_ulysses_forward: layer is NULL"):
        _capi.ulysses_forward(None, ct([1, 64, 4, 64]), ct([1, 64, 4, 64]), ct([1, 64, 4, 64]), ct([1, 64, 4, 64]),
                              _capi.ULYSSES_FUSED_BOTH, 0)
    with pytest.raises(xstage.InputError, match="xstage_moe_poll: layer is NULL"):
        _capi.moe_poll(None)
    with pytest.raises(xstage.InputError, match="xstage_ulysses_create: comm is NULL"):
        _capi.ulysses_create(None, 1, 64, 4, 64, 0, 0.0)
    with pytest.raises(xstage.InputError, match="xstage_moe_create: comm is NULL"):
        _capi.moe_create(None, config())
    with pytest.raises(xstage.InputError, match="xstage_comm_info: comm is NULL"):
        _capi.comm_info(None)
    for destroy in (_capi.comm_destroy, _capi.ulysses_destroy, _capi.moe_destroy):
        destroy(None)  # NULL is accepted
    assert c_library.xstage_last_error() == b""


def test_c_comm_create_checks(c_library):
    uid = bytes(128)
    with pytest.raises(xstage.InputError, match="rank 2 does not exist in a job of 2 ranks"):
        _capi.comm_create(uid, 2, 2, 0)
    with pytest.raises(xstage.InputError, match="world_size is 0"):
        _capi.comm_create(uid, 0, 0, 0)
    with pytest.raises(xstage.InputError, match="the NCCL unique id has 3 bytes"):
        _capi.comm_create(b"abc", 0, 1, 0)
    status = c_library.xstage_comm_create(None, 0, 1, 0, ctypes.byref(ctypes.c_void_p()))
    assert status == _capi.ERROR_INPUT and b"id is NULL" in c_library.xstage_last_error()
    if not torch.cuda.is_available():
        with pytest.raises(xstage.PlatformError, match="CUDA is not usable on this machine"):
            _capi.comm_create(uid, 0, 1, 0)


def test_c_comm_unique_id(c_library):
    """NCCL makes the id on the host (its bootstrap socket); without network interfaces it may refuse."""
    try:
        uid = _capi.comm_unique_id()
    except xstage.PlatformError as e:
        assert str(e).startswith("xstage_comm_unique_id: ")
        return
    assert len(uid) == 128 and uid != bytes(128)
