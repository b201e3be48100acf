#include "moe/kernel/configs.hpp"

#include <string>

#include "common/error.hpp"

namespace xstage::moe {

MegaMoeConfigId megamoe_config_id(DType dtype, int b_n, bool half_l2, int cluster_n, int cluster_m) {
  for (const MegaMoeConfigSpec& c : kMegaMoeConfigs)
    if (c.dtype == dtype && c.b_n == b_n && c.half_l2 == half_l2 && c.cluster_n == cluster_n && c.cluster_m == cluster_m)
      return c.id;
  throw InputError(std::string("MegaMoE: no kernel is built for ") + (dtype == DType::fp8_e4m3 ? "fp8" : "bf16") +
                   " with 128 x " + std::to_string(b_n) + " tiles" + (half_l2 ? ", a half-full last Linear-2 block" : "") +
                   " and clusters of " + std::to_string(cluster_n) + " x " + std::to_string(cluster_m) + " CTAs");
}

}  // namespace xstage::moe
