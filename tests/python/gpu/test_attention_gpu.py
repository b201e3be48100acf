"""xstage.flash_attention on a Hopper GPU: numerics against an fp32 reference and torch SDPA on awkward shapes
and strided inputs, log-sum-exp, per-sequence key lengths (both registration paths, against masked attention;
clamping; keys past them not read; compiled and captured), torch.compile(fullgraph=True) and CUDA graphs against
eager, 1000 back-to-back calls (no hang, flat memory), errors on real CUDA tensors. Skipped without a GPU.

    python3 -m pytest -q tests/python/gpu          # XSTAGE_C_LIBRARY=/path/to/libxstage_c.so unless installed
"""

import math
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

import xstage

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

BF16 = torch.bfloat16
REL_L2_MAX = 2e-2


def is_hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


hopper = pytest.mark.skipif(not is_hopper(), reason="the kernels are built for sm_90a (Hopper)")


@pytest.fixture(autouse=True)
def exact_fp32_matmul():
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # the fp32 reference without TF32
    yield
    torch.set_float32_matmul_precision(previous)


def make_qkv(b, m, n, h, d, layout, seed=0):
    """q [b, m, h, d], k and v [b, n, h, d], bf16 in [-1, 1]·2, in one of the layouts a model hands over."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape):
        return (torch.rand(*shape, device="cuda", generator=g, dtype=torch.float32) * 4 - 2).to(BF16)

    if layout == "contiguous":
        return rand(b, m, h, d), rand(b, n, h, d), rand(b, n, h, d)
    if layout == "padded_heads":  # a stride on heads: [b, seq, h + 3, d] sliced to h heads
        return tuple(rand(b, s, h + 3, d)[:, :, :h] for s in (m, n, n))
    if layout == "bhsd":  # [b, h, seq, d] storage (SDPA's layout) seen as [b, seq, h, d]
        return tuple(rand(b, h, s, d).transpose(1, 2) for s in (m, n, n))
    if layout == "packed_qkv":  # one projection output [b, seq, 3, h, d], three views (needs m == n)
        assert m == n
        return rand(b, m, 3, h, d).unbind(2)
    raise ValueError(layout)


def reference(q, k, v, scale):
    """fp32 attention on the same bf16 inputs: out [b, m, h, d] fp32, lse [b, h, m]."""
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    lse = torch.logsumexp(s, dim=-1)
    out = torch.matmul(torch.softmax(s, dim=-1), vf)
    return out.transpose(1, 2), lse


def sdpa(q, k, v, scale):
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale)
    return out.transpose(1, 2)


def rel_l2(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


# (batch, seqlen_q, seqlen_k, heads, head_dim): M never a multiple of 128 but once, heads 1..12, both head dims
SHAPES = [
    (1, 1, 1, 1, 64),
    (1, 129, 129, 3, 64),
    (2, 1000, 1000, 5, 128),
    (2, 777, 777, 12, 64),
    (1, 300, 2047, 12, 128),
    (2, 2047, 77, 7, 64),
    (1, 4097, 4097, 2, 128),
    (2, 1536, 1536, 6, 128),
    (1, 3001, 3001, 4, 64),
]
LAYOUTS = ["contiguous", "padded_heads", "bhsd", "packed_qkv"]


@hopper
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}_m{}_n{}_h{}_d{}".format(*s))
def test_numerics_against_fp32_reference_and_sdpa(shape, layout):
    b, m, n, h, d = shape
    if layout == "packed_qkv" and m != n:
        pytest.skip("packed QKV has one sequence length")
    q, k, v = make_qkv(b, m, n, h, d, layout, seed=10 * SHAPES.index(shape) + LAYOUTS.index(layout))
    scale = 1.0 / math.sqrt(d)
    out, lse = xstage.flash_attention(q, k, v, return_lse=True)
    ref_out, ref_lse = reference(q, k, v, scale)
    assert out.shape == (b, m, h, d) and out.dtype == BF16 and out.is_contiguous()
    assert lse.shape == (b, h, m) and lse.dtype == torch.float32
    assert torch.isfinite(out).all()
    err = rel_l2(out, ref_out)
    err_sdpa = rel_l2(sdpa(q, k, v, scale), ref_out)
    assert err <= REL_L2_MAX, f"rel L2 {err:.2e} (SDPA: {err_sdpa:.2e})"
    assert err <= 2 * err_sdpa + 1e-3, f"xstage {err:.2e} vs SDPA {err_sdpa:.2e}"
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-4)
    # Without the log-sum-exp: the same output.
    assert torch.equal(xstage.flash_attention(q, k, v), out)


@hopper
@pytest.mark.parametrize("scale", [0.05, 1.0, 3.0])
def test_softmax_scale(scale):
    q, k, v = make_qkv(1, 555, 555, 4, 128, "contiguous", seed=7)
    out, lse = xstage.flash_attention(q, k, v, softmax_scale=scale, return_lse=True)
    ref_out, ref_lse = reference(q, k, v, scale)
    assert rel_l2(out, ref_out) <= REL_L2_MAX
    torch.testing.assert_close(lse, ref_lse, atol=2e-3, rtol=1e-4)


@hopper
def test_opcheck():
    """torch.library.opcheck: schema, fake implementation against the real one (shapes, strides), AOT dispatch."""
    q, k, v = make_qkv(2, 333, 200, 3, 64, "padded_heads", seed=3)
    lengths = torch.tensor([1, 129], dtype=torch.int32, device="cuda")
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.xstage.flash_attention.default, (q, k, v, 0.125, return_lse))
        torch.library.opcheck(torch.ops.xstage.flash_attention.default, (q, k, v, 0.125, return_lse, lengths))


# --- per-sequence key lengths ------------------------------------------------------------------------------


def masked_reference(q, k, v, scale, lengths):
    """fp32 attention where sequence b attends to its first lengths[b] keys: out [b, m, h, d], lse [b, h, m]."""
    n = k.shape[1]
    keep = torch.arange(n, device=q.device)[None, :] < lengths.clamp(1, n)[:, None]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    s = (qf @ kf.transpose(-1, -2) * scale).masked_fill(~keep[:, None, None, :], float("-inf"))
    return (s.softmax(-1) @ vf).transpose(1, 2), torch.logsumexp(s, -1), keep


# (batch, seqlen_q, seqlen_k, heads, head_dim) and one key length per sequence: 1, one past a key block (128 or
# 192 keys), exactly a block, every key, lengths that differ within the batch.
LENGTH_CASES = [
    (3, 300, 500, 4, 128, [1, 129, 500]),
    (4, 1000, 2000, 3, 128, [127, 128, 256, 1999]),
    (3, 777, 640, 5, 64, [193, 192, 1]),
    (2, 4097, 4097, 2, 64, [4097, 385]),
    (2, 129, 77, 12, 64, [77, 76]),
]


@hopper
@pytest.mark.parametrize("path", ["op", "ctypes"])
@pytest.mark.parametrize("layout", ["contiguous", "bhsd"])
@pytest.mark.parametrize("case", LENGTH_CASES, ids=lambda c: "b{}_m{}_n{}_h{}_d{}".format(*c[:5]))
def test_key_lengths_against_masked_sdpa(case, layout, path):
    """Both registration paths (the op: libxstage_torch.so's C++ kernel where it is loaded; the Python
    implementation's ctypes call) against fp32 attention over each sequence's first keys, and torch SDPA with the
    same boolean mask."""
    from xstage import attention

    b, m, n, h, d, lengths = case
    q, k, v = make_qkv(b, m, n, h, d, layout, seed=len(lengths) + m)
    lengths = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    scale = 1 / math.sqrt(d)
    xstage.flash_attention(q, k, v)  # the first CUDA call loads libxstage_torch.so: after it the impl is the ctypes path
    if path == "op":
        out, lse = xstage.flash_attention(q, k, v, return_lse=True, key_lengths=lengths)
    else:
        out, lse = attention._flash_attention_impl(q, k, v, scale, True, lengths)
    want, want_lse, keep = masked_reference(q, k, v, scale, lengths)
    err = rel_l2(out, want)
    by_sdpa = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=keep[:, None, None, :], scale=scale
    ).transpose(1, 2)
    err_sdpa = rel_l2(by_sdpa, want)
    assert torch.isfinite(out).all() and err <= REL_L2_MAX, f"rel L2 {err:.2e} (SDPA: {err_sdpa:.2e})"
    assert err <= 2 * err_sdpa + 1e-3, f"xstage {err:.2e} vs SDPA {err_sdpa:.2e}"
    torch.testing.assert_close(lse, want_lse, atol=1e-3, rtol=1e-4)


@hopper
def test_key_lengths_equal_to_the_allocated_length_change_nothing():
    q, k, v = make_qkv(3, 500, 300, 4, 128, "contiguous", seed=21)
    full = torch.full((3,), 300, dtype=torch.int32, device="cuda")
    out, lse = xstage.flash_attention(q, k, v, return_lse=True)
    out_l, lse_l = xstage.flash_attention(q, k, v, return_lse=True, key_lengths=full)
    assert torch.equal(out, out_l) and torch.equal(lse, lse_l)


@hopper
def test_key_lengths_are_clamped():
    """The values are not checked (that would synchronise): 0 and negative attend to the first key, more than
    seqlen_k to all of them."""
    q, k, v = make_qkv(4, 200, 300, 2, 64, "contiguous", seed=23)
    got = xstage.flash_attention(q, k, v, key_lengths=torch.tensor([0, -7, 301, 2**31 - 1], dtype=torch.int32, device="cuda"))
    want = xstage.flash_attention(q, k, v, key_lengths=torch.tensor([1, 1, 300, 300], dtype=torch.int32, device="cuda"))
    assert torch.equal(got, want)


@hopper
@pytest.mark.parametrize("d", [64, 128])
def test_keys_past_the_length_are_not_read(d):
    """Past each sequence's key block that holds its last key, k and v are NaN: never loaded. Within that block they
    are loaded and weighted 0, so they only need to be finite (here large)."""
    b, m, n, h = 2, 400, 1000, 3
    lengths = [130, 385]  # blocks of 128 or 192 keys: the last one partial
    q, k, v = make_qkv(b, m, n, h, d, "contiguous", seed=29)
    want = xstage.flash_attention(q, k, v, key_lengths=torch.tensor(lengths, dtype=torch.int32, device="cuda"))
    for s_, length in enumerate(lengths):
        block_end = min(n, (length + 383) // 384 * 384)  # a multiple of both 128 and 192
        k[s_, length:block_end] = 3e4
        v[s_, length:block_end] = -3e4
        k[s_, block_end:] = float("nan")
        v[s_, block_end:] = float("nan")
    got = xstage.flash_attention(q, k, v, key_lengths=torch.tensor(lengths, dtype=torch.int32, device="cuda"))
    assert torch.isfinite(got).all() and torch.equal(got, want)


@hopper
def test_key_lengths_compile_and_capture():
    """torch.compile(fullgraph=True) with key lengths; a captured CUDA graph replayed with new lengths written into
    the same tensor (the values are read on the GPU at each replay)."""
    q, k, v = make_qkv(2, 700, 900, 4, 128, "contiguous", seed=31)
    lengths = torch.tensor([900, 13], dtype=torch.int32, device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v, n: xstage.flash_attention(q * 0.5, k, v, key_lengths=n), fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v, lengths), xstage.flash_attention(q * 0.5, k, v, key_lengths=lengths))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        xstage.flash_attention(q, k, v, key_lengths=lengths)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = xstage.flash_attention(q, k, v, key_lengths=lengths)
    for new in ([1, 900], [129, 200], [900, 900]):
        lengths.copy_(torch.tensor(new, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, xstage.flash_attention(q, k, v, key_lengths=lengths)), new
        assert rel_l2(out, masked_reference(q, k, v, 1 / math.sqrt(128), lengths)[0]) <= REL_L2_MAX


@hopper
def test_key_lengths_errors_on_cuda_tensors():
    q = torch.zeros(2, 64, 2, 64, device="cuda", dtype=BF16)
    with pytest.raises(TypeError, match="key_lengths has dtype torch.int64"):
        xstage.flash_attention(q, q, q, key_lengths=torch.ones(2, dtype=torch.int64, device="cuda"))
    with pytest.raises(ValueError, match=r"key_lengths is on cpu but q is on cuda:0"):
        xstage.flash_attention(q, q, q, key_lengths=torch.ones(2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"key_lengths has stride 2"):
        xstage.flash_attention(q, q, q, key_lengths=torch.ones(4, dtype=torch.int32, device="cuda")[::2])
    torch.cuda.synchronize()  # nothing was launched; the context is healthy


def block(q, k, v):
    """Attention between other work, as in a transformer block."""
    out = xstage.flash_attention(q * 0.5, k, v)
    return out.flatten(2) * 2 + 1


@hopper
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_torch_compile_fullgraph_matches_eager(mode):
    torch._dynamo.reset()
    q, k, v = make_qkv(2, 1100, 1100, 6, 128, "bhsd", seed=11)
    eager = block(q, k, v)
    compiled = torch.compile(block, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead records a CUDA graph on a later call
        got = compiled(q, k, v)
    torch.testing.assert_close(got, eager, atol=1e-2, rtol=1e-2)
    explanation = torch._dynamo.explain(block)(q, k, v)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


def captured_call(q, k, v):
    """xstage.flash_attention(q, k, v, return_lse=True) warmed up outside the capture (library load, smem opt-in) and
    captured in a CUDA graph: (graph, out, lse), the outputs the graph writes at each replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            xstage.flash_attention(q, k, v, return_lse=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = xstage.flash_attention(q, k, v, return_lse=True)
    return graph, out, lse


@hopper
def test_cuda_graph_capture_and_replay():
    q, k, v = make_qkv(2, 1500, 1500, 5, 64, "packed_qkv", seed=5)
    graph, out, lse = captured_call(q, k, v)
    for seed in range(3):
        fresh = make_qkv(2, 1500, 1500, 5, 64, "packed_qkv", seed=100 + seed)
        for dst, src in zip((q, k, v), fresh):
            dst.copy_(src)
        graph.replay()
        want_out, want_lse = xstage.flash_attention(q, k, v, return_lse=True)
        torch.cuda.synchronize()
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
        assert rel_l2(out, reference(q, k, v, 1 / 8)[0]) <= REL_L2_MAX


@hopper
def test_1000_calls_no_hang_flat_memory():
    q, k, v = make_qkv(1, 1024, 1024, 4, 128, "contiguous", seed=9)
    xstage.flash_attention(q, k, v, return_lse=True)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    start = time.perf_counter()
    for i in range(1000):
        result = xstage.flash_attention(q, k, v, return_lse=(i % 2 == 0))
        del result
    enqueue_s = time.perf_counter() - start
    done = torch.cuda.Event()
    done.record()
    deadline = time.monotonic() + 60
    while not done.query():
        assert time.monotonic() < deadline, "1000 calls did not finish within 60 s"
        time.sleep(0.005)
    assert torch.cuda.memory_allocated() == before
    print(f"1000 calls enqueued in {enqueue_s * 1e3:.1f} ms ({enqueue_s * 1e3:.3f} ms per call on the host)")


@hopper
def test_current_device_and_stream_are_used():
    q, k, v = make_qkv(1, 700, 700, 2, 128, "contiguous", seed=13)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = xstage.flash_attention(q, k, v)
    stream.synchronize()
    assert rel_l2(out, reference(q, k, v, 1 / math.sqrt(128))[0]) <= REL_L2_MAX


@hopper
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_second_device():
    torch.cuda.set_device(0)
    with torch.cuda.device(1):
        q, k, v = make_qkv(1, 900, 900, 3, 64, "contiguous", seed=17)
    out = xstage.flash_attention(q, k, v)  # tensors on cuda:1, current device 0
    assert out.device == q.device and torch.cuda.current_device() == 0
    torch.cuda.synchronize(1)
    assert rel_l2(out, reference(q, k, v, 1 / 8)[0]) <= REL_L2_MAX
    with pytest.raises(ValueError, match="k is on cuda:0 but q is on cuda:1"):
        xstage.flash_attention(q, k.to("cuda:0"), v)
    # A launch that splits on cuda:1 (its workspace from that device's pool), the current device still 0.
    with torch.cuda.device(1):
        b, m, n, h, d = split_shape(128)
        q, k, v = make_qkv(b, m, n, h, d, "contiguous", seed=19)
    assert splits(q, k, v) and torch.cuda.current_device() == 0
    out = xstage.flash_attention(q, k, v)
    torch.cuda.synchronize(1)
    assert rel_l2(out, reference_by_head(q, k, v, 1 / math.sqrt(d))[0]) <= REL_L2_MAX


@hopper
def test_expandable_segments_memory():
    """Tensors from PyTorch's expandable segments (CUDA virtual memory) pass the pointer checks."""
    code = (
        "import torch, xstage, torch.nn.functional as F\n"
        "q = torch.randn(1, 1000, 4, 128, device='cuda', dtype=torch.bfloat16)\n"
        "out = xstage.flash_attention(q, q, q)\n"
        "ref = F.scaled_dot_product_attention(*(q.transpose(1, 2),) * 3).transpose(1, 2)\n"
        "err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()\n"
        "assert err < 2e-2, err\n"
        "print('ok', err)\n"
    )
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


@hopper
def test_cpp_kernel_and_python_path_agree():
    """Where libxstage_torch.so serves the op (torch >= 2.10 and the library built), its C++ kernel and the Python
    implementation (the ctypes path, called directly) launch the same kernel: equal outputs and LSE, bit for bit,
    on a strided layout and on another device than the current one's stream."""
    from xstage import _ops, attention

    q, k, v = make_qkv(2, 1000, 777, 4, 128, "bhsd", seed=5)
    out, lse = xstage.flash_attention(q, k, v, return_lse=True)
    path = _ops.torch_library_path()
    if path is not None and os.path.isfile(path):
        assert _ops.torch_library() == path, "the first CUDA call should have loaded libxstage_torch.so"
    py_out, py_lse = attention._flash_attention_impl(q, k, v, 1 / math.sqrt(128), True)
    assert torch.equal(out, py_out) and torch.equal(lse, py_lse)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        side = xstage.flash_attention(q, k, v)  # torch's current stream, as the Python path takes it
    stream.synchronize()
    assert torch.equal(side, out)


def sm_count():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def split_shape(d):
    """(batch, seqlen_q, seqlen_k, heads, head_dim) whose one, partial wave of 128-row tiles (about three quarters
    of this GPU's SMs) is ~100 key blocks long: the launcher's rule splits it by key range over every SM on any SM
    count (docs/ATTENTION.md, "The split tail"). seqlen_q and seqlen_k are no multiples of a tile or a key block."""
    b, h = 2, 3
    tiles_per_head = max(1, (3 * sm_count() // 4) // (b * h))
    return b, tiles_per_head * 128 - 50, 19163, h, d


def cuda_kernels(fn):
    """The names of the CUDA kernels that `fn` launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        for device in range(torch.cuda.device_count()):
            torch.cuda.synchronize(device)
    return {e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA}


def splits(q, k, v):
    """Whether xstage.flash_attention on these inputs launches the split tail's combine kernel, and its forward kernel
    once (a check that the profiler sees xstage's kernels at all)."""
    names = cuda_kernels(lambda: xstage.flash_attention(q, k, v))
    assert sum("flash_fwd_sm90_kernel" in n for n in names) == 1, names
    return any("key_split_combine" in n for n in names)


def reference_by_head(q, k, v, scale):
    """reference() one (batch, head) at a time: the split shapes' fp32 score matrices would not fit at once."""
    b, m, h, d = q.shape
    out = torch.empty(b, m, h, d, device=q.device, dtype=torch.float32)
    lse = torch.empty(b, h, m, device=q.device, dtype=torch.float32)
    for i in range(b):
        for j in range(h):
            o, l = reference(q[i : i + 1, :, j : j + 1], k[i : i + 1, :, j : j + 1], v[i : i + 1, :, j : j + 1], scale)
            out[i, :, j] = o[0, :, 0]
            lse[i, j] = l[0, 0]
    return out, lse


@hopper
@pytest.mark.parametrize("layout", ["contiguous", "padded_heads", "bhsd"])
@pytest.mark.parametrize("d", [64, 128])
def test_split_tail_against_fp32_reference(d, layout):
    """A launch whose last wave the launcher splits: the combine kernel runs, and the output and log-sum-exp are
    those of unsplit attention (the fp32 reference; SDPA as the yardstick); a shape of one whole wave does not split."""
    b, m, n, h, d = split_shape(d)
    q, k, v = make_qkv(b, m, n, h, d, layout, seed=200 + d + LAYOUTS.index(layout))
    assert splits(q, k, v), f"{(b, m, n, h, d)} on {sm_count()} SMs was expected to split"
    scale = 1.0 / math.sqrt(d)
    out, lse = xstage.flash_attention(q, k, v, return_lse=True)
    ref_out, ref_lse = reference_by_head(q, k, v, scale)
    assert torch.isfinite(out).all() and out.is_contiguous()
    err = rel_l2(out, ref_out)
    err_sdpa = rel_l2(sdpa(q, k, v, scale), ref_out)
    assert err <= REL_L2_MAX, f"rel L2 {err:.2e} (SDPA: {err_sdpa:.2e})"
    assert err <= 2 * err_sdpa + 1e-3, f"xstage {err:.2e} vs SDPA {err_sdpa:.2e}"
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-4)
    assert torch.equal(xstage.flash_attention(q, k, v), out)  # without the log-sum-exp: the same output
    whole = make_qkv(1, 128 * sm_count(), n, 1, d, layout, seed=1)  # every wave full: nothing to split
    assert not splits(*whole)


@hopper
def test_split_tail_cuda_graph_and_memory():
    """The split launch captured in a CUDA graph (its workspace then owned by the graph) and replayed on fresh inputs
    bit-equal to eager, and 1000 eager split calls: no hang, torch's memory and the device's free memory unchanged
    (the workspace comes from a pool that xstage keeps)."""
    b, m, n, h, d = split_shape(128)
    q, k, v = make_qkv(b, m, n, h, d, "contiguous", seed=31)
    assert splits(q, k, v)
    graph, out, lse = captured_call(q, k, v)
    for seed in range(3):
        for dst, src in zip((q, k, v), make_qkv(b, m, n, h, d, "contiguous", seed=300 + seed)):
            dst.copy_(src)
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        want_out, want_lse = xstage.flash_attention(q, k, v, return_lse=True)
        torch.cuda.synchronize()
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    del graph
    torch.cuda.synchronize()
    allocated, free = torch.cuda.memory_allocated(), torch.cuda.mem_get_info()[0]
    start = time.monotonic()
    for i in range(1000):
        result = xstage.flash_attention(q, k, v, return_lse=(i % 2 == 0))
        del result
    done = torch.cuda.Event()
    done.record()
    while not done.query():
        assert time.monotonic() - start < 120, "1000 split calls did not finish within 120 s"
        time.sleep(0.005)
    assert torch.cuda.memory_allocated() == allocated
    assert torch.cuda.mem_get_info()[0] == free


@hopper
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_split_tail_torch_compile(mode):
    """torch.compile(fullgraph=True) over a split launch (reduce-overhead: recorded in cudagraph trees) against eager."""
    torch._dynamo.reset()
    b, m, n, h, d = split_shape(64)
    q, k, v = make_qkv(b, m, n, h, d, "bhsd", seed=41)
    assert splits(q * 0.5, k, v)
    eager = block(q, k, v)
    compiled = torch.compile(block, fullgraph=True, mode=mode)
    for _ in range(3):
        got = compiled(q, k, v)
    torch.testing.assert_close(got, eager, atol=1e-2, rtol=1e-2)


@hopper
def test_errors_on_cuda_tensors():
    q = torch.zeros(1, 64, 2, 64, device="cuda", dtype=BF16)
    with pytest.raises(TypeError, match="k has dtype torch.float16"):
        xstage.flash_attention(q, q.half(), q)
    with pytest.raises(ValueError, match="v is a cpu tensor"):
        xstage.flash_attention(q, q, q.cpu())
    with pytest.raises(ValueError, match="head_dim is 96"):
        x = torch.zeros(1, 64, 2, 96, device="cuda", dtype=BF16)
        xstage.flash_attention(x, x, x)
    with pytest.raises(ValueError, match="head_dim stride 2"):
        x = torch.zeros(1, 64, 64, 2, device="cuda", dtype=BF16).transpose(2, 3)
        xstage.flash_attention(x, x, x)
    # A view that starts 2 bytes into its storage: only the C library sees the address.
    flat = torch.zeros(64 * 2 * 64 + 8, device="cuda", dtype=BF16)
    x = flat[1 : 1 + 64 * 2 * 64].view(1, 64, 2, 64)
    with pytest.raises(ValueError, match="Q pointer .* is not 16-byte aligned") as info:
        xstage.flash_attention(x, q, q)
    assert isinstance(info.value, xstage.InputError)
    torch.cuda.synchronize()  # nothing was launched; the context is healthy
    assert xstage.flash_attention(q, q, q).shape == q.shape


@pytest.mark.skipif(is_hopper(), reason="this GPU is a Hopper")
def test_other_gpus_are_refused():
    q = torch.zeros(1, 64, 2, 64, device="cuda", dtype=BF16)
    with pytest.raises(RuntimeError, match="built for sm_90a"):
        xstage.flash_attention(q, q, q)
