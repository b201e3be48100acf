// Who stores to whom. Pure index math, shared by kernels, the host driver and CPU tests.
#pragma once

namespace xstage::comm {

#if defined(__CUDACC__)
#define XSTAGE_HD __host__ __device__
#else
#define XSTAGE_HD
#endif

enum class Pairing {
  ring,     // every rank r stores to (r + 1) mod N, all at once: every NVLink direction loaded
  one_way,  // only rank 0 stores, to rank 1: one direction of one link, the rest idle
};

// The rank that `rank` stores to under `pairing`, or -1 if it does not store.
XSTAGE_HD inline int store_target(Pairing pairing, int rank, int world) {
  if (world < 2) return -1;
  if (pairing == Pairing::one_way) return rank == 0 ? 1 : -1;
  return (rank + 1) % world;
}

// The rank whose stores land in `rank`'s buffer under `pairing`, or -1 if none does.
XSTAGE_HD inline int store_source(Pairing pairing, int rank, int world) {
  if (world < 2) return -1;
  if (pairing == Pairing::one_way) return rank == 1 ? 0 : -1;
  return (rank + world - 1) % world;
}

}  // namespace xstage::comm
