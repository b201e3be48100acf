"""Energy, power and SM clock of a stretch of GPU work, from NVML (libnvidia-ml.so.1 through ctypes: no package).

Why: an H200 runs at its power cap under sustained attention (results/h200/attention/2026-12-02-fused-both-by-head/
power/), so a kernel's speed there is set by the energy it spends per unit of work as much as by its cycles. Splitting a
timed stretch into joules per call, mean power and the SM clock it ran at tells which of the two a speed difference
comes from: at equal power, a faster kernel either runs at a higher clock (spends less energy per cycle) or does more
per cycle.

`Nvml(device)` opens the NVML device of a CUDA device (by its PCI bus id, so CUDA_VISIBLE_DEVICES is followed);
`measure(nvml, unit, units, ...)` runs `unit` back to back `units` times and returns what the counters saw.
NVML's total-energy counter is the board's (millijoules since the driver loaded); its update period is the
driver's, so a window should last a second or more.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time
from typing import Callable, Dict

NVML_SUCCESS = 0
NVML_CLOCK_SM = 1


class NvmlUnavailable(RuntimeError):
    """NVML cannot be loaded or does not answer for this device."""


class Nvml:
    def __init__(self, device=None):
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            raise NvmlUnavailable(f"libnvidia-ml.so.1 cannot be loaded ({e})") from None
        self._check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        self.handle = ctypes.c_void_p()
        bus_id = _pci_bus_id(device)
        if bus_id is not None:
            self._check(self.lib.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), ctypes.byref(self.handle)),
                        f"nvmlDeviceGetHandleByPciBusId_v2({bus_id})")
        else:  # no PCI id from torch: NVML's index 0, which is CUDA's device 0 only without CUDA_VISIBLE_DEVICES
            self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)), "nvmlDeviceGetHandleByIndex_v2")
        self.energy_mj()  # a device without an energy counter fails here, not in the middle of a run

    def _check(self, status, what):
        if status != NVML_SUCCESS:
            self.lib.nvmlErrorString.restype = ctypes.c_char_p
            raise NvmlUnavailable(f"{what}: {self.lib.nvmlErrorString(status).decode()} (NVML status {status})")

    def energy_mj(self) -> int:
        e = ctypes.c_ulonglong()
        self._check(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(e)), "nvmlDeviceGetTotalEnergyConsumption")
        return e.value

    def sm_clock_mhz(self) -> int:
        c = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(c)), "nvmlDeviceGetClockInfo")
        return c.value


def _pci_bus_id(device):
    """NVML's bus id ("00000000:BB:DD.0") of a CUDA device, from torch's properties where it has them."""
    try:
        import torch

        p = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
        return f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    except (ImportError, AttributeError, RuntimeError):
        return None


def measure(nvml: Nvml, unit: Callable[[], object], units: int, *, calls_per_unit: int = 1,
            sample_every_s: float = 0.005) -> Dict[str, float]:
    """Runs `unit` (which enqueues GPU work on the current stream) `units` times back to back from an idle GPU and
    returns: calls (units x calls_per_unit), gpu_ms (CUDA events around the stretch), wall_s (the energy readings'
    interval: the stretch and the enqueue before it), joules_per_call, watts (energy over wall_s) and the median
    and the lowest SM clock sampled while the stretch ran."""
    import torch

    torch.cuda.synchronize()
    clocks = []
    done = threading.Event()

    def sample():
        while not done.is_set():
            clocks.append(nvml.sm_clock_mhz())
            time.sleep(sample_every_s)

    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0, t0 = nvml.energy_mj(), time.perf_counter()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    a.record()
    for _ in range(units):
        unit()
    b.record()
    b.synchronize()
    t1, e1 = time.perf_counter(), nvml.energy_mj()
    done.set()
    sampler.join()
    calls = units * calls_per_unit
    return {
        "calls": calls,
        "gpu_ms": a.elapsed_time(b),
        "wall_s": t1 - t0,
        "joules_per_call": (e1 - e0) / 1e3 / calls,
        "watts": (e1 - e0) / 1e3 / (t1 - t0),
        "sm_clock_mhz_median": statistics.median(clocks) if clocks else float("nan"),
        "sm_clock_mhz_min": min(clocks) if clocks else float("nan"),
        "clock_samples": len(clocks),
    }
