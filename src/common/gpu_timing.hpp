// Timing for benchmarks: CUDA-event times of back-to-back launches, warm-up, and the SM clock measured
// in the run. Results are reported as medians (common/stats.hpp).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

namespace xstage {

// Times `launch` (which enqueues work on `stream`): repeats `reps` times a batch of `inner` back-to-back
// launches between two events; returns the per-launch time of each rep in milliseconds.
std::vector<double> time_launches_ms(const std::function<void()>& launch, int reps, int inner, cudaStream_t stream);

// Keeps the GPU busy with `launch` for at least `ms` milliseconds (clocks ramp up from idle).
void warm_up(const std::function<void()>& launch, double ms, cudaStream_t stream);

// SM clock in MHz, measured now: clock64() against %globaltimer over a ~20 ms spin on one SM.
double measure_sm_clock_mhz();

}  // namespace xstage
