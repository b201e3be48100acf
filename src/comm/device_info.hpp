// What a result file records about the machine: GPU, driver, NCCL, link topology.
#pragma once

#include <nlohmann/json.hpp>

namespace xstage::comm {

// {gpu, sm_count, l2_bytes, sm_clock_max_mhz, driver, cuda_runtime, cuda_driver_api, nccl, nvlinks_active,
//  topology} for `device`. NVML is loaded at run time when present (driver version, NVLink count).
nlohmann::json describe_device(int device);

}  // namespace xstage::comm
