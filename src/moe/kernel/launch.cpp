#include "moe/kernel/launch.hpp"

#include <string>

#include "common/error.hpp"

namespace xstage::moe {

const char* to_string(MegaMoeConfigId id) {
  switch (id) {
    case MegaMoeConfigId::bf16_n128: return "bf16_n128";
    case MegaMoeConfigId::bf16_n128_pairs: return "bf16_n128_pairs";
    case MegaMoeConfigId::bf16_n256: return "bf16_n256";
    case MegaMoeConfigId::bf16_n256_pairs: return "bf16_n256_pairs";
    case MegaMoeConfigId::bf16_n256_mpairs: return "bf16_n256_mpairs";
    case MegaMoeConfigId::bf16_n256_half: return "bf16_n256_half";
    case MegaMoeConfigId::fp8_n256: return "fp8_n256";
    case MegaMoeConfigId::fp8_n256_pairs: return "fp8_n256_pairs";
    case MegaMoeConfigId::fp8_n256_mpairs: return "fp8_n256_mpairs";
    case MegaMoeConfigId::fp8_n256_half: return "fp8_n256_half";
  }
  return "?";
}

MegaMoeConfigId megamoe_config_id(DType dtype, int b_n, bool half_l2, int cluster_n, int cluster_m) {
  const std::string what = std::string(dtype == DType::fp8_e4m3 ? "fp8" : "bf16") + " b_n = " + std::to_string(b_n) +
                           (half_l2 ? ", half-full last Linear-2 block" : "") + ", clusters " + std::to_string(cluster_n) + " x " +
                           std::to_string(cluster_m);
  XSTAGE_REQUIRE(cluster_n >= 1 && cluster_m >= 1 && cluster_n * cluster_m <= 2,
                 "MegaMoE: CTA pairs along N or along M, not both (" + what + ")");
  XSTAGE_REQUIRE(!half_l2 || cluster_n * cluster_m == 1, "MegaMoE: a half-full Linear-2 block has no partner (" + what + ")");
  if (dtype == DType::fp8_e4m3) {
    XSTAGE_REQUIRE(b_n == 256, "MegaMoE fp8: needs 128 x 256 tiles (" + what + ")");
    if (cluster_m == 2) return MegaMoeConfigId::fp8_n256_mpairs;
    if (cluster_n == 2) return MegaMoeConfigId::fp8_n256_pairs;
    return half_l2 ? MegaMoeConfigId::fp8_n256_half : MegaMoeConfigId::fp8_n256;
  }
  XSTAGE_REQUIRE(b_n == 128 || b_n == 256, "MegaMoE: the fused kernel uses 128 x 128 or 128 x 256 tiles (" + what + ")");
  if (b_n == 128) {
    XSTAGE_REQUIRE(!half_l2 && cluster_m == 1, "MegaMoE: 128 x 128 tiles have no half blocks or M-pairs (" + what + ")");
    return cluster_n == 2 ? MegaMoeConfigId::bf16_n128_pairs : MegaMoeConfigId::bf16_n128;
  }
  if (cluster_m == 2) return MegaMoeConfigId::bf16_n256_mpairs;
  if (cluster_n == 2) return MegaMoeConfigId::bf16_n256_pairs;
  return half_l2 ? MegaMoeConfigId::bf16_n256_half : MegaMoeConfigId::bf16_n256;
}

void launch_megamoe(MegaMoeConfigId id, const MegaMoeLaunch& l, cudaStream_t stream) {
  switch (id) {
    case MegaMoeConfigId::bf16_n128: return launch_megamoe<MegaMoeConfigId::bf16_n128>(l, stream);
    case MegaMoeConfigId::bf16_n128_pairs: return launch_megamoe<MegaMoeConfigId::bf16_n128_pairs>(l, stream);
    case MegaMoeConfigId::bf16_n256: return launch_megamoe<MegaMoeConfigId::bf16_n256>(l, stream);
    case MegaMoeConfigId::bf16_n256_pairs: return launch_megamoe<MegaMoeConfigId::bf16_n256_pairs>(l, stream);
    case MegaMoeConfigId::bf16_n256_mpairs: return launch_megamoe<MegaMoeConfigId::bf16_n256_mpairs>(l, stream);
    case MegaMoeConfigId::bf16_n256_half: return launch_megamoe<MegaMoeConfigId::bf16_n256_half>(l, stream);
    case MegaMoeConfigId::fp8_n256: return launch_megamoe<MegaMoeConfigId::fp8_n256>(l, stream);
    case MegaMoeConfigId::fp8_n256_pairs: return launch_megamoe<MegaMoeConfigId::fp8_n256_pairs>(l, stream);
    case MegaMoeConfigId::fp8_n256_mpairs: return launch_megamoe<MegaMoeConfigId::fp8_n256_mpairs>(l, stream);
    case MegaMoeConfigId::fp8_n256_half: return launch_megamoe<MegaMoeConfigId::fp8_n256_half>(l, stream);
  }
}

}  // namespace xstage::moe
