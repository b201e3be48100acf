#include "common/gpu_timing.hpp"

#include <algorithm>

#include "common/cuda_check.hpp"
#include "common/launch.cuh"

namespace xstage {
namespace {

class EventPair {
 public:
  EventPair() {
    XSTAGE_CUDA_CHECK(cudaEventCreate(&start_));
    XSTAGE_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventPair() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }
  double elapsed_ms() const {
    XSTAGE_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0.f;
    XSTAGE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

__global__ void clock_probe_kernel(unsigned long long spin_ns, unsigned long long* out) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < spin_ns);
  const long long c1 = clock64();
  out[0] = (unsigned long long)(c1 - c0);
  out[1] = t1 - t0;
}

}  // namespace

std::vector<double> time_launches_ms(const std::function<void()>& launch, int reps, int inner, cudaStream_t stream) {
  EventPair events;
  std::vector<double> out;
  out.reserve(reps);
  for (int r = 0; r < reps; ++r) {
    XSTAGE_CUDA_CHECK(cudaEventRecord(events.start(), stream));
    for (int i = 0; i < inner; ++i) launch();
    XSTAGE_CUDA_CHECK(cudaEventRecord(events.stop(), stream));
    out.push_back(events.elapsed_ms() / inner);
  }
  return out;
}

void warm_up(const std::function<void()>& launch, double ms, cudaStream_t stream) {
  EventPair events;
  double spent = 0.0;
  while (spent < ms) {
    XSTAGE_CUDA_CHECK(cudaEventRecord(events.start(), stream));
    launch();
    XSTAGE_CUDA_CHECK(cudaEventRecord(events.stop(), stream));
    spent += events.elapsed_ms();
  }
}

double measure_sm_clock_mhz() {
  unsigned long long* d = nullptr;
  XSTAGE_CUDA_CHECK(cudaMalloc(&d, 2 * sizeof(unsigned long long)));
  launch_kernel(clock_probe_kernel, 1, 1, 0, nullptr, 20'000'000ull, d);
  unsigned long long h[2] = {0, 0};
  const cudaError_t err = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  XSTAGE_CUDA_CHECK(err);
  return h[1] > 0 ? double(h[0]) * 1e3 / double(h[1]) : 0.0;
}


}  // namespace xstage
