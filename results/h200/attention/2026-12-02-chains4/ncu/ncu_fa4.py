import sys, torch
sys.path.insert(0, "tools/attention"); sys.path.insert(0, "tools")
import cudnn_bench as cb
for (b, m, h, d) in [(1, 16896, 24, 128), (2, 4250, 24, 64)]:
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.rand((b, h, m, d), device="cuda", generator=g).mul_(2).sub_(1).to(torch.bfloat16) for _ in range(3))
    calls = {"xstage": cb.xstage_call(q, k, v), "fa4": cb.fa4_call(q, k, v), "cudnn": cb.sdpa_call(cb.BACKENDS["cudnn"], q, k, v)}
    for name, fn in calls.items():
        fn(); fn(); torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(f"prof_{name}_{m}_{d}")
        fn(); torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
print("ok")
