#!/usr/bin/env python3
"""What users run today for a Ulysses attention layer's second half: cuDNN SDPA, then the post-attention
all-to-all with NCCL (torch.distributed.all_to_all_single) and its transposes, on the same shapes as
`xstage attention ulysses bench`.

Run under torchrun, one process per GPU (P = world size):
    torchrun --standalone --nproc-per-node P tools/attention/ulysses_torch_bench.py --seqlens 8192,16384 --heads 4,12 \
        --head-dims 128 --out bench_torch.json
Per rank: head-sharded q, k, v [B, H/P, M, d] (what the pre-attention all-to-all leaves); timed:
  sdpa       the attention alone (cuDNN backend);
  sdpa_a2a   the attention, [B, H/P, M, d] -> [P, B, M/P, H/P, d], all_to_all_single, -> [B, M/P, H, d].
Timing: warm-up, then per trial all ranks line up (barrier), `--inner` back-to-back calls between CUDA events,
time per call; the trial's time is the max over ranks; the median over trials is reported (the paper's
protocol, as in the xstage bench). Writes JSON with the torch, cuDNN and NCCL versions.
"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def ints(text):
    return [int(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlens", type=ints, default=[4096, 8192, 16384, 32768, 49152, 65536])
    ap.add_argument("--heads", type=ints, default=[4, 12], help="heads per rank (H/P)")
    ap.add_argument("--head-dims", type=ints, default=[128, 64])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--inner", "--replays", dest="inner", type=int, default=10, help="back-to-back calls per trial")
    ap.add_argument("--warmup-ms", type=float, default=1000.0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, P = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def median_over_trials(fn):
        fn()
        torch.cuda.synchronize()
        per_trial = []
        for _ in range(args.trials):
            dist.barrier()
            start.record()
            for _ in range(args.inner):
                fn()
            stop.record()
            stop.synchronize()
            t = torch.tensor([start.elapsed_time(stop) * 1e3 / args.inner], device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            per_trial.append(t.item())
        return statistics.median(per_trial)

    results, warmed = [], False
    for d in args.head_dims:
        for hpr in args.heads:
            for M in args.seqlens:
                if M % P:
                    raise SystemExit(f"M = {M} is not a multiple of P = {P}")
                B, Ms = args.batch, M // P
                gen = torch.Generator(device=dev).manual_seed(1234 + rank)
                q, k, v = (torch.rand(B, hpr, M, d, device=dev, dtype=torch.bfloat16, generator=gen) * 2 - 1 for _ in range(3))
                recv = torch.empty(P, B, Ms, hpr, d, device=dev, dtype=torch.bfloat16)

                def sdpa():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v)

                def sdpa_a2a():
                    o = sdpa()  # [B, Hp, M, d]
                    send = o.view(B, hpr, P, Ms, d).permute(2, 0, 3, 1, 4).contiguous()  # [P, B, Ms, Hp, d]
                    dist.all_to_all_single(recv, send)
                    return recv.permute(1, 2, 0, 3, 4).reshape(B, Ms, P * hpr, d)  # [B, Ms, H, d]

                if not warmed:
                    end = torch.cuda.Event(enable_timing=True)
                    begin = torch.cuda.Event(enable_timing=True)
                    spent = 0.0
                    while spent < args.warmup_ms:
                        begin.record()
                        sdpa()
                        end.record()
                        end.synchronize()
                        spent += begin.elapsed_time(end)
                    warmed = True
                row = {"head_dim": d, "heads_per_rank": hpr, "heads": hpr * P, "seqlen": M, "batch": B,
                       "T_sdpa_us": median_over_trials(sdpa), "T_sdpa_a2a_us": median_over_trials(sdpa_a2a)}
                results.append(row)
                if rank == 0:
                    print(f"d={d} heads/rank={hpr} M={M}: cuDNN SDPA {row['T_sdpa_us']:.1f} us, + all-to-all {row['T_sdpa_a2a_us']:.1f} us",
                          flush=True)
    if rank == 0 and args.out:
        doc = {"ranks": P, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
               "nccl": ".".join(map(str, torch.cuda.nccl.version())), "gpu": torch.cuda.get_device_name(dev),
               "protocol": f"{args.inner} back-to-back calls between CUDA events per trial, barrier before each trial, max over "
                           f"ranks, median over {args.trials} trials", "results": results}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
