"""How the diffusers examples time what they compare."""

from __future__ import annotations

import statistics
import time

import torch


def time_in_turn(fns, device, warmup, iters, prepare=None):
    """{name: (median ms, samples)} of each callable in fns, timed in turn: after warmup calls of each, every
    iteration times each once, in an order rotated every iteration, so that all see the same GPU clock (a
    power-capped GPU's clock follows its load of the last seconds: timing one after the other favours whichever
    runs first, and a fixed order whatever follows the lightest). prepare: {name: callable} run untimed before
    each call of that name (switching the model's attention processor, say). CUDA events on a GPU, each timing
    from an idle GPU; perf_counter on the CPU."""
    prepare = prepare or {}
    noop = lambda: None  # noqa: E731
    for name, fn in fns.items():
        for _ in range(warmup):
            prepare.get(name, noop)()
            fn()
    samples = {name: [] for name in fns}
    names = list(fns)
    for i in range(iters):
        for name in names[i % len(names):] + names[:i % len(names)]:
            fn = fns[name]
            prepare.get(name, noop)()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples[name].append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - t0) * 1e3)
    return {name: (statistics.median(v), v) for name, v in samples.items()}
