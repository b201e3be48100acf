#!/usr/bin/env python3
"""diffusers transformers on xstage, against diffusers' own attention backends and MoE module (not a test: the
numbers are written, the thresholds judged by whoever reads them).

One GPU (a plain run), per model of tools/dit/models.py at its published size, random weights:

  attention models (flux, wan, qwenimage, ltx, hunyuanvideo, sd3): the output of one forward with every
      attention backend of diffusers that runs here -- `--backends`, default native (diffusers' default:
      torch SDPA), _native_cudnn, _native_flash, _native_efficient, flex, _native_math, and xstage -- as rel L2
      against native; then one forward timed per backend, the backends taking turns (tools/common/timing.py:
      each timing from an idle GPU, so that the host's share of a forward counts; the order balanced: turn_order).
      A backend that raises (a mask it does not take, memory) is recorded with its error; one whose first
      forward is more than --slow times native's is recorded with that time and left out of the turns. A model
      whose attention does not go through diffusers' registry (sd3 in diffusers 0.42) is recorded as such.
  hidream: diffusers' MoE module (torch) against xstage.diffusers.swap_moe in bf16 and fp8, the same way.

Under torchrun (P ranks, one GPU each), --models flux,wan: the model's output on one GPU (every rank computes
it), then model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=P)) and one forward per
backend that supports context parallelism (native, _native_cudnn, _native_flash, xstage on its default Ulysses
path and xstage:fused_both by default; xstage:<path> is the xstage backend with xstage.diffusers.set_ulysses_path),
rel L2 against the one-GPU output and timed in turn (the largest median over ranks).

Writes JSON to --out (rank 0) and prints a table.

    python3 tools/dit/bench.py --out /tmp/diffusers.json                          # one GPU, every model
    python3 tools/dit/bench.py --models flux,hidream --reps 3 --out /tmp/d.json
    torchrun --standalone --nproc-per-node 2 tools/dit/bench.py --models flux,wan --out /tmp/d2.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/, dit/
from common import timing  # noqa: E402
from dit import models as dit_models  # noqa: E402

BACKENDS = ("native", "_native_cudnn", "_native_flash", "_native_efficient", "flex", "_native_math", "xstage")
PARALLEL_BACKENDS = ("native", "_native_cudnn", "_native_flash", "xstage", "xstage:fused_both")


def use_backend(model, label):
    """Sets the attention backend a label names: a diffusers backend, or "xstage:<path>" (the xstage backend on that
    Ulysses path; plain "xstage" on the default one)."""
    import xstage.diffusers as xd

    backend, _, path = label.partition(":")
    xd.set_ulysses_path(path or None)
    model.set_attention_backend(backend)


def rel_l2(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item()


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]


def forward(model, inputs):
    with torch.no_grad():
        return dit_models.output(model(**inputs))


def timed_once(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return result, (time.perf_counter() - t0) * 1e3


def in_turn(units, prepare, reps, say):
    """{name: median ms} of units timed in turn (common/timing.py, from an idle GPU; every backend ran twice before);
    under torchrun the largest median over the ranks."""
    samples = timing.time_in_turn(units, reps, start="idle", prepare=prepare)
    medians = {name: statistics.median(t.ms) for name, t in samples.items()}
    if dist.is_initialized():
        t = torch.tensor([medians[n] for n in units], dtype=torch.float64, device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        medians = dict(zip(units, t.tolist()))
    for name, ms in medians.items():
        say(f"    {name:20s} {ms:10.2f} ms")
    return medians, {name: t.ms for name, t in samples.items()}


def speedups(medians, ours):
    """ours's speed over each other entry, and over the fastest of them."""
    others = {n: ms for n, ms in medians.items() if n != ours}
    if ours not in medians or not others:
        return {}
    fastest = min(others, key=others.get)
    return {"vs": {n: ms / medians[ours] for n, ms in others.items()}, "fastest_other": fastest,
            "vs_fastest": others[fastest] / medians[ours]}


def attention_model(name, args, say):
    model, inputs = dit_models.build(name, args.size, "cuda", seed=args.seed)
    dispatching, modules = dit_models.dispatches(model)
    result = {"config": dict(model.config), "params_b": sum(p.numel() for p in model.parameters()) / 1e9,
              "attention_modules": modules, "dispatching_modules": dispatching}
    if dispatching == 0:
        result["skipped"] = "its attention processors call SDPA themselves: no backend of diffusers' registry reaches them"
        say(f"  {name}: {result['skipped']}")
        return result
    outputs, probes, errors = {}, {}, {}
    for backend in args.backends:
        try:
            model.set_attention_backend(backend)
            forward(model, inputs)  # warm-up (first calls build kernels and caches)
            outputs[backend], probes[backend] = timed_once(lambda: forward(model, inputs))
        except Exception as e:  # recorded, not fatal: a backend that cannot run this model here
            errors[backend] = first_line(e)
            say(f"  {backend}: does not run: {errors[backend]}")
        torch.cuda.empty_cache()
    if "native" not in outputs:
        result["errors"] = errors
        return result
    ref = outputs["native"].float()
    result["rel_l2_vs_native"] = {b: rel_l2(o.float(), ref) for b, o in outputs.items()}
    result["finite"] = {b: bool(torch.isfinite(o).all()) for b, o in outputs.items()}
    outputs.clear()
    slow = {b: ms for b, ms in probes.items() if ms > args.slow * probes["native"]}
    timed = [b for b in probes if b not in slow]
    say(f"  {name}: rel L2 vs native " + ", ".join(f"{b} {e:.2e}" for b, e in result["rel_l2_vs_native"].items()))
    units = {b: (lambda: forward(model, inputs)) for b in timed}
    prepare = {b: (lambda b=b: model.set_attention_backend(b)) for b in timed}
    medians, samples = in_turn(units, prepare, args.reps, say)
    result.update(errors=errors, too_slow_ms={b: probes[b] for b in slow}, median_ms=medians, samples_ms=samples,
                  xstage=speedups(medians, "xstage"))
    return result


def hidream(args, say):
    import xstage.diffusers as xd
    from diffusers.models.transformers.transformer_hidream_image import MOEFeedForwardSwiGLU

    model, inputs = dit_models.build("hidream", args.size, "cuda", seed=args.seed)
    places = [(parent, n) for parent in model.modules() for n, c in parent.named_children() if isinstance(c, MOEFeedForwardSwiGLU)]
    variants = {"torch": [getattr(p, n) for p, n in places]}
    for label, dtype in (("xstage-bf16", torch.bfloat16), ("xstage-fp8", torch.float8_e4m3fn)):
        xd.swap_moe(model, dtype=dtype)
        variants[label] = [getattr(p, n) for p, n in places]
        for (p, n), module in zip(places, variants["torch"]):
            setattr(p, n, module)

    def use(label):
        for (p, n), module in zip(places, variants[label]):
            setattr(p, n, module)

    outputs = {}
    for label in variants:
        use(label)
        forward(model, inputs)
        outputs[label] = forward(model, inputs).float()
    result = {"config": dict(model.config), "params_b": sum(p.numel() for p in model.parameters()) / 1e9,
              "moe_modules": len(places),
              "rel_l2_vs_torch": {k: rel_l2(o, outputs["torch"]) for k, o in outputs.items()},
              "finite": {k: bool(torch.isfinite(o).all()) for k, o in outputs.items()}}
    outputs.clear()
    say("  hidream: rel L2 vs diffusers' module " + ", ".join(f"{k} {e:.2e}" for k, e in result["rel_l2_vs_torch"].items()))
    units = {label: (lambda: forward(model, inputs)) for label in variants}
    prepare = {label: (lambda label=label: use(label)) for label in variants}
    medians, samples = in_turn(units, prepare, args.reps, say)
    result.update(median_ms=medians, samples_ms=samples, **{f"{k}_speedup": medians["torch"] / medians[k] for k in variants if k != "torch"})
    return result


def parallel_model(name, args, say):
    from diffusers import ContextParallelConfig

    ranks = dist.get_world_size()
    model, inputs = dit_models.build(name, args.size, "cuda", seed=args.seed)
    model.set_attention_backend("native")
    reference = forward(model, inputs).float()  # one GPU: every rank computes the whole model
    dit_models.allow_context_parallel_warnings()
    model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=ranks))
    outputs, errors = {}, {}
    for backend in args.backends:
        try:
            use_backend(model, backend)
            forward(model, inputs)
            outputs[backend] = forward(model, inputs).float()
        except Exception as e:
            errors[backend] = first_line(e)
            say(f"  {backend}: does not run: {errors[backend]}")
    errs = {b: rel_l2(o, reference) for b, o in outputs.items()}
    t = torch.tensor([errs.get(b, float("nan")) for b in args.backends], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    result = {"config": dict(model.config), "ranks": ranks, "errors": errors,
              "rel_l2_vs_one_gpu": {b: e for b, e in zip(args.backends, t.tolist()) if b in outputs}}
    say(f"  {name} P={ranks}: rel L2 vs one GPU " + ", ".join(f"{b} {e:.2e}" for b, e in result["rel_l2_vs_one_gpu"].items()))
    units = {b: (lambda: forward(model, inputs)) for b in outputs}
    prepare = {b: (lambda b=b: use_backend(model, b)) for b in outputs}
    medians, samples = in_turn(units, prepare, args.reps, say)
    result.update(median_ms=medians, samples_ms=samples, xstage=speedups(medians, "xstage"))
    return result


def machine():
    import diffusers

    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"gpu": p.name, "sms": p.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
            "diffusers": diffusers.__version__, "python": platform.python_version(),
            "cudnn": torch.backends.cudnn.version(), "host": platform.node()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=None, help="comma-separated, of " + ", ".join(dit_models.MODELS))
    p.add_argument("--backends", default=None,
                   help="comma-separated diffusers backend names (xstage included; under torchrun also xstage:<Ulysses path>)")
    p.add_argument("--size", default="full", choices=("full", "tiny"))
    p.add_argument("--reps", type=int, default=5, help="timings per backend, taken in turn")
    p.add_argument("--slow", type=float, default=5.0, help="leave out of the turns a backend this many times native's time")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    parallel = int(os.environ.get("WORLD_SIZE", "1")) > 1
    args.models = args.models.split(",") if args.models else (["flux", "wan"] if parallel else list(dit_models.MODELS))
    args.backends = args.backends.split(",") if args.backends else list(PARALLEL_BACKENDS if parallel else BACKENDS)
    for m in args.models:
        if m not in dit_models.MODELS:
            p.error(f"unknown model {m!r}")
    if parallel:
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank() if parallel else 0
    say = print if rank == 0 else (lambda *a, **k: None)

    import xstage.diffusers  # noqa: F401  (registers the "xstage" backend)

    doc = {"command": " ".join([sys.executable] + sys.argv), "machine": machine(), "size": args.size, "reps": args.reps,
           "protocol": "one forward per timing, after an untimed forward, backends in turn (common.timing.turn_order); "
                       "CUDA events; median", "models": {}}
    for name in args.models:
        say(f"== {name}")
        torch.manual_seed(args.seed)
        try:
            if parallel:
                doc["models"][name] = parallel_model(name, args, say)
            elif name == "hidream":
                doc["models"][name] = hidream(args, say)
            else:
                doc["models"][name] = attention_model(name, args, say)
        except Exception as e:  # one model failing leaves the others' results
            doc["models"][name] = {"failed": first_line(e)}
            say(f"  {name}: failed: {first_line(e)}")
            if parallel:
                raise
        torch.cuda.empty_cache()
        if rank == 0:  # written after every model: a run cut short keeps what it measured
            with open(args.out, "w") as f:
                json.dump(doc, f, indent=1, default=str)
    say("\nmodel          xstage ms   fastest other (ms)          xstage speedup   rel L2 vs reference")
    for name, r in doc["models"].items():
        s = r.get("xstage") or {}
        if s:
            err = (r.get("rel_l2_vs_native") or r.get("rel_l2_vs_one_gpu") or {}).get("xstage", float("nan"))
            say(f"{name:14s} {r['median_ms']['xstage']:9.2f}   {s['fastest_other']:14s} ({r['median_ms'][s['fastest_other']]:8.2f})"
                f"   {s['vs_fastest']:14.3f}   {err:.2e}")
        elif "xstage-bf16_speedup" in r:
            say(f"{name:14s} bf16 {r['xstage-bf16_speedup']:.3f}x, fp8 {r['xstage-fp8_speedup']:.3f}x diffusers' module; "
                f"rel L2 {r['rel_l2_vs_torch']['xstage-bf16']:.2e} / {r['rel_l2_vs_torch']['xstage-fp8']:.2e}")
    import xstage

    xstage.distributed.teardown()  # collective: the communicators the backend and swap_moe built
    if parallel:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
