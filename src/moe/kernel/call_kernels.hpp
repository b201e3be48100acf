// The two small kernels a MegaMoE call runs before the main one, on the same stream:
//   prologue   waits (bounded) until every peer has finished reading this rank's data of the previous call
//              (its peer_finished flag), so this call may overwrite the tokens and send lists;
//   route      per expert, the count and token-ordered list of this rank's (token, k) pairs (the owners pull
//              them), checking the router's ids on the way: an id outside [0, E) or an expert repeated in a
//              token's top-k is dropped and reported (poll() names the token and the id), never a timeout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "comm/device_status.hpp"
#include "moe/problem/layout.hpp"
#include "moe/problem/problem.hpp"

namespace xstage::moe {

void enqueue_prologue(char* local, const EpochFlags& flags, int rank, int P, const comm::WaitContext& wait,
                      const comm::CallEpochView& calls, cudaStream_t stream);

void enqueue_route(const std::int32_t* topk_ids, int tokens, const MoeProblem& problem, char* local, const SendLists& send,
                   const comm::WaitContext& wait, cudaStream_t stream);

}  // namespace xstage::moe
