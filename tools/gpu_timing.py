"""How xstage's Python benchmarks (tools/time_ops.py, tools/attention_cudnn_bench.py) time GPU work.

This H200 is power-capped: its SM clock follows the load of the last seconds (1.2-1.98 GHz within one run), so
two things timed one after the other differ by the clock as well as by the code. Hence: warm up, then let the
compared things take turns rep by rep in an order rotated every rep (what ran just before a timing sets the
power headroom it starts with), each timing covering >= 2 ms of work after an untimed repeat of itself (so the
GPU is busy while the host starts the timed one, and the host's per-call work hides behind the kernels).
"""

from __future__ import annotations

import math
import statistics
import time

import torch


def gpu_ms(fn) -> float:
    """The GPU time of one call of fn, from an event pair around it."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def warm_up(fn, ms: float) -> None:
    """Keeps the GPU busy with fn for at least ms milliseconds (clocks ramp up from idle), as the CLI does."""
    spent = 0.0
    while spent < ms:
        spent += gpu_ms(fn)


def calls_per_timing(fn) -> int:
    """Back-to-back calls of fn that fill >= 2 ms of GPU time (the CLI's rule)."""
    estimate = statistics.median(gpu_ms(fn) for _ in range(3))
    return max(1, math.ceil(2.0 / max(estimate, 1e-3)))


def captured(fn, calls: int) -> torch.cuda.CUDAGraph:
    """A CUDA graph of `calls` calls of fn (captured after two calls on the capture stream). fn must launch on
    the current stream at each call."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def repeat(fn, calls: int):
    """A callable making `calls` back-to-back calls of fn."""

    def unit():
        for _ in range(calls):
            fn()

    return unit


def time_in_turn(units: dict, reps: int, prepare: dict | None = None) -> dict:
    """units: name -> a callable that enqueues one timing's work. Returns name -> (GPU ms, host us) of each of
    reps timings, the names taking turns in an order rotated every rep, each timing after one untimed unit.
    prepare: name -> a callable run before that name's untimed unit (switching a model's attention backend)."""
    torch.cuda.synchronize()
    out = {name: ([], []) for name in units}
    names = list(units)
    if not names:
        return out
    for rep in range(reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            unit = units[name]
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if prepare and name in prepare:
                prepare[name]()
            unit()
            a.record()
            t0 = time.perf_counter()
            unit()
            t1 = time.perf_counter()
            b.record()
            b.synchronize()
            out[name][0].append(a.elapsed_time(b))
            out[name][1].append((t1 - t0) * 1e6)
    return out
