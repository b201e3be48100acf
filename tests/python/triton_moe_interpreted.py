"""The Triton fused-MoE baseline's kernels (tools/moe/triton_moe.py) in Triton's interpreter: run by
test_triton_moe.py in a process of its own with TRITON_INTERPRET=1 (the interpreter must be on before triton is
imported, and must not stay on for the other tests of a pytest session). Tiny, awkward layers (tokens not a
multiple of BLOCK_M, an expert with no tokens, top-k 1 and 3, N and K not multiples of the blocks) against the
float32 reference, bf16 and fp8; align on its own; the block-size rule.

Triton 3.6's interpreter gets two things wrong that the GPU does right (probed below, patched only where the
probe shows them): a bf16 tl.dot multiplies the raw bf16 bit patterns, and fp32 -> bf16 / e4m3 casts truncate
or drop the carry of the rounding (124.7 -> 64 instead of 128). While these tests run, those casts round to
nearest even (e4m3 saturating at 448, as the GPU's cvt.rn.satfinite) through torch, and a bf16 dot multiplies
the values."""

import importlib.util
import os
import sys

import pytest

if os.environ.get("TRITON_INTERPRET") != "1" or "triton" in sys.modules:
    raise RuntimeError("run by tests/python/test_triton_moe.py: it needs TRITON_INTERPRET=1 set before triton is imported")
import triton  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402

_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "moe", "triton_moe.py")


@triton.jit
def _probe_kernel(a_ptr, b_ptr, dot_ptr, x_ptr, bf16_ptr, e4m3_ptr):
    r = tl.arange(0, 16)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
    tl.store(dot_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b))
    x = tl.load(x_ptr + r)
    tl.store(bf16_ptr + r, x.to(tl.bfloat16))
    tl.store(e4m3_ptr + r, x.to(tl.float8e4nv))


def _interpreter_faults():
    """Which of the interpreter's faults this triton has: (bf16 dot wrong, fp32 -> bf16/e4m3 rounding wrong)."""
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(16, 16, generator=gen).bfloat16()
    b = torch.randn(16, 16, generator=gen).bfloat16()
    x = torch.randn(16, generator=gen) * 100
    x[0] = 124.7  # e4m3 128 (the carry), bf16 124.5
    dot, xb, xq = torch.empty(16, 16), torch.empty(16, dtype=torch.bfloat16), torch.empty(16, dtype=torch.float8_e4m3fn)
    _probe_kernel[(1,)](a, b, dot, x, xb, xq)
    dot_wrong = not torch.allclose(dot, a.float() @ b.float(), rtol=1e-5, atol=1e-5)
    cast_wrong = not (torch.equal(xb, x.bfloat16()) and torch.equal(xq.float(), x.clamp(-448, 448).to(torch.float8_e4m3fn).float()))
    return dot_wrong, cast_wrong


@pytest.fixture(scope="module")
def moe():
    """tools/moe/triton_moe.py, loaded with the interpreter's faults patched while the tests of this file run."""
    from triton.runtime import interpreter as ti

    dot_wrong, cast_wrong = _interpreter_faults()
    saved = (ti._convert_float, ti.InterpreterBuilder.create_dot)
    if cast_wrong:
        wrong = ti._convert_float

        def convert_float(data, src, dst, rounding_mode):
            if src == tl.float32 and dst in (tl.bfloat16, tl.float8e4nv):
                v = torch.from_numpy(np.ascontiguousarray(data).view(np.float32))
                if dst == tl.float8e4nv:
                    return v.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
                return v.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            return wrong(data, src, dst, rounding_mode)

        ti._convert_float = convert_float
    if dot_wrong:
        dot = ti.InterpreterBuilder.create_dot

        def as_f32(t):
            if t.dtype.scalar != tl.bfloat16:
                return t
            return ti.TensorHandle((t.data.astype(np.uint32) << 16).view(np.float32), tl.float32)

        def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
            return dot(self, as_f32(a), as_f32(b), d, input_precision, max_num_imprecise_acc)

        ti.InterpreterBuilder.create_dot = create_dot
    assert _interpreter_faults() == (False, False), "the interpreter patch did not take"
    spec = importlib.util.spec_from_file_location("triton_moe", _TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    ti._convert_float, ti.InterpreterBuilder.create_dot = saved


def _routing(tokens, top_k, experts, empty, seed):
    """Random distinct top-k ids over the experts except `empty` (which gets no token), weights like the CLI's."""
    gen = torch.Generator().manual_seed(seed)
    live = torch.tensor([e for e in range(experts) if e not in empty])
    ids = torch.stack([live[torch.randperm(len(live), generator=gen)[:top_k]] for _ in range(tokens)]).to(torch.int32)
    w = 0.1 + torch.rand(tokens, top_k, generator=gen)
    return ids, w / w.sum(dim=1, keepdim=True)


def _layer(moe, tokens, h, inter, experts, top_k, empty, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    ids, rw = _routing(tokens, top_k, experts, empty, seed)
    x = torch.randn(tokens, h, generator=gen).bfloat16()
    weights = moe.random_weights(experts, h, inter, gen, "cpu")
    if dtype == "fp8":
        weights = moe.to_fp8(weights)
    moe.check_inputs(x, ids, rw, weights)
    return x, ids, rw, weights


def test_align(moe):
    # 7 tokens, k = 3 over 5 experts, expert 2 empty; BLOCK_M 4: expert runs of 5, 4, 0, 6, 6 rows pad to 8, 4, 0, 8, 8.
    ids = torch.tensor([[0, 1, 3], [4, 0, 3], [1, 4, 0], [3, 0, 4], [1, 3, 4], [4, 3, 0], [1, 4, 3]], dtype=torch.int32)
    sorted_pairs, block_expert, padded_rows = moe.align(ids, 5, 4)
    pairs = ids.numel()
    assert padded_rows.tolist() == [28]
    assert sorted_pairs.numel() == moe.max_padded_rows(pairs, 5, 4) >= 28
    flat = ids.reshape(-1)
    want = []
    for e in range(5):
        run = [p for p in range(pairs) if flat[p] == e]  # token order within the expert
        want += run + [pairs] * (-len(run) % 4)
    assert sorted_pairs[:28].tolist() == want
    assert (sorted_pairs[28:] == pairs).all()
    assert block_expert[:7].tolist() == [0, 0, 1, 3, 3, 4, 4]
    assert (block_expert[7:] == 5).all()  # past the end: no expert
    assert sorted_pairs.dtype == block_expert.dtype == padded_rows.dtype == torch.int32


def test_block_rule(moe):
    # DeepSeek-V3-like (E 256, k 8): weight streaming up to 16 rows per expert, then the tables' larger tiles.
    rule = lambda t, d: moe.choose_blocks(t, 8, 256, d)  # noqa: E731
    assert rule(512, "fp8") == rule(512, "bf16") == moe.Blocks(16, 128, 128, 16, 4, 4)
    assert rule(1024, "fp8") == rule(4096, "fp8") == moe.Blocks(64, 128, 128, 16, 4, 4)
    assert rule(8192, "fp8") == moe.Blocks(128, 128, 128, 16, 8, 4)
    assert rule(1024, "bf16") == moe.Blocks(128, 128, 64, 16, 8, 3)
    assert rule(2048, "bf16") == rule(8192, "bf16") == moe.Blocks(128, 256, 64, 16, 8, 4)
    for t in (1, 256, 1024, 8192):
        assert rule(t, "fp8").block_k == moe.QUANT  # one scale per K block
    with pytest.raises(ValueError, match="power of two"):
        moe.parse_blocks("48,128,128,16,4,4")


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
def test_quantize_rows_matches_torch(moe):
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(21, 256, generator=gen) * torch.logspace(-3, 3, 21)[:, None]).bfloat16()
    x[5, 128:] = 0  # a zero block: scale 1, codes 0
    q, s = moe.quantize_rows(x)
    q_ref, s_ref = moe.quantize_blocks(x, 1)
    assert torch.equal(s, s_ref) and s[5, 1] == 1.0
    assert torch.equal(q.float(), q_ref.float())


# (tokens, h, h_inter, E, k, empty experts, blocks or None for the rule): tokens never a multiple of BLOCK_M;
# bf16 with h and 2*h_inter not multiples of BLOCK_N and K not of BLOCK_K (the masked paths); fp8 h = 384 with
# 256-wide N blocks (two weight-scale blocks per tile, a half-full last one).
CASES = {
    "bf16-k3-empty-expert-tails": ("bf16", 37, 160, 48, 6, 3, {5}, (16, 64, 64, 2, 4, 1)),
    "bf16-k1-rule": ("bf16", 21, 128, 64, 4, 1, {2}, None),
    "fp8-k3-empty-expert": ("fp8", 37, 384, 128, 6, 3, {0}, (16, 256, 128, 2, 4, 1)),
    "fp8-k1-rule": ("fp8", 19, 256, 128, 4, 1, {3}, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # numpy evaluates both sides of a where: zero blocks
def test_layer_against_reference(moe, case):
    dtype, tokens, h, inter, experts, top_k, empty, blocks = CASES[case]
    x, ids, rw, weights = _layer(moe, tokens, h, inter, experts, top_k, empty, dtype, seed=len(case))
    blocks = moe.Blocks(*blocks) if blocks else moe.choose_blocks(tokens, top_k, experts, dtype)
    out = moe.moe_layer(x, ids, rw, weights, blocks)
    assert out.shape == (tokens, h) and out.dtype == torch.bfloat16
    every = torch.arange(tokens)
    ref = moe.reference_layer(x, ids, rw, weights, every)
    err = moe.rel_l2(out, ref)
    # The CLI's bound, and a tighter one here: the interpreter's GEMMs are numpy fp32 products like the reference's
    # (measured: 0 in bf16, <= 1e-4 in fp8, where a requantized code can still flip).
    assert err <= min(moe.TOLERANCE[dtype], 1e-3), f"{case}: rel L2 {err:.3e}"
    # The check can fail: the same output against the layer with one token's experts rotated, and (fp8) with one
    # W2 block's scale 1.5x, is far outside the tolerance.
    ids_wrong = ids.clone()
    ids_wrong[tokens // 2] = ids_wrong[tokens // 2].roll(1) if top_k > 1 else (ids_wrong[tokens // 2] + 1) % experts
    wrong = moe.reference_layer(x, ids_wrong, rw, weights, every)
    assert moe.rel_l2(out, wrong) > 3 * moe.TOLERANCE[dtype]
    if dtype == "fp8":
        e = int(ids[0, 0])
        scaled = moe.ExpertWeights(weights.w1, weights.w2, weights.w1_scale, weights.w2_scale.clone())
        scaled.w2_scale[e, 0, 0] *= 1.5
        assert moe.rel_l2(out, moe.reference_layer(x, ids, rw, scaled, every)) > 2 * moe.TOLERANCE[dtype]
