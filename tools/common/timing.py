"""The one way xstage's Python benchmarks time work: the tools (tools/python/time_ops.py,
tools/attention/cudnn_bench.py) and the diffusers examples (examples/diffusers/).

An H200 is power-capped: its SM clock follows the load of the last seconds (1.2-1.98 GHz within one run), so
two things timed one after the other differ by the clock as well as by the code. Hence: warm up, then let the
compared things take turns rep by rep, in turn_order's balanced order: what ran just before a timing sets the power
headroom it starts with, so every unit must follow every other equally often (a fixed order, or one fixed order
rotated every rep, keeps each unit's predecessor and favours whatever follows the lightest).

Each timing starts one of two ways:
  busy  right after an untimed call of the same unit, so the GPU is busy while the host enqueues the timed
        one and the host's per-call work hides behind the kernels (kernels, a unit covering >= 2 ms of work:
        calls_per_timing);
  idle  from an idle GPU, so the host's work is part of what is timed (a whole model's forward).
On a machine without CUDA everything is host time (perf_counter).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Dict, List, NamedTuple, Optional

import torch


class Timings(NamedTuple):
    ms: List[float]  # per timing: GPU time between CUDA events (host time without CUDA)
    host_us: List[float]  # per timing: the host's time to enqueue the unit


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


def turn_period(n: int) -> int:
    """Reps after which turn_order repeats: n for an even n, 2n for an odd n."""
    return n if n % 2 == 0 else 2 * n


def turn_order(n: int, rep: int) -> List[int]:
    """Rep `rep`'s order of n units: the rows of a Williams design, a Latin square balanced for first-order carryover
    (the CLI's benches use the same one: src/common/turn_order.hpp). Row r of the square is 0, 1, n-1, 2, n-2, ...
    each plus r (mod n); for an odd n, rows n..2n-1 are rows 0..n-1 reversed. Over one turn_period every unit comes
    first equally often and follows every other unit equally often."""
    if n < 1 or rep < 0:
        raise ValueError(f"turn_order: {n} units, rep {rep} (need n >= 1 and rep >= 0)")
    row = rep % turn_period(n)
    base, lo, hi = [0], 1, n - 1
    while len(base) < n:
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    order = [(x + row) % n for x in base]
    return order[::-1] if row >= n else order


def time_in_turn(units: Dict[str, Callable], reps: int, *, start: str = "busy", warmup: int = 0,
                 prepare: Optional[Dict[str, Callable]] = None,
                 device: Optional[torch.device] = None) -> Dict[str, Timings]:
    """units: name -> a callable that enqueues one timing's work. Returns name -> Timings of `reps` timings each,
    the names taking turns in turn_order's order, the timed reps from its first row (`reps` a multiple of
    turn_period balances the predecessors exactly; otherwise the last period is cut short). start: "busy" or
    "idle" (the module's docstring). warmup: untimed rounds in the same order first. prepare: name -> a callable
    run untimed before each of that name's calls (switching a model's attention processor, say). device: where
    the units run (default: the current CUDA device, else the CPU)."""
    if start not in ("busy", "idle"):
        raise ValueError(f"start must be 'busy' or 'idle', not {start!r}")
    prepare = prepare or {}
    cuda = device.type == "cuda" if device is not None else torch.cuda.is_available()
    out = {name: Timings([], []) for name in units}
    names = list(units)
    if not names:
        return out
    if cuda:
        torch.cuda.synchronize(device)
    for rep in range(-warmup, reps):
        for name in (names[i] for i in turn_order(len(names), rep % turn_period(len(names)))):
            unit = units[name]
            if name in prepare:
                prepare[name]()
            if start == "busy":
                unit()
            elif cuda:
                torch.cuda.synchronize(device)
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            t0 = time.perf_counter()
            unit()
            t1 = time.perf_counter()
            if cuda:
                b.record()
                b.synchronize()
            if rep < 0:
                continue
            out[name].ms.append(a.elapsed_time(b) if cuda else (t1 - t0) * 1e3)
            out[name].host_us.append((t1 - t0) * 1e6)
    return out
