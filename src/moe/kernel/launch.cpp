#include "moe/kernel/launch.hpp"

namespace xstage::moe {

void launch_megamoe(MegaMoeConfigId id, const MegaMoeLaunch& l, cudaStream_t stream) {
  switch (id) {
#define XSTAGE_MEGAMOE_CASE(name, dtype, b_n, half_l2, cluster_n, cluster_m) \
  case MegaMoeConfigId::name:                                              \
    return launch_megamoe<MegaMoeConfigId::name>(l, stream);
    XSTAGE_MEGAMOE_CONFIGS(XSTAGE_MEGAMOE_CASE)
#undef XSTAGE_MEGAMOE_CASE
  }
}

}  // namespace xstage::moe
