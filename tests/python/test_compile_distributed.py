"""torch.compile(fullgraph=True) traces xstage.ulysses_attention, xstage.moe and xstage.nn.MoE as one opaque
operator each, without graph breaks and with the right output shapes, on a machine without a GPU and without
a communicator: inputs are fake CUDA tensors (FakeTensorMode) or meta tensors, so only the fake
implementations run. (Real compiled runs and CUDA graphs: tests/python/gpu/.)"""

import pytest
import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode

import xstage
from support import Capture

BF16 = torch.bfloat16


def sp_block(x, wqkv, wo, heads, group=None, path=xstage.ulysses.DEFAULT_ULYSSES_PATH):
    """A DiT attention block, sequence-parallel: projections on the local shard, Ulysses attention, output
    projection."""
    b, s, width = x.shape
    q, k, v = (x @ wqkv).unflatten(-1, (3, heads, width // heads)).unbind(2)
    out = xstage.ulysses_attention(q.contiguous(), k.contiguous(), v.contiguous(), group=group, path=path)
    return out.flatten(2) @ wo + x


def test_ulysses_fullgraph_one_graph(fake):
    torch._dynamo.reset()
    backend = Capture()
    x = torch.empty(2, 1024, 512, dtype=BF16, device="cuda")
    wqkv, wo = torch.empty(512, 1536, dtype=BF16, device="cuda"), torch.empty(512, 512, dtype=BF16, device="cuda")
    y = torch.compile(sp_block, fullgraph=True, backend=backend)(x, wqkv, wo, 8)
    assert y.shape == x.shape and y.dtype == BF16
    assert len(backend.graphs) == 1
    assert backend.ops().count(torch.ops.xstage.ulysses_attention.default) == 1
    node = backend.node(torch.ops.xstage.ulysses_attention.default)
    assert node.args[3:] == ("", xstage.ulysses.DEFAULT_ULYSSES_PATH, "tma", 10.0)  # default group and path, options baked in


@pytest.mark.parametrize("path", ["serial", "fused_post", "fused_both"])
def test_ulysses_each_path_and_dynamic(fake, path):
    torch._dynamo.reset()
    backend = Capture()
    f = torch.compile(lambda q: xstage.ulysses_attention(q, q, q, path=path), fullgraph=True, dynamic=True, backend=backend)
    for s in (256, 1000, 4096):
        q = torch.empty(1, s, 4, 64, dtype=BF16, device="cuda")
        assert f(q).shape == q.shape
    assert len(backend.graphs) == 1
    assert backend.node(torch.ops.xstage.ulysses_attention.default).args[4] == path


def test_ulysses_with_an_explicit_group(fake, tmp_path):
    """A process group object is traced to its group_name (a constant of the graph), as torch's functional
    collectives do; the fake implementation needs no communicator for it."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        torch._dynamo.reset()
        backend = Capture()
        group = dist.group.WORLD
        q = torch.empty(1, 512, 4, 128, dtype=BF16, device="cuda")
        y = torch.compile(lambda q: xstage.ulysses_attention(q, q, q, group=group), fullgraph=True, backend=backend)(q)
        assert y.shape == q.shape and len(backend.graphs) == 1
        assert backend.node(torch.ops.xstage.ulysses_attention.default).args[3] == group.group_name
    finally:
        dist.destroy_process_group()


def test_ulysses_meta_aot_eager():
    torch._dynamo.reset()
    x = torch.empty(1, 512, 256, dtype=BF16, device="meta")
    wqkv, wo = torch.empty(256, 768, dtype=BF16, device="meta"), torch.empty(256, 256, dtype=BF16, device="meta")
    y = torch.compile(sp_block, fullgraph=True, backend="aot_eager")(x, wqkv, wo, 2)
    assert y.shape == x.shape and y.device.type == "meta"


def test_ulysses_bad_input_fails_at_trace_time(fake):
    torch._dynamo.reset()
    q = torch.empty(1, 64, 4, 96, dtype=BF16, device="cuda")
    with pytest.raises(Exception, match=r"head_dim is 96"):
        torch.compile(lambda q: xstage.ulysses_attention(q, q, q), fullgraph=True, backend=Capture())(q)
    q = torch.empty(1, 64, 4, 64, dtype=BF16, device="cuda")
    with pytest.raises(Exception, match=r"unknown Ulysses path 'fused'"):
        torch.compile(lambda q: xstage.ulysses_attention(q, q, q, path="fused"), fullgraph=True, backend=Capture())(q)


E, H, I, K = 8, 256, 128, 2


def moe_ffn(x, router, w1, w2):
    """An MoE feed-forward as a model writes it: router, top-k, the expert layer; x [batch, seq, hidden]."""
    b, s, h = x.shape
    flat = x.reshape(-1, h)
    scores = (flat.float() @ router).softmax(-1)
    weights, ids = torch.topk(scores, K, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    y = xstage.moe(flat, ids.to(torch.int32), weights, w1, w2, schedule="expert_wave")
    return y.reshape(b, s, h) + x


def test_moe_fullgraph_one_graph(c_library, fake):
    torch._dynamo.reset()
    backend = Capture()
    x = torch.empty(2, 100, H, dtype=BF16, device="cuda")
    router = torch.empty(H, E, device="cuda")
    w1, w2 = torch.empty(E, 2 * I, H, dtype=BF16, device="cuda"), torch.empty(E, H, I, dtype=BF16, device="cuda")
    y = torch.compile(moe_ffn, fullgraph=True, backend=backend)(x, router, w1, w2)
    assert y.shape == x.shape and y.dtype == BF16
    assert len(backend.graphs) == 1 and backend.ops().count(torch.ops.xstage.moe.default) == 1
    node = backend.node(torch.ops.xstage.moe.default)
    assert node.args[7:] == ("", 0, 0, "expert_wave", 0, 1, 10.0)


def test_moe_fp8_dynamic_tokens(c_library, fake):
    torch._dynamo.reset()
    backend = Capture()
    fp8 = torch.float8_e4m3fn
    w1, w2 = torch.empty(E, 2 * I, H, dtype=fp8, device="cuda"), torch.empty(E, H, I, dtype=fp8, device="cuda")
    s1, s2 = torch.empty(E * 2 * I // 128, 4, device="cuda"), torch.empty(E * H // 128, 4, device="cuda")
    f = torch.compile(
        lambda x, ids, wts: xstage.moe(x, ids, wts, w1, w2, s1, s2, max_tokens=8192), fullgraph=True, dynamic=True, backend=backend
    )
    for t in (17, 1000, 4096):
        x = torch.empty(t, H, dtype=BF16, device="cuda")
        y = f(x, torch.empty(t, K, dtype=torch.int32, device="cuda"), torch.empty(t, K, device="cuda"))
        assert y.shape == (t, H)
    assert len(backend.graphs) == 1


def test_nn_moe_module_meta_aot_eager(c_library):
    torch._dynamo.reset()
    m = xstage.nn.MoE(E, H, I, K, dtype=torch.float8_e4m3fn, device="meta")
    x = torch.empty(2, 64, H, dtype=BF16, device="meta")
    ids = torch.empty(2, 64, K, dtype=torch.int32, device="meta")
    wts = torch.empty(2, 64, K, device="meta")
    y = torch.compile(m, fullgraph=True, backend="aot_eager")(x, ids, wts)
    assert y.shape == x.shape and y.device.type == "meta"


def test_moe_bad_input_fails_at_trace_time(fake):
    torch._dynamo.reset()
    x = torch.empty(100, H, dtype=BF16, device="cuda")
    w1, w2 = torch.empty(E, 2 * I, H, dtype=BF16, device="cuda"), torch.empty(E, H, I, dtype=BF16, device="cuda")
    ids64 = torch.empty(100, K, dtype=torch.int64, device="cuda")
    with pytest.raises(Exception, match=r"topk_ids has dtype torch.int64"):
        torch.compile(lambda x, ids: xstage.moe(x, ids, ids.float(), w1, w2), fullgraph=True, backend=Capture())(x, ids64)


def test_schemas():
    assert str(torch.ops.xstage.ulysses_attention.default._schema) == (
        "xstage::ulysses_attention(Tensor q, Tensor k, Tensor v, str group, str path, str store_path, float timeout_s) -> Tensor"
    )
    assert str(torch.ops.xstage.moe.default._schema) == (
        "xstage::moe(Tensor x, Tensor topk_ids, Tensor topk_weights, Tensor w1, Tensor w2, Tensor? w1_scales, "
        "Tensor? w2_scales, str group, SymInt max_tokens, SymInt tile_n, str schedule, SymInt cluster_n, SymInt cluster_m, "
        "float timeout_s) -> Tensor"
    )
