// One MegaMoE kernel configuration per translation unit (fp8_n256_mpairs, kernel/launch.hpp), both schedules.
#include "moe/kernel/launch.cuh"

namespace xstage::moe {

template <>
void launch_megamoe<MegaMoeConfigId::fp8_n256_mpairs>(const MegaMoeLaunch& launch, cudaStream_t stream) {
  detail::launch_megamoe_config<MegaMoeFp8Config<false, 1, 2>>(launch, stream);
}

}  // namespace xstage::moe
