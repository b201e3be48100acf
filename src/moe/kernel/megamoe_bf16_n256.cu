// One MegaMoE kernel configuration per translation unit (bf16_n256, kernel/launch.hpp), both schedules.
#include "moe/kernel/launch.cuh"

namespace xstage::moe {

template <>
void launch_megamoe<MegaMoeConfigId::bf16_n256>(const MegaMoeLaunch& launch, cudaStream_t stream) {
  detail::launch_megamoe_config<MegaMoeConfig<256>>(launch, stream);
}

}  // namespace xstage::moe
