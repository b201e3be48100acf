"""xstage.ulysses_attention, xstage.moe and xstage.nn.MoE on Hopper GPUs, over one or more ranks. Skipped
without a GPU. One process (plain pytest: a world of one rank) or one process per GPU under torchrun:

    python3 -m pytest -q tests/python/gpu/test_distributed_gpu.py
    torchrun --standalone --nproc-per-node 2 -m pytest -q tests/python/gpu/test_distributed_gpu.py

Every rank runs the same tests in the same order (the ops are collective). Numerical checks compare the
largest error over all ranks (an all-reduce), so every rank passes or fails a test together and no rank is
left waiting in a collective the others skipped.

  - ulysses_attention, each path (serial, fused_post, fused_both), against attention over the whole
    (all-gathered) sequence on one GPU: an fp32 reference (torch SDPA in fp32) and xstage.flash_attention;
    rel L2 <= 2e-2; both fused paths bit-identical to serial;
  - moe (bf16, fp8 W8A8) against a plain-torch MoE layer over all experts: bf16 rel L2 <= 1e-2 against the
    fp32 layer; fp8 rel L2 <= 1e-2 against the fp32 layer run on the same W8A8 quantization (tokens and the
    SwiGLU output per 1x128, weights per 128x128, emulated in torch), and <= 1e-1 against the unquantized
    fp32 layer: e4m3 keeps 3 mantissa bits, a relative rounding error of up to 2^-4 per value (about 2-3%
    rms: 2.7% measured on Gaussian blocks) on each of the four quantized operands, so the W8A8 layer itself
    is ~5-6% from the bf16 one (6.2% for the plain-torch emulation on a small random layer);
  - moe_pack_weights: the packed W1 is the tile-interleaved permutation, fp8 codes and scales equal the
    torch emulation bit for bit;
  - torch.compile(fullgraph=True) against eager; CUDA graph capture and 100 replays on fresh inputs against
    eager; 1000 back-to-back calls of each op (no hang, flat memory); errors on real CUDA tensors, including
    ones only the C library sees; bad router ids dropped, reported by poll() and the layer going on; a layer
    ended by a timeout rebuilt.
"""

import importlib
import math
import os
import tempfile
import time

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import xstage

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
ULYSSES_REL_L2 = 2e-2
MOE_REL_L2 = 1e-2
MOE_FP8_VS_BF16_REL_L2 = 1e-1


def is_hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


hopper = pytest.mark.skipif(not is_hopper(), reason="the kernels are built for sm_90a (Hopper)")


@pytest.fixture(scope="module")
def comm():
    """The NCCL process group (torchrun's, or a world of one) and xstage's communicator on it."""
    if not is_hopper():
        pytest.skip("the kernels are built for sm_90a (Hopper)")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    created = False
    if not dist.is_initialized():
        if "MASTER_ADDR" in os.environ:  # torchrun
            dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        else:
            store = os.path.join(tempfile.mkdtemp(), "store")
            dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                                    device_id=torch.device("cuda", local))
        created = True
    c = xstage.distributed.init()
    yield c
    xstage.distributed.teardown()
    if created:
        dist.destroy_process_group()


def world():
    return dist.get_world_size(), dist.get_rank()


def global_max(x: float) -> float:
    t = torch.tensor([x], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def global_all(ok: bool) -> bool:
    return global_max(0.0 if ok else 1.0) == 0.0


def rel_l2(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


# --- Ulysses attention ------------------------------------------------------------------------------------


def shard_inputs(b, m, h, d, seed):
    """This rank's q, k, v [b, m/P, h, d] (a rank-dependent seed) and the all-gathered full sequence."""
    P, r = world()
    g = gen(seed * 1000 + r)
    local = [(torch.rand(b, m // P, h, d, device="cuda", generator=g) * 4 - 2).to(BF16) for _ in range(3)]
    full = []
    for t in local:
        gathered = torch.empty((P,) + tuple(t.shape), dtype=t.dtype, device="cuda")
        dist.all_gather_into_tensor(gathered, t)
        full.append(gathered.permute(1, 0, 2, 3, 4).reshape(b, m, h, d))
    return local, full


def my_rows(x):
    P, r = world()
    ms = x.shape[1] // P
    return x[:, r * ms : (r + 1) * ms]


# (batch, M (whole sequence), heads, head_dim): heads a multiple of 8 (any group of up to 8 ranks), M a
# multiple of 8; shards that are not multiples of the 128-row tile (tiles straddle two ranks).
ULYSSES_SHAPES = [(1, 4096, 8, 128), (2, 1000, 8, 64), (1, 8192, 24, 128), (3, 2056, 16, 64), (1, 8, 8, 128)]


@hopper
@pytest.mark.parametrize("shape", ULYSSES_SHAPES, ids=lambda s: "b{}_m{}_h{}_d{}".format(*s))
def test_ulysses_matches_single_gpu_attention(comm, shape):
    b, m, h, d = shape
    if h % comm.world_size:
        pytest.skip("heads not divisible by the group size")
    (q, k, v), (fq, fk, fv) = shard_inputs(b, m, h, d, seed=ULYSSES_SHAPES.index(shape))
    serial = xstage.ulysses_attention(q, k, v, path="serial")
    ref = F.scaled_dot_product_attention(*(t.float().transpose(1, 2) for t in (fq, fk, fv))).transpose(1, 2)
    single = xstage.flash_attention(fq, fk, fv)
    err_serial = global_max(rel_l2(serial, my_rows(ref)))
    err_single = global_max(rel_l2(single, ref))
    assert err_serial <= ULYSSES_REL_L2, f"serial {err_serial:.2e}, flash_attention on one GPU {err_single:.2e}"
    for path in ("fused_post", "fused_both"):
        fused = xstage.ulysses_attention(q, k, v, path=path)
        assert fused.shape == q.shape and fused.dtype == BF16 and fused.is_contiguous()
        err_fused = global_max(rel_l2(fused, my_rows(ref)))
        diff_single = global_max((fused.float() - my_rows(single).float()).abs().max().item())
        identical = global_all(torch.equal(fused, serial))
        msg = (f"{path} {err_fused:.2e}, serial {err_serial:.2e}, flash_attention on one GPU {err_single:.2e} "
               f"(max |{path} - it| {diff_single:.2e})")
        assert err_fused <= ULYSSES_REL_L2, msg
        assert err_fused <= 2 * err_single + 1e-3, msg
        assert identical, f"{path} and serial Ulysses differ: " + msg
        assert global_all(bool(torch.isfinite(fused).all()))


@hopper
def test_ulysses_store_paths_agree(comm):
    (q, k, v), _ = shard_inputs(1, 2048, 8, 128, seed=50)
    a = xstage.ulysses_attention(q, k, v, store_path="tma")
    b = xstage.ulysses_attention(q, k, v, store_path="st_global")
    assert global_all(torch.equal(a, b))


# --- MoE --------------------------------------------------------------------------------------------------


def block_gains(E, n, k, block_rows, g):
    """A gain in [1/4, 4] (log-uniform) per (block_rows x 128) block: the fp8 scale blocks then differ by up to
    16x, so a scale read from the wrong block shows in the layer's output (with equal-variance blocks every
    scale is within a few percent of every other and such a bug would hide)."""
    gains = torch.exp2(torch.rand(E, n // block_rows, k // 128, device="cuda", generator=g) * 4 - 2)
    return gains.repeat_interleave(block_rows, 1).repeat_interleave(128, 2)


def moe_problem(E, K, h, inter, T, seed, routing="random"):
    """All E experts' logical weights (the same on every rank: one seed), this rank's tokens and routing."""
    P, r = world()
    g = gen(seed)
    w1 = torch.randn(E, 2 * inter, h, device="cuda", generator=g) / math.sqrt(h) * block_gains(E, 2 * inter, h, 128, g)
    w2 = torch.randn(E, h, inter, device="cuda", generator=g) / math.sqrt(inter) * block_gains(E, h, inter, 128, g)
    w1, w2 = w1.to(BF16), w2.to(BF16)
    g = gen(seed * 1000 + 1 + r)
    x = (torch.randn(T, h, device="cuda", generator=g) * block_gains(1, T, h, 1, g)[0]).to(BF16)
    if routing == "random":
        ids = torch.rand(T, E, device="cuda", generator=g).topk(K, dim=-1).indices
    elif routing == "balanced":  # as `xstage moe bench`: round-robin over a permutation
        perm = torch.randperm(E, device="cuda", generator=gen(seed))
        q = (r * T + torch.arange(T, device="cuda")[:, None]) * K + torch.arange(K, device="cuda")[None, :]
        ids = perm[q % E]
    elif routing == "hot":  # every token to experts 0..K-1 (all on rank 0)
        ids = torch.arange(K, device="cuda").expand(T, K)
    wts = torch.rand(T, K, device="cuda", generator=g).softmax(-1)
    return w1, w2, x, ids.to(torch.int32).contiguous(), wts.float().contiguous()


def local_experts(w, P, r):
    e = w.shape[0] // P
    return w[r * e : (r + 1) * e].contiguous()


def q_e4m3(x, block_rows, block_cols):
    """fp8 e4m3 block quantization as xstage does it (src/moe/fp8/fp8.hpp): scale = amax/448, code =
    e4m3(x * (448/amax)) with round-to-nearest-even and saturation; a zero block gets scale 1. Returns
    (codes, scales per block)."""
    n, k = x.shape
    xb = x.float().reshape(n // block_rows, block_rows, k // block_cols, block_cols)
    amax = xb.abs().amax(dim=(1, 3), keepdim=True)
    tiny = amax < 448.0 * 1.1754943508222875e-38
    # Tensor by tensor: torch divides by a Python scalar as a multiply by its reciprocal (and 448 / t is
    # t.reciprocal() * 448), which is not the correctly rounded fp32 quotient the C library uses.
    e4m3_max = torch.full_like(amax, 448.0)
    scale = torch.where(tiny, torch.ones_like(amax), amax / e4m3_max)
    inv = torch.where(tiny, torch.ones_like(amax), e4m3_max / amax)
    codes = (xb * inv).clamp(-448.0, 448.0).to(FP8)
    return codes.reshape(n, k), scale.reshape(n // block_rows, k // block_cols)


def dq(codes, scale, block_rows, block_cols):
    n, k = codes.shape
    s = scale.repeat_interleave(block_rows, 0).repeat_interleave(block_cols, 1)
    return codes.float() * s


def torch_moe(x, ids, wts, w1, w2, fp8=False):
    """The MoE layer in plain torch, fp32: out[t] = sum_j w[t,j] W2[e] (silu(W1_gate[e] x_t) * W1_up[e] x_t).
    fp8: the W8A8 layer (tokens and the SwiGLU output quantized per 1x128, weights per 128x128)."""
    inter = w2.shape[2]
    xf = dq(*q_e4m3(x, 1, 128), 1, 128) if fp8 else x.float()
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        t_idx, j_idx = (ids == e).nonzero(as_tuple=True)
        a = w1[e].float() if not fp8 else dq(*q_e4m3(w1[e], 128, 128), 128, 128)
        b = w2[e].float() if not fp8 else dq(*q_e4m3(w2[e], 128, 128), 128, 128)
        y = xf[t_idx] @ a.T
        act = F.silu(y[:, :inter]) * y[:, inter:]
        if fp8:
            act = dq(*q_e4m3(act, 1, 128), 1, 128)
        out.index_add_(0, t_idx, (act @ b.T) * wts[t_idx, j_idx, None])
    return out


def w1_permutation(two_inter, tile_n):
    """Packed row n*tile_n + c holds logical row l1_logical_row(n, c) (src/moe/problem/layout.hpp)."""
    inter, half = two_inter // 2, tile_n // 2
    rows = torch.arange(two_inter)
    n, c = rows // tile_n, rows % tile_n
    return torch.where(c < half, n * half + c, inter + n * half + (c - half))


# (E, top_k, hidden, inter, tokens per rank): the DiT-like h = 1152 (an odd multiple of 128: half-full last
# Linear-2 tiles), 128- and 256-wide tiles, a top-k of 8.
MOE_SHAPES = [(16, 4, 1024, 512, 256), (8, 2, 1152, 1024, 300), (32, 8, 2048, 768, 200)]


@hopper
@pytest.mark.parametrize("dtype", [BF16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("shape", MOE_SHAPES, ids=lambda s: "E{}_k{}_h{}_i{}_t{}".format(*s))
def test_moe_matches_torch_reference(comm, shape, dtype, record_property):
    E, K, h, inter, T = shape
    P, r = world()
    if E % P:
        pytest.skip("experts not divisible by the group size")
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=MOE_SHAPES.index(shape))
    packed = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r), dtype=dtype)
    out = xstage.moe(x, ids, wts, packed.w1, packed.w2, packed.w1_scales, packed.w2_scales, max_tokens=T)
    assert out.shape == (T, h) and out.dtype == BF16
    fp8 = dtype == FP8
    err = global_max(rel_l2(out, torch_moe(x, ids, wts, w1, w2, fp8=fp8)))
    record_property("rel_l2", err)
    assert err <= MOE_REL_L2, f"rel L2 {err:.2e} against the plain-torch {'W8A8' if fp8 else 'bf16'} layer"
    if fp8:
        err_bf16 = global_max(rel_l2(out, torch_moe(x, ids, wts, w1, w2)))
        record_property("rel_l2_vs_unquantized", err_bf16)
        assert err_bf16 <= MOE_FP8_VS_BF16_REL_L2, f"W8A8 vs the unquantized layer: rel L2 {err_bf16:.2e}"


@hopper
@pytest.mark.parametrize("schedule", ["auto", "interleaved", "expert_wave", "pipelined_waves"])
@pytest.mark.parametrize("routing", ["balanced", "hot"])
def test_moe_schedules_and_routings(comm, schedule, routing):
    E, K, h, inter, T = 16, 4, 1024, 512, 512
    P, r = world()
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=7, routing=routing)
    packed = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r))
    out = xstage.moe(x, ids, wts, packed.w1, packed.w2, schedule=schedule, max_tokens=T)
    err = global_max(rel_l2(out, torch_moe(x, ids, wts, w1, w2)))
    assert err <= MOE_REL_L2, f"{schedule}, {routing}: rel L2 {err:.2e}"


@hopper
def test_moe_fewer_tokens_than_max_and_none(comm):
    """One layer serves every token count up to max_tokens, zero included (a rank without tokens still takes
    part)."""
    E, K, h, inter = 16, 2, 1024, 512
    P, r = world()
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, 256, seed=8)
    packed = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r))
    worst = 0.0
    for t in (256, 1, 77, 0):
        out = xstage.moe(x[:t], ids[:t], wts[:t], packed.w1, packed.w2, max_tokens=256)
        assert out.shape == (t, h)
        if t:
            worst = max(worst, rel_l2(out, torch_moe(x[:t], ids[:t], wts[:t], w1, w2)))
    assert global_max(worst) <= MOE_REL_L2
    keys = [key for key, _ in comm.layers() if key[0] == "moe" and key[-1] == 256 and key[2] == K and key[3] == h]
    assert len(keys) == 1


@hopper
@pytest.mark.parametrize("dtype", [BF16, FP8], ids=["bf16", "fp8"])
def test_pack_weights_layout_and_quantization(comm, dtype):
    E, h, inter = 4, 1152, 1024
    w1, w2, *_ = moe_problem(E, 2, h, inter, 1, seed=9)
    packed = xstage.moe_pack_weights(w1, w2, dtype=dtype)
    perm = w1_permutation(2 * inter, packed.tile_n).cuda()
    assert packed.tile_n == (256 if dtype == FP8 else 128)  # bf16: h = 1152 is not a multiple of 256
    if dtype == BF16:
        assert torch.equal(packed.w1, w1[:, perm]) and torch.equal(packed.w2, w2)
        assert packed.w1_scales is None
        return
    for e in range(E):
        codes, scales = q_e4m3(w1[e, perm], 128, 128)
        kb = scales.shape[1]
        rows = slice(e * 2 * inter // 128, (e + 1) * 2 * inter // 128)
        differ = int((packed.w1[e].view(torch.uint8) != codes.view(torch.uint8)).sum())
        assert differ == 0, f"expert {e}: {differ} of {codes.numel()} W1 codes differ from the torch emulation"
        assert torch.equal(packed.w1_scales[rows, :kb], scales)
        assert bool((packed.w1_scales[rows, kb:] == 1).all())  # padding entries
        codes, scales = q_e4m3(w2[e], 128, 128)
        rows = slice(e * h // 128, (e + 1) * h // 128)
        differ = int((packed.w2[e].view(torch.uint8) != codes.view(torch.uint8)).sum())
        assert differ == 0, f"expert {e}: {differ} of {codes.numel()} W2 codes differ from the torch emulation"
        assert torch.equal(packed.w2_scales[rows, : scales.shape[1]], scales)


@hopper
@pytest.mark.parametrize("dtype", [BF16, FP8], ids=["bf16", "fp8"])
def test_nn_moe_module(comm, dtype):
    E, K, h, inter, T = 16, 4, 1024, 512, 128
    P, r = world()
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=10)
    m = xstage.nn.MoE.from_weights(local_experts(w1, P, r), local_experts(w2, P, r), top_k=K, dtype=dtype, max_tokens=2 * T)
    assert m.num_experts == E and m.experts_per_rank == E // P
    y = m(x.view(2, T // 2, h), ids.view(2, T // 2, K), wts.view(2, T // 2, K))
    assert y.shape == (2, T // 2, h)
    packed = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r), dtype=dtype)
    direct = xstage.moe(x, ids, wts, *packed[:4], max_tokens=2 * T)
    assert global_all(torch.equal(y.view(T, h), direct))


# --- torch.compile, CUDA graphs, many calls ---------------------------------------------------------------


def ulysses_block(q, k, v):
    return xstage.ulysses_attention(q * 0.5, k, v).float().sum(-1)


@hopper
def test_ulysses_torch_compile_matches_eager(comm):
    (q, k, v), _ = shard_inputs(1, 2048, 8, 128, seed=60)
    compiled = torch.compile(ulysses_block, fullgraph=True)
    eager = ulysses_block(q, k, v)
    for _ in range(2):
        out = compiled(q, k, v)
    assert global_all(torch.allclose(out, eager, rtol=1e-5, atol=1e-5))
    explanation = torch._dynamo.explain(ulysses_block)(q, k, v)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


def moe_block(x, ids, wts, w1, w2, s1, s2):
    return xstage.moe(x, ids, wts, w1, w2, s1, s2, max_tokens=x.shape[0]) + x


@hopper
@pytest.mark.parametrize("dtype", [BF16, FP8], ids=["bf16", "fp8"])
def test_moe_torch_compile_matches_eager(comm, dtype):
    E, K, h, inter, T = 16, 4, 1024, 512, 256
    P, r = world()
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=11)
    p = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r), dtype=dtype)
    eager = moe_block(x, ids, wts, *p[:4])
    compiled = torch.compile(moe_block, fullgraph=True)
    for _ in range(2):
        out = compiled(x, ids, wts, *p[:4])
    assert global_all(torch.equal(out, eager))


def fresh_like(t, g):
    if t.dtype == torch.int32:
        return t  # routing stays: a replay is checked on new token values
    return (torch.rand(t.shape, device="cuda", generator=g) * 2 - 1).to(t.dtype)


def check_graph_replays(fn, static, replays=100, seed=0):
    """Captures fn(*static) (after warm-up on a side stream), then per replay: fresh values into the static
    inputs, replay, and the same call in eager mode on the same values; True if all are bit-equal."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn(*static)
    g = gen(1000 + seed)
    ok = True
    for _ in range(replays):
        for t in static:
            t.copy_(fresh_like(t, g))
        graph.replay()
        eager = fn(*static)
        ok &= torch.equal(static_out, eager)
    torch.cuda.synchronize()
    return ok


@hopper
@pytest.mark.parametrize("path", ["serial", "fused_post", "fused_both"])
def test_ulysses_cuda_graph_replays(comm, path):
    (q, k, v), _ = shard_inputs(1, 4096, 8, 128, seed=70)
    ok = check_graph_replays(lambda q, k, v: xstage.ulysses_attention(q, k, v, path=path), [q, k, v])
    assert global_all(ok)
    xstage.distributed.poll()


@hopper
@pytest.mark.parametrize("dtype", [BF16, FP8], ids=["bf16", "fp8"])
def test_moe_cuda_graph_replays(comm, dtype):
    E, K, h, inter, T = 16, 4, 1024, 512, 256
    P, r = world()
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=12)
    p = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r), dtype=dtype)
    ok = check_graph_replays(lambda x, ids, wts: xstage.moe(x, ids, wts, *p[:4], max_tokens=T), [x, ids, wts])
    assert global_all(ok)
    xstage.distributed.poll()


def thousand_calls(call):
    call()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    start = time.monotonic()
    for _ in range(1000):
        call()
    torch.cuda.synchronize()
    seconds = time.monotonic() - start
    return seconds, torch.cuda.memory_allocated() - before


@hopper
def test_1000_calls_each_op_no_hang_flat_memory(comm):
    P, r = world()
    (q, k, v), _ = shard_inputs(1, 8192, 8, 128, seed=80)
    E, K, h, inter, T = 32, 8, 2048, 768, 1024
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=13)
    p = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r))
    pf = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r), dtype=FP8)
    calls = {
        "ulysses fused_post": lambda: xstage.ulysses_attention(q, k, v, path="fused_post"),
        "ulysses fused_both": lambda: xstage.ulysses_attention(q, k, v, path="fused_both"),
        "ulysses serial": lambda: xstage.ulysses_attention(q, k, v, path="serial"),
        "moe bf16": lambda: xstage.moe(x, ids, wts, *p[:4], max_tokens=T),
        "moe fp8": lambda: xstage.moe(x, ids, wts, *pf[:4], max_tokens=T),
    }
    for name, call in calls.items():
        seconds, grown = thousand_calls(call)
        print(f"1000 x {name}: {seconds:.3f} s ({seconds * 1e3:.3f} ms per call, host and GPU), memory {grown:+d} B")
        assert global_max(seconds) < 60, f"{name}: 1000 calls took {seconds:.1f} s"
        assert global_max(abs(grown)) == 0, f"{name}: memory grew by {grown} bytes over 1000 calls"
    xstage.distributed.poll()


# --- errors on real CUDA tensors --------------------------------------------------------------------------


@hopper
def test_ulysses_errors_on_cuda_tensors(comm):
    P, _ = world()
    q = torch.zeros(1, 64, 8, 128, dtype=BF16, device="cuda")
    with pytest.raises(ValueError, match="not contiguous"):
        xstage.ulysses_attention(q.transpose(1, 2).contiguous().transpose(1, 2), q, q)
    buf = torch.zeros(q.numel() + 1, dtype=BF16, device="cuda")
    misaligned = buf[1:].view(q.shape)  # contiguous, but 2 bytes off: only the C library sees it
    with pytest.raises(xstage.InputError, match="q's data pointer is not 16-byte aligned"):
        xstage.ulysses_attention(misaligned, q, q)
    if P > 1:
        odd = torch.zeros(1, 64, P + 1, 128, dtype=BF16, device="cuda")
        with pytest.raises(ValueError, match=rf"{P + 1} heads cannot be split over the group's {P} ranks"):
            xstage.ulysses_attention(odd, odd, odd)
    if torch.cuda.device_count() > 1:
        other = (comm.device + 1) % torch.cuda.device_count()
        t = torch.zeros(1, 64, 8, 128, dtype=BF16, device=f"cuda:{other}")
        with pytest.raises(ValueError, match=rf"on cuda:{other} but this rank's xstage communicator is on cuda:{comm.device}"):
            xstage.ulysses_attention(t, t, t)


@hopper
def test_moe_errors_on_cuda_tensors(comm):
    E, K, h, inter, T = 16, 2, 1024, 512, 64
    P, r = world()
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=14)
    p = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r))
    with pytest.raises(TypeError, match="topk_ids has dtype torch.int64"):
        xstage.moe(x, ids.long(), wts, p.w1, p.w2, max_tokens=T)
    with pytest.raises(ValueError, match="65 tokens, more than max_tokens = 64"):
        xstage.moe(torch.cat([x, x[:1]]), torch.cat([ids, ids[:1]]), torch.cat([wts, wts[:1]]), p.w1, p.w2, max_tokens=T)
    buf = torch.zeros(x.numel() + 8, dtype=BF16, device="cuda")
    misaligned = buf[8:].view(x.shape)  # 16 bytes off: fine; 2 bytes off: refused by the C library
    xstage.moe(misaligned, ids, wts, p.w1, p.w2, max_tokens=T)
    misaligned = buf[1 : 1 + x.numel()].view(x.shape)
    with pytest.raises(xstage.InputError, match="tokens's data pointer is not 16-byte aligned"):
        xstage.moe(misaligned, ids, wts, p.w1, p.w2, max_tokens=T)
    if P > 1:
        with pytest.raises(ValueError, match="pass max_tokens"):
            xstage.moe(x, ids, wts, p.w1, p.w2)


@hopper
def test_teardown_and_init_again(comm):
    (q, k, v), _ = shard_inputs(1, 1024, 8, 64, seed=90)
    before = xstage.ulysses_attention(q, k, v)
    xstage.distributed.teardown()
    assert not xstage.distributed.is_initialized()
    if comm.world_size > 1:
        with pytest.raises(RuntimeError, match="not initialised"):
            xstage.ulysses_attention(q, k, v)
    else:  # a group of one rank: the op builds the local communicator of the tensors' device instead
        assert torch.equal(xstage.ulysses_attention(q, k, v), before)
        xstage.distributed.teardown()  # that local communicator too
    again = xstage.distributed.init()
    assert again is not comm and again.world_size == comm.world_size and comm.handle is None
    assert global_all(torch.equal(xstage.ulysses_attention(q, k, v), before))


@hopper
@pytest.mark.parametrize("dtype", [BF16, FP8], ids=["bf16", "fp8"])
def test_moe_cpp_kernel_and_python_path_agree(comm, dtype):
    """Where libxstage_torch.so serves the op (torch >= 2.10 and the library built), its C++ kernel and the Python
    implementation (the ctypes path, called directly) run the same layer: the same output, and the kernel finds
    the layer the first call built (no second one). After teardown and init, the kernel's cached handle is gone:
    the same configuration gets the new communicator's layer."""
    from xstage import _ops

    moe_module = importlib.import_module("xstage.moe")  # the module (xstage.moe is the function)

    E, K, h, inter, T = 16, 4, 1024, 512, 256
    P, r = world()
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=11)
    p = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r), dtype=dtype)
    out = xstage.moe(x, ids, wts, *p[:4], max_tokens=T)
    path = _ops.torch_library_path()
    if path is not None and os.path.isfile(path):
        assert _ops.torch_library() == path, "the first CUDA call should have loaded libxstage_torch.so"
    layers = len(comm_now().layers())
    args = (x, ids, wts, *p[:4], xstage.distributed.group_key(None), T, 0, "auto", 0, 1, 10.0)
    assert rel_l2(moe_module._moe_impl(*args), out) <= 1e-3
    assert rel_l2(xstage.moe(x, ids, wts, *p[:4], max_tokens=T), out) <= 1e-3
    assert len(comm_now().layers()) == layers
    xstage.distributed.teardown()
    again = xstage.distributed.init()
    assert rel_l2(xstage.moe(x, ids, wts, *p[:4], max_tokens=T), out) <= 1e-3
    assert len(again.layers()) == 1


@hopper
@pytest.mark.parametrize("bad", ["out_of_range", "repeated"])
def test_bad_router_ids_are_dropped_reported_and_the_layer_goes_on(comm, bad):
    """One call with a bad router id on every rank: poll() names it (xstage.InputError), the call's other
    pairs are computed, and the next call of the same cached layer with good ids is correct."""
    E, K, h, inter, T = 16, 2, 1024, 512, 64
    P, r = world()
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=15)
    p = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r))
    xstage.moe(x, ids, wts, p.w1, p.w2, max_tokens=T)  # the layer, built before the bad call
    torch.cuda.synchronize()
    xstage.distributed.poll()
    layers = len(comm_now().layers())
    bad_ids = ids.clone()
    bad_ids[5, 1] = E + 3 if bad == "out_of_range" else bad_ids[5, 0]
    out = xstage.moe(x, bad_ids, wts, p.w1, p.w2, max_tokens=T)
    torch.cuda.synchronize()
    expect = rf"token 5 picks expert {E + 3}, outside \[0, {E}\)" if bad == "out_of_range" else "more than once"
    with pytest.raises(xstage.InputError, match=expect) as info:
        xstage.distributed.poll()
    assert "1 (token, expert) pair dropped" in str(info.value) and "the layer goes on" in str(info.value)
    xstage.distributed.poll()  # reported once
    # The dropped pair adds nothing: token 5 gets its first expert's share only, every other token all of it.
    kept = wts.clone()
    kept[5, 1] = 0.0
    assert global_max(rel_l2(out, torch_moe(x, ids, kept, w1, w2))) <= MOE_REL_L2
    good = xstage.moe(x, ids, wts, p.w1, p.w2, max_tokens=T)
    torch.cuda.synchronize()
    xstage.distributed.poll()
    assert len(comm_now().layers()) == layers  # the same cached layer
    assert global_max(rel_l2(good, torch_moe(x, ids, wts, w1, w2))) <= MOE_REL_L2


@hopper
def test_a_layer_ended_by_a_timeout_is_rebuilt(comm):
    """A device-side wait that times out (a bound of 1 us, which the dispatch of the first rows already
    exceeds) ends the layer: poll() names the timeout, the next call says how to recover, and after that
    recovery (one rank: by itself; more: teardown() and init()) the op computes correctly again."""
    E, K, h, inter, T = 16, 2, 1024, 512, 256
    P, r = world()
    w1, w2, x, ids, wts = moe_problem(E, K, h, inter, T, seed=16)
    p = xstage.moe_pack_weights(local_experts(w1, P, r), local_experts(w2, P, r))
    tiny = dict(max_tokens=T, timeout_s=1e-6)
    xstage.moe(x, ids, wts, p.w1, p.w2, **tiny)
    torch.cuda.synchronize()
    with pytest.raises(xstage.PlatformError, match="timed out after 1e-06 s") as info:
        xstage.distributed.poll()
    assert "the layer has ended" in str(info.value)
    if P == 1:
        with pytest.raises(xstage.PlatformError, match="the layer was dropped; the next call builds a new one"):
            xstage.moe(x, ids, wts, p.w1, p.w2, **tiny)
        assert not [key for key, _ in comm_now().layers() if key[-2] == 1e-6]
        xstage.moe(x, ids, wts, p.w1, p.w2, **tiny)  # a new layer (which times out again: same bound)
        torch.cuda.synchronize()
        with pytest.raises(xstage.PlatformError, match="timed out"):
            xstage.distributed.poll()
    else:
        with pytest.raises(xstage.PlatformError, match=r"xstage.distributed.teardown\(\) and then xstage.distributed.init\(\)"):
            xstage.moe(x, ids, wts, p.w1, p.w2, **tiny)
    xstage.distributed.teardown()
    xstage.distributed.init()
    out = xstage.moe(x, ids, wts, p.w1, p.w2, max_tokens=T)
    torch.cuda.synchronize()
    xstage.distributed.poll()
    assert global_max(rel_l2(out, torch_moe(x, ids, wts, w1, w2))) <= MOE_REL_L2


def comm_now():
    """The default group's communicator as it is now (teardown() and init() replace the fixture's)."""
    return xstage.distributed.get_communicator()
