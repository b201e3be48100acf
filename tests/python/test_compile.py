"""torch.compile traces xstage.flash_attention as one opaque operator, without graph breaks, with the right
output shapes, on a machine without a GPU: inputs are fake CUDA tensors (FakeTensorMode) or meta tensors,
so only the fake implementation runs. (Real compiled runs and CUDA graphs: tests/python/gpu/.)"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import xstage
from support import Capture

BF16 = torch.bfloat16


def block(q, k, v):
    """Attention inside other work, as in a transformer block: projections in, output projection out."""
    out = xstage.flash_attention(q * 2, k, v)
    return out.flatten(2) + 1


def block_lse(q, k, v):
    out, lse = xstage.flash_attention(q, k, v, softmax_scale=0.05, return_lse=True)
    return out, lse.exp()


def test_fullgraph_one_graph_with_the_op(fake):
    torch._dynamo.reset()
    backend = Capture()
    q, k = torch.empty(2, 1000, 6, 128, dtype=BF16, device="cuda"), torch.empty(2, 77, 6, 128, dtype=BF16, device="cuda")
    y = torch.compile(block, fullgraph=True, backend=backend)(q, k, k)
    assert y.shape == (2, 1000, 6 * 128) and y.dtype == BF16 and y.device.type == "cuda"
    assert len(backend.graphs) == 1
    assert backend.ops().count(torch.ops.xstage.flash_attention.default) == 1


def test_fullgraph_lse_shapes(fake):
    torch._dynamo.reset()
    backend = Capture()
    q = torch.empty(1, 4097, 3, 64, dtype=BF16, device="cuda")
    out, lse = torch.compile(block_lse, fullgraph=True, backend=backend)(q, q, q)
    assert out.shape == (1, 4097, 3, 64) and out.dtype == BF16
    assert lse.shape == (1, 3, 4097) and lse.dtype == torch.float32
    node = next(n for g in backend.graphs for n in g.graph.nodes if n.target == torch.ops.xstage.flash_attention.default)
    assert node.args[3:] == (0.05, True, None)  # scale and return_lse are baked into the graph; no key lengths


def test_fullgraph_with_key_lengths(fake):
    """Per-sequence key lengths computed in the graph from a mask (no host read) and passed to the op."""
    torch._dynamo.reset()
    backend = Capture()
    q, k = torch.empty(3, 500, 4, 64, dtype=BF16, device="cuda"), torch.empty(3, 77, 4, 64, dtype=BF16, device="cuda")
    keep = torch.empty(3, 77, dtype=torch.bool, device="cuda")
    f = lambda q, k, keep: xstage.flash_attention(q, k, k, key_lengths=keep.sum(-1, dtype=torch.int32))  # noqa: E731
    out = torch.compile(f, fullgraph=True, backend=backend)(q, k, keep)
    assert out.shape == q.shape and len(backend.graphs) == 1
    assert backend.node(torch.ops.xstage.flash_attention.default).args[5] is not None


def test_aot_eager_functionalizes_through_the_op(fake):
    """aot_eager runs AOTAutograd (functionalization, the fake implementation under its own fake mode)."""
    torch._dynamo.reset()
    q = torch.empty(2, 257, 4, 64, dtype=BF16, device="cuda")
    y = torch.compile(block, fullgraph=True, backend="aot_eager")(q, q, q)
    assert y.shape == (2, 257, 4 * 64)


def test_dynamic_shapes(fake):
    """With dynamic=True one graph serves every sequence length."""
    torch._dynamo.reset()
    backend = Capture()
    f = torch.compile(block_lse, fullgraph=True, dynamic=True, backend=backend)
    for m in (300, 1000, 4099):
        q = torch.empty(1, m, 2, 128, dtype=BF16, device="cuda")
        out, lse = f(q, q, q)
        assert out.shape == (1, m, 2, 128) and lse.shape == (1, 2, m)
    assert len(backend.graphs) == 1


def test_meta_tensors_compile():
    torch._dynamo.reset()
    q = torch.empty(2, 513, 4, 128, dtype=BF16, device="meta")
    y = torch.compile(block, fullgraph=True, backend="aot_eager")(q, q, q)
    assert y.shape == (2, 513, 4 * 128) and y.device.type == "meta"


def test_bad_input_fails_at_trace_time(fake):
    torch._dynamo.reset()
    q = torch.empty(1, 64, 2, 96, dtype=BF16, device="cuda")
    with pytest.raises(Exception, match=r"head_dim is 96"):
        torch.compile(block, fullgraph=True, backend=Capture())(q, q, q)


def test_schema():
    schema = str(torch.ops.xstage.flash_attention.default._schema)
    assert schema == (
        "xstage::flash_attention(Tensor q, Tensor k, Tensor v, float softmax_scale, bool return_lse, "
        "Tensor? key_lengths=None) -> (Tensor, Tensor)"
    )
