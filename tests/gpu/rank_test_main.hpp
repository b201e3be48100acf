// The main() of the multi-GPU test programs: started without RANK in the environment, the program starts
// one local rank of itself per visible GPU (at least 2, peer access checked); as a rank, it creates the
// runtime, hands it to the tests through `*runtime` and runs them. Every rank runs the same tests in the
// same order, so the collectives inside them pair up.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <exception>

#include "comm/launcher.hpp"
#include "comm/runtime.hpp"
#include "common/error.hpp"

namespace xstage::test {

inline int run_rank_tests(int argc, char** argv, const char* program, comm::Runtime** runtime) {
  try {
    const auto env = comm::rank_env_from_environment();
    if (!env) {
      const int gpus = comm::visible_gpu_count();
      if (gpus < 2) throw PlatformError(std::string(program) + " needs 2 GPUs joined by NVLink; 1 is visible");
      comm::require_peer_access(gpus);
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
