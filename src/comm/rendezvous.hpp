// Rendezvous for the NCCL unique id: rank 0 listens on MASTER_ADDR:MASTER_PORT and hands the id to
// every other rank over TCP. Bounded: a rank that cannot reach rank 0 within the timeout fails with a
// message naming the address, instead of hanging.
#pragma once

#include <cstddef>
#include <string>

#include "comm/launcher.hpp"

namespace xstage::comm {

// On rank 0, `blob` (size bytes) is sent to ranks 1..world_size-1; on other ranks it is received into
// `blob`. Throws xstage::Error on timeout or a broken connection.
void broadcast_from_rank0(const RankEnv& env, void* blob, std::size_t size, int timeout_seconds = 60);

}  // namespace xstage::comm
