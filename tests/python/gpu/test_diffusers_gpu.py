"""xstage.diffusers on a Hopper GPU: the "xstage" backend against diffusers' default (SDPA) on small models of every
dispatching family of tools/dit/models.py (masks included), direct backend calls against fp32 attention
(cross-attention, scale, log-sum-exp, every kind of key-padding mask), a masked call without any host
synchronisation (sync debug mode, CUDA graph capture) and bad masks failing a device-side assertion, the ops and xstage.nn.MoE on one GPU in a
process without torch.distributed, a backward through an op raising (eager and compiled), and swap_moe on a
small HiDream transformer against diffusers' own MoE module in bf16 and fp8. Skipped without a GPU or diffusers.

    python3 -m pytest -q tests/python/gpu/test_diffusers_gpu.py   # XSTAGE_C_LIBRARY=/path/to/libxstage_c.so
"""

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"),
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="the kernels are built for sm_90a (Hopper)",
    ),
]
diffusers = pytest.importorskip("diffusers")

import xstage  # noqa: E402
import xstage.diffusers as xd  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from dit import models as dit_models  # noqa: E402

BF16 = torch.bfloat16
REL_L2_MAX = 2e-2


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def reference(q, k, v, scale=None, keep=None):
    """fp32 attention of [b, s, h, d] tensors; keep: [b, s_k] bool (kept keys) or None. Returns out, lse [b, s, h]."""
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    scores = qf @ kf.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if keep is not None:
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    return (scores.softmax(-1) @ vf).transpose(1, 2), torch.logsumexp(scores, -1).transpose(1, 2)


@pytest.fixture(autouse=True)
def exact_fp32_matmul():
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(previous)


@pytest.mark.parametrize("name", ["flux", "wan", "qwenimage", "ltx", "hunyuanvideo"])
def test_model_matches_diffusers_default(name):
    model, inputs = dit_models.build(name, "tiny", "cuda")
    with torch.no_grad():
        reference_out = dit_models.output(model(**inputs)).float()
        model.set_attention_backend("xstage")
        out = dit_models.output(model(**inputs)).float()
    assert torch.isfinite(out).all()
    assert rel_l2(out, reference_out) <= REL_L2_MAX


def qkv(b, m, n, h, d, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(b, s, h, d, device="cuda", generator=g).to(BF16) for s in (m, n, n))


@pytest.mark.parametrize("m,n,d", [(300, 77, 128), (1000, 1000, 64), (129, 4097, 128)])
def test_cross_attention_scale_and_lse(m, n, d):
    q, k, v = qkv(2, m, n, 4, d)
    out, lse = xd._xstage_attention(q, k, v, scale=0.07, return_lse=True)
    want, want_lse = reference(q, k, v, scale=0.07)
    assert rel_l2(out, want) <= REL_L2_MAX
    assert lse.shape == (2, m, 4) and torch.allclose(lse, want_lse, atol=1e-3)


def kept_keys(kind, b, n):
    keep = torch.ones(b, n, dtype=torch.bool)
    if kind == "prefix":  # HunyuanVideo: padding at the end, one length for the batch
        keep[:, n - 37:] = False
    elif kind == "lengths":  # a different length per sequence
        keep[0, n - 37:] = False
    elif kind == "middle":  # Qwen-Image: [text kept, text padding, image]
        keep[0, 20:50] = False
    elif kind == "random":
        keep = torch.rand(b, n, generator=torch.Generator().manual_seed(1)) > 0.5
        keep[:, 0] = True
    return keep.cuda()


@pytest.mark.parametrize("kind", ["none", "prefix", "lengths", "middle", "random"])
@pytest.mark.parametrize("form", ["bool4d", "additive3d", "bias1e4_heads"])
def test_key_padding_masks(kind, form):
    b, m, n, h = 2, 200, 300, 4
    q, k, v = qkv(b, m, n, h, 128, seed=3)
    keep = kept_keys(kind, b, n)
    if form == "bool4d":
        mask = keep[:, None, None, :]
    elif form == "additive3d":
        mask = torch.zeros(b, 1, n, device="cuda", dtype=BF16).masked_fill(~keep[:, None, :], float("-inf"))
    else:  # LTX-Video: -10000, repeated per head
        mask = torch.zeros(b, 1, 1, n, device="cuda", dtype=BF16).masked_fill(~keep[:, None, None, :], -10000.0)
        mask = mask.expand(b, h, 1, n)
    out = xd._xstage_attention(q, k, v, attn_mask=mask)
    want, _ = reference(q, k, v, keep=keep)
    assert rel_l2(out, want) <= REL_L2_MAX


def test_a_masked_call_does_not_synchronise():
    """torch's sync debug mode makes any operation that waits for the GPU raise; a CUDA graph capture would fail on
    one too. A Qwen-Image-like mask (kept keys with a hole), bool and LTX-Video's additive per-head form."""
    b, m, n, h = 2, 300, 400, 4
    q, k, v = qkv(b, m, n, h, 128, seed=5)
    keep = kept_keys("middle", b, n)
    masks = [keep[:, None, None, :],
             torch.zeros(b, h, 1, n, device="cuda", dtype=BF16).masked_fill(~keep[:, None, None, :], -10000.0)]
    for mask in masks:
        xd._xstage_attention(q, k, v, attn_mask=mask)  # warm-up (library load, smem opt-in)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = xd._xstage_attention(q, k, v, attn_mask=mask)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert rel_l2(out, reference(q, k, v, keep=keep)[0]) <= REL_L2_MAX
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = xd._xstage_attention(q, k, v, attn_mask=mask)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, out)


def test_a_masked_call_compiles_to_one_graph():
    b, m, n, h = 2, 300, 128, 4
    q, k, v = qkv(b, m, n, h, 64, seed=7)
    keep = kept_keys("lengths", b, n)
    mask = torch.zeros(b, h, 1, n, device="cuda", dtype=BF16).masked_fill(~keep[:, None, None, :], -10000.0)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v, mask: xd._xstage_attention(q, k, v, attn_mask=mask), fullgraph=True)
    out = compiled(q, k, v, mask)
    assert torch.equal(out, xd._xstage_attention(q, k, v, attn_mask=mask))
    assert rel_l2(out, reference(q, k, v, keep=keep)[0]) <= REL_L2_MAX


@pytest.mark.parametrize(
    "mask_code,message",
    [
        ("torch.zeros(2, 1, 1, 64, dtype=torch.bool, device='cuda')", "masks every key"),
        ("torch.full((2, 4, 1, 64), -1.0, dtype=torch.bfloat16, device='cuda')", "values other than 0"),
    ],
)
def test_a_bad_mask_fails_a_device_side_assertion(mask_code, message):
    """Checked on the device, so the failure surfaces at the next synchronisation, as a CUDA device-side assertion
    that ends the process's CUDA context: a process of its own."""
    script = textwrap.dedent(
        f"""
        import torch, xstage.diffusers as xd
        q = torch.randn(2, 32, 4, 64, device="cuda", dtype=torch.bfloat16)
        xd._xstage_attention(q, q[:, :1].expand(2, 64, 4, 64).contiguous(), q[:, :1].expand(2, 64, 4, 64).contiguous(),
                             attn_mask={mask_code})
        torch.cuda.synchronize()
        print("not caught")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert done.returncode != 0 and "not caught" not in done.stdout, done.stdout + done.stderr
    assert "device-side assert" in done.stderr or message in done.stderr, done.stderr[-3000:]


def test_ops_without_a_process_group():
    """A fresh process that never touches torch.distributed: flash_attention, ulysses_attention (one rank),
    moe and nn.MoE run on a local communicator built on demand."""
    script = textwrap.dedent(
        """
        import torch, torch.distributed as dist, xstage
        assert not dist.is_initialized()
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(1, 512, 8, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
        want = torch.nn.functional.scaled_dot_product_attention(*(t.float().transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
        for out in (xstage.flash_attention(q, k, v), xstage.ulysses_attention(q, k, v)):
            assert ((out.float() - want).norm() / want.norm()).item() < 2e-2
        e, h, inter, t = 8, 1024, 512, 300
        w1 = torch.randn(e, 2 * inter, h, device="cuda", generator=g).to(torch.bfloat16) / h**0.5
        w2 = torch.randn(e, h, inter, device="cuda", generator=g).to(torch.bfloat16) / inter**0.5
        x = torch.randn(t, h, device="cuda", generator=g).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(e, device="cuda")[:2] for _ in range(t)]).to(torch.int32)
        wts = torch.rand(t, 2, device="cuda")
        y = xstage.nn.MoE.from_weights(w1, w2, top_k=2)(x, ids, wts).float()
        ref = torch.zeros(t, h, device="cuda")
        for j in range(2):
            a = torch.einsum("th,tnh->tn", x.float(), w1[ids[:, j].long()].float())
            act = torch.nn.functional.silu(a[:, :inter]) * a[:, inter:]
            ref += wts[:, j, None] * torch.einsum("tn,thn->th", act, w2[ids[:, j].long()].float())
        assert ((y - ref).norm() / ref.norm()).item() < 2e-2, ((y - ref).norm() / ref.norm()).item()
        xstage.distributed.poll()
        xstage.distributed.teardown()
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


def test_backward_raises():
    q, k, v = (t.requires_grad_() for t in qkv(1, 256, 256, 2, 64))
    out = xstage.flash_attention(q, k, v)
    with pytest.raises(RuntimeError, match=r"xstage.flash_attention is forward-only \(inference\)"):
        out.float().sum().backward()
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: xstage.flash_attention(q, k, v) * 2, fullgraph=True)
    out = compiled(q, k, v)
    with pytest.raises(RuntimeError, match=r"forward-only"):
        out.float().sum().backward()
    with torch.no_grad():
        assert xstage.flash_attention(q, k, v).grad_fn is None


@pytest.mark.parametrize("dtype,bound", [(BF16, REL_L2_MAX), (torch.float8_e4m3fn, 1e-1)])
def test_swap_moe_matches_diffusers_module(dtype, bound):
    model, inputs = dit_models.build("hidream", "tiny", "cuda")
    with torch.no_grad():
        reference_out = dit_models.output(model(**inputs)).float()
        assert xd.swap_moe(model, dtype=dtype) == 2
        out = dit_models.output(model(**inputs)).float()
    assert torch.isfinite(out).all()
    assert rel_l2(out, reference_out) <= bound
