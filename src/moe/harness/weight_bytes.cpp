// The host half of harness/weight_stream.hpp (pure C++: CPU-tested).
#include "moe/fp8/fp8.hpp"
#include "moe/harness/weight_stream.hpp"

namespace xstage::moe {

ExpertWeightBytes expert_weight_bytes(const MoeProblem& pr) {
  validate(pr);
  const std::int64_t h = pr.h_hidden, I = pr.h_inter, EL = pr.E_local(), s = pr.elem_bytes();
  ExpertWeightBytes b;
  b.W1 = EL * 2 * I * h * s;
  b.W2 = EL * h * I * s;
  if (pr.dtype == DType::fp8_e4m3) {
    constexpr std::int64_t kScaleBytes = 4;  // fp32
    b.W1_scales = EL * (2 * I / fp8::kBlock) * fp8::weight_scale_pitch(h) * kScaleBytes;
    b.W2_scales = EL * (h / fp8::kBlock) * fp8::weight_scale_pitch(I) * kScaleBytes;
  }
  return b;
}

bool read_streams_from_hbm(std::int64_t bytes, std::int64_t l2_bytes) {
  return l2_bytes > 0 && bytes >= kHbmMinL2Multiple * l2_bytes;
}

}  // namespace xstage::moe
