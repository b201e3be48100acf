"""Smoke test of an installed xstage wheel on one Hopper GPU (run it with python/ NOT on PYTHONPATH, so the
installed package and its bundled libxstage_c.so are used): flash_attention against fp32 SDPA, and moe (default
schedule "auto") against a plain-torch layer, each rel L2 <= 1e-2.

    pip install --no-deps --target /tmp/xs dist/xstage-*.whl && PYTHONPATH=/tmp/xs python3 tests/python/gpu/wheel_smoke.py
"""
import os
import tempfile

import torch
import torch.distributed as dist

import xstage
print("xstage from", xstage.__file__, "library", xstage.library_path())
assert os.path.join("python", "xstage") not in xstage.__file__, "this checkout's python/ is on the path, not the wheel"
torch.manual_seed(0)
q, k, v = (torch.randn(1, 4097, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = xstage.flash_attention(q, k, v)
ref = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2).float() for t in (q, k, v))).transpose(1, 2)
err = ((out.float() - ref).norm() / ref.norm()).item()
print("flash_attention rel L2 vs fp32 SDPA", err); assert err < 1e-2
dist.init_process_group("nccl", init_method=f"file://{tempfile.mkdtemp()}/s", rank=0, world_size=1, device_id=torch.device("cuda", 0))
xstage.distributed.init()
E, K, H, I, T = 16, 4, 1024, 512, 256
w1 = (torch.randn(E, 2 * I, H, device="cuda") / 32).bfloat16(); w2 = (torch.randn(E, H, I, device="cuda") / 22.6).bfloat16()
x = torch.randn(T, H, device="cuda").bfloat16(); ids = torch.rand(T, E, device="cuda").topk(K, -1).indices.int(); wts = torch.rand(T, K, device="cuda").softmax(-1)
p = xstage.moe_pack_weights(w1, w2)
y = xstage.moe(x, ids, wts, p.w1, p.w2, max_tokens=T)
ref = torch.zeros(T, H, device="cuda")
for e in range(E):
    t, j = (ids == e).nonzero(as_tuple=True)
    h = x[t].float() @ w1[e].float().T
    ref.index_add_(0, t, ((torch.nn.functional.silu(h[:, :I]) * h[:, I:]) @ w2[e].float().T) * wts[t, j, None])
err = ((y.float() - ref).norm() / ref.norm()).item()
print("moe (schedule auto) rel L2 vs fp32 torch", err); assert err < 1e-2
xstage.distributed.teardown(); dist.destroy_process_group()
print("wheel OK")
