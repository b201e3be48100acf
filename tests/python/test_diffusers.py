"""xstage.diffusers on a machine without a GPU: the "xstage" backend in diffusers' registry, the version check,
every model of tools/dit/models.py (what the GPU benchmark times) traced on meta tensors through the backend,
torch.compile(fullgraph=True) of a whole Flux transformer as one graph, the masks, the composed Ulysses index
math (P ranks as threads), swap_moe on meta tensors, and every error the backend raises.

Numerics on the CPU: xstage.flash_attention needs a Hopper GPU, so where a test compares numbers it puts an fp32
SDPA stand-in in its place (`sdpa_for_xstage`): what is checked is everything around the kernel (masks, kept
keys, layouts, the all-to-all index math); tests/python/gpu/test_diffusers_gpu.py checks the kernel's part."""

import math
import os
import sys
import threading

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import xstage
import xstage.diffusers as xd
from support import Capture

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from dit import models as dit_models  # noqa: E402

from diffusers.models.attention_dispatch import (  # noqa: E402
    AttentionBackendName,
    _AttentionBackendRegistry,
    attention_backend,
    dispatch_attention_fn,
)

BF16 = torch.bfloat16
DISPATCHING = ("flux", "wan", "qwenimage", "ltx", "hunyuanvideo")


def meta(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def sdpa(q, k, v, softmax_scale=None, return_lse=False, key_lengths=None):
    """What xstage.flash_attention computes, in fp32 SDPA (the CPU stand-in): sequence b attends to its first
    key_lengths[b] keys, clamped to [1, seqlen_k] as the kernel clamps them."""
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    scale = softmax_scale if softmax_scale is not None else 1 / math.sqrt(q.shape[-1])
    scores = qf @ kf.transpose(-1, -2) * scale
    if key_lengths is not None:
        assert key_lengths.dtype == torch.int32 and key_lengths.shape == (q.shape[0],)
        kept = torch.arange(k.shape[1])[None, :] < key_lengths.clamp(1, k.shape[1])[:, None]
        scores = scores.masked_fill(~kept[:, None, None, :], float("-inf"))
    out = (scores.softmax(-1) @ vf).transpose(1, 2).to(q.dtype)
    return (out, torch.logsumexp(scores, -1)) if return_lse else out


@pytest.fixture
def sdpa_for_xstage(monkeypatch):
    monkeypatch.setattr(xd, "flash_attention", sdpa)


class OpCounter(TorchDispatchMode):
    """The ops an eager run dispatches (some models' own code does not trace under torch.compile on meta)."""

    def __init__(self):
        super().__init__()
        self.ops, self.calls = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        self.calls.append((func, args))
        return func(*args, **(kwargs or {}))

    def count(self, op):
        return self.ops.count(op)


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


# --- registration and the version check -------------------------------------------------------------------


def test_backend_is_registered():
    member = AttentionBackendName("xstage")
    assert member is AttentionBackendName.XSTAGE is AttentionBackendName["XSTAGE"]
    assert member in list(AttentionBackendName) and member.value == "xstage" and member == "xstage"
    assert _AttentionBackendRegistry._backends[member] is xd._xstage_attention
    assert _AttentionBackendRegistry._is_context_parallel_available(member)
    assert {"query", "key", "value", "attn_mask", "scale", "return_lse", "_parallel_config"} <= (
        _AttentionBackendRegistry._supported_arg_names[member]
    )


def test_registering_again_adds_nothing():
    members = len(AttentionBackendName)
    xd._register()
    assert len(AttentionBackendName) == members and AttentionBackendName("xstage") is AttentionBackendName.XSTAGE


def test_the_tested_version_passes():
    import diffusers

    assert diffusers.__version__ in xd.TESTED_VERSIONS
    xd._check_version(diffusers.__version__)


def test_an_untested_version_is_refused(monkeypatch):
    monkeypatch.delenv(xd.UNTESTED_ENV, raising=False)
    with pytest.raises(ImportError, match=r"diffusers 0\.41\.0 is installed; the xstage backend is tested with diffusers 0\.42\.1.*XSTAGE_DIFFUSERS_UNTESTED=1"):
        xd._check_version("0.41.0")


def test_an_untested_version_warns_when_allowed(monkeypatch):
    monkeypatch.setenv(xd.UNTESTED_ENV, "1")
    with pytest.warns(UserWarning, match=r"diffusers 0\.43\.0 is installed.*trying anyway"):
        xd._check_version("0.43.0")


def test_without_diffusers_the_import_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffusers", None)
    with pytest.raises(ImportError, match=r"xstage.diffusers needs diffusers \(pip install diffusers==0.42.1\)"):
        xd._register()


def test_a_diffusers_without_the_registry_is_refused(monkeypatch):
    monkeypatch.setenv(xd.UNTESTED_ENV, "1")
    monkeypatch.setitem(sys.modules, "diffusers.models.attention_dispatch", None)
    with pytest.raises(ImportError, match=r"has no attention-backend registry"):
        xd._register()


# --- models through the backend (meta tensors: shapes, the ops in the graph) ----------------------------


@pytest.mark.parametrize("name", DISPATCHING)
def test_every_benchmark_model_runs_through_the_backend(name):
    model, inputs = dit_models.build(name, "tiny", "meta")
    dispatching, attention_modules = dit_models.dispatches(model)
    assert dispatching > 0
    model.set_attention_backend("xstage")
    with torch.no_grad(), OpCounter() as ops:
        out = dit_models.output(model(**inputs))
    assert out.device.type == "meta" and out.dtype == BF16
    assert ops.count(torch.ops.xstage.flash_attention.default) >= dispatching


def test_sd3_does_not_dispatch():
    """diffusers 0.42's SD3 calls SDPA in its own processor: no backend reaches it (the benchmark says so)."""
    model, _ = dit_models.build("sd3", "tiny", "meta")
    assert dit_models.dispatches(model)[0] == 0


def test_compiled_flux_is_one_graph():
    torch._dynamo.reset()
    model, inputs = dit_models.build("flux", "tiny", "meta")
    model.set_attention_backend("xstage")
    backend = Capture()
    with torch.no_grad():
        out = dit_models.output(torch.compile(model, fullgraph=True, backend=backend)(**inputs))
    assert out.shape == inputs["hidden_states"].shape
    assert len(backend.graphs) == 1
    assert backend.ops().count(torch.ops.xstage.flash_attention.default) == 2  # one double-, one single-stream block


def test_the_context_manager_selects_the_backend():
    q = meta(1, 64, 2, 128)
    backend = Capture()
    with attention_backend("xstage"), torch.no_grad():
        torch.compile(lambda q: dispatch_attention_fn(q, q, q), fullgraph=True, backend=backend)(q)
    assert torch.ops.xstage.flash_attention.default in backend.ops()


def test_cross_attention_scale_and_lse_shapes():
    q, k = meta(2, 100, 4, 64), meta(2, 77, 4, 64)
    out, lse = xd._xstage_attention(q, k, k, scale=0.3, return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 100, 4) and lse.dtype == torch.float32


# --- masks --------------------------------------------------------------------------------------------


def kept(*rows):
    return torch.tensor(rows, dtype=torch.bool)


@pytest.mark.parametrize(
    "mask,lengths",
    [
        (kept([1, 1, 1, 1], [1, 1, 1, 1]), [4, 4]),  # nothing masked
        (kept([1, 1, 0, 0], [1, 0, 0, 0]), [2, 1]),  # prefixes of their own lengths (text padding at the end)
        (kept([0, 1, 0, 1], [1, 0, 1, 1]), [2, 3]),  # holes (Qwen-Image: padding between the text and the image)
        (kept([0, 0, 0, 1], [1, 1, 1, 0]), [1, 3]),
    ],
)
def test_kept_keys_move_first_in_their_order(mask, lengths):
    """The kernel attends to the first lengths[b] keys: they must be exactly sequence b's kept keys, in order."""
    b, sk, h, d = 2, mask.shape[1], 3, 64
    key = torch.arange(b * sk, dtype=torch.float32).view(b, sk, 1, 1).expand(b, sk, h, d).to(BF16)
    k, v, n = xd._kept_keys_first(mask[:, None, None, :], key, key + 1, seqlen_q=5)
    assert n.dtype == torch.int32 and n.tolist() == lengths
    assert k.shape == key.shape and k.is_contiguous()
    for s_ in range(b):
        ids = k[s_, : lengths[s_], 0, 0].float().sub(s_ * sk).tolist()
        assert ids == mask[s_].nonzero().flatten().tolist()
        assert torch.equal(v[s_, : lengths[s_]], k[s_, : lengths[s_]] + 1)


def test_a_fully_masked_sequence_is_refused():
    """A device-side assertion (on a GPU it fails when the GPU gets there; on the CPU at once)."""
    q = torch.zeros(2, 5, 1, 64, dtype=BF16)
    with pytest.raises(RuntimeError, match=r"attn_mask masks every key of a sequence of the batch"):
        xd._kept_keys_first(kept([1, 0], [0, 0]), q[:, :2], q[:, :2], seqlen_q=5)


@pytest.mark.parametrize(
    "mask",
    [
        torch.tensor([True, True, False]),  # [seq_k]
        torch.tensor([[True, True, False]]),  # [batch, seq_k]
        torch.tensor([[[0.0, 0.0, float("-inf")]]]),  # [batch, 1, seq_k], additive
        torch.tensor([0.0, 0.0, -10000.0]).view(1, 1, 1, 3).expand(1, 4, 5, 3),  # -1e4, repeated per head/query
        torch.tensor([0.0, 0.0, -10000.0]).view(1, 1, 1, 3).repeat(1, 4, 1, 1).to(BF16),  # LTX-Video: copies per head
    ],
)
def test_key_padding_masks(mask):
    assert xd._kept_keys(mask, 1, 5, 3).tolist() == [[True, True, False]]


def test_a_bf16_bias_mask_passes_its_check_when_compiled():
    """LTX-Video's -10000 is -9984 in bf16: eager compares in bf16, Inductor in fp32, and both must keep the mask."""
    mask = torch.tensor([0.0, 0.0, -10000.0]).view(1, 1, 1, 3).repeat(2, 4, 1, 1).to(BF16)
    torch._dynamo.reset()
    kept = torch.compile(lambda m: xd._kept_keys(m, 2, 5, 3), fullgraph=True)(mask)
    assert kept.tolist() == [[True, True, False]] * 2


@pytest.mark.parametrize(
    "mask,error,message",
    [
        (torch.ones(1, 4, dtype=torch.int64), TypeError, r"attn_mask has dtype torch.int64; it must be bool"),
        (torch.ones(1, 4, dtype=torch.bool), ValueError, r"attn_mask of shape \(1, 4\) does not fit 2 sequences of 5 queries and 3 keys"),
        (torch.ones(2, 7, 3, dtype=torch.bool), ValueError, r"does not fit"),
        (torch.tensor([[True, True, False], [True, False, False]]).view(1, 2, 1, 3).expand(2, 2, 5, 3), RuntimeError, r"differs between heads or queries"),
        (torch.ones(2, 5, 3, dtype=torch.bool).index_put_((torch.tensor(0), torch.tensor(1), torch.tensor(2)), torch.tensor(False)), RuntimeError, r"differs between heads or queries"),
        (torch.tensor([[True, True, False], [True, False, False]]).view(1, 2, 3).expand(2, 2, 3), ValueError, r"does not fit"),
        (torch.tensor([0.0, -1.0, 0.0]), RuntimeError, r"values other than 0 and <= -10000.0 \(a bias on the scores\)"),
        (torch.tensor([0.0, 1.0, 0.0]), RuntimeError, r"values other than 0 and <= -10000.0"),
        (torch.tensor([0.0, float("nan"), 0.0]), RuntimeError, r"values other than 0 and <= -10000.0"),
        (torch.tensor([[0.0, 0.0, -1e4], [0.0, -1e4, -1e4]]).view(1, 2, 1, 3).expand(2, 2, 5, 3), RuntimeError,
         r"kept keys that differ between heads or queries"),
    ],
)
def test_masks_that_are_not_key_padding_are_refused(mask, error, message):
    """Shapes and dtypes on the host (ValueError, TypeError); values by device-side assertions, which on the CPU
    raise RuntimeError at once."""
    with pytest.raises(error, match=message):
        xd._kept_keys(mask, 2, 5, 3)


@pytest.mark.parametrize(
    "mask",
    [
        torch.ones(2, 77, dtype=torch.bool),
        torch.zeros(2, 4, 1, 77, dtype=BF16),  # LTX-Video's additive mask, one copy per head
        torch.ones(1, 1, 300, 77, dtype=torch.bool),
    ],
)
def test_a_masked_call_reads_nothing_on_the_host(mask):
    """On meta tensors no value exists: any host read (.item(), .tolist(), .cpu(), bool()) would raise. The mask
    becomes key lengths and the op gets them."""
    q, k = meta(2, 300, 4, 64), meta(2, 77, 4, 64)
    with torch.no_grad(), OpCounter() as ops:
        out = xd._xstage_attention(q, k, k, attn_mask=mask.to("meta"))
    assert out.shape == q.shape and out.device.type == "meta"
    call = [a for f, a in ops.calls if f == torch.ops.xstage.flash_attention.default]
    assert len(call) == 1 and call[0][5].shape == (2,) and call[0][5].dtype == torch.int32


def test_a_masked_call_compiles_to_one_graph(fake):
    torch._dynamo.reset()
    q, k = torch.empty(2, 300, 4, 64, dtype=BF16, device="cuda"), torch.empty(2, 77, 4, 64, dtype=BF16, device="cuda")
    mask = torch.empty(2, 4, 1, 77, dtype=BF16, device="cuda")
    backend = Capture()
    out = torch.compile(lambda q, k, m: xd._xstage_attention(q, k, k, attn_mask=m), fullgraph=True, backend=backend)(q, k, mask)
    assert out.shape == q.shape and len(backend.graphs) == 1
    node = backend.node(torch.ops.xstage.flash_attention.default)
    assert node.args[5] is not None  # the key lengths, computed in the graph


@pytest.mark.parametrize("name", ["ltx", "hunyuanvideo"])
def test_compiled_masked_model_is_one_graph(name):
    """LTX-Video's cross-attention to padded text (an additive mask) and HunyuanVideo's joint attention (a boolean
    one): the whole transformer in one graph, the masked call with key lengths. (Qwen-Image's own code reads its
    mask's values to find the text length, so it does not trace on meta tensors.)"""
    torch._dynamo.reset()
    model, inputs = dit_models.build(name, "tiny", "meta")
    model.set_attention_backend("xstage")
    backend = Capture()
    with torch.no_grad():
        out = dit_models.output(torch.compile(model, fullgraph=True, backend=backend)(**inputs))
    assert out.device.type == "meta" and len(backend.graphs) == 1
    calls = [n for g in backend.graphs for n in g.graph.nodes if n.target == torch.ops.xstage.flash_attention.default]
    assert any(len(n.args) > 5 and n.args[5] is not None for n in calls)


@pytest.mark.parametrize("name", ["qwenimage", "hunyuanvideo", "ltx"])
def test_masked_models_match_diffusers_default(name, sdpa_for_xstage):
    """Qwen-Image pads the text in the middle of the keys (batch of 2, one sequence padded: two groups, one
    gathered), HunyuanVideo at the end (a prefix), LTX-Video with an additive -1e4 bias repeated per head."""
    model, inputs = dit_models.build(name, "tiny", "cpu", dtype=BF16)
    with torch.no_grad():
        reference = dit_models.output(model(**inputs))
        model.set_attention_backend("xstage")
        out = dit_models.output(model(**inputs))
    assert rel_l2(out, reference) < 2e-2


def test_flux_matches_diffusers_default(sdpa_for_xstage):
    model, inputs = dit_models.build("flux", "tiny", "cpu", dtype=BF16)
    with torch.no_grad():
        reference = dit_models.output(model(**inputs))
        model.set_attention_backend("xstage")
        out = dit_models.output(model(**inputs))
    assert rel_l2(out, reference) < 2e-2


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(is_causal=True), ValueError, r"is_causal=True: causal attention is not supported"),
        (dict(dropout_p=0.1), ValueError, r"dropout_p=0.1: attention dropout is not supported"),
        (dict(enable_gqa=True), ValueError, r"grouped-query attention is not supported"),
    ],
)
def test_unsupported_options_are_named(kwargs, error, message):
    q = meta(1, 64, 4, 64)
    with pytest.raises(error, match=message):
        dispatch_attention_fn(q, q, q, backend="xstage", **kwargs)


def test_gqa_shapes_are_named():
    with pytest.raises(ValueError, match=r"query has 8 heads, key 2, value 2"):
        xd._xstage_attention(meta(1, 64, 8, 64), meta(1, 64, 2, 64), meta(1, 64, 2, 64))


def test_other_dtypes_are_named():
    q = meta(1, 64, 4, 64, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"query has dtype torch.float16; the backend runs torch.bfloat16 only"):
        xd._xstage_attention(q, q, q)


def test_other_head_dims_are_named():
    q = meta(1, 64, 4, 80)
    with pytest.raises(ValueError, match=r"head_dim is 80"):
        xd._xstage_attention(q, q, q)


def test_not_4d():
    with pytest.raises(ValueError, match=r"query must be 4-D"):
        xd._xstage_attention(meta(64, 4, 64), meta(64, 4, 64), meta(64, 4, 64))


class _Config:
    def __init__(self, ring_degree=1, ulysses_degree=2, ulysses_anything=False):
        self.ring_degree, self.ulysses_degree, self.ulysses_anything = ring_degree, ulysses_degree, ulysses_anything

        class Mesh:
            def get_group(self):
                return None

        self._ulysses_mesh = Mesh()


class _Parallel:
    def __init__(self, **kwargs):
        self.context_parallel_config = _Config(**kwargs)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(ring_degree=2, ulysses_degree=1), r"ring attention \(ContextParallelConfig ring_degree=2\) is not supported"),
        (dict(ulysses_anything=True), r"ulysses_anything is not supported"),
        (dict(ulysses_degree=3), r"4 heads cannot be split over ulysses_degree=3 ranks"),
    ],
)
def test_unsupported_parallel_configs_are_named(kwargs, message):
    q = meta(1, 64, 4, 64)
    with pytest.raises(ValueError, match=message):
        xd._xstage_attention(q, q, q, _parallel_config=_Parallel(**kwargs))


# --- the composed Ulysses path, P ranks as threads -----------------------------------------------------


class ThreadRanks:
    """P "ranks" as threads: all-to-all and all-gather through shared slots and a barrier. Each thread passes
    its rank as the `group`."""

    def __init__(self, ranks):
        self.ranks, self.barrier, self.slots = ranks, threading.Barrier(ranks), [None] * ranks

    def exchange(self, rank, value):
        self.slots[rank] = value
        self.barrier.wait()
        everything = list(self.slots)
        self.barrier.wait()
        return everything

    def all_to_all(self, x, rank):
        chunks = self.exchange(rank, x.chunk(self.ranks))
        return torch.cat([chunks[r][rank] for r in range(self.ranks)])

    def gather_keys(self, mask, rank):
        return torch.cat(self.exchange(rank, mask), dim=-1)


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("case", ["self", "cross", "mask", "lse"])
def test_composed_ulysses_matches_attention_over_the_whole_sequence(monkeypatch, sdpa_for_xstage, ranks, case):
    world = ThreadRanks(ranks)
    monkeypatch.setattr(xd, "_all_to_all", lambda x, group: world.all_to_all(x, group))
    monkeypatch.setattr(xd, "_gather_keys", lambda mask, group: world.gather_keys(mask, group))
    g = torch.Generator().manual_seed(ranks)
    b, s, sk, h, d = 2, 8 * ranks, (12 if case == "cross" else 8) * ranks, 4, 64
    q = torch.randn(b, s, h, d, generator=g).to(BF16)
    k, v = (torch.randn(b, sk, h, d, generator=g).to(BF16) for _ in range(2))
    mask = None
    if case == "mask":  # each sequence keeps its own keys, spread over the ranks' shards
        mask = torch.rand(b, sk, generator=g) > 0.4
        mask[:, 0] = True
    scale = 0.2 if case == "lse" else None
    want = sdpa(q, k, v, softmax_scale=scale, return_lse=True)
    if mask is not None:
        bias = torch.zeros(b, 1, 1, sk).masked_fill(~mask[:, None, None, :], float("-inf"))
        want_out = F.scaled_dot_product_attention(
            *(t.float().transpose(1, 2) for t in (q, k, v)), attn_mask=bias
        ).transpose(1, 2)
        want = (want_out, None)
    results = [None] * ranks

    def run(rank):
        rows, keys = slice(rank * s // ranks, (rank + 1) * s // ranks), slice(rank * sk // ranks, (rank + 1) * sk // ranks)
        local_mask = None if mask is None else mask[:, None, None, keys]
        results[rank] = xd._ulysses_composed(
            q[:, rows], k[:, keys], v[:, keys], local_mask, scale, case == "lse", rank, ranks
        )

    threads = [threading.Thread(target=run, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if case == "lse":
        out = torch.cat([r[0] for r in results], dim=1)
        lse = torch.cat([r[1] for r in results], dim=1)
        assert lse.shape == (b, s, h)
        assert torch.allclose(lse, want[1].transpose(1, 2), atol=1e-4)
    else:
        out = torch.cat(results, dim=1)
    assert out.shape == q.shape and rel_l2(out, want[0]) < 1e-2


# --- swap_moe (meta tensors) ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [BF16, torch.float8_e4m3fn])
def test_swap_moe_on_meta(c_library, dtype):
    model, inputs = dit_models.build("hidream", "tiny", "meta")
    originals = [m for m in model.modules() if type(m).__name__ == "MOEFeedForwardSwiGLU"]
    assert xd.swap_moe(model, dtype=dtype) == len(originals) == 2
    swapped = [m for m in model.modules() if isinstance(m, xd.HiDreamMoE)]
    assert len(swapped) == 2 and not any(type(m).__name__ == "MOEFeedForwardSwiGLU" for m in model.modules())
    first, original = swapped[0], originals[0]
    assert first.gate is original.gate and first.shared_experts is original.shared_experts
    experts = first.experts
    assert isinstance(experts, xstage.nn.MoE) and experts.dtype == dtype and experts.num_experts == 4
    assert experts.top_k == 2 and experts.hidden == original.experts[0].w2.weight.shape[0]
    assert experts.inter == original.experts[0].w2.weight.shape[1] and experts.w1.device.type == "meta"
    model.train()  # HiDream's inference unpatchify reads sizes from tensor values, which meta tensors lack
    with torch.no_grad(), OpCounter() as ops:
        out = dit_models.output(model(**inputs))
    assert out.device.type == "meta"
    assert ops.count(torch.ops.xstage.moe.default) == 2


def test_swap_moe_without_moe():
    model, _ = dit_models.build("flux", "tiny", "meta")
    with pytest.raises(ValueError, match=r"FluxTransformer2DModel has no MoE feed-forward swap_moe knows \(MOEFeedForwardSwiGLU\)"):
        xd.swap_moe(model)


def test_swap_moe_dtype():
    model, _ = dit_models.build("hidream", "tiny", "meta")
    with pytest.raises(TypeError, match=r"dtype is torch.float16; it must be torch.bfloat16 or torch.float8_e4m3fn"):
        xd.swap_moe(model, dtype=torch.float16)


def test_swap_moe_needs_the_gpu():
    model, _ = dit_models.build("hidream", "tiny", "cpu")
    with pytest.raises(ValueError, match=r"the experts' weights are on cpu; move the transformer to the GPU"):
        xd.swap_moe(model)


def test_register_moe_teaches_another_module(monkeypatch):
    monkeypatch.setattr(xd, "_MOE_SWAPS", dict(xd._MOE_SWAPS))

    class MyMoE(torch.nn.Module):
        pass

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), MyMoE())
    xd.register_moe(MyMoE, lambda module, dtype: torch.nn.Identity())
    assert xd.swap_moe(model) == 1 and isinstance(model[1], torch.nn.Identity)


# --- the ops' honest edges: backward, 32-bit sizes, errors under torch.compile, one GPU ------------------


def test_backward_is_recorded_and_raises():
    q = meta(1, 64, 2, 64).requires_grad_()
    out = xstage.flash_attention(q, q, q)
    assert type(out.grad_fn).__name__ == "_ForwardOnlyBackward"
    with torch.no_grad():
        assert xstage.flash_attention(q, q, q).grad_fn is None
    with pytest.raises(RuntimeError, match=r"xstage.flash_attention is forward-only \(inference\): it has no backward.*torch.no_grad\(\)"):
        torch.ops.xstage.no_backward.default(torch.zeros(2), "xstage.flash_attention", [2])


def test_backward_through_compiled_graph_has_the_raising_op():
    torch._dynamo.reset()
    graphs = []

    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    q = meta(1, 64, 2, 64).requires_grad_()
    out = torch.compile(lambda q: xstage.flash_attention(q, q, q) * 2, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))(q)
    out.sum().backward()  # on meta tensors the op's fake runs: what a real backward would raise is in the graph
    targets = [n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert torch.ops.xstage.no_backward.default in targets


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: xstage.flash_attention(meta(1, 2**31, 1, 64), meta(1, 64, 1, 64), meta(1, 64, 1, 64)), r"seqlen_q is 2147483648"),
        (lambda: xstage.flash_attention(meta(1, 64, 1, 64), meta(1, 2**31, 1, 64), meta(1, 2**31, 1, 64)), r"seqlen_k is 2147483648"),
        (lambda: xstage.flash_attention(meta(1, 2**30, 256, 64), meta(1, 64, 256, 64), meta(1, 64, 256, 64)), r"4294967296 output tiles"),
        (lambda: xstage.ulysses_attention(*[meta(1, 2**31, 8, 64)] * 3), r"seqlen \(seqlen/P times the group's size\) is 2147483648"),
        (lambda: xstage.moe(meta(2**31, 128), meta(2**31, 2, dtype=torch.int32), meta(2**31, 2, dtype=torch.float32),
                            meta(4, 512, 128), meta(4, 128, 256)), r"2147483648 tokens"),
    ],
)
def test_sizes_past_32_bits_are_rejected_by_the_fake_implementations(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_sizes_past_32_bits_are_rejected_under_compile():
    torch._dynamo.reset()
    q = meta(1, 2**31, 1, 64)
    with pytest.raises(Exception, match=r"seqlen_q is 2147483648"):
        torch.compile(lambda q: xstage.flash_attention(q, q, q), fullgraph=True, backend=Capture())(q)


def test_dtype_error_under_compile_is_the_plain_error():
    torch._dynamo.reset()
    q = meta(1, 64, 2, 64, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"^xstage.flash_attention: q has dtype torch.float16; q, k and v must be torch.bfloat16"):
        torch.compile(lambda q: xstage.flash_attention(q, q, q) + 1, backend=Capture())(q)


def test_dtype_error_under_fullgraph_names_the_problem():
    torch._dynamo.reset()
    q = meta(1, 64, 2, 64, dtype=torch.float16)
    with pytest.raises(Exception, match=r"xstage.flash_attention: q has dtype torch.float16") as info:
        torch.compile(lambda q: xstage.flash_attention(q, q, q) + 1, fullgraph=True, backend=Capture())(q)
    assert "fake tensor" not in str(info.value)


def test_one_gpu_needs_no_process_group(c_library):
    """Without torch.distributed the default group is one rank: fake implementations check against it, and
    the op builds a local communicator on the tensors' device (without a GPU that fails as the platform's
    error, not as a missing init())."""
    from xstage import distributed

    assert distributed.world_size_for_key("") == 1
    if xstage.is_available():  # a Hopper GPU: the local communicator itself
        comm = distributed.communicator_for_key("", "xstage.moe", torch.cuda.current_device())
        assert comm.world_size == 1 and comm is distributed.communicator_for_key("", "xstage.moe", comm.device)
        distributed.teardown()
    else:
        with pytest.raises(xstage.PlatformError):
            distributed.communicator_for_key("", "xstage.moe", 0)
    with pytest.raises(RuntimeError, match=r"not initialised for process group '7'"):
        distributed.communicator_for_key("7", "xstage.moe", 0)
    x = meta(10, 128)
    moe = xstage.nn.MoE(4, 128, 256, top_k=2, device="meta")
    assert moe(x, meta(10, 2, dtype=torch.int32), meta(10, 2, dtype=torch.float32)).shape == (10, 128)
    with pytest.raises(ValueError, match=r"top_k = 5 is more than the layer's 4 experts"):
        moe.top_k = 5
        moe(x, meta(10, 5, dtype=torch.int32), meta(10, 5, dtype=torch.float32))
