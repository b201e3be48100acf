#include "comm/device_info.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <string>

#include "common/cuda_check.hpp"

namespace xstage::comm {

namespace {

// The few NVML entry points we need, loaded with dlopen so the binary runs where NVML is absent.
struct Nvml {
  void* lib = nullptr;
  using Fn0 = int (*)();
  using DriverVersionFn = int (*)(char*, unsigned);
  using HandleFn = int (*)(unsigned, void**);
  using LinkStateFn = int (*)(void*, unsigned, int*);
  Fn0 shutdown = nullptr;
  DriverVersionFn driver_version = nullptr;
  HandleFn handle_by_index = nullptr;
  LinkStateFn link_state = nullptr;

  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<Fn0>(dlsym(lib, "nvmlInit_v2"));
    shutdown = reinterpret_cast<Fn0>(dlsym(lib, "nvmlShutdown"));
    driver_version = reinterpret_cast<DriverVersionFn>(dlsym(lib, "nvmlSystemGetDriverVersion"));
    handle_by_index = reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    link_state = reinterpret_cast<LinkStateFn>(dlsym(lib, "nvmlDeviceGetNvLinkState"));
    if (!init || init() != 0) {
      dlclose(lib);
      lib = nullptr;
    }
  }
  ~Nvml() {
    if (lib) {
      if (shutdown) shutdown();
      dlclose(lib);
    }
  }
};

}  // namespace

nlohmann::json describe_device(int device) {
  cudaDeviceProp prop{};
  XSTAGE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int clock_khz = 0, runtime = 0, driver_api = 0, nccl = 0;
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  XSTAGE_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  XSTAGE_CUDA_CHECK(cudaDriverGetVersion(&driver_api));
  ncclGetVersion(&nccl);

  nlohmann::json info = {
      {"gpu", prop.name},
      {"sm_count", prop.multiProcessorCount},
      {"l2_bytes", prop.l2CacheSize},
      {"sm_clock_max_mhz", clock_khz / 1000.0},
      {"cuda_runtime", std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10)},
      {"cuda_driver_api", std::to_string(driver_api / 1000) + "." + std::to_string(driver_api % 1000 / 10)},
      {"nccl", std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." + std::to_string(nccl % 100)},
  };
  Nvml nvml;
  if (nvml.lib) {
    char version[96] = {};
    if (nvml.driver_version && nvml.driver_version(version, sizeof version) == 0) info["driver"] = version;
    void* handle = nullptr;
    // NVML enumerates in PCI order like CUDA's default; CUDA_VISIBLE_DEVICES remaps are not followed.
    if (nvml.handle_by_index && nvml.link_state && nvml.handle_by_index(device, &handle) == 0) {
      int active = 0;
      for (unsigned link = 0; link < 18; ++link) {
        int state = 0;
        if (nvml.link_state(handle, link, &state) == 0 && state == 1) ++active;
      }
      info["nvlinks_active"] = active;
      info["topology"] = "NVLink x" + std::to_string(active);
    }
  }
  return info;
}

}  // namespace xstage::comm
