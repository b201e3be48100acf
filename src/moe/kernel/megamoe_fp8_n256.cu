// One MegaMoE kernel configuration per translation unit (fp8_n256, kernel/launch.hpp), both schedules.
#include "moe/kernel/launch.cuh"

namespace xstage::moe {

template <>
void launch_megamoe<MegaMoeConfigId::fp8_n256>(const MegaMoeLaunch& launch, cudaStream_t stream) {
  detail::launch_megamoe_config<MegaMoeFp8Config<false>>(launch, stream);
}

}  // namespace xstage::moe
