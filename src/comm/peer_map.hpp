// Who stores to whom. Pure index math, shared by kernels, the host driver and CPU tests.
#pragma once

#include "common/host_device.hpp"

namespace xstage::comm {

// Ranks a fused op's kernel parameters hold peer pointers for (one NVLink domain of H200s: 8). The
// runtime and its signal barrier reach further (kMaxLsaRanks); an op with more ranks refuses them.
inline constexpr int kMaxFusedOpRanks = 8;

enum class Pairing {
  ring,       // every rank r stores to (r + 1) mod N, all at once: every NVLink direction loaded
  one_way,    // only rank 0 stores, to rank 1: one direction of one link, the rest idle
  all_peers,  // every rank stores to all others at once, its producers spread round-robin over the
              // N − 1 peers (the all-to-all pattern of a MoE combine); the same as ring for N = 2
};

// The rank that producer `producer` of `rank` stores to, or -1 if `rank` does not store. Producer p
// always writes region p of its target's buffer, so every region has exactly one writer.
XSTAGE_HD inline int producer_target(Pairing pairing, int rank, int world, int producer) {
  if (world < 2) return -1;
  if (pairing == Pairing::one_way) return rank == 0 ? 1 : -1;
  if (pairing == Pairing::all_peers) return (rank + 1 + producer % (world - 1)) % world;
  return (rank + 1) % world;
}

// The rank whose producer `producer` writes region `producer` of `rank`'s buffer, or -1 if none does.
XSTAGE_HD inline int producer_source(Pairing pairing, int rank, int world, int producer) {
  if (world < 2) return -1;
  if (pairing == Pairing::one_way) return rank == 1 ? 0 : -1;
  if (pairing == Pairing::all_peers) return (rank + world - 1 - producer % (world - 1)) % world;
  return (rank + world - 1) % world;
}

// Whether `rank` stores at all, and whether anything lands in its buffer.
XSTAGE_HD inline bool stores_remotely(Pairing pairing, int rank, int world) {
  return producer_target(pairing, rank, world, 0) >= 0;
}
XSTAGE_HD inline bool receives_remotely(Pairing pairing, int rank, int world) {
  return producer_source(pairing, rank, world, 0) >= 0;
}

}  // namespace xstage::comm
