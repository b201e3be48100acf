// One MegaMoE kernel configuration per translation unit (bf16_n128, kernel/launch.hpp), both schedules.
#include "moe/kernel/launch.cuh"

namespace xstage::moe {

template <>
void launch_megamoe<MegaMoeConfigId::bf16_n128>(const MegaMoeLaunch& launch, cudaStream_t stream) {
  detail::launch_megamoe_config<MegaMoeConfig<128>>(launch, stream);
}

}  // namespace xstage::moe
