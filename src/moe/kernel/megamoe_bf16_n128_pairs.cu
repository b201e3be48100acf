// One MegaMoE kernel configuration per translation unit (bf16_n128_pairs, kernel/launch.hpp), both schedules.
#include "moe/kernel/launch.cuh"

namespace xstage::moe {

template <>
void launch_megamoe<MegaMoeConfigId::bf16_n128_pairs>(const MegaMoeLaunch& launch, cudaStream_t stream) {
  detail::launch_megamoe_config<MegaMoeConfig<128, cute::bfloat16_t, false, 2>>(launch, stream);
}

}  // namespace xstage::moe
