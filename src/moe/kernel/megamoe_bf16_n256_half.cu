// One MegaMoE kernel configuration per translation unit (bf16_n256_half, kernel/launch.hpp), both schedules.
#include "moe/kernel/launch.cuh"

namespace xstage::moe {

template <>
void launch_megamoe<MegaMoeConfigId::bf16_n256_half>(const MegaMoeLaunch& launch, cudaStream_t stream) {
  detail::launch_megamoe_config<MegaMoeConfig<256, cute::bfloat16_t, true>>(launch, stream);
}

}  // namespace xstage::moe
