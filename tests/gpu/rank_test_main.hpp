// The main() of the multi-GPU test programs: started without RANK in the environment, the program starts
// one local rank of itself per visible GPU (at least `min_gpus`, peer access checked); as a rank, it creates
// the runtime, hands it to the tests through `*runtime` and runs them. Every rank runs the same tests in the
// same order, so the collectives inside them pair up; tests that need a peer skip on one rank.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <exception>
#include <string>

#include "comm/launcher.hpp"
#include "comm/runtime.hpp"
#include "common/error.hpp"

namespace xstage::test {

inline int run_rank_tests(int argc, char** argv, const char* program, comm::Runtime** runtime, int min_gpus = 2) {
  try {
    const auto env = comm::rank_env_from_environment();
    if (!env) {
      const int gpus = comm::visible_gpu_count();
      if (gpus < min_gpus)
        throw PlatformError(std::string(program) + " needs " + std::to_string(min_gpus) + " GPUs joined by NVLink; " +
                            std::to_string(gpus) + " visible");
      if (gpus > 1) comm::require_peer_access(gpus);
      return comm::run_local_ranks(gpus);
    }
    ::testing::InitGoogleTest(&argc, argv);
    comm::Runtime rt(*env);
    *runtime = &rt;
    const int rc = RUN_ALL_TESTS();
    rt.barrier();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace xstage::test
